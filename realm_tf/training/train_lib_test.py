"""Tests of train_lib's TrainStep and make_eval_step on the three task models (REALM, ICT, ORQA).

What must hold for every task:
  (a) the XLA-compiled step runs on CPU under the default strategy (the CPU stand-in for TPU);
  (b) two replicas (MirroredStrategy over two logical CPUs) report the same loss and reach the same
      weights as one replica on the same global batch: REALM's loss is a mean over the masked tokens of
      the GLOBAL batch (checked with replicas holding 3 and 1 masks per example), ICT's softmax runs
      against the blocks of ALL replicas;
  (c) under mixed_bfloat16 the losses stay close to float32 and logits/losses are float32;
  (d) the eval step changes no weight.

XLA compilations dominate this file's time, so each task's compiled one-replica run is made once
(_reference: the XLA step over _STEPS steps) and is what the two-replica runs, the loops of steps and the
gradient accumulation are compared with. The batches alternate between the task's batch and the same
examples rotated by one row: one replica sees the same examples (its loss is permutation invariant, so
every step makes progress on them), two replicas get other halves at each step.

The two-replica tests need the CPU split before TensorFlow initializes (done at import, first thing);
under a pytest run of many files another module may have initialized TensorFlow first, and then those
tests skip with the reason (Bazel runs this file alone, where the split always works).
"""

# pylint: disable=g-import-not-at-top,g-bad-import-order
import tensorflow as tf
from realm_tf.training import distribute

try:  # Before anything else touches TensorFlow: logical devices are fixed at runtime initialization.
  distribute.configure_logical_cpus(2)
  _SPLIT_ERROR = None
except RuntimeError as e:  # TensorFlow was initialized by an earlier test module (pytest only).
  _SPLIT_ERROR = str(e)

import dataclasses
import functools
import os
from typing import Dict, List

import numpy as np
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import ict
from realm_tf.modeling import orqa_reader
from realm_tf.modeling import reader
from realm_tf.modeling import realm
from realm_tf.training import loop
from realm_tf.training import train_lib
# pylint: enable=g-import-not-at-top,g-bad-import-order

_VOCAB = 30
# initializer_range 0.2: predictions far from uniform, so per-token losses differ between examples and
# a wrong normalization shows in the loss. One layer: XLA compile time dominates this file's runtime.
_CONFIG = bert.tiny_config(_VOCAB,
                           hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0,
                           initializer_range=0.2,
                           num_layers=1)
_D = 16
_GLOBAL_BATCH = 4
_LEARNING_RATE = 0.01
_CLS, _SEP, _MASK = 2, 3, 4


def _triple(token_ids, segment_start):
  token_ids = np.asarray(token_ids, np.int32)
  segment_ids = np.zeros_like(token_ids)
  segment_ids[..., segment_start:] = 1
  return token_ids, np.ones_like(token_ids), segment_ids


def _add(features, prefix, triple):
  for field, value in zip(realm.BERT_FIELDS, triple):
    features[f"{prefix}_{field}"] = value


# ------------------------------------------------------------------------------------------------
# The three tasks: model factory and a global batch of 4 examples (replica 0 gets examples 0-1).


def _realm_features():
  """REALM batch: examples 0-1 (replica 0) have 3 masks each, examples 2-3 (replica 1) have 1."""
  rng = np.random.default_rng(0)
  b, n, q, c, m = _GLOBAL_BATCH, 3, 6, 7, 3
  query = rng.integers(5, _VOCAB, [b, q]).astype(np.int32)
  query[:, 0], query[:, -1] = _CLS, _SEP
  positions = np.array([[1, 2, 3], [2, 3, 4], [1, 0, 0], [3, 0, 0]], np.int32)
  mlm_mask = np.array([[1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 0, 0]], np.float32)
  targets = rng.integers(5, _VOCAB, [b, m]).astype(np.int32) * mlm_mask.astype(np.int32)
  for i in range(b):
    query[i, positions[i][mlm_mask[i] > 0]] = _MASK
  candidates = rng.integers(5, _VOCAB, [b, n, c]).astype(np.int32)
  candidates[:, :, 0], candidates[:, :, 3], candidates[:, :, -1] = _CLS, _SEP, _SEP
  candidates[:, 0] = [_CLS, _SEP, _SEP] + [0] * (c - 3)  # the null document
  joint = np.concatenate([np.repeat(query[:, np.newaxis], n, 1), candidates[:, :, 4:]], -1)
  features = {realm.MLM_POSITIONS: positions, realm.MLM_TARGETS: targets, realm.MLM_MASK: mlm_mask}
  _add(features, realm.QUERY, _triple(query, q))
  _add(features, realm.CANDIDATE, _triple(candidates, 4))
  _add(features, realm.JOINT, _triple(joint, q))
  return {k: tf.constant(v) for k, v in features.items()}


