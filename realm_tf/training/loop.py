"""The training loop every realm_tf trainer runs (REALM, ICT, ORQA, MLM, FiD-KD): an orbit.Controller.

It trains a Task (realm_tf.training.task: the model, optimizer, batches, warm start, evaluator and host
hooks of one method) and owns everything the methods share.

The controller owns the outer loop: it runs the trainer (realm_tf.training.step_loop.StepLoop: the steps
of one loop in one tf.function), saves checkpoints through its CheckpointManager (model + optimizer,
whose `iterations` is the global step; every N steps, keep K), restores the newest readable checkpoint
or runs the warm start when there is none, writes every loop's window-mean metrics to MODEL_DIR/train,
and runs an evaluator (ORQA's dev evaluation) every eval interval. What orbit does not do is added here
and says so where it is: the non-finite stop, the task's hook, the progress line and the SIGTERM stop
between loops (one train action), checkpoints on multiples of the interval and the damaged-checkpoint
fallback (a CheckpointManager subclass), evaluations on multiples of their interval after a resume.

Resuming continues the same data stream: the task's build_inputs receives the number of batches already
consumed and skips them, so the order is a function of the seed and the step (given the same index).
"""

import contextlib
import dataclasses
import gc
import json
import math
import os
import time
import traceback
from typing import Callable, Dict, Optional

from absl import logging
import orbit
import tensorflow as tf

from realm_tf import io_utils
from realm_tf import stopping
from realm_tf.checkpoints import training_state
from realm_tf.data import untuned
from realm_tf.training import preemption
from realm_tf.training import step_loop
from realm_tf.training import task as task_lib
from realm_tf.training import train_lib


@dataclasses.dataclass(frozen=True)
class LoopOptions:
  """Options of the loop.

  Attributes:
    model_dir: checkpoints (ckpt-<step>) and summaries (train/) go here.
    num_train_steps: the step to stop at.
    save_checkpoints_steps: checkpoint every this many steps (and at the end).
    keep_checkpoint_max: checkpoints to keep.
    log_every_steps: progress line every this many steps (TensorBoard gets every loop's means).
    jit_compile: compile the step with XLA.
    steps_per_loop: steps run in one tf.function (a tf.while_loop, orbit.StandardTrainer) between two
      looks of the host; metrics are means over the loop. save_checkpoints_steps and log_every_steps
      must be multiples of it. The host's hooks (after_step, the REALM index check) run once per loop.
    gradient_accumulation_steps: parts each replica's batch is cut into and run one after another,
      their gradients summed into the step's one update (train_lib.TrainStep): a batch that does not fit
      in memory at once, with the update of the whole batch.
    global_batch_size: examples per step over all replicas; recorded in MODEL_DIR/train_state.json, and
      a resume with another one is refused (the data stream resumes by batches: it would repeat or skip
      examples).
  """
  model_dir: str
  num_train_steps: int
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5
  log_every_steps: int = 10
  jit_compile: bool = True
  global_batch_size: Optional[int] = None
  steps_per_loop: int = 1
  gradient_accumulation_steps: int = 1

  def __post_init__(self):
    if self.steps_per_loop < 1:
      raise ValueError(f"--steps_per_loop={self.steps_per_loop} must be at least 1")
    for flag in ("save_checkpoints_steps", "log_every_steps"):
      self.check_between_loops(flag, getattr(self, flag), "checkpoints and logs")

  def check_between_loops(self, flag: str, interval: int, what: str) -> None:
    """The host acts only between loops: an interval of steps (--flag) must be a multiple of the loop."""
    if interval % self.steps_per_loop:
      raise ValueError(f"--{flag}={interval} is not a multiple of --steps_per_loop={self.steps_per_loop}: "
                       f"{what} happen between loops; make it a multiple")


TRAIN_STATE_NAME = "train_state.json"


class CheckpointWriteError(RuntimeError):
  """The model dir cannot take a checkpoint (unwritable or full)."""


class ResumeError(ValueError):
  """The model dir cannot be resumed as asked (no readable checkpoint, another batch size)."""


class NonFiniteLossError(RuntimeError):
  """A step gave a NaN or Inf loss or gradient; nothing of it was saved."""


