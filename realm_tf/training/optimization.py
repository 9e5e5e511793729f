"""The BERT optimizer that all three original trainers (REALM, ICT, ORQA) use, on Model Garden.

The original release calls `bert.optimization.create_optimizer`: AdamW with weight decay 0.01 (except on
variables whose name contains "LayerNorm", "layer_norm" or "bias"), beta_1 0.9, beta_2 0.999, epsilon 1e-6,
gradients clipped to global norm 1.0, and a learning rate that warms up linearly for
`min(10000, max(100, num_train_steps // 10))` steps and decays linearly to 0 at num_train_steps. Here the
optimizer is Model Garden's `adamw` (`official.modeling.optimization.legacy_adamw.AdamWeightDecay`, a
tf_keras legacy Adam), built by `OptimizerFactory` from an `OptimizationConfig`.

Where Model Garden differs from the original, and what this module does:

* Bias correction. The original BERT AdamW has none: w -= lr * (m / (sqrt(v) + eps) + wd * w). Model
  Garden's AdamWeightDecay is Keras Adam plus decoupled decay, so it bias-corrects:
  w -= lr * wd * w + lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + eps) (t = step + 1; eps is
  added to the uncorrected sqrt(v), as in the original). The two agree once the betas' powers vanish
  (t >~ 5000); early on the original moves further, e.g. for a constant gradient its step is 3.2x the
  corrected one at t=1, 6.5x at t=10, 3.2x at t=100, 1.26x at t=1000. The default here is Model Garden's
  (bias_correction=True); `create_optimizer(..., bias_correction=False)` gives the original update exactly
  (the same optimizer with beta powers fixed at 0, which makes Keras's Adam kernels uncorrected).
  Weight decay uses the scheduled learning rate (never the bias-corrected one) in both modes, as the
  original does.
* Clipping. Model Garden's AdamWeightDecay clips each replica's gradients *before* the cross-replica sum
  (`gradient_clip_norm`, mirroring TF1's CrossShardOptimizer); that clips partial gradients, not the
  step's gradient. Here that is off (gradient_clip_norm=0) and Keras's `global_clipnorm` clips the
  aggregated gradient instead, so the global norm of what is applied is at most clip_norm whatever the
  replica count. With one replica both are the original's `clip_by_global_norm(grads, 1.0)`.
* Warmup. Model Garden's warmups ramp to `decay(warmup_steps)` = lr * (1 - warmup/total), not to lr.
  `BertWarmupSchedule` keeps the original: lr * step / warmup while step < warmup, then the polynomial
  decay of lr from step 0, lr * (1 - step / total) (so lr drops from ~lr to lr * (1 - warmup/total) when
  warmup ends, as in the original). Step 0 has learning rate 0, as in the original.
* Weight-decay exclusion is a regex search of each variable's name (`re.search`), as in the original:
  Model Garden's "embeddings/layer_norm/gamma", "self_attention_layer_norm/beta",
  "output_layer_norm/gamma", Keras's "layer_normalization/gamma", and every ".../bias:0" are excluded;
  kernels and embedding tables are decayed. Under MirroredStrategy the replica copies are named
  ".../bias/replica_1:0", which still match.
* Per-variable learning rates. The original has one rate for the whole model. `create_optimizer(...,
  learning_rate_multipliers=[(regex, factor)])` steps the variables whose name matches at factor x the
  schedule (Adam's step and the weight decay alike), in the same optimizer, so the schedule, the global
  step and the checkpoint's slots are as without it (bin/train_orqa --retriever_learning_rate).
* Slots are Keras's "m" and "v" (the original's "adam_m"/"adam_v" matter only for TF1 checkpoints).
"""

import re
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import tensorflow as tf
import tf_keras
from official.modeling import optimization
from official.modeling.optimization import legacy_adamw

EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


