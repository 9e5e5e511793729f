"""orbit's StandardTrainer around a train_lib.TrainStep: the steps of one loop in one tf.function.

The steps run inside a tf.while_loop (orbit.StandardTrainerOptions(use_tf_while_loop=True)), so a TPU
runs a whole loop without waiting on the host; each step's scalars are summed on the device and read
by the host once per loop, as window means. Only the step counter and these sums cross to the host.
orbit.Controller (realm_tf.training.loop) decides how many steps each loop runs.
"""

from typing import Dict, Optional

import orbit
import tensorflow as tf

from realm_tf.training import train_lib


class StepLoop(orbit.StandardTrainer):
  """Runs TrainSteps from a distributed iterator; train(n) returns the mean of each scalar over the n
  steps (NONFINITE_GRADIENTS is a mean count: > 0 when any step had a NaN or Inf gradient).

  The very first step runs alone, outside the compiled loop: its result names the scalars that the loop
  sums, in variables a tf.while_loop cannot create. A loop of one step (--steps_per_loop=1, the default)
  runs the same way, through the step's own tf.function: orbit's loop function would trace and optimize
  a second graph around that step for nothing (1.7 s of CPU for the tests' one-layer REALM, 3.9 s with
  in-step retrieval), and its mean of one step is the step's value.

  Args:
    train_step: the step.
    iterator: an iterator over a strategy-distributed dataset (orbit calls iter() on it: the same one);
      may be set later through `train_dataset`, before the first train().
  """

  def __init__(self,
               train_step: train_lib.TrainStep,
               iterator: Optional[tf.distribute.DistributedIterator] = None):
    super().__init__(iterator, orbit.StandardTrainerOptions(use_tf_function=True, use_tf_while_loop=True))
    self._train_step = train_step
    self._sums: Optional[Dict[str, tf.Variable]] = None

  def train(self, num_steps: tf.Tensor) -> Dict[str, float]:
    steps = int(num_steps)
    if self._sums is not None and steps != 1:
      sums = super().train(num_steps)
      return {name: total / max(steps, 1) for name, total in sums.items()}
    # The very first step, or a loop of one: through the step's own tf.function (the class docstring).
    # float32 as the loop's sums are, so that a one-step window reads the same either way.
    first = {
        name: float(tf.cast(value, tf.float32))
        for name, value in self._train_step(next(self.train_dataset)).items()
    }
    if self._sums is None:
      with self._train_step.strategy.scope():
        # Float32 sums of every step's scalars, created once.
        self._sums = {
            name: tf.Variable(0.0, trainable=False, name=f"sum_{i}") for i, name in enumerate(sorted(first))
        }
    if steps <= 1:
      return first
    rest = super().train(tf.constant(steps - 1, tf.int32))  # sums
    return {name: (first[name] + rest[name]) / steps for name in first}

  def train_loop_begin(self):
    for total in self._sums.values():
      total.assign(0.0)

  def train_step(self, iterator):
    result = self._train_step(next(iterator))
    for name, total in self._sums.items():
      total.assign_add(tf.cast(result[name], tf.float32))

  def train_loop_end(self) -> Dict[str, float]:
    return {name: float(total.numpy()) for name, total in self._sums.items()}
