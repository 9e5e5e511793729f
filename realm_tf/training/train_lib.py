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

Gradient accumulation (accumulation_steps = k) takes the same sums one k-th of the replica's batch at a
time: the gradients and LossOutputs of the k parts add up to those of the whole batch, so one update of
a batch that does not fit in memory at once is the update of that batch, not an average of k smaller
ones' (REALM's masked tokens are still weighted equally across parts). The parts run one after another;
with XLA each is one call of the compiled pass, whose temporaries are freed before the next.
"""

from typing import Callable, Dict, Optional

import tensorflow as tf

from realm_tf.modeling import losses

_SUM = tf.distribute.ReduceOp.SUM
# A step result that is a check, not a metric: replicas whose gradient held a NaN or Inf.
NONFINITE_GRADIENTS = "nonfinite_gradient_replicas"


def _all_reduce_sum(value: tf.Tensor) -> tf.Tensor:
  context = tf.distribute.get_replica_context()
  return context.all_reduce(_SUM, value)


def _global_metrics(loss_output: losses.LossOutput) -> Dict[str, tf.Tensor]:
  """Inside a replica: the metrics as global means (sum over replicas / weight over replicas)."""
  return {
      name:
          tf.math.divide_no_nan(_all_reduce_sum(tf.cast(total, tf.float32)),
                                _all_reduce_sum(tf.cast(weight, tf.float32)))
      for name, (total, weight) in loss_output.metrics.items()
  }


def _add_gradients(a, b):
  """The sum of two parts' gradients of one variable. An embedding table's are IndexedSlices, kept as
  such (rows of both parts; the optimizer sums repeated rows, as it does within one batch), so the update
  is the one the whole batch gets: densified, Adam would update every row's moments."""
  if a is None:
    return None
  if isinstance(a, tf.IndexedSlices):
    return tf.IndexedSlices(tf.concat([a.values, b.values], 0), tf.concat([a.indices, b.indices], 0),
                            a.dense_shape)
  return a + b


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
    accumulation_steps: parts each replica's batch is cut into, run one after another (their
      gradients summed into one update); the per-replica batch must be a multiple of it. Refused for a
      model whose loss couples the examples of the batch (cross_replica_loss: ICT's in-batch negatives).
    features_fn: graph ops that complete each replica's batch inside the step, before the loss
      (task.Task.step_features: REALM's in-step retrieval); they run in the step's graph on the
      replica's device, outside the XLA-compiled forward and backward pass.

  Call with a per-replica batch (what iterating a strategy-distributed dataset yields); returns a dict of
  scalar tensors: loss (global mean), the model's metrics (global means) and NONFINITE_GRADIENTS.
  """

  def __init__(self,
               model,
               optimizer,
               strategy: Optional[tf.distribute.Strategy] = None,
               jit_compile: bool = True,
               accumulation_steps: int = 1,
               features_fn: Optional[Callable[[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]]] = None):
    if accumulation_steps < 1:
      raise ValueError(f"--gradient_accumulation_steps={accumulation_steps} must be at least 1")
    if accumulation_steps > 1 and getattr(model, "cross_replica_loss", False):
      raise ValueError(
          f"--gradient_accumulation_steps={accumulation_steps}: {type(model).__name__}'s loss compares "
          "each example with the rest of the batch (in-batch negatives), so parts of a batch would give "
          "another loss than the whole; use --gradient_accumulation_steps=1")
    self.accumulation_steps = accumulation_steps
    self.features_fn = features_fn
    self.model = model
    self.optimizer = optimizer
    self.strategy = strategy or tf.distribute.get_strategy()
    self.jit_compile = _uses_compiler(model, self.strategy, jit_compile)
    # The forward and backward pass in a nested tf.function: the step's first trace creates the
    # optimizer's slots, after which tf.function traces the step again, and that second trace reuses
    # the nested function's graph (most of the tracing) instead of building it anew. Inlined instead
    # where a cross-replica loss (ICT) runs on several replicas without XLA: a separate uncompiled graph
    # cannot synchronize the replicas.
    cross_replica = (getattr(model, "cross_replica_loss", False) and self.strategy.num_replicas_in_sync > 1)
    self._gradients = (
        self._loss_and_gradients if cross_replica and not self.jit_compile else
        # None, not False, without XLA: whatever compiles the enclosing step (a TPU's
        # compiler) compiles this function with it, as it did the inlined code.
        tf.function(self._loss_and_gradients, jit_compile=self.jit_compile or None, autograph=False))
    # autograph=False (here and in make_eval_step): the step and the models branch on Python values
    # only, and converting their code took two thirds of each trace.
    self._step = tf.function(self._distributed_step, autograph=False)

  def _loss_and_gradients(self, features: Dict[str, tf.Tensor]):
    """This replica's LossOutput and the gradients of its loss SUM (no cross-replica op unless the
    model's loss has one)."""
    with tf.GradientTape() as tape:
      output = self.model.compute_loss(features, training=True)
      loss_sum = tf.cast(output.loss_sum, tf.float32)
    variables = self.model.trainable_variables
    return output, tape.gradient(loss_sum, variables)

  def _accumulated(self, features: Dict[str, tf.Tensor]):
    """_gradients of the replica's batch, summed over accumulation_steps parts run in turn."""
    k = self.accumulation_steps
    if k == 1:
      return self._gradients(features)
    batch = tf.nest.flatten(features)[0].shape[0]
    if batch is None or batch % k:
      raise ValueError(f"--gradient_accumulation_steps={k} must divide the batch of each replica "
                       f"({batch}; --batch_size over the replicas)")
    part_size = batch // k
    output = gradients = None
    for i in range(k):
      # The parts are independent in the graph: without the dependency on the previous part's results
      # the executor may run them side by side, and hold all their activations at once.
      with tf.control_dependencies([] if output is None else [output.loss_sum] +
                                   [g for g in gradients if g is not None]):
        part = tf.nest.map_structure(lambda t: tf.identity(t[i * part_size:(i + 1) * part_size]), features)  # pylint: disable=cell-var-from-loop
      part_output, part_gradients = self._gradients(part)
      if output is None:
        output, gradients = part_output, list(part_gradients)
        continue
      gradients = [_add_gradients(g, p) for g, p in zip(gradients, part_gradients)]
      output = losses.LossOutput(
          output.loss_sum + part_output.loss_sum, output.loss_weight + part_output.loss_weight, {
              name: (total + part_output.metrics[name][0], weight + part_output.metrics[name][1])
              for name, (total, weight) in output.metrics.items()
          })
    return output, gradients

  def _replica_step(self, features: Dict[str, tf.Tensor]):
    if self.features_fn is not None:
      features = self.features_fn(features)
    output, gradients = self._accumulated(features)
    global_weight = tf.maximum(_all_reduce_sum(tf.cast(output.loss_weight, tf.float32)), 1e-12)
    # Variables the loss does not reach (e.g. the pooler under the MLM loss) get no update at all, not
    # even weight decay, as in the original BERT optimizer.
    pairs = [(g / tf.cast(global_weight, g.dtype), v)
             for g, v in zip(gradients, self.model.trainable_variables)
             if g is not None]
    # How many replicas got a NaN or Inf gradient: the loop stops on any before saving (the loss alone
    # can be finite while a gradient overflows).
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g, _ in pairs]) if pairs else True
    nonfinite = _all_reduce_sum(1.0 - tf.cast(finite, tf.float32))
    self.optimizer.apply_gradients(pairs)
    loss = _all_reduce_sum(tf.cast(output.loss_sum, tf.float32)) / global_weight
    return dict(_global_metrics(output), loss=loss, **{NONFINITE_GRADIENTS: nonfinite})

  def _distributed_step(self, features):
    per_replica = self.strategy.run(self._replica_step, args=(features,))
    # Values are already all-reduced, hence identical on every replica: take the first.
    return tf.nest.map_structure(lambda v: self.strategy.experimental_local_results(v)[0], per_replica)

  def __call__(self, features) -> Dict[str, tf.Tensor]:
    return self._step(features)


def make_eval_step(model,
                   strategy: Optional[tf.distribute.Strategy] = None,
                   jit_compile: bool = True) -> Callable:
  """A compiled evaluation step: loss and metrics (global means) without updating anything."""
  strategy = strategy or tf.distribute.get_strategy()

  compiled = _uses_compiler(model, strategy, jit_compile)

  def replica_outputs(features):
    return model.compute_loss(features, training=False)

  outputs_fn = (tf.function(replica_outputs, jit_compile=True, autograph=False)
                if compiled else replica_outputs)

  def replica_eval(features):
    output = outputs_fn(features)
    weight = tf.maximum(_all_reduce_sum(tf.cast(output.loss_weight, tf.float32)), 1e-12)
    loss = _all_reduce_sum(tf.cast(output.loss_sum, tf.float32)) / weight
    return dict(_global_metrics(output), loss=loss)

  @tf.function(autograph=False)
  def step(features):
    per_replica = strategy.run(replica_eval, args=(features,))
    return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], per_replica)

  return step
