"""Tests of the ORQA model: its loss is zero without a retrievable answer and positive with one, the
gradient reaches the query tower (and the reader) while the document tower and the block embeddings stay
frozen, compute_loss compiles with XLA and matches eager, a two-replica MirroredStrategy step gives the
global-batch loss, and predictions map back to the original (accented) block text.

One training step (the costly part: tracing the train step) serves both the frozen-towers checks and the
two-replica loss. The two replicas need the CPU split before TensorFlow initializes (done at import,
first thing); under a pytest run of several files another module may have initialized TensorFlow first,
and then the step runs on the one default replica (Bazel runs this file alone, where the split always
works).
"""

# pylint: disable=g-import-not-at-top,g-bad-import-order
import tensorflow as tf
from realm_tf.training import distribute

try:  # Before anything else touches TensorFlow: logical devices are fixed at runtime initialization.
  distribute.configure_logical_cpus(2)
  _SPLIT_ERROR = None
except RuntimeError as e:
  _SPLIT_ERROR = str(e)

import dataclasses
import os

import numpy as np
import tf_keras

from realm_tf import featurization
from realm_tf import tokenization
from realm_tf.data import orqa_features
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import orqa
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.testing import test_paths
from realm_tf.training import optimization
from realm_tf.training import train_lib
# pylint: enable=g-import-not-at-top,g-bad-import-order

_VOCAB_PATH = os.path.join(test_paths.repo_root(), "testdata", "vocab.txt")
_VOCAB = 285
_BERT = bert.tiny_config(_VOCAB,
                         hidden_size=32,
                         num_layers=1,
                         intermediate_size=64,
                         hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0)
_CONFIG = realm_config_lib.RealmConfig(retriever_bert=_BERT,
                                       reader_bert=_BERT,
                                       vocab_path=_VOCAB_PATH,
                                       projection_size=16,
                                       query_seq_len=8)
_ORQA = orqa.OrqaConfig(reader_seq_len=20,
                        span_hidden_size=8,
                        max_span_width=3,
                        retriever_beam_size=12,
                        reader_beam_size=3,
                        max_answers=4,
                        max_num_answers=2,
                        max_answer_len=4)
_CLS, _SEP = 2, 3
_N, _C, _B = 12, 10, 4
_ANSWER = [40, 41]  # planted in blocks 0..5


def _corpus(seed=0):
  rng = np.random.default_rng(seed)
  token_ids = rng.integers(50, _VOCAB, [_N, _C]).astype(np.int32)
  lengths = rng.integers(5, _C + 1, [_N]).astype(np.int32)
  for row in range(_N):
    token_ids[row, lengths[row]:] = 0
  token_ids[:6, 1:3] = _ANSWER
  embeddings = rng.normal(size=[_N, 16]).astype(np.float32)
  return embeddings, token_ids, lengths


def _model(seed=0):
  tf_keras.utils.set_random_seed(seed)
  model = orqa.OrqaModel(_CONFIG, _ORQA, *_corpus(), cls_id=_CLS, sep_id=_SEP)
  model.build_variables()
  return model


def _features(answer=None, seed=1):
  rng = np.random.default_rng(seed)
  question = rng.integers(50, _VOCAB, [_B, 5]).astype(np.int32)
  query = np.zeros([_B, 8], np.int32)
  query[:, 0], query[:, 1:6], query[:, 6] = _CLS, question, _SEP
  question_ids = np.zeros([_B, _ORQA.max_block_len], np.int32)
  question_ids[:, :5] = question
  answer_ids = np.zeros([_B, 2, 4], np.int32)
  answer_len = np.zeros([_B, 2], np.int32)
  answer = _ANSWER if answer is None else answer
  answer_ids[:, 0, :len(answer)] = answer
  answer_len[:, 0] = len(answer)
  return {
      "query_token_ids": tf.constant(query),
      "query_mask": tf.constant((query > 0).astype(np.int32)),
      "query_segment_ids": tf.zeros([_B, 8], tf.int32),
      orqa_features.QUESTION_IDS: tf.constant(question_ids),
      orqa_features.QUESTION_LEN: tf.fill([_B], 5),
      orqa_features.ANSWER_IDS: tf.constant(answer_ids),
      orqa_features.ANSWER_LEN: tf.constant(answer_len)
  }


