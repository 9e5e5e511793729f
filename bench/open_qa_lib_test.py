"""Tests for bench/open_qa_lib.py (the system of bench/squad_open_qa_bench.py), without MiniLM weights or
SQuAD data: the training paragraphs, the featurized batches under OrqaReader's loss (ORQA's marginal over
every gold span of both paragraphs, one softmax) and through loop.train, and how answers are picked
across the first k paragraphs and sliced from the text."""

import functools
import os

import numpy as np
import tensorflow as tf

from bench import loss_curve
from bench import open_qa_lib
from realm_tf import tokenization
from realm_tf.data import qa
from realm_tf.modeling import bert
from realm_tf.modeling import orqa_reader
from realm_tf.modeling import reader as reader_lib
from realm_tf.training import optimization

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SEQ_LEN, _WIDTH = 24, 3


def _tokenizer():
  return tokenization.Tokenizer(os.path.join(_REPO, "testdata", "vocab.txt"))


@functools.lru_cache(maxsize=None)
def _featurizer():
  """make_featurizer's function, traced once for all the tests.

  Tracing the text featurizer (three tokenizer calls) and running its graph the first time cost seconds
  of CPU, and make_featurizer's tf.function traces once per input shape: 2 questions x 2 paragraphs in
  training, then 2 x 3 and 1 x 3 when answering. The same Python function under a signature with
  unknown batch and paragraph dimensions is traced once for all of them."""
  featurize = open_qa_lib.make_featurizer(_tokenizer(), _SEQ_LEN)
  return tf.function(featurize.python_function,
                     input_signature=[
                         tf.TensorSpec([None], tf.string),
                         tf.TensorSpec([None, None], tf.string),
                         tf.RaggedTensorSpec([None, None],
                                             tf.string,
                                             ragged_rank=1,
                                             row_splits_dtype=tf.int64)
                     ])


class TrainingParagraphsTest(tf.test.TestCase):

  def test_gold_then_best_other(self):
    train = [qa.QAExample("a", ["x"]), qa.QAExample("b", ["y"])]
    pairs = open_qa_lib.training_paragraphs(train, np.array([4, 7]), np.array([[4, 9], [2, 7]]))
    self.assertEqual(pairs.tolist(), [[4, 9], [7, 2]])


class ReaderTrainingTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.featurize = staticmethod(_featurizer())

  def _reader(self, tokenizer):
    config = bert.tiny_config(tokenizer.vocab_size,
                              hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0,
                              num_layers=1)
    return reader_lib.SpanReader(config, seq_len=_SEQ_LEN, span_hidden_size=8, max_span_width=_WIDTH)

  def test_loss_is_the_marginal_over_gold_spans_of_both_paragraphs(self):
    tf.keras.utils.set_random_seed(1)
    tokenizer = _tokenizer()
    reader = self._reader(tokenizer)
    featurize = self.featurize
    features = featurize(
        tf.constant(["who was born in paris?", "who?"]),
        tf.constant([["the city of paris is big", "paris again"], ["no answer here", "nor here"]]),
        tf.ragged.constant([["paris"], ["london"]]))
    model = orqa_reader.OrqaReader(reader)
    output = model.compute_loss({k: features[k] for k in orqa_reader.FEATURES}, training=False)
    logits = reader((tuple(features[k] for k in orqa_reader.READER_FIELDS), features["block_mask"],
                     tf.zeros([2, 2]))).logits.numpy()
    correct = reader_lib.reader_correct(
        *[tf.constant(a) for a in reader_lib.span_candidates(_SEQ_LEN, _WIDTH)], features["gold_starts"],
        features["gold_ends"]).numpy()
    self.assertEqual(correct[0].sum(axis=-1).tolist(), [1, 1])  # "paris" once in each paragraph
    self.assertEqual(correct[1].sum(), 0)
    flat, gold = logits[0].reshape(-1), correct[0].reshape(-1)
    expected = np.logaddexp.reduce(flat) - np.logaddexp.reduce(flat[gold])
    # The question without a gold span adds nothing and is not counted.
    self.assertAllClose(output.loss_sum, expected, rtol=1e-5)
    self.assertAllClose(output.loss_weight, 1.0)
    self.assertAllClose(output.metrics["reader_oracle"], (1.0, 2.0))

  def test_batches_train_the_reader_through_the_loop(self):
    tf.keras.utils.set_random_seed(2)
    tokenizer = _tokenizer()
    reader = self._reader(tokenizer)
    featurize = self.featurize
    bodies = ["Lantern river flows.", "Telescope, the academy.", "Garden calling."]
    train = [
        qa.QAExample("what lights the river?", ["lantern"]),
        qa.QAExample("what did the astronomer use?", ["telescope"])
    ]
    pairs = np.array([[0, 2], [1, 0]])
    dataset_fn = open_qa_lib.training_dataset_fn(featurize,
                                                 _SEQ_LEN,
                                                 bodies,
                                                 train,
                                                 pairs,
                                                 np.array([0, 1, 1, 0]),
                                                 batch_size=2)
    first = next(iter(dataset_fn(0)))
    self.assertEqual(sorted(first), sorted(orqa_reader.FEATURES))
    self.assertEqual(first["reader_token_ids"].shape, (2, 2, _SEQ_LEN))
    self.assertEqual(dataset_fn(0).element_spec["gold_starts"].shape.as_list(), [2, 2, None])
    self.assertLen(list(dataset_fn(1)), 1)  # a resume at batch 1 of 2 gets the last batch only
    model = orqa_reader.OrqaReader(reader)
    model(first)
    before = [w.numpy() for w in reader.trainable_weights]
    curve = loss_curve.train(model,
                             optimization.create_optimizer(1e-3, 2, num_warmup_steps=0),
                             dataset_fn,
                             num_steps=2,
                             log_every=1,
                             jit_compile=False,
                             log=lambda _: None)
    self.assertEqual([p["step"] for p in curve.points], [1, 2])
    self.assertContainsSubset({"loss", "exact_match", "reader_oracle"}, curve.points[0])
    self.assertAllClose(1.0, curve.points[0]["reader_oracle"])  # both answers are in their paragraphs
    self.assertTrue(any(np.abs(b - w.numpy()).max() > 0 for b, w in zip(before, reader.trainable_weights)))