def _check_finite(result: Dict[str, float],
                  step: int,
                  manager: tf.train.CheckpointManager,
                  steps_run: int = 1) -> None:
  bad = [f"{name}={value}" for name, value in sorted(result.items()) if not math.isfinite(value)]
  if result.get(train_lib.NONFINITE_GRADIENTS, 0.0) > 0:
    bad.append("a NaN or Inf gradient")
  if not bad:
    return
  # A loop of several steps is checked as a whole: its mean is non-finite when any of its steps was.
  where = f"step {step}" if steps_run == 1 else f"steps {step - steps_run + 1}-{step} (one loop)"
  latest = manager.latest_checkpoint
  resume = (f"the last good checkpoint is {latest}; a restart resumes from it"
            if latest else "no checkpoint was written yet; a restart begins from the warm start")
  raise NonFiniteLossError(
      f"{where}: non-finite training values ({', '.join(bad)}); training stopped before saving this "
      f"step, {resume}. Lower --learning_rate, check the input data, or use float32 instead of "
      "--mixed_precision")


def _remove_unfinished_saves(model_dir: str, log: Callable[[str], None]) -> None:
  """Deletes ckpt-N_temp/ directories a killed or disk-full save left behind (TensorFlow writes a
  checkpoint there and renames its files into place; what remains was never a checkpoint)."""
  for path in tf.io.gfile.glob(os.path.join(model_dir, "ckpt-*_temp")):
    log(f"removing {path}: an unfinished checkpoint save")
    tf.io.gfile.rmtree(path)


def _restore_newest_readable(checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager,
                             log: Callable[[str], None]) -> str:
  """Restores the newest checkpoint that reads and returns its path; a damaged one (truncated or missing
  data file) is named and skipped for the one before it. None readable: ResumeError with the fix."""
  damaged = []
  for path in reversed(manager.checkpoints):
    try:
      checkpoint.restore(path).assert_existing_objects_matched()
    except (tf.errors.OpError, ValueError, IndexError, AssertionError) as e:
      # IndexError: TensorFlow's reader of a truncated data file ("Read less bytes than requested").
      files = ", ".join(sorted(os.path.basename(f) for f in tf.io.gfile.glob(path + ".*")))
      log(f"WARNING: checkpoint {path} is damaged ({type(e).__name__}: {str(e).splitlines()[0][:300]}; "
          f"its files: {files or 'none'}); trying the one before it")
      damaged.append(path)
      continue
    log(f"resumed from {path} at step {int(checkpoint.optimizer.iterations.numpy())}" +
        (f" (skipped damaged {', '.join(damaged)}: delete them)" if damaged else ""))
    return path
  raise ResumeError(
      f"no checkpoint in {manager.directory} can be read (damaged: {', '.join(damaged)}). Delete them "
      "(and the 'checkpoint' file) to start over from the warm start, or restore them from a backup")


def _check_batch_size(options: LoopOptions) -> None:
  path = os.path.join(options.model_dir, TRAIN_STATE_NAME)
  if options.global_batch_size is None or not tf.io.gfile.exists(path):
    return
  with tf.io.gfile.GFile(path) as f:
    recorded = json.load(f).get("global_batch_size")
  if recorded is not None and recorded != options.global_batch_size:
    raise ResumeError(
        f"{options.model_dir} was trained with a global batch of {recorded} ({path}); resuming with "
        f"{options.global_batch_size} would repeat or skip training examples, since the data stream "
        f"resumes by batches. Resume with --batch_size={recorded} (global), or train in a new "
        "--model_dir warm-started from this run's checkpoint")


def _record_batch_size(options: LoopOptions) -> None:
  if options.global_batch_size is not None:
    io_utils.write_json_atomic(os.path.join(options.model_dir, TRAIN_STATE_NAME),
                               {"global_batch_size": int(options.global_batch_size)})


