"""Tests of the Inverse Cloze Task model: its loss is the in-batch softmax cross entropy of the queries
against all blocks (labels on the diagonal), its accuracies split by mask_query, and ONE embedder (one
set of weights) embeds both queries and blocks, as the released ORQA code does. The cross-replica
version (negatives from every replica) is tested in realm_tf/training/train_lib_test.py."""

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import ict

_VOCAB = 30
_CONFIG = bert.tiny_config(_VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_B, _Q, _C = 4, 6, 9


def _triple(token_ids, segment_start=None):
  token_ids = np.asarray(token_ids, np.int32)
  segment_ids = np.zeros_like(token_ids)
  if segment_start is not None:
    segment_ids[:, segment_start:] = 1
  return token_ids, np.ones_like(token_ids), segment_ids


def _features(query_is_block_of, mask_query=None):
  """Blocks are random; query i is a copy of block query_is_block_of[i] (so its best match is known)."""
  rng = np.random.default_rng(0)
  blocks = _triple(rng.integers(5, _VOCAB, [_B, _C]), segment_start=4)
  queries = tuple(x[list(query_is_block_of)] for x in blocks)
  features = {}
  for prefix, triple in (("query", queries), ("block", blocks)):
    for field, value in zip(("token_ids", "mask", "segment_ids"), triple):
      features[f"{prefix}_{field}"] = tf.constant(value)
  if mask_query is not None:
    features["mask_query"] = tf.constant(mask_query, tf.float32)
  return features


def _cross_entropy(query, blocks):
  logits = query @ blocks.T
  logits -= logits.max(-1, keepdims=True)
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return -np.diag(log_probs), (logits.argmax(-1) == np.arange(len(query))).astype(np.float32)


class _SeededTestCase(tf.test.TestCase):
  """Seeds Keras's initializers, so every run builds the same weights (unseeded ones differ per run)."""

  def setUp(self):
    super().setUp()
    tf_keras.utils.set_random_seed(0)


class IctModelTest(_SeededTestCase):

  def test_loss_is_in_batch_softmax_cross_entropy(self):
    model = ict.IctModel(_CONFIG, projection_size=16)
    features = _features([0, 1, 2, 3])
    # Make queries differ from their blocks: different token ids after position 1.
    features["query_token_ids"] = tf.concat(
        [features["query_token_ids"][:, :2],
         tf.reverse(features["query_token_ids"][:, 2:], [0])], 1)
    query, blocks = (x.numpy() for x in model(features))
    self.assertEqual(query.shape, (_B, 16))
    self.assertEqual(blocks.shape, (_B, 16))
    nll, correct = _cross_entropy(query, blocks)
    output = model.compute_loss(features, training=False)
    self.assertAllClose(float(_B), output.loss_weight)
    self.assertAllClose(nll.sum(), output.loss_sum, atol=1e-4)
    total, weight = output.metrics["accuracy"]
    self.assertAllClose(correct.mean(), total / weight)
    self.assertNotIn("masked_accuracy", output.metrics)
    # Sensitivity: the labels matter (the same softmax scored against the reversed blocks differs).
    reversed_nll, _ = _cross_entropy(query[::-1], blocks)
    self.assertGreater(abs(reversed_nll.sum() - output.loss_sum.numpy()), 1e-3)

  def test_masked_and_unmasked_accuracy(self):
    model = ict.IctModel(_CONFIG, projection_size=16)
    # Queries 0 and 2 copy their own block (hits); query 1 copies block 2 and query 3 block 1 (misses).
    features = _features([0, 2, 2, 1], mask_query=[1.0, 0.0, 1.0, 1.0])
    query, blocks = (x.numpy() for x in model(features))
    nll, correct = _cross_entropy(query, blocks)
    self.assertAllEqual([1.0, 0.0, 1.0, 0.0], correct)
    output = model.compute_loss(features, training=False)
    self.assertAllClose(nll.sum(), output.loss_sum, atol=1e-4)
    value = {name: float(total) / float(weight) for name, (total, weight) in output.metrics.items()}
    self.assertAllClose(0.5, value["accuracy"])
    self.assertAllClose(2.0 / 3.0, value["masked_accuracy"])  # queries 0, 2 hit, 3 missed
    self.assertAllClose(0.0, value["unmasked_accuracy"])  # query 1 missed
    self.assertAllClose(3.0, output.metrics["masked_accuracy"][1])
    self.assertAllClose(1.0, output.metrics["unmasked_accuracy"][1])

  def test_one_embedder_for_queries_and_blocks(self):
    model = ict.IctModel(_CONFIG, projection_size=16)
    features = _features([0, 1, 2, 3])
    query, blocks = model(features)
    # Identical inputs, identical embeddings: the same weights embed both.
    self.assertAllClose(query, blocks, atol=1e-6)
    self.assertLen(model.trainable_variables, len(model.embedder.trainable_variables))
    self.assertEqual(len(model.trainable_variables), len({id(v) for v in model.trainable_variables}))

  def test_ict_module_numerics(self):
    """The released ICT module: LayerNorm epsilon 1e-3 and dropout 0.1, active only in training."""
    model = ict.IctModel(_CONFIG, projection_size=16)
    self.assertEqual(1e-3, model.embedder.layer_norm.epsilon)
    self.assertEqual(0.1, model.embedder.dropout.rate)
    features = _features([0, 1, 2, 3])
    self.assertAllEqual(
        model.compute_loss(features, training=False).loss_sum,
        model.compute_loss(features, training=False).loss_sum)
    self.assertNotAllClose(model(features, training=True)[0], model(features, training=False)[0])


if __name__ == "__main__":
  tf.test.main()
