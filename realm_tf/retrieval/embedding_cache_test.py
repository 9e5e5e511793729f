"""Tests for realm_tf.retrieval.embedding_cache: hits, misses on any change, and bad inputs."""

import json
import os

import numpy as np
import tensorflow as tf

from realm_tf.retrieval import embedding_cache


class EmbeddingCacheTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.directory = os.path.join(self.create_tempdir().full_path, "cache")
    self.calls = []

  def _compute(self, texts):
    self.calls.append(list(texts))
    return np.array([[len(t), i] for i, t in enumerate(texts)], np.float32)

  def _get(self, texts, model_id="model-a", name="things"):
    return embedding_cache.cached_embeddings(self.directory, name, model_id, texts, self._compute)

  def test_miss_then_hit(self):
    array, info = self._get(["a", "bb"])
    self.assertFalse(info["cached"])
    self.assertAllEqual(array, [[1, 0], [2, 1]])
    self.assertEqual(info["path"], os.path.join(self.directory, "things.npy"))
    self.assertEqual(sorted(os.listdir(self.directory)), ["things.json", "things.npy"])  # no temporaries
    with open(os.path.join(self.directory, "things.json")) as f:
      metadata = json.load(f)
    self.assertEqual(metadata["num_texts"], 2)
    self.assertEqual(metadata["fingerprint"], embedding_cache.fingerprint("model-a", ["a", "bb"]))
    again, info = self._get(["a", "bb"])
    self.assertTrue(info["cached"])
    self.assertAllEqual(again, array)
    self.assertLen(self.calls, 1)
    self.assertEqual(info["compute_seconds"], metadata["compute_seconds"])

  def test_any_change_recomputes(self):
    self._get(["a", "bb"])
    self._get(["a", "bc"])  # a changed text
    self._get(["a", "bc"], "model-b")  # a changed model
    self._get(["a", "bc", "d"], "model-b")
    self.assertLen(self.calls, 4)
    # The fingerprint separates texts, so re-splitting the same characters is a different input.
    self.assertNotEqual(embedding_cache.fingerprint("m", ["ab", "c"]),
                        embedding_cache.fingerprint("m", ["a", "bc"]))

  def test_lookup_never_computes(self):
    self.assertIsNone(embedding_cache.lookup(self.directory, "things", "model-a", ["a", "bb"]))
    self.assertFalse(os.path.exists(self.directory))  # a miss writes nothing
    array, _ = self._get(["a", "bb"])
    found, info = embedding_cache.lookup(self.directory, "things", "model-a", ["a", "bb"])
    self.assertAllEqual(found, array)
    self.assertTrue(info["cached"])
    self.assertIsNone(embedding_cache.lookup(self.directory, "things", "model-b", ["a", "bb"]))
    self.assertIsNone(embedding_cache.lookup(self.directory, "things", "model-a", ["a", "bc"]))
    self.assertLen(self.calls, 1)

  def test_damaged_cache_recomputes(self):
    self._get(["a", "bb"])
    with open(os.path.join(self.directory, "things.json"), "w") as f:
      f.write("{not json")
    _, info = self._get(["a", "bb"])
    self.assertFalse(info["cached"])
    self.assertLen(self.calls, 2)

  def test_bad_compute_output(self):
    with self.assertRaisesRegex(ValueError, r"compute returned float64 \(2, 2\), expected float32"):
      embedding_cache.cached_embeddings(self.directory, "x", "m", ["a", "b"], lambda texts: np.zeros([2, 2]))
    with self.assertRaisesRegex(ValueError, r"expected float32 \[3, D\]"):
      embedding_cache.cached_embeddings(self.directory, "x", "m", ["a", "b", "c"],
                                        lambda texts: np.zeros([2, 2], np.float32))
    self.assertFalse(os.path.exists(os.path.join(self.directory, "x.npy")))


if __name__ == "__main__":
  tf.test.main()
