"""Tests of training_state: checkpoint steps, the done marker and restoring retrievers from any layout."""

import os

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import training_state
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.testing import released_weights

_VOCAB_SIZE = 285
# Small enough that building and restoring takes well under a second.
_CONFIG = bert.tiny_config(_VOCAB_SIZE, hidden_size=32, num_layers=1, intermediate_size=64)
_D = 16


def _retriever(seed: int,
               share_embedders: bool = True,
               config: bert.BertConfig = _CONFIG) -> embedder_lib.Retriever:
  tf_keras.utils.set_random_seed(seed)
  return embedder_lib.build_retriever(config, _D, share_embedders=share_embedders)


def _embedder(seed: int, config: bert.BertConfig = _CONFIG) -> embedder_lib.RetrieverEmbedder:
  tf_keras.utils.set_random_seed(seed)
  embedder = embedder_lib.RetrieverEmbedder(config, _D, layer_norm_epsilon=1e-3, name="embedder")
  dummy = tf.zeros([1, 8], tf.int32)
  embedder((dummy, dummy, dummy))
  return embedder


def _inputs(batch=3, seq_len=12, seed=0):
  rng = np.random.default_rng(seed)
  token_ids = rng.integers(5, _VOCAB_SIZE, [batch, seq_len]).astype(np.int32)
  mask = np.ones([batch, seq_len], np.int32)
  mask[:, -3:] = 0
  token_ids[:, -3:] = 0
  segment_ids = np.zeros([batch, seq_len], np.int32)
  segment_ids[:, seq_len // 2:-3] = 1
  return tuple(tf.constant(x) for x in (token_ids, mask, segment_ids))


def _save_with_manager(root: tf.train.Checkpoint, directory: str, step: int) -> str:
  """Saves like the trainers: CheckpointManager in the model dir, names ckpt-<step>."""
  manager = tf.train.CheckpointManager(root, directory, max_to_keep=5)
  return manager.save(checkpoint_number=step)


class CheckpointStepTest(tf.test.TestCase):

  def test_parses_manager_paths(self):
    self.assertEqual(training_state.checkpoint_step("/runs/realm/ckpt-1200"), 1200)
    self.assertEqual(training_state.checkpoint_step("ckpt-0"), 0)
    self.assertEqual(training_state.checkpoint_step("gs://bucket/run/ckpt-7"), 7)
    self.assertEqual(training_state.checkpoint_step("/runs/ict/model.ckpt-300"), 300)

  def test_rejects_other_paths_naming_them(self):
    for path in ("/runs/realm/ckpt-12.index", "/runs/realm/model", "/runs/realm/ckpt-", "ckpt-1a",
                 "/runs/realm/ckpt-12/"):
      with self.subTest(path):
        with self.assertRaises(ValueError) as cm:
          training_state.checkpoint_step(path)
        self.assertIn(path, str(cm.exception))
        self.assertIn("ckpt-<step>", str(cm.exception))


class LatestStepAndDoneMarkerTest(tf.test.TestCase):

  def test_latest_step(self):
    model_dir = self.get_temp_dir()
    root = tf.train.Checkpoint(v=tf.Variable(1.0))
    _save_with_manager(root, model_dir, 10)
    _save_with_manager(root, model_dir, 20)
    self.assertEqual(training_state.latest_step(model_dir), 20)
    empty = os.path.join(self.get_temp_dir(), "empty")
    os.makedirs(empty)
    self.assertIsNone(training_state.latest_step(empty))

  def test_checkpoint_state_written_for_a_reader_or_for_a_resuming_manager(self):
    model_dir = self.get_temp_dir()
    value = tf.Variable(3.0)
    tf.train.Checkpoint(v=value).write(os.path.join(model_dir, "ckpt-3"))
    training_state.write_checkpoint_state(model_dir, "ckpt-3")
    self.assertEqual(training_state.latest_step(model_dir), 3)
    # Without timestamps a CheckpointManager of the directory does not count it as its own.
    self.assertEqual(tf.train.CheckpointManager(tf.train.Checkpoint(v=value), model_dir, 2).checkpoints, [])
    training_state.write_checkpoint_state(model_dir, "ckpt-3", timestamp=20.0, last_preserved_timestamp=10.0)
    restored = tf.Variable(0.0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=restored), model_dir, 2)
    self.assertEqual([os.path.basename(p) for p in manager.checkpoints], ["ckpt-3"])
    manager.restore_or_initialize()
    self.assertEqual(restored.numpy(), 3.0)

  def test_done_marker(self):
    model_dir = self.get_temp_dir()
    self.assertFalse(training_state.training_done(model_dir))
    training_state.write_done_marker(model_dir)
    self.assertTrue(training_state.training_done(model_dir))
    self.assertTrue(os.path.exists(os.path.join(model_dir, training_state.DONE_MARKER)))