class _CheckpointManager(tf.train.CheckpointManager):
  """The tf.train.CheckpointManager that orbit.Controller saves and restores through, with three changes.

  - Periodic saves land on multiples of the interval. TensorFlow's manager counts the interval from its
    last save and saves at once in a fresh run: a run would save after its first step, and one resumed
    at step 7 with --save_checkpoints_steps=5 at 12, 17, ..., not at the steps of an uninterrupted run.
  - restore_or_initialize (what the controller calls when it starts) restores the newest checkpoint that
    reads, skipping damaged ones, where TensorFlow's restores the newest or fails; without any
    checkpoint it runs the warm start.
  - A save that fails names the model dir and the fix, and a save is logged.
  """

  def __init__(self, checkpoint: tf.train.Checkpoint, options: LoopOptions, warm_start: Callable[[], None],
               log: Callable[[str], None]):
    self._step = checkpoint.optimizer.iterations
    super().__init__(checkpoint,
                     options.model_dir,
                     max_to_keep=options.keep_checkpoint_max,
                     step_counter=self._step,
                     checkpoint_interval=options.save_checkpoints_steps)
    self._warm_start = warm_start
    self._log = log
    # The checkpoint restore_or_initialize restored, None before or without one.
    self.restored: Optional[str] = None

  def save(self, checkpoint_number=None, check_interval: bool = True, options=None) -> Optional[str]:
    step = int(self._step.numpy())
    if check_interval and step % self.checkpoint_interval:
      return None
    try:
      # ckpt-<global step>, also when called without a number. Without check_interval TensorFlow's
      # manager still skips a second save of the same step.
      path = super().save(checkpoint_number=step if checkpoint_number is None else checkpoint_number,
                          check_interval=False,
                          options=options)
    except (tf.errors.OpError, OSError) as e:
      raise CheckpointWriteError(
          f"cannot write checkpoint ckpt-{step} into {self.directory}: {e}. Earlier checkpoints are "
          "untouched; free space or fix permissions and restart (training resumes from the latest "
          "checkpoint)") from e
    if path:
      self._log(f"saved {path}")
    return path

  def restore_or_initialize(self) -> Optional[str]:
    if not self.checkpoints:
      self._warm_start()
      return None
    self.restored = _restore_newest_readable(self.checkpoint, self, self._log)
    return self.restored


class _AfterEachLoop:
  """What the host does between two loops, as orbit.Controller's one train action (called with the
  loop's output, the window means, before the controller summarizes it): the non-finite check, the
  task's after_step hook, the progress line, and the stop a SIGTERM requested.

  orbit gives an action the very dict it then writes to TensorBoard, so the scalars added here (the
  hook's, the learning rate) are summarized with the loop's metrics, once per loop.
  """

  def __init__(self, optimizer, options: LoopOptions, manager: _CheckpointManager,
               summaries: orbit.utils.SummaryManager, stop: preemption.Request,
               after_step: Callable[[int, Dict[str, float]], Dict[str, float]], log: Callable[[str], None]):
    self._optimizer = optimizer
    self._options = options
    self._manager = manager
    self._summaries = summaries
    self._stop = stop
    self._after_step = after_step
    self._log = log
    self._last_step: Optional[int] = None
    self._window_start, self._window_steps = time.time(), 0
    self.metrics: Dict[str, float] = {}

  def loop_length(self, step: int) -> int:
    """Steps of the loop that starts at `step` (orbit.Controller's steps_per_loop callable). The first
    loop of a process is one step: the host sees its loss (a broken input or warm start shows at once),
    and it names the scalars the compiled loop sums. Later loops end on multiples of steps_per_loop, so
    every checkpoint, log and evaluation interval (multiples of it) ends one."""
    if self._last_step is None:
      return 1
    return self._options.steps_per_loop - step % self._options.steps_per_loop

  def __call__(self, output: Dict[str, float]) -> None:
    options = self._options
    step = int(self._optimizer.iterations.numpy())
    steps_run = step - (self._last_step if self._last_step is not None else step - 1)
    self._last_step = step
    _check_finite(output, step, self._manager, steps_run)
    output.pop(train_lib.NONFINITE_GRADIENTS, None)
    output.update(self._after_step(step, dict(output)))
    self._window_steps += steps_run
    metrics = dict(output)
    if step % options.log_every_steps == 0 or step >= options.num_train_steps:
      now = time.time()
      metrics["steps_per_second"] = self._window_steps / max(now - self._window_start, 1e-9)
      self._window_start, self._window_steps = now, 0
      shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()))
      self._log(f"step {step}/{options.num_train_steps}: {shown}")
    self.metrics = metrics
    lr = self._optimizer.learning_rate
    output["learning_rate"] = float(
        tf.convert_to_tensor(lr(self._optimizer.iterations) if callable(lr) else lr))
    if self._stop.requested and step < options.num_train_steps:
      # orbit.Controller.train has no way to stop between loops but an exception; the controller would
      # summarize this loop after the action, so it is written here.
      self._summaries.write_summaries(output)
      self._summaries.flush()
      path = self._manager.save(check_interval=False) or self._manager.latest_checkpoint
      message = (f"SIGTERM: saved {path} at step {step} of {options.num_train_steps} and stopped; "
                 "run the same command again to resume from it")
      self._log(message)
      raise preemption.Preempted(message)

  def stop_while_waiting(self) -> preemption.Preempted:
    """The Preempted of a SIGTERM that came while the next step waited for its input (REALM's pipeline
    waiting for an index: the request's on_set ended that wait, which ended the step with an error).
    Steps the loop finished before are saved, as at a loop boundary; none: nothing to save."""
    options = self._options
    step = int(self._optimizer.iterations.numpy())
    waited = f"it came while step {step + 1} waited for its input"
    if step == 0:
      message = (f"SIGTERM: stopped before the first step ({waited}); nothing was trained, so nothing "
                 "was saved; run the same command again to start")
    else:
      path = self._manager.save(check_interval=False) or self._manager.latest_checkpoint
      message = (f"SIGTERM: saved {path} at step {step} of {options.num_train_steps} and stopped ({waited}); "
                 "run the same command again to resume from it")
    self._log(message)
    return preemption.Preempted(message)


