"""Tests of the shared training loop: its stop on non-finite values, how it resumes, and that it tears
its input pipeline down before it returns."""

import contextlib
import dataclasses
import gc
import io
import os
import subprocess
import sys
import time
import traceback
from unittest import mock

import numpy as np
import tensorflow as tf
import tf_keras

from tensorflow.python.data.ops import iterator_ops  # pylint: disable=g-direct-tensorflow-import

from realm_tf.checkpoints import training_state
from realm_tf.data import untuned
from realm_tf.modeling import losses
from realm_tf.training import loop
from realm_tf.training import task as task_lib


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


@task_lib.register("loop_test_regression")
class _RegressionTask(task_lib.Task):
  """The regression as a Task: records what the loop calls, in order."""

  def __init__(self, warm_start_bias: float):
    self.warm_start_bias = warm_start_bias
    self.calls = []

  def build_model(self):
    self.calls.append("build_model")
    self.model = _Regression()
    self.model(tf.zeros([1, 3]))
    return self.model

  def create_optimizer(self):
    self.calls.append("create_optimizer")
    return tf_keras.optimizers.legacy.SGD(0.01)

  def build_inputs(self, batches_done: int) -> tf.data.Dataset:
    self.calls.append(f"build_inputs({batches_done})")
    return _batches(batches_done)

  def initialize(self, model) -> None:
    self.calls.append("initialize")
    model.dense.bias.assign([self.warm_start_bias])

  def after_step(self, step, metrics):
    self.calls.append(f"after_step({step})")
    return {"hook": float(step)}

  def stop_input(self) -> None:
    self.calls.append("stop_input")


class TaskTest(tf.test.TestCase):

  def test_the_registry_makes_a_task_by_name_and_names_the_registered_ones_otherwise(self):
    task = task_lib.get_task("loop_test_regression", warm_start_bias=0.5)
    self.assertIsInstance(task, _RegressionTask)
    self.assertEqual(task.warm_start_bias, 0.5)
    self.assertIs(task_lib.registered()["loop_test_regression"], _RegressionTask)
    with self.assertRaisesRegex(ValueError, "no task 'nope'; registered: .*loop_test_regression"):
      task_lib.get_task("nope")
    with self.assertRaisesRegex(ValueError, "registered twice"):
      task_lib.register("loop_test_regression")(type("Other", (_RegressionTask,), {}))

  def test_a_task_trains_warm_starts_once_and_resumes_its_data_stream(self):
    model_dir = os.path.join(self.get_temp_dir(), "task")
    options = loop.LoopOptions(model_dir=model_dir,
                               num_train_steps=2,
                               save_checkpoints_steps=2,
                               log_every_steps=100,
                               jit_compile=False)
    task = task_lib.get_task("loop_test_regression", warm_start_bias=0.5)
    final = loop.train(task, options, tf.distribute.get_strategy(), log=lambda _: None)
    self.assertEqual(task.calls, [
        "build_model", "create_optimizer", "initialize", "build_inputs(0)", "after_step(1)", "after_step(2)",
        "stop_input"
    ])
    self.assertEqual(final["hook"], 2.0)
    self.assertNotEqual(float(task.model.dense.bias[0]), 0.5)  # trained from the warm start
    resumed = task_lib.get_task("loop_test_regression", warm_start_bias=0.5)
    loop.train(resumed,
               dataclasses.replace(options, num_train_steps=3),
               tf.distribute.get_strategy(),
               log=lambda _: None)
    # Restored from ckpt-2, not warm-started again; the stream continues after its two batches.
    self.assertEqual(resumed.calls,
                     ["build_model", "create_optimizer", "build_inputs(2)", "after_step(3)", "stop_input"])


class NonFiniteTest(tf.test.TestCase):

  def _train(self, model, model_dir):
    model(tf.zeros([1, 3]))
    options = loop.LoopOptions(model_dir=model_dir,
                               num_train_steps=10,
                               save_checkpoints_steps=2,
                               log_every_steps=100,
                               jit_compile=False)
    return loop.train(model,
                      tf_keras.optimizers.legacy.SGD(0.01),
                      tf.distribute.get_strategy(),
                      _batches,
                      options,
                      log=lambda _: None)

  def test_nan_loss_stops_before_saving_and_names_the_last_good_checkpoint(self):
    model_dir = os.path.join(self.get_temp_dir(), "nan_loss")
    with self.assertRaisesRegex(
        loop.NonFiniteLossError, r"step 5: non-finite training values \(loss=nan, mse=nan\).*" +
        f"last good checkpoint is {os.path.join(model_dir, 'ckpt-4')}"):
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

  def test_stdout_holds_the_progress_lines_not_one_orbit_line_per_step(self):
    model = _Regression()
    model(tf.zeros([1, 3]))
    options = loop.LoopOptions(model_dir=os.path.join(self.get_temp_dir(), "quiet"),
                               num_train_steps=6,
                               save_checkpoints_steps=3,
                               log_every_steps=3,
                               jit_compile=False)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
      loop.train(model, tf_keras.optimizers.legacy.SGD(0.01), tf.distribute.get_strategy(), _batches, options)
    lines = stdout.getvalue().splitlines()
    self.assertEqual([line.split(":")[0] for line in lines if line.startswith("step ")],
                     ["step 3/6", "step 6/6"])
    self.assertFalse([line for line in lines if "train | step" in line], lines)


