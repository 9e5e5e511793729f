"""orbit's StandardTrainer around a train_lib.TrainStep: steps_per_loop steps in one tf.function.

The steps run inside a tf.while_loop (orbit.StandardTrainerOptions(use_tf_while_loop=True)), so a TPU
runs a whole loop without waiting on the host; each step's scalars are summed on the device and read
by the host once per loop, as window means. Only the step counter and these sums cross to the host.
"""

from typing import Dict, Iterator

import orbit
import tensorflow as tf

from realm_tf.training import train_lib


class StepLoop(orbit.StandardTrainer):
  """Runs TrainSteps from a distributed iterator; train(n) returns the mean of each scalar over the n
  steps (NONFINITE_GRADIENTS is a mean count: > 0 when any step had a NaN or Inf gradient).

  Args:
    iterator: an iterator over a strategy-distributed dataset (orbit calls iter() on it: the same one).
    train_step: the step; names: the keys of its result (from a first step run outside the loop).
  """

  def __init__(self, iterator: Iterator, train_step: train_lib.TrainStep, names):
    super().__init__(iterator, orbit.StandardTrainerOptions(use_tf_function=True,
                                                            use_tf_while_loop=True))
    self._train_step = train_step
    with train_step.strategy.scope():
      # Float32 sums of every step's scalars; created outside the loop (no variables in a while_loop).
      self._sums = {name: tf.Variable(0.0, trainable=False, name=f"sum_{i}")
                    for i, name in enumerate(sorted(names))}

  def train(self, num_steps: tf.Tensor) -> Dict[str, float]:
    sums = super().train(num_steps)
    steps = max(int(num_steps), 1)
    return {name: total / steps for name, total in sums.items()}

  def train_loop_begin(self):
    for total in self._sums.values():
      total.assign(0.0)

  def train_step(self, iterator):
    result = self._train_step(next(iterator))
    for name, total in self._sums.items():
      total.assign_add(tf.cast(result[name], tf.float32))

  def train_loop_end(self) -> Dict[str, float]:
    return {name: float(total.numpy()) for name, total in self._sums.items()}
