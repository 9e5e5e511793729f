"""Tests for realm_tf.training.optimization: schedule, update rule, weight-decay exclusion, clipping, and
running under XLA and under a two-replica MirroredStrategy.

The update rule is checked against a NumPy transcription of the original BERT AdamW (and of the
bias-corrected variant Model Garden implements), so a change in Model Garden or Keras shows up here.
The two-replica test needs logical CPUs configured before TensorFlow initializes (done at import; under a
pytest run of many files it skips if an earlier module initialized TensorFlow, see distribute_test).
"""

from typing import List, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.training import distribute
from realm_tf.training import optimization

try:
  distribute.configure_logical_cpus(2)
  _SPLIT_ERROR = None
except RuntimeError as e:  # TensorFlow was initialized by an earlier test module (pytest only).
  _SPLIT_ERROR = str(e)

# The optimizer's hyperparameters as float32 holds them: 1 - 0.999 is 1.3e-5 smaller in float32, which
# the bias-corrected update cancels but the uncorrected (original) one does not.
_BETA_1, _BETA_2, _EPSILON = (float(np.float32(x)) for x in (0.9, 0.999, 1e-6))
_WEIGHT_DECAY = 0.01


def _reference_adamw(params: Sequence[np.ndarray],
                     grads_per_step: Sequence[Sequence[np.ndarray]],
                     learning_rates: Sequence[float],
                     decayed: Sequence[bool],
                     bias_correction: bool,
                     clip_norm: float,
                     multipliers: Sequence[float] = ()) -> List[np.ndarray]:
  """Original BERT AdamW (bias_correction=False) or its bias-corrected form, in float64; parameter i
  steps at multipliers[i] x the learning rate (1 when not given)."""
  params = [np.array(p, np.float64) for p in params]
  m = [np.zeros_like(p) for p in params]
  v = [np.zeros_like(p) for p in params]
  for t, (grads, lr) in enumerate(zip(grads_per_step, learning_rates), start=1):
    grads = [np.array(g, np.float64) for g in grads]
    norm = np.sqrt(sum(np.sum(g * g) for g in grads))
    grads = [g * clip_norm / max(norm, clip_norm) for g in grads]
    for i, g in enumerate(grads):
      m[i] = _BETA_1 * m[i] + (1 - _BETA_1) * g
      v[i] = _BETA_2 * v[i] + (1 - _BETA_2) * g * g
      var_lr = lr * (multipliers[i] if multipliers else 1.0)
      step_lr = var_lr * np.sqrt(1 - _BETA_2**t) / (1 - _BETA_1**t) if bias_correction else var_lr
      decay = _WEIGHT_DECAY * params[i] if decayed[i] else 0.0
      params[i] = params[i] - step_lr * m[i] / (np.sqrt(v[i]) + _EPSILON) - var_lr * decay
  return params


class ScheduleTest(tf.test.TestCase):

  def test_num_warmup_steps(self):
    for train_steps, warmup in [(100, 100), (5000, 500), (1_000_000, 10000), (50, 100), (1999, 199),
                                (100_000, 10000)]:
      self.assertEqual(optimization.num_warmup_steps(train_steps), warmup, train_steps)

  def test_learning_rate_warms_up_then_decays_linearly_to_zero(self):
    # 1000 steps -> 100 warmup steps. Warmup: 1e-3 * step / 100; then 1e-3 * (1 - step / 1000).
    optimizer = optimization.create_optimizer(1e-3, num_train_steps=1000)
    expected = {0: 0.0, 50: 5e-4, 99: 9.9e-4, 100: 9e-4, 550: 4.5e-4, 999: 1e-6, 1000: 0.0, 1500: 0.0}
    for step, lr in expected.items():
      self.assertAllClose(optimization.learning_rate_at(optimizer, step), lr, atol=1e-9, msg=step)
      self.assertAllClose(optimization.learning_rate_at(optimizer.learning_rate, tf.constant(step)),
                          lr,
                          atol=1e-9)

  def test_explicit_and_zero_warmup(self):
    optimizer = optimization.create_optimizer(2e-3, num_train_steps=100, num_warmup_steps=20)
    self.assertAllClose(optimization.learning_rate_at(optimizer, 10), 1e-3)
    self.assertAllClose(optimization.learning_rate_at(optimizer, 20), 2e-3 * 0.8)
    no_warmup = optimization.create_optimizer(2e-3, num_train_steps=100, num_warmup_steps=0)
    self.assertAllClose(optimization.learning_rate_at(no_warmup, 0), 2e-3)
    self.assertAllClose(optimization.learning_rate_at(no_warmup, 75), 5e-4)
    self.assertAllClose(optimization.learning_rate_at(0.5, 7), 0.5)

  def test_rejects_bad_step_counts(self):
    with self.assertRaisesRegex(ValueError, "num_train_steps must be positive"):
      optimization.create_optimizer(1e-3, num_train_steps=0)
    with self.assertRaisesRegex(ValueError, "num_warmup_steps must be >= 0"):
      optimization.create_optimizer(1e-3, num_train_steps=10, num_warmup_steps=-1)

  def test_is_model_gardens_adamw_with_the_bert_hyperparameters(self):
    optimizer = optimization.create_optimizer(1e-3, num_train_steps=1000)
    self.assertIsInstance(optimizer, optimization.legacy_adamw.AdamWeightDecay)
    self.assertIsInstance(optimizer, tf_keras.optimizers.legacy.Optimizer)
    self.assertEqual(optimizer.epsilon, 1e-6)
    self.assertAllClose([optimizer.beta_1, optimizer.beta_2], [0.9, 0.999])
    self.assertEqual(optimizer.weight_decay_rate, 0.01)
    self.assertEqual(optimizer.global_clipnorm, 1.0)
    self.assertEqual(optimizer.gradient_clip_norm, 0.0)  # Model Garden's per-replica clipping is off.
    self.assertIsNone(optimization.create_optimizer(1e-3, 1000, clip_norm=None).global_clipnorm)


