"""Tests for bench/squad_open_orqa_bench.py's pieces, without MiniLM weights or SQuAD data: training
questions are mined and counted as the answer index decides, and the bench's batches train the question
tower of an OrqaRetriever through loop.train (the curve recorded, the index unmoved)."""

from unittest import mock

from absl.testing import flagsaver
import numpy as np
import tensorflow as tf

from bench import loss_curve
from bench import squad_open_orqa_bench as orqa
from realm_tf import answer_index
from realm_tf import tokenization
from realm_tf.data import qa
from realm_tf.modeling import bert
from realm_tf.modeling import embedder
from realm_tf.modeling import orqa_retriever
from realm_tf.modeling import realm_config
from realm_tf.retrieval import text_embedder
from realm_tf.testing import tiny_inputs
from realm_tf.training import optimization

_TEXTS = [
    "The city of New  York lies on the Hudson.", "Paris is the capital of France; Parisians say so.",
    "In 1990 and in the 1990s, nothing happened.", "", "new\nyork, again: NEW YORK."
]


class RankedTest(tf.test.TestCase):

  def test_dev_paragraphs_alone_keep_their_rows_and_first_hits(self):
    from realm_tf.data import corpus  # pylint: disable=g-import-not-at-top
    from realm_tf.data import squad_open  # pylint: disable=g-import-not-at-top
    from realm_tf.retrieval import index as index_lib  # pylint: disable=g-import-not-at-top
    bodies = ["Tokyo train text.", "Paris train text.", "Paris is in France.", "Rome is in Italy."]
    documents = [corpus.Document(f"t{i}", body, doc_id=str(i)) for i, body in enumerate(bodies)]
    questions = [
        qa.QAExample("q0", ["Paris"], metadata={"doc_id": "2"}),
        qa.QAExample("q1", ["Rome"], metadata={"doc_id": "3"})
    ]
    full = squad_open.SquadOpen(documents, questions, num_train_paragraphs=2)
    vectors = np.eye(4, dtype=np.float32)
    # q0 is nearest the train paragraph holding "Paris", then its own; q1 nearest the Tokyo paragraph.
    queries = np.array([[0.1, 1.0, 0.5, 0.0], [1.0, 0.0, 0.2, 0.6]], np.float32)
    with mock.patch.object(orqa, "_KS", (1, 2)):
      recall, first_hits = orqa._ranked(index_lib.build_index(vectors, implementation="brute_force"), queries,
                                        full)
      dev_recall, dev_first_hits = orqa._ranked(
          index_lib.build_index(vectors[2:], implementation="brute_force"), queries, full.dev_corpus())
    self.assertEqual(first_hits, [1, 2])  # answer strings: row 1 holds "Paris" too
    self.assertEqual((recall["gold_recall@1"], recall["gold_recall@2"]), (0.0, 100.0))
    self.assertEqual(dev_first_hits, [1, 1])  # without train rows each finds its own paragraph first
    self.assertEqual(dev_recall["gold_recall@1"], 100.0)


class TrainingQuestionsTest(tf.test.TestCase):

  def test_skips_and_counts(self):
    index = answer_index.AnswerIndex(_TEXTS)
    train = [
        qa.QAExample("q0", ["Tokyo"]),
        qa.QAExample("q1", ["new york"]),
        qa.QAExample("q2", ["Berlin"]),
        qa.QAExample("q3", ["1990"])
    ]
    chosen, positives, examined, skipped = orqa._training_questions(train, index, needed=5, seed=3)
    self.assertLen(chosen, 5)  # more than the two usable questions: the order starts over
    self.assertContainsSubset(set(chosen), {1, 3})
    self.assertEqual((examined, skipped), (4, 2))
    for i, rows in zip(chosen, positives):
      self.assertEqual(rows.tolist(), [0, 4] if i == 1 else [2])

  def test_without_any_answer_raises(self):
    index = answer_index.AnswerIndex(_TEXTS)
    with self.assertRaisesRegex(RuntimeError, "no training question"):
      orqa._training_questions([qa.QAExample("q", ["Tokyo"])], index, needed=1, seed=0)

  def test_positive_mask(self):
    mask = orqa.positive_mask([np.array([0, 3], np.int32), np.array([], np.int32)], 4)
    self.assertAllEqual(mask, [[1, 0, 0, 1], [0, 0, 0, 0]])
    self.assertEqual(mask.dtype, np.float32)