def _raise_if_restore_failed(error: BaseException, restored: Optional[str]) -> None:
  """ResumeError for a step that failed reading the checkpoint it resumed from. TensorFlow restores some
  values (an optimizer's slots and hyperparameters) only when the first step creates them, so a checkpoint
  damaged or deleted after the `resumed from` line stopped the trainer with a raw NotFoundError (found by
  bench/fault_soak); the next start skips it for the one before."""
  if (restored and isinstance(error, tf.errors.OpError) and "RestoreV2" in str(error) and
      os.path.basename(restored) in str(error)):
    raise ResumeError(
        f"checkpoint {restored} became unreadable after it was restored ({type(error).__name__}: "
        f"{str(error).splitlines()[0][-300:]}): TensorFlow reads the optimizer's values from it "
        "at the first step. Run the same command again: a damaged checkpoint is skipped for the "
        "one before it") from error


def _distribute(strategy: tf.distribute.Strategy, dataset_fn: Callable[[int], tf.data.Dataset],
                batches_done: int, global_batch_size: Optional[int]) -> tf.distribute.DistributedDataset:
  """dataset_fn's global batches through strategy.distribute_datasets_from_function: one input pipeline
  per host, each feeding its own replicas. A global batch is cut into per-replica batches in order
  (InputContext's per-replica batch size; on one host replica r takes rows [r * b, (r + 1) * b), as
  experimental_distribute_dataset split them) and each pipeline keeps every num_input_pipelines-th of
  them, so every step still trains on exactly one global batch. One replica takes the batches as they
  are."""

  def dataset_for(context: tf.distribute.InputContext) -> tf.data.Dataset:
    # Untuned: an autotuned iterator's deletion, at the end of training, could stall up to a minute.
    dataset = untuned.untuned(dataset_fn(batches_done))
    if context.num_replicas_in_sync == 1:
      return dataset
    batch = global_batch_size
    if batch is None:
      batch = tf.nest.flatten(dataset.element_spec)[0].shape[0]
      if batch is None:
        raise ValueError("the training batches have no static size to split over "
                         f"{context.num_replicas_in_sync} replicas; pass LoopOptions.global_batch_size "
                         "(--batch_size) or batch with drop_remainder=True")
    per_replica = context.get_per_replica_batch_size(batch)
    return (dataset.rebatch(per_replica, drop_remainder=True).shard(context.num_input_pipelines,
                                                                    context.input_pipeline_id))

  return strategy.distribute_datasets_from_function(dataset_for)


@contextlib.contextmanager
def _orbit_lines_in_the_log_only():
  """Sends orbit.Controller's own lines ("train | step ...", one per loop, and its save/restore lines) to
  the absl log only.

  Why: orbit prints each of them to stdout as well (orbit.controller._log, with no option to stop it); at
  --steps_per_loop=1 that is a line per step beside realm_tf's progress line every --log_every_steps.
  """
  original = orbit.controller._log  # pylint: disable=protected-access
  orbit.controller._log = logging.info  # pylint: disable=protected-access
  try:
    yield
  finally:
    orbit.controller._log = original  # pylint: disable=protected-access


