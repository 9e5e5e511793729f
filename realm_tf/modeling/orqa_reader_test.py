"""Tests of OrqaReader: with the retriever's outputs as features its loss is ORQA's (losses.orqa_loss,
span logits including the read blocks' retriever logits); without them it is the reader's alone
(losses.reader_loss, retriever logits 0); and a step lowers it."""

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import losses
from realm_tf.modeling import orqa_reader
from realm_tf.modeling import reader
from realm_tf.training import optimization
from realm_tf.training import train_lib

_CONFIG = bert.tiny_config(40, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_B, _K, _L, _R = 2, 2, 12, 5


def _features(with_retriever: bool):
  rng = np.random.default_rng(0)
  token_ids = rng.integers(5, 40, [_B, _K, _L]).astype(np.int32)
  block_mask = np.zeros([_B, _K, _L], np.int32)
  block_mask[:, :, 4:-1] = 1
  gold_starts = np.full([_B, _K, 2], -1, np.int32)
  gold_ends = np.full([_B, _K, 2], -1, np.int32)
  gold_starts[0, 1, 0], gold_ends[0, 1, 0] = 5, 6  # question 1 has no gold span
  features = {
      "reader_token_ids": token_ids,
      "reader_mask": np.ones_like(token_ids),
      "reader_segment_ids": (np.arange(_L) >= 4).astype(np.int32) * np.ones_like(token_ids),
      orqa_reader.BLOCK_MASK: block_mask,
      orqa_reader.GOLD_STARTS: gold_starts,
      orqa_reader.GOLD_ENDS: gold_ends
  }
  if with_retriever:
    features[orqa_reader.RETRIEVER_LOGITS] = rng.normal(size=[_B, _R]).astype(np.float32)
    features[orqa_reader.RETRIEVER_CORRECT] = np.array([[0, 1, 0, 0, 1], [1, 0, 0, 0, 0]], bool)
  return {k: tf.constant(v) for k, v in features.items()}


class OrqaReaderTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    tf_keras.utils.set_random_seed(0)
    self.model = orqa_reader.OrqaReader(
        reader.SpanReader(_CONFIG, seq_len=_L, span_hidden_size=8, max_span_width=3))

  def _expected(self, features, retriever_logits):
    output = self.model.reader(
        ((features["reader_token_ids"], features["reader_mask"], features["reader_segment_ids"]),
         features[orqa_reader.BLOCK_MASK], retriever_logits))
    correct = reader.reader_correct(output.span_starts, output.span_ends, features[orqa_reader.GOLD_STARTS],
                                    features[orqa_reader.GOLD_ENDS])
    return output, correct

  def test_with_retriever_features_is_orqa_loss(self):
    features = _features(with_retriever=True)
    output, correct = self._expected(features, features[orqa_reader.RETRIEVER_LOGITS][:, :_K])
    self.assertAllClose(output.logits, self.model(features).logits)
    expected = losses.orqa_loss(features[orqa_reader.RETRIEVER_LOGITS],
                                features[orqa_reader.RETRIEVER_CORRECT], output.logits, correct)
    got = self.model.compute_loss(features)
    self.assertAllClose(expected.loss_sum, got.loss_sum, atol=1e-5)
    self.assertAllClose(expected.loss_weight, got.loss_weight)

  def test_without_is_reader_loss(self):
    features = _features(with_retriever=False)
    output, correct = self._expected(features, tf.zeros([_B, _K]))
    expected = losses.reader_loss(output.logits, correct)
    got = self.model.compute_loss(features)
    self.assertAllClose(expected.loss_sum, got.loss_sum, atol=1e-5)
    self.assertEqual(1.0, float(got.loss_weight))  # one question has a gold span
    self.assertEqual(sorted(got.metrics), ["exact_match", "reader_oracle"])

  def test_step_lowers_the_loss(self):
    features = _features(with_retriever=False)
    self.model(features)
    step = train_lib.TrainStep(self.model,
                               optimization.create_optimizer(1e-3, 20, num_warmup_steps=0),
                               jit_compile=False)
    seen = [float(step(features)["loss"]) for _ in range(4)]
    self.assertLess(seen[-1], seen[0])


if __name__ == "__main__":
  tf.test.main()
