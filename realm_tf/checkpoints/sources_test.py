"""Tests of sources.resolve_checkpoint: the one resolver of user-given checkpoint paths."""

import os

import numpy as np
import tensorflow as tf

from realm_tf.checkpoints import sources
from realm_tf.testing import released_weights


def _save_with_manager(root: tf.train.Checkpoint, directory: str, step: int) -> str:
  """Saves like the trainers: CheckpointManager in the model dir, names ckpt-<step>."""
  manager = tf.train.CheckpointManager(root, directory, max_to_keep=5)
  return manager.save(checkpoint_number=step)


class ResolveCheckpointTest(tf.test.TestCase):

  def test_directory_resolves_to_latest_and_prefix_to_itself(self):
    model_dir = self.get_temp_dir()
    root = tf.train.Checkpoint(v=tf.Variable(1.0))
    first = _save_with_manager(root, model_dir, 10)
    second = _save_with_manager(root, model_dir, 20)
    self.assertEqual(sources.resolve_checkpoint(model_dir), second)
    self.assertEqual(sources.resolve_checkpoint(first), first)

  def test_empty_directory_and_missing_prefix_raise_file_not_found(self):
    empty = os.path.join(self.get_temp_dir(), "empty")
    os.makedirs(empty)
    with self.assertRaises(FileNotFoundError) as cm:
      sources.resolve_checkpoint(empty)
    self.assertIn("holds no checkpoint", str(cm.exception))
    self.assertIn(os.path.join(empty, "ckpt-1000"), str(cm.exception))  # the hint
    missing = os.path.join(empty, "ckpt-5")
    with self.assertRaises(FileNotFoundError) as cm:
      sources.resolve_checkpoint(missing)
    self.assertIn(missing + ".index", str(cm.exception))

  def test_released_directories(self):
    """A TF-Hub module means its variables/variables (or, for block_emb, its encoded/encoded.ckpt); a
    directory without a `checkpoint` file means its only checkpoint, and several are refused."""
    module = self.create_tempdir().full_path
    value = {"v": np.ones([2], np.float32)}
    for sub in ("variables", "encoded"):
      os.makedirs(os.path.join(module, sub))
    variables = released_weights.write_tf1_checkpoint(os.path.join(module, "variables", "variables"), value)
    encoded = released_weights.write_tf1_checkpoint(os.path.join(module, "encoded", "encoded.ckpt"), value)
    self.assertEqual(sources.resolve_checkpoint(module), variables)
    self.assertEqual(sources.resolve_checkpoint(module, block_emb=True), encoded)
    bert_dir = self.create_tempdir().full_path
    only = released_weights.write_tf1_checkpoint(os.path.join(bert_dir, "bert_model.ckpt"), value)
    state = os.path.join(bert_dir, "checkpoint")  # the Saver's; Google's BERT downloads have none
    os.remove(state)
    self.assertEqual(sources.resolve_checkpoint(bert_dir), only)
    released_weights.write_tf1_checkpoint(os.path.join(bert_dir, "other.ckpt"), value)
    os.remove(state)
    with self.assertRaisesRegex(
        FileNotFoundError, r"expected one checkpoint in the directory, found "
        r"\['bert_model.ckpt.index', 'other.ckpt.index'\]"):
      sources.resolve_checkpoint(bert_dir)


if __name__ == "__main__":
  tf.test.main()