def _clear_frame_locals(error: BaseException) -> None:
  """Drops the locals of the finished frames in error's traceback (and those of the exceptions it
  chains); the traceback keeps every line."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    traceback.clear_frames(error.__traceback__)
    error = error.__cause__ or error.__context__


def train(task, *args, **kwargs) -> Dict[str, float]:
  """Trains a Task until options.num_train_steps with an orbit.Controller; returns the last loop's metrics.

  train(task, options, strategy, log=print): task is a realm_tf.training.task.Task, whose model and
  optimizer are built here under strategy.scope() (the Task docstring gives the order of its calls).

  The older form train(model, optimizer, strategy, dataset_fn, options, warm_start=None, after_step=None,
  log=print, evaluator=None, eval_every_steps=None, eval_name="eval", stop_input=None), with the model
  and optimizer already built, runs the same loop on a Task made of those closures; it stays for the
  benches and tests that train a bare model (bench/loop_overhead_bench, bench/loss_curve,
  realm_tf/reliability_test, ...).
  """
  if not isinstance(task, task_lib.Task):
    return _train_task(*_closures_task(task, *args, **kwargs))
  return _train_task(task, *args, **kwargs)


class _Closures(task_lib.Task):
  """A Task of an already built model and optimizer and the loop's older closure arguments."""

  def __init__(self, model, optimizer, dataset_fn: Callable[[int], tf.data.Dataset],
               warm_start: Optional[Callable[[], None]],
               after_step: Optional[Callable[[int, Dict[str, float]],
                                             Dict[str, float]]], evaluator: Optional[orbit.AbstractEvaluator],
               eval_every_steps: Optional[int], eval_name: str, stop_input: Optional[Callable[[], None]]):
    self._model, self._optimizer, self._dataset_fn = model, optimizer, dataset_fn
    self._warm_start, self._after_step, self._evaluator = warm_start, after_step, evaluator
    self._stop_input = stop_input
    self.eval_every_steps, self.eval_name = eval_every_steps, eval_name

  def build_model(self):
    return self._model

  def create_optimizer(self):
    return self._optimizer

  def build_inputs(self, batches_done: int) -> tf.data.Dataset:
    return self._dataset_fn(batches_done)

  def initialize(self, model) -> None:
    if self._warm_start is not None:
      self._warm_start()

  def build_evaluator(self, model, optimizer, strategy):
    return self._evaluator

  def after_step(self, step: int, metrics: Dict[str, float]) -> Dict[str, float]:
    return self._after_step(step, metrics) if self._after_step is not None else {}

  def stop_input(self) -> None:
    if self._stop_input is not None:
      self._stop_input()


def _closures_task(model,
                   optimizer,
                   strategy: tf.distribute.Strategy,
                   dataset_fn: Callable[[int], tf.data.Dataset],
                   options: LoopOptions,
                   warm_start: Optional[Callable[[], None]] = None,
                   after_step: Optional[Callable[[int, Dict[str, float]], Dict[str, float]]] = None,
                   log: Callable[[str], None] = print,
                   evaluator: Optional[orbit.AbstractEvaluator] = None,
                   eval_every_steps: Optional[int] = None,
                   eval_name: str = "eval",
                   stop_input: Optional[Callable[[], None]] = None):
  """The older form's arguments as _train_task's (task, options, strategy, log)."""
  return (_Closures(model, optimizer, dataset_fn, warm_start, after_step, evaluator, eval_every_steps,
                    eval_name, stop_input), options, strategy, log)


def _train_task(task: task_lib.Task,
                options: LoopOptions,
                strategy: tf.distribute.Strategy,
                log: Callable[[str], None] = print) -> Dict[str, float]:
  """train() of a Task."""
  try:
    tf.io.gfile.makedirs(options.model_dir)
  except (tf.errors.OpError, OSError) as e:
    raise CheckpointWriteError(f"cannot create the model dir {options.model_dir}: {e}; pass a "
                               "writable --model_dir") from e
  # The input pipeline dies here, while its threads can still take the GIL. Why: orbit's objects hold
  # the input iterator in reference cycles, so left alone it is destroyed only at interpreter exit; a
  # tf.data thread then inside Python (REALM's retrieval py_function, the MLM and FiD-KD generators,
  # making batches ahead of steps that will never run) can never take the GIL back, and the iterator's
  # destructor waits for it forever: the trainer hung after its last checkpoint (a one-hour CI
  # timeout of bin/demo_pipeline_test). _train's frame holds all of them; once it has ended (its
  # locals dropped from a traceback too), a collection destroys the iterator, and the destructor
  # releases the GIL while it waits for the batch in progress.
  try:
    return _train(task, options, strategy, log)
  except BaseException as e:
    _clear_frame_locals(e)
    raise
  finally:
    gc.collect()