class UpdateTest(tf.test.TestCase):

  def _run_steps(self, bias_correction: bool, grads_per_step, params) -> List[np.ndarray]:
    optimizer = optimization.create_optimizer(0.1,
                                              num_train_steps=10,
                                              num_warmup_steps=0,
                                              bias_correction=bias_correction)
    variables = [tf.Variable(params[0], name="dense/kernel"), tf.Variable(params[1], name="dense/bias")]
    for grads in grads_per_step:
      optimizer.apply_gradients(zip([tf.constant(g) for g in grads], variables))
    self.assertEqual(int(optimizer.iterations), len(grads_per_step))
    return [v.numpy() for v in variables]

  def test_update_matches_the_reference_with_and_without_bias_correction(self):
    params = [np.array([[0.5, -1.0], [2.0, 0.25]], np.float32), np.array([0.3, -0.7], np.float32)]
    base = [np.array([[0.3, -0.2], [0.1, 0.4]], np.float32), np.array([0.1, -0.05], np.float32)]
    # Step 3's gradient has global norm > 1, so clipping is part of the check.
    grads_per_step = [[g * s for g in base] for s in (1.0, -0.5, 2.5)]
    learning_rates = [0.1 * (1 - step / 10) for step in range(3)]
    results = {}
    for bias_correction in (True, False):
      got = self._run_steps(bias_correction, grads_per_step, params)
      want = _reference_adamw(params,
                              grads_per_step,
                              learning_rates,
                              decayed=[True, False],
                              bias_correction=bias_correction,
                              clip_norm=1.0)
      for g, w in zip(got, want):
        self.assertAllClose(g, w, rtol=1e-5, atol=1e-6, msg=f"bias_correction={bias_correction}")
      results[bias_correction] = got
    # The two modes really differ (the uncorrected first steps are larger).
    self.assertGreater(np.max(np.abs(results[True][0] - results[False][0])), 1e-2)

  def test_sparse_gradients_follow_the_same_rule(self):
    # Embedding lookups give IndexedSlices gradients, which Keras's Adam applies through another path.
    for bias_correction in (True, False):
      optimizer = optimization.create_optimizer(0.1,
                                                num_train_steps=10,
                                                num_warmup_steps=0,
                                                bias_correction=bias_correction)
      table = tf.Variable(np.ones([3, 2], np.float32), name="word_embeddings/embeddings")
      dense_table = tf.Variable(np.ones([3, 2], np.float32), name="word_embeddings_copy/embeddings")
      sparse = tf.IndexedSlices(tf.constant([[0.2, -0.1]]), tf.constant([1]), tf.constant([3, 2]))
      for _ in range(2):
        optimizer.apply_gradients([(sparse, table), (tf.convert_to_tensor(sparse), dense_table)])
      self.assertAllClose(table.numpy(), dense_table.numpy(), rtol=1e-6)
      self.assertNotAllClose(table.numpy()[1], [1.0, 1.0])


