"""One training step for every task (REALM, ICT, ORQA, FiD-KD), under any tf.distribute strategy.

A task model exposes `compute_loss(features, training) -> losses.LossOutput`: per-replica SUMS with their
weights. The step divides the replica's sum by the weight summed over all replicas, so the gradients the
optimizer adds up across replicas are exactly those of the mean over the global batch (for REALM: over
all real masked tokens of the global batch), whatever the number of replicas.

The forward and backward pass is compiled with XLA when jit_compile=True: the CPU stand-in for "runs on
TPU" (static shapes, no host-side ops). Cross-replica operations (all-reduce of the weights and metrics,
the optimizer's update of mirrored variables) stay outside the compiled function, because outside TPUs
XLA cannot contain a synchronization point (merge_call). This works because the weights (token counts,
batch sizes) do not depend on the parameters: grad(sum / global_weight) = grad(sum) / global_weight.
A model whose loss itself needs the other replicas (ICT's in-batch softmax over the global batch sets
`cross_replica_loss = True`) runs uncompiled under a multi-replica strategy other than TPUStrategy, which
compiles the whole step itself.
"""

import functools
from typing import Callable, Dict, Optional, Sequence

import tensorflow as tf
import tf_keras

from realm_tf.modeling import losses

_SUM = tf.distribute.ReduceOp.SUM
# A step result that is a check, not a metric: replicas whose gradient held a NaN or Inf.
NONFINITE_GRADIENTS = "nonfinite_gradient_replicas"


def _all_reduce_sum(value: tf.Tensor) -> tf.Tensor:
  context = tf.distribute.get_replica_context()
  return context.all_reduce(_SUM, value)


def _global_metrics(loss_output: losses.LossOutput) -> Dict[str, tf.Tensor]:
  """Inside a replica: the metrics as global means (sum over replicas / weight over replicas)."""
  return {name: tf.math.divide_no_nan(_all_reduce_sum(tf.cast(total, tf.float32)),
                                      _all_reduce_sum(tf.cast(weight, tf.float32)))
          for name, (total, weight) in loss_output.metrics.items()}


def _uses_compiler(model, strategy: tf.distribute.Strategy, jit_compile: bool) -> bool:
  if not jit_compile:
    return False
  if getattr(model, "cross_replica_loss", False) and strategy.num_replicas_in_sync > 1:
    return isinstance(strategy, (tf.distribute.TPUStrategy,))
  return True