def _train(task: task_lib.Task, options: LoopOptions, strategy: tf.distribute.Strategy,
           log: Callable[[str], None]) -> Dict[str, float]:
  """train() after its checks, with every object that holds the input iterator local to it."""
  with strategy.scope():
    model = task.build_model()
    optimizer = task.create_optimizer()
  evaluator = task.build_evaluator(model, optimizer, strategy)
  if evaluator is not None:
    options.check_between_loops("eval_every_steps", task.eval_every_steps, "evaluations")
  _remove_unfinished_saves(options.model_dir, log)
  manager = _CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer), options,
                               lambda: task.initialize(model), log)
  if manager.checkpoints:
    _check_batch_size(options)
  trainer = step_loop.StepLoop(
      train_lib.TrainStep(model,
                          optimizer,
                          strategy,
                          jit_compile=options.jit_compile,
                          accumulation_steps=options.gradient_accumulation_steps,
                          features_fn=(None if type(task).step_features is task_lib.Task.step_features else
                                       task.step_features)))
  summaries = orbit.utils.SummaryManager(os.path.join(options.model_dir, "train"),
                                         tf.summary.scalar,
                                         global_step=optimizer.iterations)
  # SIGTERM (a preempted TPU VM, a scheduler, kill) stops at the next loop boundary with a checkpoint
  # of that step: nothing since the last periodic save is lost (realm_tf.training.preemption).
  # SIGTERM also ends the input's waits at once (task.stop_input): a step whose input waits for an index
  # would never reach that boundary, and the main thread, blocked inside TensorFlow, would never run
  # Python's handler (found by bench/fault_soak: a trainer not exited 120 s after a SIGTERM).
  with preemption.sigterm_requests_stop(task.stop_input) as stop, _orbit_lines_in_the_log_only():
    after_each_loop = _AfterEachLoop(optimizer, options, manager, summaries, stop, task.after_step, log)
    # Restores the newest readable checkpoint, or warm-starts (_CheckpointManager).
    controller = orbit.Controller(global_step=optimizer.iterations,
                                  trainer=trainer,
                                  evaluator=evaluator,
                                  strategy=strategy,
                                  train_actions=[after_each_loop],
                                  steps_per_loop=after_each_loop.loop_length,
                                  checkpoint_manager=manager,
                                  summary_manager=summaries,
                                  eval_summary_dir=os.path.join(options.model_dir, task.eval_name))
    step = int(optimizer.iterations.numpy())
    if step >= options.num_train_steps:
      log(f"already at step {step} >= --num_train_steps={options.num_train_steps}; nothing to do")
      return {}
    if training_state.clear_done_marker(options.model_dir):
      # A finished run continued to more steps: a refresher must not take the old marker for this run's.
      log(f"continuing a finished run to step {options.num_train_steps}: removed its "
          f"{training_state.DONE_MARKER} marker")
    _record_batch_size(options)
    trainer.train_dataset = iter(_distribute(strategy, task.build_inputs, step, options.global_batch_size))
    started = time.time()
    try:
      if evaluator is None:
        controller.train(options.num_train_steps)
      else:
        # Controller.train_and_evaluate counts the evaluation interval from the step it starts at: a
        # resumed run would evaluate at other steps than an uninterrupted one. Evaluations at multiples:
        while step < options.num_train_steps:
          step = min((step // task.eval_every_steps + 1) * task.eval_every_steps, options.num_train_steps)
          controller.train(step, checkpoint_at_completion=step >= options.num_train_steps)
          controller.evaluate()
    except (tf.errors.OpError, stopping.InputStopped) as error:
      # The input's wait ended by the SIGTERM reaches the step as an error (a graph execution error when
      # the wait was in a tf.data thread): any other error, or one without a SIGTERM, is raised as it is.
      if not stop.requested:
        _raise_if_restore_failed(error, manager.restored)
        raise
      raise after_each_loop.stop_while_waiting() from None
    finally:
      task.stop_input()  # a pipeline thread waiting for an index would hold up the iterator's destructor
  summaries.flush()
  log(f"trained to step {int(optimizer.iterations.numpy())} in {time.time() - started:.1f} s")
  return after_each_loop.metrics
