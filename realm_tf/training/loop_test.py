"""Tests of the shared training loop's stop on non-finite values."""

import os

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.modeling import losses
from realm_tf.training import loop


class _Regression(tf_keras.Model):
  """y = w.x + b with a squared-error loss sum; poison(step) makes that step's loss or gradient bad."""

  def __init__(self, poison_loss_at: int = 0, poison_gradient_at: int = 0):
    super().__init__()
    self.dense = tf_keras.layers.Dense(1, kernel_initializer="zeros")
    self.calls = tf.Variable(0, trainable=False)
    self.poison_loss_at = poison_loss_at
    self.poison_gradient_at = poison_gradient_at

  def call(self, x):
    return self.dense(x)

  def compute_loss(self, features, training=None):
    self.calls.assign_add(1)
    prediction = self(features["x"])
    if self.poison_gradient_at:
      # sqrt at 0 has an infinite derivative: the loss stays finite, the gradient does not.
      at = tf.cast(tf.equal(self.calls, self.poison_gradient_at), tf.float32)
      prediction += at * tf.sqrt(tf.zeros_like(prediction) * self.dense.kernel[0, 0])
    error = prediction - features["y"]
    loss_sum = tf.reduce_sum(tf.square(error))
    if self.poison_loss_at:
      loss_sum += tf.where(tf.equal(self.calls, self.poison_loss_at), np.nan, 0.0)
    weight = tf.cast(tf.shape(error)[0], tf.float32)
    return losses.LossOutput(loss_sum, weight, {"mse": (loss_sum, weight)})


def _batches(batches_done: int) -> tf.data.Dataset:
  x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0
  return tf.data.Dataset.from_tensors({"x": x, "y": x.sum(axis=1, keepdims=True) + 1.0}).repeat()


class NonFiniteTest(tf.test.TestCase):

  def _train(self, model, model_dir):
    model(tf.zeros([1, 3]))
    options = loop.LoopOptions(model_dir=model_dir, num_train_steps=10, save_checkpoints_steps=2,
                               log_every_steps=100, jit_compile=False)
    return loop.train(model, tf_keras.optimizers.legacy.SGD(0.01), tf.distribute.get_strategy(),
                      _batches, options, log=lambda _: None)

  def test_nan_loss_stops_before_saving_and_names_the_last_good_checkpoint(self):
    model_dir = os.path.join(self.get_temp_dir(), "nan_loss")
    with self.assertRaisesRegex(loop.NonFiniteLossError,
                                r"step 5: non-finite training values \(loss=nan, mse=nan\).*"
                                + f"last good checkpoint is {os.path.join(model_dir, 'ckpt-4')}"):
      self._train(_Regression(poison_loss_at=5), model_dir)
    self.assertEqual(tf.train.latest_checkpoint(model_dir), os.path.join(model_dir, "ckpt-4"))

  def test_infinite_gradient_with_a_finite_loss_stops_too(self):
    model_dir = os.path.join(self.get_temp_dir(), "inf_gradient")
    with self.assertRaisesRegex(loop.NonFiniteLossError, "step 3: .*a NaN or Inf gradient"):
      self._train(_Regression(poison_gradient_at=3), model_dir)
    self.assertEqual(tf.train.latest_checkpoint(model_dir), os.path.join(model_dir, "ckpt-2"))

  def test_nan_before_any_checkpoint_says_so(self):
    with self.assertRaisesRegex(loop.NonFiniteLossError, "no checkpoint was written yet"):
      self._train(_Regression(poison_loss_at=1), os.path.join(self.get_temp_dir(), "first"))

  def test_finite_run_reports_no_check_value(self):
    metrics = self._train(_Regression(), os.path.join(self.get_temp_dir(), "fine"))
    self.assertEqual(set(metrics), {"loss", "mse", "steps_per_second"})


if __name__ == "__main__":
  tf.test.main()
