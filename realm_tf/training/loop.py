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
import math
import os
import time
from typing import Callable, Dict, Optional, Sequence

import tensorflow as tf

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
  """
  model_dir: str
  num_train_steps: int
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5
  log_every_steps: int = 10
  jit_compile: bool = True


class CheckpointWriteError(RuntimeError):
  """The model dir cannot take a checkpoint (unwritable or full)."""


class NonFiniteLossError(RuntimeError):
  """A step gave a NaN or Inf loss or gradient; nothing of it was saved."""


def _check_finite(result: Dict[str, float], step: int, manager: tf.train.CheckpointManager) -> None:
  bad = [f"{name}={value}" for name, value in sorted(result.items()) if not math.isfinite(value)]
  if result.get(train_lib.NONFINITE_GRADIENTS, 0.0) > 0:
    bad.append("a NaN or Inf gradient")
  if not bad:
    return
  latest = manager.latest_checkpoint
  resume = (f"the last good checkpoint is {latest}; a restart resumes from it" if latest else
            "no checkpoint was written yet; a restart begins from the warm start")
  raise NonFiniteLossError(
      f"step {step}: non-finite training values ({', '.join(bad)}); training stopped before saving this "
      f"step, {resume}. Lower --learning_rate, check the input data, or use float32 instead of "
      "--mixed_precision")


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
          log: Callable[[str], None] = print, frozen_variables: Sequence[tf.Variable] = (),
          freeze_until_step: int = 0) -> Dict[str, float]:
  """Trains until options.num_train_steps; returns the metrics of the last step.

  Args:
    model: task model with compute_loss, created under strategy.scope() with its variables built.
    optimizer: created under strategy.scope().
    dataset_fn: batches consumed so far -> the dataset of global batches from there on.
    warm_start: initializes weights when the model dir holds no checkpoint yet.
    after_step: (step, metrics) -> extra scalars to log; called every step on the host.
    frozen_variables, freeze_until_step: see train_lib.TrainStep.
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
  if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    log(f"resumed from {manager.latest_checkpoint} at step {int(optimizer.iterations.numpy())}")
  elif warm_start is not None:
    warm_start()
  step = int(optimizer.iterations.numpy())
  if step >= options.num_train_steps:
    log(f"already at step {step} >= --num_train_steps={options.num_train_steps}; nothing to do")
    return {}

  dataset = strategy.experimental_distribute_dataset(dataset_fn(step))
  train_step = train_lib.TrainStep(model, optimizer, strategy, jit_compile=options.jit_compile,
                                   frozen_variables=frozen_variables,
                                   freeze_until_step=freeze_until_step)
  if train_step.freeze_until_step > step:
    log(f"{len(frozen_variables)} variables frozen until step {freeze_until_step}")
  writer = tf.summary.create_file_writer(os.path.join(options.model_dir, "train"))
  metrics: Dict[str, float] = {}
  started = time.time()
  window_start, window_steps = started, 0
  for batch in dataset:
    result = train_step(batch)
    step = int(optimizer.iterations.numpy())
    metrics = {name: float(value) for name, value in result.items()}
    _check_finite(metrics, step, manager)
    metrics.pop(train_lib.NONFINITE_GRADIENTS, None)
    window_steps += 1
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
    if step % options.save_checkpoints_steps == 0 or step >= options.num_train_steps:
      path = _save(manager, step)
      log(f"saved {path}")
    if step >= options.num_train_steps:
      break
  writer.flush()
  log(f"trained to step {step} in {time.time() - started:.1f} s")
  return metrics