class RestoreRetrieverTest(tf.test.TestCase):

  def assertSameEmbeddings(self, got_model, want_model):
    inputs = _inputs()
    self.assertAllClose(got_model(inputs, training=False), want_model(inputs, training=False), atol=1e-6)

  def assertDifferentEmbeddings(self, a, b):
    inputs = _inputs()
    self.assertNotAllClose(a(inputs, training=False), b(inputs, training=False), atol=1e-3)

  def test_realm_layout_restores_both_towers(self):
    model_dir = self.get_temp_dir()
    source = _retriever(1, share_embedders=False)
    # The REALM trainer: tf.train.Checkpoint(model=RealmPretrainer, optimizer=...) with
    # RealmPretrainer.retriever; the rest of the model and the optimizer are ignored by the restore.
    root = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=source,
                                                         encoder=tf.train.Checkpoint(w=tf.Variable([1.0]))),
                               optimizer=tf.train.Checkpoint(iterations=tf.Variable(7, dtype=tf.int64)))
    path = _save_with_manager(root, model_dir, 100)
    target = _retriever(2, share_embedders=False)
    self.assertDifferentEmbeddings(target.doc_embedder, source.doc_embedder)
    self.assertEqual(training_state.restore_retriever(target, model_dir), path)  # directory -> latest
    self.assertSameEmbeddings(target.doc_embedder, source.doc_embedder)
    self.assertSameEmbeddings(target.query_embedder, source.query_embedder)
    # The towers stayed distinct (the query tower did not get the document tower's weights).
    self.assertDifferentEmbeddings(target.query_embedder, target.doc_embedder)

  def test_realm_layout_from_a_prefix_picks_that_step(self):
    model_dir = self.get_temp_dir()
    source = _retriever(1)
    root = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=source))
    first = _save_with_manager(root, model_dir, 10)
    first_weights = [w.numpy() for w in source.weights]
    source.doc_embedder.projection.kernel.assign_add(tf.ones_like(source.doc_embedder.projection.kernel))
    _save_with_manager(root, model_dir, 20)
    target = _retriever(2)
    self.assertEqual(training_state.restore_retriever(target, first), first)
    for got, want in zip(target.weights, first_weights):
      self.assertAllEqual(got, want)

  def test_checkpoint_written_without_save_counter(self):
    # tf.train.Checkpoint.write (what a converter uses) stores no save_counter; the restore must not
    # report the missing counter as an unmatched retriever object.
    prefix = os.path.join(self.get_temp_dir(), "written")
    source = _retriever(1)
    path = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=source)).write(prefix)
    self.assertNotIn("save_counter/.ATTRIBUTES/VARIABLE_VALUE",
                     [name for name, _ in tf.train.list_variables(path)])
    target = _retriever(2)
    self.assertEqual(training_state.restore_retriever(target, path), path)
    self.assertSameEmbeddings(target.doc_embedder, source.doc_embedder)

  def test_ict_layout_restores_the_single_embedder_into_a_shared_tower(self):
    model_dir = self.get_temp_dir()
    ict_embedder = _embedder(3)
    path = _save_with_manager(tf.train.Checkpoint(model=tf.train.Checkpoint(embedder=ict_embedder)),
                              model_dir, 400)
    target = _retriever(4)  # default epsilon 1e-12; the weights do not depend on it
    self.assertEqual(training_state.restore_retriever(target, path), path)
    for got, want in zip(target.doc_embedder.weights, ict_embedder.weights):
      self.assertAllEqual(got, want)

  def test_ict_layout_restores_the_single_embedder_into_separate_towers(self):
    model_dir = self.get_temp_dir()
    ict_embedder = _embedder(3)
    path = _save_with_manager(tf.train.Checkpoint(model=tf.train.Checkpoint(embedder=ict_embedder)),
                              model_dir, 400)
    target = _retriever(4, share_embedders=False)
    self.assertDifferentEmbeddings(target.query_embedder, target.doc_embedder)
    training_state.restore_retriever(target, path)
    for tower in (target.doc_embedder, target.query_embedder):
      for got, want in zip(tower.weights, ict_embedder.weights):
        self.assertAllEqual(got, want)
    # Both towers own their variables: training one later does not move the other.
    self.assertEmpty({id(v) for v in target.doc_embedder.weights} &
                     {id(v) for v in target.query_embedder.weights})

  def test_retriever_layout(self):
    prefix = os.path.join(self.get_temp_dir(), "converted")
    source = _retriever(5, share_embedders=False)
    path = tf.train.Checkpoint(retriever=source).write(prefix)
    target = _retriever(6, share_embedders=False)
    self.assertEqual(training_state.restore_retriever(target, path), path)
    self.assertSameEmbeddings(target.doc_embedder, source.doc_embedder)
    self.assertSameEmbeddings(target.query_embedder, source.query_embedder)

  def test_checkpoint_without_retriever_names_file_and_layouts(self):
    prefix = os.path.join(self.get_temp_dir(), "reader_only")
    path = tf.train.Checkpoint(model=tf.train.Checkpoint(reader=tf.train.Checkpoint(
        kernel=tf.Variable(tf.zeros([2, 2]))))).write(prefix)
    target = _retriever(1)
    before = [w.numpy() for w in target.weights]
    with self.assertRaises(ValueError) as cm:
      training_state.restore_retriever(target, path)
    message = str(cm.exception)
    self.assertIn(path, message)
    self.assertIn("holds no retriever", message)
    for layout in ("model/retriever/", "model/embedder/", "retriever/"):
      self.assertIn(layout, message)
    self.assertIn("found e.g.", message)  # what it found instead
    self.assertIn("bin/train_realm", message)
    for got, want in zip(target.weights, before):
      self.assertAllEqual(got, want)

  def test_embedder_of_another_hidden_size_names_the_file(self):
    model_dir = self.get_temp_dir()
    wide = bert.tiny_config(_VOCAB_SIZE, hidden_size=64, num_layers=1, intermediate_size=64)
    path = _save_with_manager(tf.train.Checkpoint(model=tf.train.Checkpoint(embedder=_embedder(1, wide))),
                              model_dir, 10)
    with self.assertRaises(ValueError) as cm:
      training_state.restore_retriever(_retriever(2), model_dir)
    message = str(cm.exception)
    self.assertIn(path, message)
    self.assertIn("cannot restore the retriever", message)
    self.assertIn("model/embedder/", message)

  def test_retriever_with_more_layers_than_the_checkpoint_is_an_error(self):
    model_dir = self.get_temp_dir()
    path = _save_with_manager(tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=_retriever(1))),
                              model_dir, 10)
    deeper = bert.tiny_config(_VOCAB_SIZE, hidden_size=32, num_layers=2, intermediate_size=64)
    with self.assertRaisesRegex(ValueError, "cannot restore the retriever") as cm:
      training_state.restore_retriever(_retriever(2, config=deeper), path)
    self.assertIn(path, str(cm.exception))