def _realm_model():
  return realm.RealmPretrainer(_CONFIG, projection_size=_D)


def _ict_features():
  rng = np.random.default_rng(1)
  features = {ict.MASK_QUERY: np.array([1.0, 0.0, 1.0, 1.0], np.float32)}
  _add(features, ict.QUERY, _triple(rng.integers(5, _VOCAB, [_GLOBAL_BATCH, 6]), 6))
  _add(features, ict.BLOCK, _triple(rng.integers(5, _VOCAB, [_GLOBAL_BATCH, 9]), 4))
  return {k: tf.constant(v) for k, v in features.items()}


def _ict_model():
  return ict.IctModel(_CONFIG, projection_size=_D, dropout_rate=0.0)


_READER_LEN, _READER_BEAM, _RETRIEVER_BEAM = 10, 2, 5


def _orqa_model(config):
  """ORQA's fine-tuning loss on a span reader, with the retriever's outputs given as fixed features
  (retriever_logits [B, retriever_beam], its first reader_beam entries being the read blocks')."""
  return orqa_reader.OrqaReader(reader.SpanReader(config,
                                                  seq_len=_READER_LEN,
                                                  span_hidden_size=16,
                                                  max_span_width=3),
                                name="orqa")


def _orqa_features():
  rng = np.random.default_rng(2)
  b = _GLOBAL_BATCH
  token_ids = rng.integers(5, _VOCAB, [b, _READER_BEAM, _READER_LEN])
  block_mask = np.zeros([b, _READER_BEAM, _READER_LEN], np.int32)
  block_mask[:, :, 4:-1] = 1
  gold_starts = np.full([b, _READER_BEAM, 2], -1, np.int32)
  gold_ends = np.full([b, _READER_BEAM, 2], -1, np.int32)
  gold_starts[:, 0, 0], gold_ends[:, 0, 0] = 5, 6
  gold_starts[0, 1], gold_ends[0, 1] = [4, 7], [4, 8]
  gold_starts[3, 0, 0] = gold_ends[3, 0, 0] = -1  # example 3: no gold span (zero reader loss)
  retriever_correct = rng.random([b, _RETRIEVER_BEAM]) < 0.5
  retriever_correct[:, 0] = True
  features = {
      "block_mask": block_mask,
      "gold_starts": gold_starts,
      "gold_ends": gold_ends,
      "retriever_logits": rng.normal(size=[b, _RETRIEVER_BEAM]).astype(np.float32),
      "retriever_correct": retriever_correct
  }
  _add(features, "reader", _triple(token_ids, 4))
  return {k: tf.constant(v) for k, v in features.items()}


_TASKS = {
    "realm": (_realm_model, _realm_features),
    "ict": (_ict_model, _ict_features),
    "orqa": (_orqa_model, _orqa_features),
}
# Whether the two-replica run compiles its per-replica pass with XLA. Compiling is TrainStep's default and
# what GPUs run, but each compile costs seconds per replica on CPU, so one task (ORQA, the cheapest to
# compile) covers "XLA inside MirroredStrategy"; ICT never compiles under Mirrored (cross-replica loss).
# REALM's two replicas train through loop.train (StepsPerLoopTest's run, shared: _realm_two_replicas).
_MIRRORED_JIT = {"realm": False, "ict": True, "orqa": True}
# The reference runs' steps, and the loops of steps compared with them: loops end on steps 1, 5 and 10.
_STEPS = 10
_STEPS_PER_LOOP = 5

# ------------------------------------------------------------------------------------------------


