"""Tests of OrqaRetriever: its logits are scale x q . d over every block, its loss is
losses.retriever_loss of them, and a training step moves the query tower and never the index."""

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.data import orqa_features
from realm_tf.modeling import bert
from realm_tf.modeling import embedder
from realm_tf.modeling import losses
from realm_tf.modeling import orqa_retriever
from realm_tf.training import optimization
from realm_tf.training import train_lib

_CONFIG = bert.tiny_config(50, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _features(correct):
  ids = np.array([[1, 5, 7, 2], [1, 9, 2, 0]], np.int32)
  return {
      orqa_features.QUERY_FIELDS[0]: tf.constant(ids),
      orqa_features.QUERY_FIELDS[1]: tf.constant((ids > 0).astype(np.int32)),
      orqa_features.QUERY_FIELDS[2]: tf.constant(np.zeros_like(ids)),
      orqa_retriever.RETRIEVER_CORRECT: tf.constant(correct, tf.float32)
  }


class OrqaRetrieverTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    tf_keras.utils.set_random_seed(0)
    self.tower = embedder.sentence_transformers_embedder(_CONFIG)
    blocks = np.random.default_rng(0).normal(size=[6, _CONFIG.hidden_size]).astype(np.float32)
    self.blocks = blocks / np.linalg.norm(blocks, axis=1, keepdims=True)
    self.correct = np.zeros([2, 6], np.float32)
    self.correct[0, 2] = self.correct[1, 4] = self.correct[1, 5] = 1.0

  def test_logits_and_loss(self):
    model = orqa_retriever.OrqaRetriever(self.tower, self.blocks, scale=20.0)
    features = _features(self.correct)
    query = model(features)
    self.assertAllClose(tf.norm(query, axis=-1), [1.0, 1.0], atol=1e-5)
    logits = model.retriever_logits(features)
    self.assertAllClose(20.0 * query.numpy() @ self.blocks.T, logits, atol=1e-4)
    expected = losses.retriever_loss(logits, self.correct)
    output = model.compute_loss(features)
    self.assertAllClose(expected.loss_sum, output.loss_sum, atol=1e-5)
    self.assertEqual(sorted(output.metrics), ["retriever_correct_mass", "retriever_top1_match"])

  def test_step_trains_the_tower_and_not_the_index(self):
    model = orqa_retriever.OrqaRetriever(self.tower, self.blocks, scale=20.0)
    features = _features(self.correct)
    model(features)
    self.assertNotIn(model.index.embeddings.ref(), {v.ref() for v in model.variables})
    self.assertEqual(len(model.trainable_variables), len(self.tower.encoder.trainable_variables))
    step = train_lib.TrainStep(model,
                               optimization.create_optimizer(1e-3, 20, num_warmup_steps=0),
                               jit_compile=False)
    losses_seen = [float(step(features)["loss"]) for _ in range(5)]
    self.assertLess(losses_seen[-1], losses_seen[0])
    self.assertAllEqual(model.index.embeddings.numpy(), self.blocks)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, r"expected \[N, 64\]"):
      orqa_retriever.OrqaRetriever(self.tower, np.zeros([3, 16], np.float32))
    with self.assertRaisesRegex(ValueError, "scale must be positive"):
      orqa_retriever.OrqaRetriever(self.tower, self.blocks, scale=0.0)


if __name__ == "__main__":
  tf.test.main()