class StepsPerLoopTest(tf.test.TestCase):

  def _train(self, model_dir, steps_per_loop, model=None, num_train_steps=10):
    model = model or _Regression()
    model(tf.zeros([1, 3]))
    seen, logs = [], []
    options = loop.LoopOptions(model_dir=model_dir,
                               num_train_steps=num_train_steps,
                               save_checkpoints_steps=5 if steps_per_loop > 1 else 1,
                               log_every_steps=steps_per_loop,
                               jit_compile=False,
                               steps_per_loop=steps_per_loop)
    loop.train(model,
               tf_keras.optimizers.legacy.SGD(0.01),
               tf.distribute.get_strategy(),
               _batches,
               options,
               after_step=lambda step, m: seen.append((step, m["loss"])) or {},
               log=logs.append)
    return model, seen, logs

  def test_loops_of_five_steps_train_exactly_as_single_steps_and_report_window_means(self):
    one, per_step, _ = self._train(os.path.join(self.get_temp_dir(), "one"), 1)
    five, per_loop, logs = self._train(os.path.join(self.get_temp_dir(), "five"), 5)
    self.assertAllClose(five.dense.kernel, one.dense.kernel, rtol=1e-6)
    self.assertAllClose(five.dense.bias, one.dense.bias, rtol=1e-6)
    self.assertEqual(int(five.calls.numpy()), 10)
    # The host looks after the first step, then at the end of each loop: steps 1, 5 and 10.
    self.assertEqual([step for step, _ in per_loop], [1, 5, 10])
    losses = dict(per_step)
    self.assertAllClose(
        [loss for _, loss in per_loop],
        [losses[1],
         np.mean([losses[s] for s in range(2, 6)]),
         np.mean([losses[s] for s in range(6, 11)])],
        rtol=1e-5)
    self.assertEqual(
        tf.train.get_checkpoint_state(os.path.join(self.get_temp_dir(),
                                                   "five")).all_model_checkpoint_paths[-2:],
        [os.path.join(self.get_temp_dir(), "five", f"ckpt-{s}") for s in (5, 10)])
    self.assertEqual([line.split(":")[0] for line in logs if line.startswith("step ")],
                     ["step 5/10", "step 10/10"])

  def test_a_resumed_run_continues_on_loop_boundaries(self):
    model_dir = os.path.join(self.get_temp_dir(), "resumed")
    self._train(model_dir, 5, num_train_steps=5)
    model, seen, _ = self._train(model_dir, 5, num_train_steps=15)
    self.assertEqual([step for step, _ in seen], [6, 10, 15])
    # The call counter is a model variable: 5 restored from ckpt-5, then this process's steps 6-15.
    self.assertEqual(int(model.calls.numpy()), 15)

  def test_a_nan_inside_a_loop_names_the_loop_and_keeps_the_checkpoint_before_it(self):
    model_dir = os.path.join(self.get_temp_dir(), "nan_in_loop")
    with self.assertRaisesRegex(loop.NonFiniteLossError, r"steps 6-10 \(one loop\): non-finite"):
      self._train(model_dir, 5, model=_Regression(poison_loss_at=8))
    self.assertEqual(tf.train.latest_checkpoint(model_dir), os.path.join(model_dir, "ckpt-5"))

  def test_intervals_must_be_multiples_of_the_loop(self):
    with self.assertRaisesRegex(ValueError, "--save_checkpoints_steps=15 is not a multiple of "
                                "--steps_per_loop=10"):
      loop.LoopOptions(model_dir="m",
                       num_train_steps=100,
                       save_checkpoints_steps=15,
                       log_every_steps=10,
                       steps_per_loop=10)
    with self.assertRaisesRegex(ValueError, "--steps_per_loop=0 must be at least 1"):
      loop.LoopOptions(model_dir="m", num_train_steps=100, steps_per_loop=0)