class LearningRateMultiplierTest(tf.test.TestCase):
  """A slower query tower beside its reader, in one optimizer (ORQA's --retriever_learning_rate)."""

  def test_matching_variables_step_at_their_factor_of_the_schedule(self):
    params = [
        np.array([[0.5, -1.0], [2.0, 0.25]], np.float32),
        np.array([0.3, -0.7], np.float32),
        np.array([[1.5, 0.5], [-0.5, 1.0]], np.float32)
    ]
    base = [
        np.array([[0.3, -0.2], [0.1, 0.4]], np.float32),
        np.array([0.1, -0.05], np.float32),
        np.array([[0.2, 0.2], [-0.1, 0.3]], np.float32)
    ]
    grads_per_step = [[g * s for g in base] for s in (1.0, -0.5, 2.5)]  # step 3 is clipped
    learning_rates = [0.1 * (1 - step / 10) for step in range(3)]
    for bias_correction in (True, False):
      optimizer = optimization.create_optimizer(0.1,
                                                num_train_steps=10,
                                                num_warmup_steps=0,
                                                bias_correction=bias_correction,
                                                learning_rate_multipliers=[("/query_embedder/", 0.1),
                                                                           ("reader/", 1.0)])
      variables = [
          tf.Variable(params[0], name="orqa/query_embedder/dense/kernel"),
          tf.Variable(params[1], name="orqa/query_embedder/dense/bias"),
          tf.Variable(params[2], name="orqa/reader/dense/kernel")
      ]
      for grads in grads_per_step:
        optimizer.apply_gradients(zip([tf.constant(g) for g in grads], variables))
      want = _reference_adamw(params,
                              grads_per_step,
                              learning_rates,
                              decayed=[True, False, True],
                              bias_correction=bias_correction,
                              clip_norm=1.0,
                              multipliers=[0.1, 0.1, 1.0])
      for variable, w in zip(variables, want):
        self.assertAllClose(variable.numpy(),
                            w,
                            rtol=1e-5,
                            atol=1e-6,
                            msg=f"{variable.name} "
                            f"bias_correction={bias_correction}")
      # The schedule itself is the one given: the factor is per variable, not the optimizer's rate.
      self.assertAllClose(optimization.learning_rate_at(optimizer, 0), 0.1)
      self.assertEqual(optimizer.get_config()["learning_rate_multipliers"],
                       [["/query_embedder/", 0.1], ["reader/", 1.0]])

  def test_sparse_gradients_are_scaled_too(self):
    # Step 1 of Adam + decoupled decay is proportional to the learning rate: a factor f moves f as far.
    for bias_correction in (True, False):
      optimizer = optimization.create_optimizer(0.1,
                                                num_train_steps=10,
                                                num_warmup_steps=0,
                                                bias_correction=bias_correction,
                                                learning_rate_multipliers=[("query_embedder", 0.25)])
      slow = tf.Variable(np.ones([3, 2], np.float32), name="query_embedder/word_embeddings/embeddings")
      fast = tf.Variable(np.ones([3, 2], np.float32), name="reader/word_embeddings/embeddings")
      sparse = tf.IndexedSlices(tf.constant([[0.2, -0.1]]), tf.constant([1]), tf.constant([3, 2]))
      optimizer.apply_gradients([(sparse, slow), (sparse, fast)])
      self.assertAllClose(1.0 - slow.numpy()[1], 0.25 * (1.0 - fast.numpy()[1]), rtol=1e-5)
      self.assertNotAllClose(fast.numpy()[1], [1.0, 1.0])

  def test_factor_one_is_model_gardens_own_optimizer_and_negative_is_refused(self):
    self.assertIs(type(optimization.create_optimizer(1e-3, 100, learning_rate_multipliers=[("query", 1.0)])),
                  optimization.legacy_adamw.AdamWeightDecay)
    with self.assertRaisesRegex(ValueError, "multiplier of 'query' must be >= 0"):
      optimization.create_optimizer(1e-3, 100, learning_rate_multipliers=[("query", -0.5)])