class TrainStep:
  """A compiled training step.

  Args:
    model: a tf_keras model with compute_loss(features, training) -> LossOutput, built under
      strategy.scope().
    optimizer: a tf_keras optimizer created under strategy.scope().
    strategy: the distribution strategy (tf.distribute.get_strategy() for none).
    jit_compile: compile the forward and backward pass with XLA.
    frozen_variables, freeze_until_step: while the optimizer's step is below freeze_until_step, these
      variables get no gradient and no update (not even weight decay); their backward pass is not
      computed. REALM freezes its retriever this way while the reader learns to read the retrieved
      documents, so the retriever's first updates carry a signal instead of a random reader's noise.

  Call with a per-replica batch (what iterating a strategy-distributed dataset yields); returns a dict of
  scalar tensors: loss (global mean), the model's metrics (global means) and NONFINITE_GRADIENTS.
  """

  def __init__(self, model, optimizer, strategy: Optional[tf.distribute.Strategy] = None,
               jit_compile: bool = True, frozen_variables: Sequence[tf.Variable] = (),
               freeze_until_step: int = 0):
    self.model = model
    self.optimizer = optimizer
    self.strategy = strategy or tf.distribute.get_strategy()
    self.jit_compile = _uses_compiler(model, self.strategy, jit_compile)
    self.freeze_until_step = freeze_until_step if frozen_variables else 0
    frozen = {v.ref() for v in frozen_variables}
    if self.freeze_until_step and not isinstance(optimizer, tf_keras.optimizers.legacy.Optimizer):
      # Keras 2.11+ optimizers create their slots for the variables of their first update only and
      # then reject any other; legacy ones (Model Garden's AdamW) create slots per variable as needed.
      with self.strategy.scope():
        optimizer.build(model.trainable_variables)
    self._steps = {}
    for is_frozen in ((False, True) if self.freeze_until_step else (False,)):
      variables = [v for v in model.trainable_variables if not (is_frozen and v.ref() in frozen)]
      gradients = functools.partial(self._loss_and_gradients, variables)
      # A nested tf.function only when compiling: an uncompiled nested function would still be a
      # separate graph, where a cross-replica loss (ICT) cannot synchronize.
      if self.jit_compile:
        gradients = tf.function(gradients, jit_compile=True)
      self._steps[is_frozen] = tf.function(
          functools.partial(self._distributed_step, variables, gradients))

  def _loss_and_gradients(self, variables, features: Dict[str, tf.Tensor]):
    """This replica's LossOutput and the gradients of its loss SUM (no cross-replica op unless the
    model's loss has one)."""
    with tf.GradientTape() as tape:
      output = self.model.compute_loss(features, training=True)
      loss_sum = tf.cast(output.loss_sum, tf.float32)
    return output, tape.gradient(loss_sum, variables)

  def _replica_step(self, variables, gradients_fn, features: Dict[str, tf.Tensor]):
    output, gradients = gradients_fn(features)
    global_weight = tf.maximum(_all_reduce_sum(tf.cast(output.loss_weight, tf.float32)), 1e-12)
    # Variables the loss does not reach (e.g. the pooler under the MLM loss) get no update at all, not
    # even weight decay, as in the original BERT optimizer.
    pairs = [(g / tf.cast(global_weight, g.dtype), v)
             for g, v in zip(gradients, variables) if g is not None]
    # How many replicas got a NaN or Inf gradient: the loop stops on any before saving (the loss alone
    # can be finite while a gradient overflows).
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g, _ in pairs]) if pairs else True
    nonfinite = _all_reduce_sum(1.0 - tf.cast(finite, tf.float32))
    self.optimizer.apply_gradients(pairs)
    loss = _all_reduce_sum(tf.cast(output.loss_sum, tf.float32)) / global_weight
    return dict(_global_metrics(output), loss=loss, **{NONFINITE_GRADIENTS: nonfinite})

  def _distributed_step(self, variables, gradients_fn, features):
    per_replica = self.strategy.run(self._replica_step, args=(variables, gradients_fn, features))
    # Values are already all-reduced, hence identical on every replica: take the first.
    return tf.nest.map_structure(
        lambda v: self.strategy.experimental_local_results(v)[0], per_replica)

  def __call__(self, features) -> Dict[str, tf.Tensor]:
    frozen = bool(self.freeze_until_step) and int(self.optimizer.iterations.numpy()) < self.freeze_until_step
    return self._steps[frozen](features)


def make_eval_step(model, strategy: Optional[tf.distribute.Strategy] = None,
                   jit_compile: bool = True) -> Callable:
  """A compiled evaluation step: loss and metrics (global means) without updating anything."""
  strategy = strategy or tf.distribute.get_strategy()

  compiled = _uses_compiler(model, strategy, jit_compile)

  def replica_outputs(features):
    return model.compute_loss(features, training=False)

  outputs_fn = tf.function(replica_outputs, jit_compile=True) if compiled else replica_outputs

  def replica_eval(features):
    output = outputs_fn(features)
    weight = tf.maximum(_all_reduce_sum(tf.cast(output.loss_weight, tf.float32)), 1e-12)
    loss = _all_reduce_sum(tf.cast(output.loss_sum, tf.float32)) / weight
    return dict(_global_metrics(output), loss=loss)

  @tf.function
  def step(features):
    per_replica = strategy.run(replica_eval, args=(features,))
    return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], per_replica)

  return step