class RestoreRetrieverFromBertTest(tf.test.TestCase):
  """A plain BERT initializes every tower's encoder (e.g. all-MiniLM-L6-v2 as REALM's retriever)."""

  def _tf1_bert(self, config=_CONFIG) -> str:
    params = released_weights.float32_weights(released_weights.ReleasedWeights(3).bert_body("bert/", config))
    return released_weights.write_tf1_checkpoint(os.path.join(self.create_tempdir().full_path, "bert.ckpt"),
                                                 params)

  def test_tf1_bert_into_separate_projection_free_towers(self):
    path = self._tf1_bert()
    tf_keras.utils.set_random_seed(4)
    target = embedder_lib.build_retriever(_CONFIG, 0, share_embedders=False, pooling=embedder_lib.MEAN)
    self.assertIsNone(target.doc_embedder.projection)
    self.assertEqual(training_state.restore_retriever(target, path), path)
    want = embedder_lib.RetrieverEmbedder(_CONFIG, None, pooling=embedder_lib.MEAN)
    bert_mapping.load_bert_weights(want.encoder, path)
    inputs = _inputs()
    for tower in (target.doc_embedder, target.query_embedder):
      self.assertAllClose(tower(inputs, training=False), want(inputs, training=False), atol=1e-5)
      self.assertEqual(tower(inputs, training=False).shape, [3, _CONFIG.hidden_size])

  def test_model_garden_encoder_checkpoint_keeps_a_fresh_projection(self):
    # bin/train_mlm's export: tf.train.Checkpoint(encoder=..., masked_lm=...).
    source = bert.build_encoder(_CONFIG)
    source(bert.encoder_inputs(*[tf.zeros([1, 4], tf.int32)] * 3))
    path = tf.train.Checkpoint(encoder=source).write(os.path.join(self.get_temp_dir(), "mlm", "ckpt-1"))
    target = _retriever(7)
    projection = [w.numpy() for w in target.doc_embedder.projection.weights]
    training_state.restore_retriever(target, path)
    for got, want in zip(target.doc_embedder.encoder.weights, source.weights):
      self.assertAllEqual(got, want)
    for got, want in zip(target.doc_embedder.projection.weights, projection):
      self.assertAllEqual(got, want)

  def test_bert_of_another_size_names_the_file_and_the_flag(self):
    wide = bert.tiny_config(_VOCAB_SIZE, hidden_size=64, num_layers=1, intermediate_size=64)
    path = self._tf1_bert(wide)
    with self.assertRaises(ValueError) as cm:
      training_state.restore_retriever(_retriever(2), path)
    self.assertIn(path, str(cm.exception))
    self.assertIn("--bert_config", str(cm.exception))


if __name__ == "__main__":
  tf.test.main()