class WeightDecayTest(tf.test.TestCase):

  def _zero_gradient_step(self, variables) -> List[str]:
    """One step with zero gradients at a learning rate of 1e-3; returns the names that changed."""
    optimizer = optimization.create_optimizer(1e-3, num_train_steps=1000, num_warmup_steps=0)
    before = [v.numpy() for v in variables]
    optimizer.apply_gradients([(tf.zeros_like(v), v) for v in variables])
    changed = []
    for v, old in zip(variables, before):
      if not np.array_equal(v.numpy(), old):
        # Zero gradient: Adam's step is 0, so only the decay lr * 0.01 * w moves the variable.
        self.assertAllClose(v.numpy(), old * (1 - 1e-3 * 0.01), rtol=1e-7, msg=v.name)
        changed.append(v.name)
    return changed

  def test_layer_norms_and_biases_are_not_decayed(self):
    names = [
        "x/layer_norm/gamma", "dense/bias", "dense/kernel", "layer_normalization/beta",
        "bert/encoder/layer_0/output/LayerNorm/gamma", "word_embeddings/embeddings"
    ]
    variables = [tf.Variable(tf.fill([2], 2.0), name=name) for name in names]
    self.assertEqual(self._zero_gradient_step(variables), ["dense/kernel:0", "word_embeddings/embeddings:0"])

  def test_exclusion_matches_model_garden_bert_variable_names(self):
    from official.nlp.modeling import networks  # pylint: disable=g-import-not-at-top
    encoder = networks.BertEncoderV2(vocab_size=16,
                                     hidden_size=8,
                                     num_layers=1,
                                     num_attention_heads=2,
                                     inner_dim=16,
                                     max_sequence_length=8)
    ids = tf.ones([1, 4], tf.int32)
    encoder({"input_word_ids": ids, "input_mask": ids, "input_type_ids": ids * 0})
    head_norm = tf_keras.layers.LayerNormalization()
    head_norm(tf.zeros([1, 8]))  # Built by a call, so its weights are "layer_normalization/...".
    variables = encoder.trainable_variables + head_norm.trainable_variables
    names = [v.name for v in variables]
    for expected in ("embeddings/layer_norm/gamma:0", "self_attention_layer_norm/beta:0",
                     "output_layer_norm/gamma:0", "self_attention/query/bias:0",
                     "word_embeddings/embeddings:0"):
      self.assertTrue(any(n.endswith(expected) for n in names), f"{expected} not in {names}")
    self.assertRegex(head_norm.trainable_variables[0].name, r"^layer_normalization(_\d+)?/gamma:0$")
    # Every layer-norm scale/offset and every bias stays; kernels and embedding tables decay.
    not_decayed = {n for n in names if n.endswith(("/gamma:0", "/beta:0", "/bias:0"))}
    self.assertCountEqual(self._zero_gradient_step(variables), set(names) - not_decayed)


class ClippingTest(tf.test.TestCase):

  def _first_moments_after_one_step(self, clip_norm, grads) -> List[np.ndarray]:
    optimizer = optimization.create_optimizer(1e-3,
                                              num_train_steps=1000,
                                              num_warmup_steps=0,
                                              clip_norm=clip_norm)
    variables = [tf.Variable([1.0, 1.0], name="a/kernel"), tf.Variable([1.0], name="b/kernel")]
    optimizer.apply_gradients(zip([tf.constant(g) for g in grads], variables))
    # The first moment after one step is (1 - beta_1) * the applied gradient.
    return [optimizer.get_slot(v, "m").numpy() / (1 - _BETA_1) for v in variables]

  def test_huge_gradient_is_clipped_to_global_norm_one(self):
    grads = [[3e6, 0.0], [4e6]]  # global norm 5e6
    applied = self._first_moments_after_one_step(1.0, grads)
    self.assertAllClose(applied[0], [0.6, 0.0], rtol=1e-5)
    self.assertAllClose(applied[1], [0.8], rtol=1e-5)
    unclipped = self._first_moments_after_one_step(None, grads)
    self.assertAllClose(unclipped[1], [4e6], rtol=1e-5)

  def test_small_gradient_is_not_clipped(self):
    applied = self._first_moments_after_one_step(1.0, [[0.3, 0.0], [0.4]])
    self.assertAllClose(applied[0], [0.3, 0.0], rtol=1e-5)
    self.assertAllClose(applied[1], [0.4], rtol=1e-5)


def _tiny_model() -> tf_keras.Model:
  inputs = tf_keras.Input([3])
  hidden = tf_keras.layers.Dense(4, activation="tanh", name="dense")(inputs)
  hidden = tf_keras.layers.LayerNormalization(name="layer_norm")(hidden)
  outputs = tf_keras.layers.Dense(1, name="out")(hidden)
  return tf_keras.Model(inputs, outputs)


_FEATURES = np.array([[0.1, -0.4, 0.9], [1.0, 0.2, -0.3], [-0.5, 0.5, 0.5], [0.3, 0.3, -1.0]], np.float32)
_TARGETS = np.array([[1.0], [-1.0], [0.5], [2.0]], np.float32)