class SaveRestoreTest(tf.test.TestCase):

  def _reader(self, seed):
    tf.keras.utils.set_random_seed(seed)
    tokenizer = _tokenizer()
    config = bert.tiny_config(tokenizer.vocab_size, num_layers=1)
    reader = reader_lib.SpanReader(config, seq_len=_SEQ_LEN, span_hidden_size=8, max_span_width=_WIDTH)
    dummy = tf.zeros([1, 1, _SEQ_LEN], tf.int32)
    reader(((dummy, dummy, dummy), dummy, tf.zeros([1, 1])))
    return reader

  def test_round_trip_and_refusals(self):
    directory = os.path.join(self.get_temp_dir(), "reader")
    settings = {"steps": 3, "seq_len": _SEQ_LEN}
    fresh = self._reader(1)
    self.assertFalse(open_qa_lib.restore_reader(fresh, directory, settings))  # nothing saved yet
    trained = self._reader(2)
    open_qa_lib.save_reader(trained, directory, settings)
    self.assertNotAllClose(fresh.get_weights()[0], trained.get_weights()[0])
    self.assertTrue(open_qa_lib.restore_reader(fresh, directory, settings))
    for a, b in zip(fresh.get_weights(), trained.get_weights()):
      self.assertAllEqual(a, b)
    with self.assertRaisesRegex(ValueError, "other settings.*steps"):
      open_qa_lib.restore_reader(fresh, directory, {"steps": 4, "seq_len": _SEQ_LEN})
    with self.assertRaisesRegex(FileExistsError, "exists"):
      open_qa_lib.save_reader(trained, directory, settings)
    self.assertEqual(sorted(os.listdir(self.get_temp_dir())), ["reader"])  # no temporary left behind
    stray = os.path.join(self.get_temp_dir(), "stray")
    os.makedirs(stray)
    with open(os.path.join(stray, "x"), "w") as f:
      f.write("x")
    with self.assertRaisesRegex(ValueError, "not a reader"):
      open_qa_lib.restore_reader(fresh, stray, settings)


class _FirstPieceReader:
  """A test double: scores only each paragraph's first wordpiece (a width-1 span), score[k] for paragraph
  k, so which paragraph's first word is predicted depends on k alone."""

  def __init__(self, seq_len, scores):
    self.seq_len = seq_len
    self.scores = tf.constant(scores, tf.float32)
    self.num_spans = len(reader_lib.span_candidates(seq_len, _WIDTH)[0])

  def __call__(self, inputs, training=None):
    _, block_mask, _ = inputs
    first = tf.argmax(block_mask, axis=-1, output_type=tf.int32)  # [B, K]; width-1 span index = position
    hot = tf.one_hot(first, self.num_spans, on_value=0.0, off_value=-10000.0)
    k = tf.shape(block_mask)[1]
    return reader_lib.ReaderOutput(hot + self.scores[tf.newaxis, :k, tf.newaxis], None, None)


class AnswerQuestionsTest(tf.test.TestCase):

  def test_best_span_over_the_first_k_paragraphs(self):
    featurize = _featurizer()
    # Words of the test vocab, so that each is one wordpiece; paragraph 1 scores highest, then 0.
    bodies = ["Lantern river flows.", "Telescope, the academy.", "Garden calling."]
    questions = [
        qa.QAExample("what did the astronomer use?", ["telescope"]),
        qa.QAExample("what lights the river?", ["lantern"]),
        qa.QAExample("what grows?", ["Garden"])
    ]
    rows = np.array([[0, 1, 2], [0, 1, 2], [2, 0, 1]])
    reader = _FirstPieceReader(_SEQ_LEN, [2.0, 5.0, 1.0])
    result = open_qa_lib.answer_questions(reader,
                                          featurize,
                                          bodies,
                                          questions,
                                          rows, (1, 3),
                                          max_span_width=_WIDTH,
                                          batch_size=2,
                                          jit_compile=False)
    # k = 1: each question's first paragraph: "Lantern", "Lantern", "Garden" (matched after SQuAD's
    # normalisation, which lower-cases); k = 3: the second paragraph read scores highest: "Telescope"
    # for the first two, "Lantern" for the third.
    self.assertAllClose(result["per_k"]["1"]["exact_match"], 200 / 3)
    self.assertAllClose(result["per_k"]["3"]["exact_match"], 100 / 3)
    self.assertEqual([p["prediction"] for p in result["predictions_sample"]],
                     ["Telescope", "Telescope", "Lantern"])
    # The oracle: an answer anywhere in the paragraphs read (raw, case-sensitive substring, as ORQA).
    self.assertAllClose(result["per_k"]["1"]["answer_in_read_paragraphs"], 100 / 3)
    self.assertAllClose(result["per_k"]["3"]["answer_in_read_paragraphs"], 100 / 3)


if __name__ == "__main__":
  tf.test.main()