class TrainingTest(tf.test.TestCase):

  def test_batches_train_the_tower_through_the_loop(self):
    tf.keras.utils.set_random_seed(0)
    tokenizer = tokenization.Tokenizer(tiny_inputs.write_vocab(self.create_tempdir().full_path))
    tower = embedder.sentence_transformers_embedder(
        bert.tiny_config(tokenizer.vocab_size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    questions = text_embedder.TextEmbedder(tower,
                                           tokenizer,
                                           max_seq_length=8,
                                           length_bucket=4,
                                           jit_compile=False)
    paragraphs = np.random.default_rng(0).normal(size=[6, 64]).astype(np.float32)
    paragraphs /= np.linalg.norm(paragraphs, axis=1, keepdims=True)
    token_ids = questions.token_ids(["a short one", "x", "mid length text", "the second text"] * 2)
    positives = [np.array([2]), np.array([4, 5]), np.array([0]), np.array([1])] * 2
    dataset_fn = orqa.training_dataset_fn(questions, token_ids, positives, 6, batch_size=2)
    first = next(iter(dataset_fn(0)))
    ids, mask = questions.pad(token_ids[:2])
    self.assertAllEqual(first["query_token_ids"], ids)  # padded as evaluation pads them
    self.assertAllEqual(first["query_mask"], mask)
    self.assertAllEqual(first[orqa_retriever.RETRIEVER_CORRECT], orqa.positive_mask(positives[:2], 6))
    self.assertLen(list(dataset_fn(3)), 1)  # a resume at batch 3 of 4 gets the last batch only
    model = orqa_retriever.OrqaRetriever(tower, paragraphs, scale=20.0)
    model(first)
    before = [w.numpy() for w in tower.trainable_weights]
    curve = loss_curve.train(model,
                             optimization.create_optimizer(1e-3, 4, num_warmup_steps=0),
                             dataset_fn,
                             num_steps=4,
                             log_every=2,
                             jit_compile=False,
                             log=lambda _: None,
                             point_extras=lambda step: {"extra": step})
    self.assertEqual([p["step"] for p in curve.points], [2, 4])
    self.assertEqual([p["extra"] for p in curve.points], [2, 4])
    self.assertContainsSubset({"loss", "retriever_top1_match", "retriever_correct_mass", "seconds"},
                              curve.points[0])
    self.assertLen(curve.step_seconds, 4)
    self.assertTrue(any(np.abs(b - w.numpy()).max() > 0 for b, w in zip(before, tower.trainable_weights)))
    self.assertAllEqual(model.index.embeddings.numpy(), paragraphs)


class RetrieverStartTest(tf.test.TestCase):
  """--init_retriever_checkpoint: a REALM run's towers are the start (the REALM + ORQA row)."""

  def _realm_run(self, model_dir, vocab, projection_size=0, share_embedders=True):
    config = realm_config.RealmConfig(retriever_bert=bert.tiny_config(
        tokenization.Tokenizer(vocab).vocab_size),
                                      reader_bert=bert.tiny_config(tokenization.Tokenizer(vocab).vocab_size),
                                      vocab_path=vocab,
                                      projection_size=projection_size,
                                      embedder_pooling=embedder.MEAN,
                                      cosine_score_scale=20.0,
                                      share_embedders=share_embedders)
    config.save(model_dir)
    tf.keras.utils.set_random_seed(1)
    retriever = config.build_retriever()
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=retriever)),
                                         model_dir,
                                         max_to_keep=2)
    return retriever, manager.save(checkpoint_number=50)

  def test_towers_and_cached_index_come_from_the_checkpoint(self):
    model_dir = self.create_tempdir().full_path
    vocab = tiny_inputs.write_vocab(self.create_tempdir().full_path)
    tokenizer = tokenization.Tokenizer(vocab)
    saved, path = self._realm_run(model_dir, vocab)
    texts = ["the city lies on the river", "paris is a capital", "nothing happened"]
    with flagsaver.flagsaver(cache_dir=self.create_tempdir().full_path, embed_jit_compile=False):
      tower, vectors, info, resolved = orqa._retriever_start(model_dir, tokenizer, texts)
      self.assertEqual(resolved, path)  # the model_dir's latest checkpoint
      self.assertFalse(info["cached"])
      again = orqa._retriever_start(model_dir, tokenizer, texts)
      self.assertTrue(again[2]["cached"])
      self.assertAllClose(again[1], vectors)
    # The saved document tower's embeddings, unit norm (its cosine score scale 20 dropped).
    expected = text_embedder.TextEmbedder(saved.doc_embedder,
                                          tokenizer,
                                          max_seq_length=256,
                                          jit_compile=False).embed(texts)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    self.assertAllClose(vectors, expected, atol=1e-5)
    self.assertAllClose(np.linalg.norm(vectors, axis=1), np.ones(3), atol=1e-5)
    # The question tower holds the saved weights, restored into a tower of its own (not the saved object).
    questions = text_embedder.TextEmbedder(tower, tokenizer, max_seq_length=64, jit_compile=False)
    self.assertAllClose(questions.embed(texts), expected, atol=1e-5)
    self.assertNotIn(id(tower.encoder), {id(saved.doc_embedder.encoder)})

  def test_rejects_a_projected_retriever_naming_the_flag(self):
    model_dir = self.create_tempdir().full_path
    vocab = tiny_inputs.write_vocab(self.create_tempdir().full_path)
    self._realm_run(model_dir, vocab, projection_size=16)
    with self.assertRaisesRegex(Exception, "--init_retriever_checkpoint.*projection_size 16"):
      orqa._retriever_start(model_dir, tokenization.Tokenizer(vocab), ["x"])

  def test_rejects_a_directory_without_a_config(self):
    vocab = tiny_inputs.write_vocab(self.create_tempdir().full_path)
    with self.assertRaisesRegex(Exception, "realm_config.json"):
      orqa._retriever_start(self.create_tempdir().full_path, tokenization.Tokenizer(vocab), ["x"])


if __name__ == "__main__":
  tf.test.main()