def _build(task, strategy=None, weights=None):
  """The task's model built (a forward pass) under the strategy's scope, optionally given weights."""
  model_fn, features_fn = _TASKS[task]
  with (strategy or tf.distribute.get_strategy()).scope():
    model = model_fn() if task != "orqa" else model_fn(_CONFIG)
    model(features_fn())
  if weights is not None:
    model.set_weights(weights)
  return model


def _distribute(strategy, features):
  """Replica i gets rows [i * b, (i + 1) * b) of the global batch."""
  replicas = strategy.num_replicas_in_sync

  def value_fn(context):
    return {k: tf.split(v, replicas)[context.replica_id_in_sync_group] for k, v in features.items()}

  return strategy.experimental_distribute_values_from_function(value_fn)


def _mean_loss(model, features, training=False):
  output = model.compute_loss(features, training=training)
  return float(output.loss_sum / output.loss_weight)


def _batches(task):
  """The task's global batches in turn: its batch, then the same examples rotated by one row (REALM's
  replicas then hold 6 and 2 masks, then 4 and 4; a replica given another step's rows, or the whole
  global batch, trains differently)."""
  features = _TASKS[task][1]()
  return [features, {k: tf.roll(v, 1, axis=0) for k, v in features.items()}]


@dataclasses.dataclass(frozen=True)
class _Reference:
  """A task's one-replica run of the XLA-compiled step from seeded weights, over _STEPS steps of
  _batches(task) in turn."""
  batches: List[Dict[str, tf.Tensor]]
  initial: List[np.ndarray]  # the weights before the first step
  initial_loss: float  # the mean loss of the first batch under the initial weights
  results: List[Dict[str, float]]  # what each step returned
  after_two: List[np.ndarray]  # the weights after two steps
  final: List[np.ndarray]  # and after _STEPS
  jit_compile: bool
  variable_names: List[str]


@functools.lru_cache(maxsize=None)
def _reference(task) -> _Reference:
  tf_keras.utils.set_random_seed(0)  # the weights _SeededTestCase's tests build
  batches = _batches(task)
  model = _build(task)
  initial = model.get_weights()
  initial_loss = _mean_loss(model, batches[0], training=True)
  step = train_lib.TrainStep(model, tf_keras.optimizers.SGD(_LEARNING_RATE), jit_compile=True)
  results, after_two = [], None
  for i in range(_STEPS):
    results.append({k: float(v) for k, v in step(batches[i % 2]).items()})
    if i == 1:
      after_two = model.get_weights()
  return _Reference(batches, initial, initial_loss, results, after_two, model.get_weights(), step.jit_compile,
                    [v.name for v in model.weights])


def _run_loop(task, weights, steps_per_loop, model_dir, strategy=None, jit_compile=True):
  """loop.train over _STEPS steps of _batches(task) from `weights`: (final weights, [(step, metrics)]
  seen after each loop: the loop's window means)."""
  strategy = strategy or tf.distribute.get_strategy()
  model = _build(task, strategy, weights)
  with strategy.scope():
    optimizer = tf_keras.optimizers.SGD(_LEARNING_RATE)
  first, second = _batches(task)
  dataset = tf.data.Dataset.from_tensors(first).concatenate(tf.data.Dataset.from_tensors(second)).repeat()
  seen = []
  options = loop.LoopOptions(model_dir=model_dir,
                             num_train_steps=_STEPS,
                             save_checkpoints_steps=_STEPS,
                             log_every_steps=steps_per_loop,
                             jit_compile=jit_compile,
                             steps_per_loop=steps_per_loop,
                             global_batch_size=_GLOBAL_BATCH)
  loop.train(model,
             optimizer,
             strategy,
             lambda _: dataset,
             options,
             after_step=lambda step, m: seen.append((step, dict(m))) or {},
             log=lambda _: None)
  return model.get_weights(), seen


def _mirrored_strategy():
  """MirroredStrategy over two logical CPUs, or the reason it cannot be had here."""
  if _SPLIT_ERROR:
    return None, _SPLIT_ERROR
  strategy = distribute.get_strategy("mirrored", num_cpu_devices=2)
  if strategy.num_replicas_in_sync != 2:  # it mirrors over the GPUs where there are some
    return None, f"MirroredStrategy has {strategy.num_replicas_in_sync} replicas here, not 2 CPUs"
  return strategy, None