class OrqaLossTest(tf.test.TestCase):

  def test_zero_loss_when_no_answer_is_retrievable(self):
    model = _model()
    output = model.compute_loss(_features(answer=[4, 4]), training=False)  # [MASK] [MASK]: nowhere
    self.assertEqual(float(output.loss_sum), 0.0)
    self.assertEqual(float(output.loss_weight), _B)
    self.assertEqual(float(output.metrics["retriever_top12_match"][0]), 0.0)
    self.assertEqual(float(output.metrics["reader_oracle"][0]), 0.0)

  def test_positive_loss_and_labels_with_a_retrievable_answer(self):
    model = _model()
    output = model.compute_loss(_features(), training=False)
    self.assertGreater(float(output.loss_sum), 0.0)
    self.assertGreater(float(output.metrics["retriever_loss"][0]), 0.0)
    # The beam is the whole corpus (12 blocks), half of which contain the answer.
    self.assertEqual(float(output.metrics["retriever_top12_match"][0]), _B)
    # Reader oracle == some read block is one of blocks 0..5.
    rows = model.predict_answers(_features())["block_rows"].numpy()[:, :3]
    self.assertEqual(float(output.metrics["reader_oracle"][0]), float((rows < 6).any(axis=1).sum()))

  def test_given_candidate_rows_are_what_the_loss_reads(self):
    """bin/train_orqa --retriever=bm25|hybrid: the step reads the rows in the features, not its search."""
    model = _model()
    no_answer = np.tile(np.arange(6, 12, dtype=np.int32), [_B, 2])  # [B, 12]: blocks 6..11 only
    output = model.compute_loss(dict(_features(), **{orqa_features.CANDIDATE_ROWS: no_answer}),
                                training=False)
    # The dense search's beam (the whole corpus) holds the answer for every question; these rows do not.
    self.assertEqual(float(output.metrics["retriever_top12_match"][0]), 0.0)
    self.assertEqual(float(output.loss_sum), 0.0)
    one_answer = no_answer.copy()
    one_answer[0, 0] = 2  # question 0 reads block 2 (an answer) first
    output = model.compute_loss(dict(_features(), **{orqa_features.CANDIDATE_ROWS: one_answer}),
                                training=False)
    self.assertEqual(float(output.metrics["retriever_top12_match"][0]), 1.0)
    self.assertEqual(float(output.metrics["reader_oracle"][0]), 1.0)
    self.assertGreater(float(output.loss_sum), 0.0)

  def test_gradient_reaches_query_tower_and_blocks_stay_frozen(self):
    """What is trainable, and the loss's gradient; the training step itself is TrainStepTest's."""
    model = _model()
    trainable = {v.ref() for v in model.trainable_variables}
    self.assertTrue(all(v.ref() in trainable for v in model.retriever.query_embedder.weights))
    self.assertFalse(any(v.ref() in trainable for v in model.retriever.doc_embedder.weights))
    self.assertNotIn(model.corpus.embeddings.ref(), trainable)
    # The frozen index is not part of the model's checkpoint.
    self.assertFalse(any("block_embeddings" in v.name for v in model.variables))

    with tf.GradientTape() as tape:
      loss = model.compute_loss(_features(), training=True).loss_sum
    gradients = tape.gradient(loss, model.retriever.query_embedder.trainable_variables)
    self.assertGreater(sum(float(tf.norm(g)) for g in gradients if g is not None), 0.0)

  def test_compute_loss_compiles_with_xla(self):
    model = _model()
    features = _features()
    compiled = tf.function(lambda f: model.compute_loss(f, training=False), jit_compile=True)
    eager, xla = model.compute_loss(features, training=False), compiled(features)
    self.assertAllClose(eager.loss_sum, xla.loss_sum, rtol=1e-4)
    for name, (total, _) in eager.metrics.items():
      self.assertAllClose(total, xla.metrics[name][0], rtol=1e-4, msg=name)


class TrainStepTest(tf.test.TestCase):

  def test_two_replica_step_gives_the_global_batch_loss_and_trains_the_query_tower_only(self):
    if _SPLIT_ERROR:
      print(f"one replica only: {_SPLIT_ERROR}")
      strategy = tf.distribute.get_strategy()
    else:
      strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
      self.assertEqual(strategy.num_replicas_in_sync, 2)
    with strategy.scope():
      model = _model()
      optimizer = optimization.create_optimizer(1e-2, 10, num_warmup_steps=0)
      # The optimizer's variables made before the step: a tf.function that creates variables on its first
      # call is traced twice, and tracing the two-replica step is most of this file's cost.
      optimizer._create_all_weights(model.trainable_variables)  # pylint: disable=protected-access
    features = _features()
    expected = model.compute_loss(features, training=True)
    before = {
        name: [w.numpy() for w in tower.weights]
        for name, tower in (("query", model.retriever.query_embedder), ("doc", model.retriever.doc_embedder))
    }
    embeddings = model.corpus.embeddings.numpy()
    dataset = tf.data.Dataset.from_tensors(features)
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
    result = train_lib.TrainStep(model, optimizer, strategy, jit_compile=False)(batch)
    self.assertAllClose(result["loss"], float(expected.loss_sum) / _B, rtol=1e-4)
    self.assertAllClose(result["retriever_top12_match"], 1.0)
    self.assertEqual(int(optimizer.iterations.numpy()), 1)
    # The step updated the query tower, and neither the document tower nor the block embeddings.
    changed = lambda name, tower: any(not np.allclose(a, b.numpy())
                                      for a, b in zip(before[name], tower.weights))
    self.assertTrue(changed("query", model.retriever.query_embedder))
    self.assertFalse(changed("doc", model.retriever.doc_embedder))
    self.assertAllEqual(model.corpus.embeddings.numpy(), embeddings)


