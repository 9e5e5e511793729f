"""The custom training loop every realm_tf trainer runs (REALM, ICT, ORQA).

It owns what is the same for all tasks: the checkpoint (model + optimizer, whose `iterations` is the global
step), CheckpointManager (every N steps, keep K; resume from the latest with the same global step), the
warm start that runs only when there is nothing to resume, the distributed dataset, the compiled step
(realm_tf.training.train_lib.TrainStep), TensorBoard summaries and a per-step progress line. A task adds its
own summaries through `after_step`.

Resuming continues the same data stream: the dataset function receives the number of batches already
consumed and skips them, so the order is a function of the seed and the step (given the same index).
"""

import dataclasses
import json
import math
import os
import time
from typing import Callable, Dict, Optional

import tensorflow as tf

from realm_tf import io_utils
from realm_tf.modeling import checkpoints
from realm_tf.training import preemption
from realm_tf.training import step_loop
from realm_tf.training import train_lib


@dataclasses.dataclass(frozen=True)
class LoopOptions:
  """Options of the loop.

  Attributes:
    model_dir: checkpoints (ckpt-<step>) and summaries (train/) go here.
    num_train_steps: the step to stop at.
    save_checkpoints_steps: checkpoint every this many steps (and at the end).
    keep_checkpoint_max: checkpoints to keep.
    log_every_steps: progress line and summaries every this many steps.
    jit_compile: compile the step with XLA.
    steps_per_loop: steps run in one tf.function (a tf.while_loop, orbit.StandardTrainer) between two
      looks of the host; metrics are means over the loop. save_checkpoints_steps and log_every_steps
      must be multiples of it. The host's hooks (after_step, the REALM index check) run once per loop.
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


def _check_finite(result: Dict[str, float], step: int, manager: tf.train.CheckpointManager,
                  steps_run: int = 1) -> None:
  bad = [f"{name}={value}" for name, value in sorted(result.items()) if not math.isfinite(value)]
  if result.get(train_lib.NONFINITE_GRADIENTS, 0.0) > 0:
    bad.append("a NaN or Inf gradient")
  if not bad:
    return
  # A loop of several steps is checked as a whole: its mean is non-finite when any of its steps was.
  where = f"step {step}" if steps_run == 1 else f"steps {step - steps_run + 1}-{step} (one loop)"
  latest = manager.latest_checkpoint
  resume = (f"the last good checkpoint is {latest}; a restart resumes from it" if latest else
            "no checkpoint was written yet; a restart begins from the warm start")
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
                             log: Callable[[str], None]) -> None:
  """Restores the newest checkpoint that reads; a damaged one (truncated or missing data file) is named
  and skipped for the one before it. None readable: ResumeError with the fix."""
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
    log(f"resumed from {path} at step {int(checkpoint.optimizer.iterations.numpy())}"
        + (f" (skipped damaged {', '.join(damaged)}: delete them)" if damaged else ""))
    return
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


def _save(manager: tf.train.CheckpointManager, step: int) -> str:
  try:
    return manager.save(checkpoint_number=step)
  except (tf.errors.OpError, OSError) as e:
    raise CheckpointWriteError(
        f"cannot write checkpoint ckpt-{step} into {manager.directory}: {e}. Earlier checkpoints are "
        "untouched; free space or fix permissions and restart (training resumes from the latest "
        "checkpoint)") from e


def train(model, optimizer, strategy: tf.distribute.Strategy,
          dataset_fn: Callable[[int], tf.data.Dataset], options: LoopOptions,
          warm_start: Optional[Callable[[], None]] = None,
          after_step: Optional[Callable[[int, Dict[str, float]], Dict[str, float]]] = None,
          log: Callable[[str], None] = print) -> Dict[str, float]:
  """Trains until options.num_train_steps; returns the metrics of the last loop.

  Args:
    model: task model with compute_loss, created under strategy.scope() with its variables built.
    optimizer: created under strategy.scope().
    dataset_fn: batches consumed so far -> the dataset of global batches from there on.
    warm_start: initializes weights when the model dir holds no checkpoint yet.
    after_step: (step, metrics) -> extra scalars to log; called on the host after every loop of
      options.steps_per_loop steps (and after the first step), with the loop's mean metrics.
  """
  try:
    tf.io.gfile.makedirs(options.model_dir)
  except (tf.errors.OpError, OSError) as e:
    raise CheckpointWriteError(f"cannot create the model dir {options.model_dir}: {e}; pass a "
                               "writable --model_dir") from e
  checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
  manager = tf.train.CheckpointManager(checkpoint, options.model_dir,
                                       max_to_keep=options.keep_checkpoint_max,
                                       step_counter=optimizer.iterations)
  _remove_unfinished_saves(options.model_dir, log)
  if manager.checkpoints:
    _check_batch_size(options)
    _restore_newest_readable(checkpoint, manager, log)
  elif warm_start is not None:
    warm_start()
  step = int(optimizer.iterations.numpy())
  if step >= options.num_train_steps:
    log(f"already at step {step} >= --num_train_steps={options.num_train_steps}; nothing to do")
    return {}
  if checkpoints.clear_done_marker(options.model_dir):
    # A finished run continued to more steps: a refresher must not take the old marker for this run's.
    log(f"continuing a finished run to step {options.num_train_steps}: removed its "
        f"{checkpoints.DONE_MARKER} marker")
  _record_batch_size(options)

  iterator = iter(strategy.experimental_distribute_dataset(dataset_fn(step)))
  train_step = train_lib.TrainStep(model, optimizer, strategy, jit_compile=options.jit_compile)
  writer = tf.summary.create_file_writer(os.path.join(options.model_dir, "train"))
  started = time.time()
  window_start, window_steps = started, 0
  runner = None
  # SIGTERM (a preempted TPU VM, a scheduler, kill) stops at the next loop boundary with a checkpoint
  # of that step: nothing since the last periodic save is lost (realm_tf.training.preemption).
  with preemption.sigterm_requests_stop() as stop:
    while step < options.num_train_steps:
      if runner is None:
        # The first step runs alone: its result names the scalars the compiled loop sums.
        metrics = {name: float(value) for name, value in train_step(next(iterator)).items()}
        runner = step_loop.StepLoop(iterator, train_step, metrics)
        steps_run = 1
      else:
        # Loops end on multiples of steps_per_loop, so every log and save interval (multiples of it)
        # ends one.
        steps_run = min(options.steps_per_loop - step % options.steps_per_loop,
                        options.num_train_steps - step)
        metrics = runner.train(tf.constant(steps_run, tf.int32))
      step = int(optimizer.iterations.numpy())
      _check_finite(metrics, step, manager, steps_run)
      metrics.pop(train_lib.NONFINITE_GRADIENTS, None)
      window_steps += steps_run
      if after_step is not None:
        metrics.update(after_step(step, metrics))
      if step % options.log_every_steps == 0 or step >= options.num_train_steps:
        now = time.time()
        metrics["steps_per_second"] = window_steps / max(now - window_start, 1e-9)
        window_start, window_steps = now, 0
        with writer.as_default(step=step):
          for name, value in metrics.items():
            tf.summary.scalar(name, value)
          lr = optimizer.learning_rate
          tf.summary.scalar("learning_rate",
                            lr(optimizer.iterations) if callable(lr) else lr)
        shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()))
        log(f"step {step}/{options.num_train_steps}: {shown}")
      saved = step % options.save_checkpoints_steps == 0 or step >= options.num_train_steps
      if saved:
        path = _save(manager, step)
        log(f"saved {path}")
      if stop.requested and step < options.num_train_steps:
        path = manager.latest_checkpoint if saved else _save(manager, step)
        writer.flush()
        message = (f"SIGTERM: saved {path} at step {step} of {options.num_train_steps} and stopped; "
                   "run the same command again to resume from it")
        log(message)
        raise preemption.Preempted(message)
  writer.flush()
  log(f"trained to step {step} in {time.time() - started:.1f} s")
  return metrics