@functools.lru_cache(maxsize=None)
def _realm_two_replicas():
  """REALM on two replicas through loop.train (uncompiled; distribute_datasets_from_function cuts each
  global batch into the replicas' halves), in loops of _STEPS_PER_LOOP steps from the reference's
  initial weights: (final weights, [(step, window-mean metrics)]), or None and why not."""
  strategy, reason = _mirrored_strategy()
  if strategy is None:
    return None, reason
  model_dir = os.path.join(tf.compat.v1.test.get_temp_dir(), "realm_two_replicas")
  return _run_loop("realm",
                   _reference("realm").initial,
                   _STEPS_PER_LOOP,
                   model_dir,
                   strategy,
                   jit_compile=False), None


def _window_means(results, loop_ends):
  """The metrics of per-step results averaged over the loops that end on loop_ends."""
  means, start = [], 0
  for end in loop_ends:
    window = results[start:end]
    means.append({name: float(np.mean([r[name] for r in window])) for name in window[0]})
    start = end
  return means


class _SeededTestCase(tf.test.TestCase):
  """Seeds Keras's initializers, so every run builds the same weights (unseeded ones differ per run)."""

  def setUp(self):
    super().setUp()
    tf_keras.utils.set_random_seed(0)


class TrainStepTest(_SeededTestCase):

  def _check_single_replica(self, ref):
    """(a): the XLA step on one replica trains."""
    self.assertTrue(ref.jit_compile)
    self.assertAllClose(ref.initial_loss, ref.results[0]["loss"], rtol=1e-5)  # loss before the update
    # SGD made progress (the second batch holds the same examples as the first).
    self.assertLess(ref.results[1]["loss"], ref.results[0]["loss"])
    changed = [not np.allclose(a, b) for a, b in zip(ref.initial, ref.after_two)]
    self.assertGreater(np.mean(changed), 0.5)

  def _assert_same_results(self, expected, got, msg=""):
    self.assertEqual(set(expected), set(got))
    for name in expected:
      self.assertAllClose(expected[name], got[name], rtol=1e-5, atol=1e-6, msg=f"{msg} {name}")

  def _assert_same_weights(self, expected, got, names):
    self.assertLen(got, len(expected))
    for e, g, name in zip(expected, got, names):
      self.assertAllClose(e, g, rtol=1e-4, atol=1e-6, msg=name)

  def _check_mirrored_matches_single_replica(self, task):
    """(a) and (b): the XLA step on one replica, and the same step on two replicas, agree."""
    ref = _reference(task)
    self._check_single_replica(ref)
    strategy, reason = _mirrored_strategy()
    if strategy is None:
      self.skipTest(reason)
    mirrored = _build(task, strategy, ref.initial)
    with strategy.scope():
      optimizer = tf_keras.optimizers.SGD(_LEARNING_RATE)
    step = train_lib.TrainStep(mirrored, optimizer, strategy, jit_compile=_MIRRORED_JIT[task])
    self.assertEqual(task == "orqa", step.jit_compile)
    for i in range(2):
      got = {k: float(v) for k, v in step(_distribute(strategy, ref.batches[i])).items()}
      self._assert_same_results(ref.results[i], got, f"step {i + 1}")
    self._assert_same_weights(ref.after_two, mirrored.get_weights(), ref.variable_names)
    return ref

  def test_realm_mirrored_normalizes_by_global_mask_count(self):
    ref = _reference("realm")
    self._check_single_replica(ref)
    features = ref.batches[0]
    # The replicas hold 6 and 2 masks: the global mean weighs each token equally; a mean of the two
    # replica means (what a per-replica normalization would give) is measurably different.
    model = _build("realm", weights=ref.initial)
    outputs = model(features)
    joint = outputs["candidate_log_probs"][:, :, tf.newaxis] + outputs["gold_log_probs"]
    token_nll = -tf.reduce_logsumexp(joint, axis=1).numpy() * features[realm.MLM_MASK].numpy()
    global_mean = token_nll.sum() / 8
    self.assertAllClose(global_mean, ref.results[0]["loss"], rtol=1e-5)
    replica_means = (token_nll[:2].sum() / 6 + token_nll[2:].sum() / 2) / 2
    self.assertGreater(abs(replica_means - global_mean), 1e-2)
    # Two replicas (loop.train's first step runs alone: on the batch above) report the one replica's
    # loss and metrics, and end on its weights.
    run, reason = _realm_two_replicas()
    if run is None:
      self.skipTest(reason)
    weights, seen = run
    self.assertEqual(1, seen[0][0])
    # loop.train checks the non-finite gradient count itself and passes the rest on.
    expected = {k: v for k, v in ref.results[0].items() if k != train_lib.NONFINITE_GRADIENTS}
    self._assert_same_results(expected, seen[0][1], "step 1")
    self._assert_same_weights(ref.final, weights, ref.variable_names)

  def test_ict_mirrored_uses_negatives_from_all_replicas(self):
    ref = self._check_mirrored_matches_single_replica("ict")
    # With each replica's own blocks only as negatives the loss would be measurably different.
    query, blocks = (x.numpy() for x in _build("ict", weights=ref.initial)(ref.batches[0]))
    local = 0.0
    for r in range(2):
      logits = query[2 * r:2 * r + 2] @ blocks[2 * r:2 * r + 2].T
      local += (np.log(np.exp(logits).sum(-1)) - np.diag(logits)).sum()
    self.assertGreater(abs(local / 4 - ref.results[0]["loss"]), 1e-2)

  def test_orqa_mirrored_matches_single_replica(self):
    self._check_mirrored_matches_single_replica("orqa")