class TrainStepTest(tf.test.TestCase):

  def _train_single_device(self, jit_compile: bool, steps: int = 3, multipliers=()) -> List[np.ndarray]:
    tf_keras.utils.set_random_seed(7)
    model = _tiny_model()
    optimizer = optimization.create_optimizer(0.05,
                                              num_train_steps=10,
                                              num_warmup_steps=2,
                                              learning_rate_multipliers=multipliers)

    @tf.function(jit_compile=jit_compile)
    def train_step(x, y):
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
      grads = tape.gradient(loss, model.trainable_variables)
      optimizer.apply_gradients(zip(grads, model.trainable_variables))
      return loss

    for _ in range(steps):
      train_step(_FEATURES, _TARGETS)
    self.assertEqual(int(optimizer.iterations), steps)
    return [v.numpy() for v in model.trainable_variables]

  def test_jit_compiled_train_step_matches_the_plain_one(self):
    tf_keras.utils.set_random_seed(7)
    initial = [v.numpy() for v in _tiny_model().trainable_variables]
    jitted = self._train_single_device(jit_compile=True)
    plain = self._train_single_device(jit_compile=False)
    for j, p, i in zip(jitted, plain, initial):
      self.assertAllClose(j, p, rtol=1e-5, atol=1e-6)
    self.assertNotAllClose(jitted[0], initial[0])  # step 0 has learning rate 0; steps 1 and 2 move.

  def test_two_replica_mirrored_step_matches_the_single_device_step(self):
    if _SPLIT_ERROR:
      self.skipTest(_SPLIT_ERROR)
    self._check_two_replica_step(())

  def test_two_replica_step_applies_learning_rate_multipliers_on_every_replica(self):
    # Replica 1's copies are named ".../replica_1:0": the pattern must still find them, or the replicas
    # diverge.
    if _SPLIT_ERROR:
      self.skipTest(_SPLIT_ERROR)
    multiplied = self._check_two_replica_step((("^dense/", 0.1),))
    self.assertNotAllClose(multiplied[0], self._train_single_device(False)[0])

  def _check_two_replica_step(self, multipliers) -> List[np.ndarray]:
    """Trains 3 steps on two replicas and checks both against the single-device step; returns the
    single-device weights."""
    strategy = distribute.get_strategy("mirrored", num_cpu_devices=2)
    self.assertEqual(strategy.num_replicas_in_sync, 2)
    with strategy.scope():
      tf_keras.utils.set_random_seed(7)
      model = _tiny_model()
      optimizer = optimization.create_optimizer(0.05,
                                                num_train_steps=10,
                                                num_warmup_steps=2,
                                                learning_rate_multipliers=multipliers)
    dataset = tf.data.Dataset.from_tensor_slices((_FEATURES, _TARGETS)).batch(4).repeat()
    batches = iter(strategy.experimental_distribute_dataset(dataset))

    @tf.function
    def train_step(batch):

      def replica_step(x, y):
        with tf.GradientTape() as tape:
          per_example = tf.reduce_sum(tf.square(model(x) - y), axis=-1)
          loss = tf.nn.compute_average_loss(per_example, global_batch_size=4)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return tf.shape(x)[0]

      return strategy.run(replica_step, args=batch)

    for _ in range(3):
      sizes = train_step(next(batches))
    self.assertEqual([int(s) for s in strategy.experimental_local_results(sizes)], [2, 2])
    expected = self._train_single_device(jit_compile=False, multipliers=multipliers)
    for variable, want in zip(model.trainable_variables, expected):
      replicas = strategy.experimental_local_results(variable)
      self.assertLen(replicas, 2)
      self.assertAllClose(replicas[0].numpy(), replicas[1].numpy(), rtol=0, atol=0)
      self.assertAllClose(replicas[0].numpy(), want, rtol=1e-5, atol=1e-6)
    return expected

  def test_mirrored_clips_the_aggregated_gradient(self):
    if _SPLIT_ERROR:
      self.skipTest(_SPLIT_ERROR)
    strategy = distribute.get_strategy("mirrored", num_cpu_devices=2)
    with strategy.scope():
      variable = tf.Variable([1.0, 1.0], name="w/kernel")
      optimizer = optimization.create_optimizer(1e-3, num_train_steps=10, num_warmup_steps=0)
    # Replica 0's gradient is [6, 0], replica 1's [0, 8]: the sum [6, 8] has norm 10 and clips to
    # [0.6, 0.8]. Clipping each replica's part first would give [1, 1].
    grads = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant([[6.0, 0.0], [0.0, 8.0]][ctx.replica_id_in_sync_group]))

    @tf.function
    def apply(grad):
      strategy.run(lambda g: optimizer.apply_gradients([(g, variable)]), args=(grad,))

    apply(grads)
    first_moment = strategy.experimental_local_results(optimizer.get_slot(variable, "m"))
    for m in first_moment:
      self.assertAllClose(m.numpy() / (1 - _BETA_1), [0.6, 0.8], rtol=1e-5)


if __name__ == "__main__":
  tf.test.main()
