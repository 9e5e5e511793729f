"""Training a bench's model through realm_tf.training.loop.train, with a loss curve and step times
recorded from its after_step hook.

Why: the SQuAD-open benches train through the one training loop but report more than its log lines: a
curve of window means (one point per log_every steps, with the elapsed seconds and whatever point_extras
adds, e.g. the learning rate) and the seconds of each step (their median leaves out the steps that
compile and most load spikes of a shared machine). With steps_per_loop 1 the hook sees every step.
"""

import collections
import shutil
import tempfile
import time
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf


class LossCurve:
  """Pass .after_step as loop.train's after_step; then read .points and .step_seconds.

  Args:
    log_every: steps per curve point (the last step always ends one).
    num_steps: the run's last step.
    point_extras: step -> more fields for its point.
  """

  def __init__(self, log_every: int, num_steps: int, point_extras: Optional[Callable[[int], Dict]] = None):
    self.log_every = log_every
    self.num_steps = num_steps
    self.point_extras = point_extras
    self.points: List[Dict] = []
    self.step_seconds: List[float] = []
    self._window = collections.defaultdict(list)
    self.start = self._last = time.perf_counter()

  def after_step(self, step: int, metrics: Dict[str, float]) -> Dict[str, float]:
    now = time.perf_counter()
    self.step_seconds.append(now - self._last)
    self._last = now
    for name, value in metrics.items():
      self._window[name].append(value)
    if step % self.log_every == 0 or step >= self.num_steps:
      self.points.append({
          "step": step,
          **{
              k: float(np.mean(v)) for k, v in self._window.items()
          },
          **(self.point_extras(step) if self.point_extras else {}), "seconds": now - self.start
      })
      self._window.clear()
    return {}

  @property
  def seconds(self) -> float:
    """From construction to the last step."""
    return self._last - self.start


def train(model,
          optimizer,
          dataset_fn: Callable[[int], tf.data.Dataset],
          num_steps: int,
          log_every: int,
          jit_compile: bool,
          log: Callable[[str], None],
          point_extras: Optional[Callable[[int], Dict]] = None) -> LossCurve:
  """Trains model (with compute_loss, its variables built) for num_steps through loop.train, in a
  temporary model dir removed afterwards (a bench keeps the weights it needs itself); returns the curve.

  dataset_fn: batches consumed so far -> the dataset of the remaining batches (loop.train's).
  """
  from realm_tf.training import loop  # pylint: disable=g-import-not-at-top
  model_dir = tempfile.mkdtemp(prefix="bench-loop-")
  try:
    options = loop.LoopOptions(model_dir=model_dir,
                               num_train_steps=num_steps,
                               save_checkpoints_steps=num_steps,
                               keep_checkpoint_max=1,
                               log_every_steps=log_every,
                               jit_compile=jit_compile)
    curve = LossCurve(log_every, num_steps, point_extras)
    loop.train(model,
               optimizer,
               tf.distribute.get_strategy(),
               dataset_fn,
               options,
               after_step=curve.after_step,
               log=log)
  finally:
    shutil.rmtree(model_dir, ignore_errors=True)
  return curve