class MixedPrecisionTest(_SeededTestCase):

  def tearDown(self):
    tf_keras.mixed_precision.set_global_policy("float32")
    super().tearDown()

  def _check_close_to_float32(self, task):
    features = _TASKS[task][1]()
    reference = _build(task)
    expected = _mean_loss(reference, features)
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = _build(task, weights=reference.get_weights())
    output = model.compute_loss(features, training=False)
    self.assertEqual(tf.float32, output.loss_sum.dtype)
    for name, (total, _) in output.metrics.items():
      self.assertEqual(tf.float32, total.dtype, msg=name)
    got = float(output.loss_sum / output.loss_weight)
    self.assertAllClose(expected, got, rtol=5e-2)
    self.assertNotEqual(expected, got)  # bfloat16 really was used
    return model, features

  def test_realm(self):
    model, features = self._check_close_to_float32("realm")
    for name, value in model(features).items():
      self.assertEqual(tf.float32, value.dtype, msg=name)

  def test_ict(self):
    model, features = self._check_close_to_float32("ict")
    for value in model(features):
      self.assertEqual(tf.float32, value.dtype)

  def test_orqa(self):
    model, features = self._check_close_to_float32("orqa")
    self.assertEqual(tf.float32, model(features).logits.dtype)


class StepsPerLoopTest(_SeededTestCase):
  """ICT and REALM through loop.train: loops of compiled steps (ICT's XLA-compiled; REALM's on two replicas
  fed through distribute_datasets_from_function) give the per-step run's weights and its losses' window
  means."""

  def _check_loops(self, ref, weights, seen, loop_ends=(1, 5, 10)):
    # The first step of a process runs alone, then loops end on multiples of _STEPS_PER_LOOP.
    loop_ends = list(loop_ends)
    self.assertEqual([s for s, _ in seen], loop_ends)
    for (step, got), expected in zip(seen, _window_means(ref.results, loop_ends)):
      self.assertEqual(set(expected) - {train_lib.NONFINITE_GRADIENTS}, set(got), msg=step)
      for name in got:
        self.assertAllClose(expected[name], got[name], rtol=1e-4, atol=1e-6, msg=f"{step} {name}")
    for a, b, name in zip(weights, ref.final, ref.variable_names):
      self.assertAllClose(b, a, atol=1e-5, rtol=1e-4, msg=name)

  def test_ict_and_realm_loss_curves_match_across_loop_lengths(self):
    with self.subTest("ict"):
      ref = _reference("ict")
      self._check_loops(
          ref, *_run_loop("ict", ref.initial, _STEPS_PER_LOOP, os.path.join(self.get_temp_dir(), "ict")))
    with self.subTest("realm"):
      run, reason = _realm_two_replicas()
      if run is None:
        self.skipTest(reason)
      self._check_loops(_reference("realm"), *run)

  def test_one_step_loops_report_each_step(self):
    # --steps_per_loop=1 runs each step through the step's own function, not orbit's loop function
    # (step_loop.StepLoop): every loop's means are its one step's scalars, and the weights the same.
    ref = _reference("ict")
    self._check_loops(ref,
                      *_run_loop("ict", ref.initial, 1, os.path.join(self.get_temp_dir(), "ict")),
                      loop_ends=range(1, _STEPS + 1))

  def test_two_replicas_take_their_halves_of_each_global_batch(self):
    run, reason = _realm_two_replicas()
    if run is None:
      self.skipTest(reason)
    # Two different global batches in turn (the second's rows rotated, so the replicas' mask counts
    # differ): a replica given a whole global batch, or another step's rows, trains differently.
    ref = _reference("realm")
    weights, seen = run
    means = _window_means(ref.results, [s for s, _ in seen])
    self.assertAllClose([m["loss"] for _, m in seen], [m["loss"] for m in means], rtol=1e-5)
    for a, b in zip(weights, ref.final):
      self.assertAllClose(b, a, rtol=1e-4, atol=1e-6)


