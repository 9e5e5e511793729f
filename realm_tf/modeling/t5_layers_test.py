"""Tests of the T5-style layers (realm_tf.modeling.t5_layers)."""

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.modeling import t5_layers


class RelativePositionTest(tf.test.TestCase):

  def test_buckets_match_t5(self):
    # Hand-computed with T5's formula: exact up to max_exact, then logarithmic, capped.
    relative = tf.constant([0, -1, 1, -7, -20, -200, 20])
    self.assertAllEqual([0, 1, 17, 7, 10, 15, 26],
                        t5_layers.relative_position_bucket(relative, True, 32, 128))
    # Causal: every future key shares bucket 0.
    self.assertAllEqual([0, 0, 3, 30],
                        t5_layers.relative_position_bucket(tf.constant([0, 3, -3, -100]), False, 32, 128))

  def test_bias_is_shared_by_equal_distances(self):
    init = lambda fan_in: tf_keras.initializers.RandomNormal(stddev=fan_in**-0.5, seed=1)
    bias = t5_layers.RelativePositionBias(2, 8, 16, True, init)(4, 4).numpy()
    self.assertEqual((1, 2, 4, 4), bias.shape)
    self.assertAllClose(bias[0, :, 0, 1], bias[0, :, 2, 3])  # key - query = 1 both
    self.assertGreater(np.abs(bias[0, :, 0, 1] - bias[0, :, 1, 0]).max(), 0.0)  # +1 and -1 differ


class AttentionTest(tf.test.TestCase):

  def test_logits_are_pre_softmax_and_without_the_bias(self):
    init = lambda fan_in: tf_keras.initializers.RandomNormal(stddev=fan_in**-0.5, seed=2)
    attention = t5_layers.Attention(8, 2, init)
    x = tf.random.stateless_normal([1, 3, 8], seed=[1, 2])
    masked = tf.constant([0.0, 0.0, t5_layers.MASK_BIAS])[tf.newaxis, tf.newaxis, tf.newaxis, :]
    output, logits = attention(x, x, masked)
    _, plain = attention(x, x, tf.zeros([1, 1, 1, 3]))
    self.assertEqual((1, 3, 8), tuple(output.shape))
    self.assertEqual((1, 2, 3, 3), tuple(logits.shape))
    self.assertAllClose(plain, logits)
    q = attention.query(x).numpy()
    k = attention.key(x).numpy()
    self.assertAllClose(np.einsum("bqnh,bknh->bnqk", q, k) / np.sqrt(4.0), logits, atol=1e-5)


if __name__ == "__main__":
  tf.test.main()