class PredictionTest(tf.test.TestCase):

  def test_answer_text_is_the_original_slice(self):
    tokenizer = tokenization.Tokenizer(_VOCAB_PATH)
    bodies = [
        "Zoë Kelarlé founded the Ünter Workshop in Café.", "Wenor was born in Griencor.",
        "Nothing here at all.", "Savix Lunene lived in Rosysmer."
    ]
    ids = tokenizer.tokenize(bodies)
    token_ids = ids.to_tensor().numpy().astype(np.int32)
    lengths = ids.row_lengths().numpy().astype(np.int32)
    config = dataclasses.replace(_ORQA, reader_seq_len=32, retriever_beam_size=4, reader_beam_size=2)
    tf_keras.utils.set_random_seed(0)
    embeddings = np.random.default_rng(0).normal(size=[4, 16]).astype(np.float32)
    model = orqa.OrqaModel(_CONFIG, config, embeddings, token_ids, lengths, tokenizer.cls_id,
                           tokenizer.sep_id)
    featurizer = featurization.Featurizer.from_tokenizer(tokenizer,
                                                         query_seq_len=8,
                                                         candidate_seq_len=16,
                                                         max_masks=1)
    features = orqa_features.question_features(tokenizer, featurizer,
                                               ["Who founded the Ünter Workshop?", "Where?", ""], 32)
    predictions = {k: v.numpy() for k, v in model.predict_answers(features, num_retrieved=3).items()}
    self.assertEqual(predictions["block_rows"].shape, (3, 3))
    answers = orqa.answer_texts(tokenizer, bodies, predictions)
    pieces = tokenizer.tokenize_texts(bodies)
    for i, answer in enumerate(answers):
      row = predictions["predicted_row"][i]
      first, last = predictions["first_piece"][i], predictions["last_piece"][i]
      self.assertBetween(first, 0, last)
      self.assertLess(last, lengths[row])
      # The answer is the body's bytes from the first piece's start to the last piece's limit.
      expected = bodies[row].encode("utf-8")[pieces[row].starts[first]:pieces[row].limits[last]]
      self.assertEqual(answer, expected)
    # A hand-made prediction: pieces 0..5 of block 0 are z ##o ##e kel ##ar ##le.
    hand = {"predicted_row": np.array([0]), "first_piece": np.array([0]), "last_piece": np.array([5])}
    self.assertEqual(orqa.answer_texts(tokenizer, bodies, hand)[0].decode("utf-8"), "Zoë Kelarlé")

  def test_candidates_from_an_external_search_are_ranked_exactly(self):
    """An approximate searcher's candidates (any order, -1 padding) give brute force's result when
    they include the true top blocks."""
    model = _model()
    features = _features()

    def candidates(query):
      batch = tf.shape(query)[0]
      return tf.concat(
          [tf.tile(tf.range(_N - 1, -1, -1)[tf.newaxis], [batch, 1]), -tf.ones([batch, 3], tf.int32)], axis=1)

    exact = model.predict_answers(features, num_retrieved=5)
    approx = model.predict_answers(features, num_retrieved=5, candidate_fn=candidates)
    for name in ("block_rows", "predicted_row", "first_piece", "last_piece"):
      self.assertAllEqual(exact[name], approx[name], msg=name)
    self.assertAllClose(exact["retriever_logits"], approx["retriever_logits"])

  def test_given_rows_are_read_in_their_order_with_their_exact_scores(self):
    """Another retriever's rows (BM25's, a hybrid's, the gold block): the reader reads them, not the
    dense search's, and each gets its exact q . d; the dense tower's own rows give its own result."""
    model = _model()
    features = _features()
    dense = model.predict_answers(features, num_retrieved=5)
    given = model.predict_answers(features, block_rows=dense["block_rows"])
    for name in ("block_rows", "predicted_row", "first_piece", "last_piece", "score"):
      self.assertAllClose(dense[name], given[name], msg=name)
    self.assertAllClose(dense["retriever_logits"], given["retriever_logits"], rtol=1e-5)
    # Rows the dense search ranks last, one per question: the answer can only come from them.
    last = tf.math.top_k(
        -tf.matmul(model.retriever.embed_queries(tuple(features[n] for n in orqa_features.QUERY_FIELDS)),
                   model.corpus.embeddings,
                   transpose_b=True),
        k=1)[1]
    one = model.predict_answers(features, block_rows=last)
    self.assertAllEqual(one["block_rows"], last)
    self.assertAllEqual(one["predicted_row"], last[:, 0])
    self.assertNotIn(int(last[0, 0]), dense["block_rows"].numpy()[0].tolist())

  def test_copy_retriever_weights_names_the_mismatch(self):
    model = _model()
    other = embedder_lib.build_retriever(dataclasses.replace(_BERT, hidden_size=64), 16)
    with self.assertRaisesRegex(ValueError, "shape"):
      orqa.copy_retriever_weights(other, model.retriever)
    same = embedder_lib.build_retriever(_BERT, 16)
    orqa.copy_retriever_weights(same, model.retriever)
    self.assertAllEqual(model.retriever.query_embedder.weights[0], same.doc_embedder.weights[0])


if __name__ == "__main__":
  tf.test.main()