class GradientAccumulationTest(_SeededTestCase):
  """A batch taken in parts (accumulation_steps) gives the whole batch's loss, metrics and update."""

  def test_realm_and_orqa_in_parts_train_as_the_whole_batch(self):
    # Against the reference (the whole batch, XLA-compiled). REALM's 4 parts hold 3, 3, 1 and 1 masked
    # tokens: averaging the parts' means would be measurably off (TrainStepTest's realm case), summing
    # their sums is not. REALM's parts run XLA-compiled (one call of the compiled pass each), ORQA's
    # uncompiled.
    for task, parts, jit_compile in (("realm", 4, True), ("orqa", 2, False)):
      with self.subTest(task):
        ref = _reference(task)
        model = _build(task, weights=ref.initial)
        step = train_lib.TrainStep(model,
                                   tf_keras.optimizers.SGD(_LEARNING_RATE),
                                   jit_compile=jit_compile,
                                   accumulation_steps=parts)
        self.assertEqual(jit_compile, step.jit_compile)
        for i in range(2):
          got = {k: float(v) for k, v in step(ref.batches[i]).items()}
          self.assertEqual(set(ref.results[i]), set(got))
          for name in got:
            self.assertAllClose(ref.results[i][name], got[name], rtol=1e-5, atol=1e-6, msg=f"{parts} {name}")
        for got, expected in zip(model.get_weights(), ref.after_two):
          self.assertAllClose(expected, got, rtol=1e-4, atol=1e-6)
        self.assertFalse(all(np.allclose(a, b) for a, b in zip(ref.initial, ref.after_two)))

  def test_a_batch_the_parts_do_not_divide_and_ict_are_refused(self):
    model = _build("realm")
    step = train_lib.TrainStep(model,
                               tf_keras.optimizers.SGD(_LEARNING_RATE),
                               jit_compile=False,
                               accumulation_steps=3)
    with self.assertRaisesRegex(ValueError, r"gradient_accumulation_steps=3 must divide the batch .*\(4;"):
      step(_realm_features())
    with self.assertRaisesRegex(ValueError, "in-batch negatives"):
      train_lib.TrainStep(_build("ict"), tf_keras.optimizers.SGD(_LEARNING_RATE), accumulation_steps=2)


class EvalStepTest(_SeededTestCase):

  def test_eval_step_changes_no_weight(self):
    # ORQA's eval step is XLA-compiled; REALM's and ICT's forward passes compile in their train steps
    # (_reference: the same graphs, training only switches dropout, whose rate is 0 here).
    for task in _TASKS:
      features = _TASKS[task][1]()
      model = _build(task)
      before = model.get_weights()
      step = train_lib.make_eval_step(model, jit_compile=task == "orqa")
      first, second = step(features), step(features)
      self.assertAllClose(_mean_loss(model, features), first["loss"], rtol=1e-5, msg=task)
      self.assertAllClose(first, second, msg=task)
      for a, b in zip(before, model.get_weights()):
        self.assertAllEqual(a, b)


if __name__ == "__main__":
  tf.test.main()