class ResumeTest(tf.test.TestCase):
  """Operator mistakes on resume: a damaged checkpoint, another batch size, a finished run continued."""

  def _train(self,
             model_dir,
             num_train_steps=6,
             batch_size=4,
             messages=None,
             optimizer=None,
             dataset_fn=_batches):
    model = _Regression()
    model(tf.zeros([1, 3]))
    optimizer = optimizer or tf_keras.optimizers.legacy.SGD(0.01)
    options = loop.LoopOptions(model_dir=model_dir,
                               num_train_steps=num_train_steps,
                               save_checkpoints_steps=2,
                               log_every_steps=100,
                               jit_compile=False,
                               global_batch_size=batch_size)
    loop.train(model,
               optimizer,
               tf.distribute.get_strategy(),
               dataset_fn,
               options,
               log=(messages if messages is not None else []).append)
    return model, int(optimizer.iterations.numpy())

  def test_a_truncated_or_missing_newest_checkpoint_falls_back_to_the_one_before(self):
    for damage in ("truncate", "delete"):
      model_dir = os.path.join(self.get_temp_dir(), damage)
      self._train(model_dir)
      data = os.path.join(model_dir, "ckpt-6.data-00000-of-00001")
      if damage == "truncate":
        with open(data, "r+b") as f:
          f.truncate(os.path.getsize(data) // 2)
      else:
        os.remove(data)
      messages = []
      _, step = self._train(model_dir, num_train_steps=8, messages=messages)
      self.assertEqual(step, 8)
      warning = [m for m in messages if m.startswith("WARNING")]
      self.assertLen(warning, 1, messages)
      self.assertIn(os.path.join(model_dir, "ckpt-6"), warning[0])
      self.assertTrue(
          any(m.startswith(f"resumed from {os.path.join(model_dir, 'ckpt-4')} at step 4") for m in messages),
          messages)

  def test_a_checkpoint_deleted_after_its_restore_stops_with_the_fix(self):
    # The long soak's fourth run: Adam's slots are restored when the first step creates them, so the
    # data file deleted after the "resumed from" line stopped the trainer with a raw NotFoundError.
    model_dir = os.path.join(self.get_temp_dir(), "deleted_after_restore")

    # Adam, not _train's SGD: its slots are what the first step restores.
    self._train(model_dir, num_train_steps=2, optimizer=tf_keras.optimizers.legacy.Adam(0.01))

    def delete_then_batch(done):
      for data in tf.io.gfile.glob(os.path.join(model_dir, "ckpt-2.data-*")):
        os.remove(data)
      return _batches(done)

    with self.assertRaisesRegex(
        loop.ResumeError, r"ckpt-2 became unreadable after it was restored .*"
        r"Run the same command again"):
      self._train(model_dir,
                  num_train_steps=4,
                  optimizer=tf_keras.optimizers.legacy.Adam(0.01),
                  dataset_fn=delete_then_batch)

  def test_no_readable_checkpoint_stops_with_the_fix(self):
    model_dir = os.path.join(self.get_temp_dir(), "all_damaged")
    self._train(model_dir)
    for name in os.listdir(model_dir):
      if ".data-" in name:
        os.remove(os.path.join(model_dir, name))
    with self.assertRaisesRegex(loop.ResumeError, "no checkpoint in .* can be read .*Delete them"):
      self._train(model_dir, num_train_steps=8)

  def test_another_batch_size_is_refused(self):
    model_dir = os.path.join(self.get_temp_dir(), "batch")
    self._train(model_dir, batch_size=8)
    with self.assertRaisesRegex(loop.ResumeError, r"global batch of 8 .*resuming with 4 .*"
                                r"--batch_size=8"):
      self._train(model_dir, num_train_steps=8, batch_size=4)
    _, step = self._train(model_dir, num_train_steps=8, batch_size=8)  # the same size resumes
    self.assertEqual(step, 8)

  def test_continuing_a_finished_run_removes_its_done_marker(self):
    model_dir = os.path.join(self.get_temp_dir(), "continued")
    self._train(model_dir)
    training_state.write_done_marker(model_dir)
    self._train(model_dir, num_train_steps=6)  # nothing to do: the marker stays
    self.assertTrue(training_state.training_done(model_dir))
    messages = []
    self._train(model_dir, num_train_steps=8, messages=messages)
    self.assertFalse(training_state.training_done(model_dir))
    self.assertTrue(any("removed its TRAINING_DONE" in m for m in messages), messages)

  def test_unfinished_saves_are_removed(self):
    model_dir = os.path.join(self.get_temp_dir(), "temp")
    self._train(model_dir)
    leftover = os.path.join(model_dir, "ckpt-8_temp")
    os.makedirs(os.path.join(leftover, "part-00000-of-00001"))
    messages = []
    self._train(model_dir, num_train_steps=8, messages=messages)
    self.assertFalse(os.path.exists(leftover))
    self.assertTrue(any(m.startswith(f"removing {leftover}") for m in messages), messages)


def _slow_batches(batches_done: int) -> tf.data.Dataset:
  """_batches made by a py_function that takes seconds: when training ends, a batch is being made."""

  def slow(i):
    time.sleep(3.0)
    return i

  def made_in_python(i, batch):
    zero = tf.cast(tf.py_function(slow, [i], tf.int64), tf.float32) * 0.0
    return {"x": batch["x"] + zero, "y": batch["y"]}

  return _batches(batches_done).enumerate().map(made_in_python)


def train_on_slow_batches_and_exit(model_dir: str) -> None:
  """What the child process of InputTeardownTest runs: two steps on _slow_batches, then exit."""
  model = _Regression()
  model(tf.zeros([1, 3]))
  options = loop.LoopOptions(model_dir=model_dir,
                             num_train_steps=2,
                             save_checkpoints_steps=2,
                             log_every_steps=2,
                             jit_compile=False)
  loop.train(model,
             tf_keras.optimizers.legacy.SGD(0.01),
             tf.distribute.get_strategy(),
             _slow_batches,
             options,
             log=lambda _: None)
  print("trained", flush=True)


def _live_iterators():
  return [o for o in gc.get_objects() if isinstance(o, iterator_ops.OwnedIterator)]


class InputTeardownTest(tf.test.TestCase):
  """The input iterator dies inside loop.train: left to interpreter exit, its destructor waits forever
  for a tf.data thread inside Python (a py_function) that can no longer take the GIL."""

  def setUp(self):
    super().setUp()
    # Automatic collection could destroy a leaked iterator before the check; loop.train must do it.
    gc.collect()
    gc.disable()
    self.addCleanup(gc.enable)

  def _train(self, model, model_dir, stop_input):
    model(tf.zeros([1, 3]))
    options = loop.LoopOptions(model_dir=model_dir,
                               num_train_steps=4,
                               save_checkpoints_steps=2,
                               log_every_steps=100,
                               jit_compile=False)
    return loop.train(model,
                      tf_keras.optimizers.legacy.SGD(0.01),
                      tf.distribute.get_strategy(),
                      _batches,
                      options,
                      log=lambda _: None,
                      stop_input=stop_input)

  def test_no_iterator_outlives_a_finished_run_and_stop_input_is_called_once(self):
    stops = []
    self._train(_Regression(), os.path.join(self.get_temp_dir(), "finished"), lambda: stops.append(1))
    self.assertEqual(stops, [1])
    self.assertEmpty(_live_iterators())

  def test_the_input_runs_untuned(self):
    # Its iterator dies at the end of every run: autotuned, that deletion could stall up to a minute
    # (realm_tf.data.untuned).
    with mock.patch.object(untuned, "untuned", wraps=untuned.untuned) as untune:
      self._train(_Regression(), os.path.join(self.get_temp_dir(), "untuned"), lambda: None)
    self.assertEqual(untune.call_count, 1)

  def test_nor_a_failed_one_whose_traceback_still_names_the_step(self):
    stops = []
    try:
      self._train(_Regression(poison_loss_at=3), os.path.join(self.get_temp_dir(), "failed"),
                  lambda: stops.append(1))
    except loop.NonFiniteLossError as e:
      lines = traceback.format_exception(e)
    else:
      self.fail("a NaN loss at step 3 did not stop training")
    self.assertEqual(stops, [1])
    self.assertEmpty(_live_iterators())
    # The frames' locals went with the iterator; the lines stay, down to where the loop raised.
    self.assertIn("step 3", lines[-1])
    self.assertGreaterEqual(sum("loop.py" in line for line in lines), 2, lines)

  def test_a_process_exits_while_a_batch_is_still_being_made_in_python(self):
    model_dir = os.path.join(self.get_temp_dir(), "exits")
    code = (f"import sys; sys.path[:0] = {sys.path!r}; from realm_tf.training import loop_test; "
            f"loop_test.train_on_slow_batches_and_exit({model_dir!r})")
    child = subprocess.Popen([sys.executable, "-c", code],
                             stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT,
                             text=True)
    try:
      # Not a speed check: the run takes seconds; without the teardown the process never exits.
      output, _ = child.communicate(timeout=600)
    except subprocess.TimeoutExpired:
      child.kill()
      output, _ = child.communicate()
      self.fail(f"the process did not exit after training:\n{output[-3000:]}")
    self.assertEqual(child.returncode, 0, output[-3000:])
    self.assertIn("trained", output)
    self.assertEqual(training_state.latest_step(model_dir), 2)


if __name__ == "__main__":
  tf.test.main()