def num_warmup_steps(num_train_steps: int) -> int:
  """The original's warmup length: a tenth of training, at least 100 and at most 10000 steps."""
  return min(10000, max(100, int(num_train_steps) // 10))


_original_num_warmup_steps = num_warmup_steps  # create_optimizer's argument shadows the name.


class BertWarmupSchedule(tf_keras.optimizers.schedules.LearningRateSchedule):
  """Original BERT schedule: linear warmup to `initial_learning_rate`, then `decay_schedule(step)`."""

  def __init__(self,
               initial_learning_rate: float,
               decay_schedule: tf_keras.optimizers.schedules.LearningRateSchedule,
               warmup_steps: int,
               name: str = "BertWarmup"):
    super().__init__()
    self.initial_learning_rate = initial_learning_rate
    self.decay_schedule = decay_schedule
    self.warmup_steps = int(warmup_steps)
    self.name = name

  def __call__(self, step):
    with tf.name_scope(self.name):
      decayed = tf.cast(self.decay_schedule(step), tf.float32)
      if self.warmup_steps <= 0:
        return decayed
      step = tf.cast(step, tf.float32)
      warmup = self.initial_learning_rate * step / float(self.warmup_steps)
      return tf.where(step < float(self.warmup_steps), warmup, decayed)

  def get_config(self) -> Dict[str, Any]:
    return {
        "initial_learning_rate": self.initial_learning_rate,
        "decay_schedule": self.decay_schedule.get_config(),
        "warmup_steps": self.warmup_steps,
        "name": self.name
    }


class _LearningRateMultipliers:
  """Mixin for Keras's legacy Adam kernels: the variables whose name matches a pattern step at the
  scheduled learning rate times that pattern's factor (the first matching pattern's), the decoupled weight
  decay with them.

  Why not scale their gradients instead: Adam divides the gradient by its own running size, so a scaled
  gradient takes the same step. The factor is applied to the kernels' `lr_t` (the dense kernel's, which
  also drives the weight decay) and `lr` (the sparse path's, bias-corrected or not) for those variables
  only, so one optimizer, one schedule and one `iterations` serve the whole model.
  """

  def __init__(self, *args, learning_rate_multipliers: Sequence[Tuple[str, float]] = (), **kwargs):
    super().__init__(*args, **kwargs)
    self.learning_rate_multipliers = tuple((str(p), float(f)) for p, f in learning_rate_multipliers)

  def _multiplier(self, var_name: str) -> float:
    for pattern, factor in self.learning_rate_multipliers:
      if re.search(pattern, var_name):
        return factor
    return 1.0

  def _scaled_state(self, var, apply_state):
    factor = self._multiplier(var.name)
    if factor == 1.0:
      return apply_state
    key = (var.device, var.dtype.base_dtype)
    coefficients = (apply_state or {}).get(key) or self._fallback_apply_state(*key)
    scaled = dict(coefficients)
    for name in ("lr_t", "lr"):
      if name in scaled:
        scaled[name] = scaled[name] * tf.cast(factor, scaled[name].dtype)
    return {key: scaled}

  def _resource_apply_dense(self, grad, var, apply_state=None):
    return super()._resource_apply_dense(grad, var, apply_state=self._scaled_state(var, apply_state))

  def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
    return super()._resource_apply_sparse(grad,
                                          var,
                                          indices,
                                          apply_state=self._scaled_state(var, apply_state))

  def get_config(self):
    config = super().get_config()
    config["learning_rate_multipliers"] = [list(m) for m in self.learning_rate_multipliers]
    return config


class AdamWeightDecayWithoutBiasCorrection(legacy_adamw.AdamWeightDecay):
  """Model Garden's AdamWeightDecay with the original BERT update (no Adam bias correction).

  Keras's Adam kernels scale the step by sqrt(1 - beta_2_power) / (1 - beta_1_power); with both powers 0
  that factor is 1 in the dense (ResourceApplyAdam) and the sparse (IndexedSlices) paths alike.
  """

  def _prepare_local(self, var_device, var_dtype, apply_state):
    super()._prepare_local(var_device, var_dtype, apply_state)
    coefficients = apply_state[(var_device, var_dtype)]
    zero = tf.zeros([], var_dtype)
    coefficients.update(beta_1_power=zero, beta_2_power=zero, lr=coefficients["lr_t"])


class _ScaledAdamWeightDecay(_LearningRateMultipliers, legacy_adamw.AdamWeightDecay):
  """Model Garden's AdamWeightDecay with per-variable learning-rate factors."""


class _ScaledAdamWeightDecayWithoutBiasCorrection(_LearningRateMultipliers,
                                                  AdamWeightDecayWithoutBiasCorrection):
  """The original BERT update with per-variable learning-rate factors."""


def bert_optimization_config(
    learning_rate: float,
    num_train_steps: int,
    weight_decay_rate: float = 0.01,
    clip_norm: Optional[float] = 1.0,
    exclude_from_weight_decay: Sequence[str] = EXCLUDE_FROM_WEIGHT_DECAY) -> optimization.OptimizationConfig:
  """Model Garden config: adamw + polynomial (power 1) decay of `learning_rate` to 0 at num_train_steps.

  The warmup is not in the config (Model Garden's warmups ramp to another peak; see the module doc);
  `create_optimizer` wraps the decay in `BertWarmupSchedule`.
  """
  return optimization.OptimizationConfig({
      "optimizer": {
          "type": "adamw",
          "adamw": {
              "weight_decay_rate": weight_decay_rate,
              "beta_1": 0.9,
              "beta_2": 0.999,
              "epsilon": 1e-6,
              "exclude_from_weight_decay": list(exclude_from_weight_decay),
              # Clip the aggregated gradient (Keras), not each replica's part (Model Garden's own).
              "gradient_clip_norm": 0.0,
              "global_clipnorm": clip_norm if clip_norm else None,
          },
      },
      "learning_rate": {
          "type": "polynomial",
          "polynomial": {
              "initial_learning_rate": learning_rate,
              "decay_steps": int(num_train_steps),
              "end_learning_rate": 0.0,
              "power": 1.0,
          },
      },
  })


def create_optimizer(
    learning_rate: float,
    num_train_steps: int,
    num_warmup_steps: Optional[int] = None,  # pylint: disable=redefined-outer-name
    weight_decay_rate: float = 0.01,
    clip_norm: Optional[float] = 1.0,
    bias_correction: bool = True,
    learning_rate_multipliers: Sequence[Tuple[str, float]] = ()
) -> tf_keras.optimizers.legacy.Optimizer:
  """The BERT AdamW optimizer with its warmup + linear-decay schedule (see the module docstring).

  Create it under the training strategy's scope; apply gradients with `optimizer.apply_gradients` in
  replica context (inside `strategy.run`), which sums them over replicas, then clips the global norm.

  Args:
    learning_rate: peak learning rate.
    num_train_steps: the learning rate reaches 0 here.
    num_warmup_steps: warmup length; None means the original's `num_warmup_steps(num_train_steps)`;
      0 means no warmup.
    weight_decay_rate: decoupled weight decay, except on layer norms and biases.
    clip_norm: global-norm clip of the aggregated gradient; None or 0 disables clipping.
    bias_correction: True: Model Garden's (Keras) bias-corrected Adam; False: the original BERT update.
    learning_rate_multipliers: (regex, factor) pairs: a variable whose name the regex searches
      (re.search, the first pattern that matches) steps at factor x the schedule's learning rate, its
      weight decay too (e.g. ORQA's query tower slower than its reader).
  """
  for pattern, factor in learning_rate_multipliers:
    if factor < 0:
      raise ValueError(f"learning rate multiplier of {pattern!r} must be >= 0, got {factor}")
  if num_train_steps <= 0:
    raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
  if num_warmup_steps is None:
    num_warmup_steps = _original_num_warmup_steps(num_train_steps)
  if num_warmup_steps < 0:
    raise ValueError(f"num_warmup_steps must be >= 0, got {num_warmup_steps}")
  config = bert_optimization_config(learning_rate, num_train_steps, weight_decay_rate, clip_norm)
  factory = optimization.OptimizerFactory(config)
  schedule = BertWarmupSchedule(learning_rate, factory.build_learning_rate(), num_warmup_steps)
  # Every factor 1 changes nothing: Model Garden's own optimizer (or the uncorrected one) as before.
  multipliers = tuple(learning_rate_multipliers) if any(
      f != 1.0 for _, f in learning_rate_multipliers) else ()
  if bias_correction and not multipliers:
    return factory.build_optimizer(schedule)
  # What OptimizerFactory.build_optimizer passes its class, given to one of this module's.
  kwargs = {
      k: v
      for k, v in config.optimizer.adamw.as_dict().items()
      if not (k in ("clipnorm", "clipvalue", "global_clipnorm") and v is None)
  }
  if not multipliers:
    return AdamWeightDecayWithoutBiasCorrection(learning_rate=schedule, **kwargs)
  cls = _ScaledAdamWeightDecay if bias_correction else _ScaledAdamWeightDecayWithoutBiasCorrection
  return cls(learning_rate=schedule, learning_rate_multipliers=multipliers, **kwargs)


def learning_rate_at(optimizer_or_schedule: Union[tf_keras.optimizers.legacy.Optimizer,
                                                  tf_keras.optimizers.schedules.LearningRateSchedule, float],
                     step: Union[int, tf.Tensor]) -> float:
  """The learning rate at `step` (an optimizer's schedule, a schedule, or a constant), as a float."""
  lr = optimizer_or_schedule
  if isinstance(lr, tf_keras.optimizers.legacy.Optimizer):
    lr = lr.learning_rate
  elif isinstance(lr, tf_keras.optimizers.Optimizer):
    lr = lr._learning_rate  # pylint: disable=protected-access  (.learning_rate is the current value)
  if isinstance(lr, tf_keras.optimizers.schedules.LearningRateSchedule):
    lr = lr(step)
  return float(tf.convert_to_tensor(lr))
