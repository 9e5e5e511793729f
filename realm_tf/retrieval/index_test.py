"""Tests for realm_tf.retrieval.index: exactness, ScaNN recall, save/load, corruption and validation."""

import json
import os
from unittest import mock

import numpy as np
import tensorflow as tf

from realm_tf.retrieval import brute_force_index
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import index_format
from realm_tf.retrieval import mips_index
from realm_tf.retrieval import scann_index

CorruptIndexError = index_format.CorruptIndexError


def _random(num, dim, seed=0):
  return np.random.default_rng(seed).normal(size=(num, dim)).astype(np.float32)


def _clustered(num, dim, num_clusters, seed=0, sigma=0.3):
  """Points around num_clusters Gaussian centres; queries should be drawn near the points."""
  rng = np.random.default_rng(seed)
  centres = rng.normal(size=(num_clusters, dim)).astype(np.float32)
  points = centres[rng.integers(0, num_clusters, size=num)]
  return points + sigma * rng.standard_normal(size=(num, dim), dtype=np.float32)


def _near(points, num, seed=1, sigma=0.3):
  rng = np.random.default_rng(seed)
  picked = points[rng.integers(0, points.shape[0], size=num)]
  return picked + sigma * rng.standard_normal(size=picked.shape, dtype=np.float32)


def _numpy_top_k(queries, embeddings, k):
  """Exact top-k rows by score descending, ties by lower row (stable argsort)."""
  scores = queries.astype(np.float64) @ embeddings.astype(np.float64).T
  rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
  return rows, np.take_along_axis(scores, rows, axis=1)


class BruteForceIndexTest(tf.test.TestCase):

  def test_matches_numpy_argsort_across_blocks_and_query_batches(self):
    embeddings, queries = _random(1000, 16), _random(11, 16, seed=1)
    index = brute_force_index.BruteForceIndex.build(embeddings, doc_block_size=97, query_batch_size=4)
    ids, scores = index.search(queries, 10)
    want_rows, want_scores = _numpy_top_k(queries, embeddings, 10)
    self.assertEqual(ids.dtype, np.int64)
    self.assertEqual(scores.dtype, np.float32)
    self.assertAllEqual(ids, want_rows)
    self.assertAllClose(scores, want_scores, rtol=1e-5, atol=1e-5)
    self.assertTrue(np.all(np.diff(scores, axis=1) <= 0))

  def test_ties_are_broken_by_lower_row_across_blocks(self):
    embeddings = np.zeros([12, 4], np.float32)
    embeddings[[2, 5, 9, 11], 0] = 1.0  # four equal best documents in different blocks
    index = brute_force_index.BruteForceIndex.build(embeddings, doc_block_size=4)
    ids, scores = index.search(np.array([[1.0, 0, 0, 0]], np.float32), 3)
    self.assertAllEqual(ids, [[2, 5, 9]])
    self.assertAllEqual(scores, [[1.0, 1.0, 1.0]])

  def test_doc_ids_are_returned_instead_of_rows(self):
    embeddings, queries = _random(50, 8), _random(3, 8, seed=1)
    doc_ids = np.arange(50, dtype=np.int64)[::-1] * 1000 + 7
    ids, _ = brute_force_index.BruteForceIndex.build(embeddings, doc_ids).search(queries, 5)
    rows, _ = _numpy_top_k(queries, embeddings, 5)
    self.assertAllEqual(ids, doc_ids[rows])

  def test_empty_query_batch(self):
    index = brute_force_index.BruteForceIndex.build(_random(10, 4))
    ids, scores = index.search(np.zeros([0, 4], np.float32), 3)
    self.assertEqual(ids.shape, (0, 3))
    self.assertEqual(scores.shape, (0, 3))

  def test_embeddings_property_is_a_read_only_copy(self):
    embeddings = _random(30, 4)
    index = brute_force_index.BruteForceIndex.build(embeddings, doc_block_size=7)
    self.assertAllEqual(index.embeddings, embeddings)
    self.assertFalse(index.embeddings.flags.writeable)
    self.assertEqual((index.num_docs, index.dim), (30, 4))


class ValidationTest(tf.test.TestCase):

  def test_query_dimension_mismatch_names_both_dims(self):
    for cls in (brute_force_index.BruteForceIndex, scann_index.ScannIndex):
      index = cls.build(_random(20, 128))
      with self.assertRaisesRegex(ValueError, r"index has D=128, queries have 64"):
        index.search(_random(2, 64), 5)

  def test_k_larger_than_num_docs_returns_every_document(self):
    embeddings, queries = _random(5, 8), _random(3, 8, seed=1)
    want_rows, _ = _numpy_top_k(queries, embeddings, 5)
    for cls in (brute_force_index.BruteForceIndex, scann_index.ScannIndex):
      ids, scores = cls.build(embeddings).search(queries, 10)
      self.assertEqual(ids.shape, (3, 5), cls.__name__)
      self.assertEqual(scores.shape, (3, 5), cls.__name__)
      self.assertAllEqual(ids, want_rows)

  def test_bad_k(self):
    index = brute_force_index.BruteForceIndex.build(_random(5, 4))
    for k in (0, -1, 2.5, True):
      with self.assertRaisesRegex(ValueError, "k must be a positive integer"):
        index.search(_random(1, 4), k)

  def test_bad_embeddings(self):
    build = brute_force_index.BruteForceIndex.build
    with self.assertRaisesRegex(ValueError, "must be float32, got float64"):
      build(np.zeros([3, 4]))
    with self.assertRaisesRegex(ValueError, r"must be \[num_docs, dim\]"):
      build(np.zeros([4], np.float32))
    with self.assertRaisesRegex(ValueError, "at least one document"):
      build(np.zeros([0, 4], np.float32))
    with self.assertRaisesRegex(ValueError, "numpy array"):
      build([[1.0, 2.0]])
    bad = _random(10, 4)
    bad[7, 2] = np.nan
    with self.assertRaisesRegex(ValueError, "row 7 has NaN"):
      build(bad)

  def test_bad_doc_ids(self):
    embeddings = _random(4, 2)
    with self.assertRaisesRegex(ValueError, r"\[num_docs\] = \[4\]"):
      brute_force_index.BruteForceIndex.build(embeddings, np.arange(3))
    with self.assertRaisesRegex(ValueError, "duplicates"):
      brute_force_index.BruteForceIndex.build(embeddings, np.array([1, 2, 2, 3]))
    with self.assertRaisesRegex(ValueError, "integers"):
      brute_force_index.BruteForceIndex.build(embeddings, np.arange(4, dtype=np.float32))

  def test_bad_queries(self):
    index = scann_index.ScannIndex.build(_random(10, 4))
    with self.assertRaisesRegex(ValueError, r"q\[None, :\]"):
      index.search(np.zeros([4], np.float32), 1)
    with self.assertRaisesRegex(ValueError, "NaN"):
      index.search(np.full([1, 4], np.nan, np.float32), 1)
    with self.assertRaisesRegex(ValueError, "floating point"):
      index.search(np.zeros([1, 4], np.int32), 1)
    ids, _ = index.search(tf.ones([2, 4], tf.float64), 3)  # tensors and other float dtypes are fine
    self.assertEqual(ids.shape, (2, 3))

  def test_abstract_build_and_unknown_implementation(self):
    with self.assertRaisesRegex(TypeError, "abstract"):
      mips_index.MipsIndex.build(_random(3, 2))
    with self.assertRaisesRegex(ValueError, "unknown index implementation 'faiss'"):
      index_lib.build_index(_random(3, 2), implementation="faiss")
    self.assertIsInstance(index_lib.build_index(_random(3, 2), implementation="brute_force"),
                          brute_force_index.BruteForceIndex)


class ScannIndexTest(tf.test.TestCase):

  def test_recall_at_10_on_clustered_data(self):
    embeddings = _clustered(20000, 64, num_clusters=200)
    queries = _near(embeddings, 64)
    exact_ids, _ = brute_force_index.BruteForceIndex.build(embeddings).search(queries, 10)
    index = scann_index.ScannIndex.build(embeddings)
    self.assertEqual(index.parameters["mode"], "tree_ah")
    self.assertEqual(index.parameters["num_leaves"], 200)
    ids, scores = index.search(queries, 10)
    self.assertGreaterEqual(index_lib.recall_at_k(ids, exact_ids, 10), 0.95)
    # Scores are the exact inner products of the returned documents, sorted.
    self.assertAllClose(scores, np.einsum("bd,bkd->bk", queries, embeddings[ids]), rtol=1e-5, atol=1e-4)
    self.assertTrue(np.all(np.diff(scores, axis=1) <= 0))
    # Fewer candidates and leaves can only lose recall; the knobs reach ScaNN.
    ids_narrow, _ = index.search(queries, 10, num_candidates=10, num_leaves_to_search=1)
    self.assertLess(index_lib.recall_at_k(ids_narrow, exact_ids, 10), 0.95)

  def test_small_corpus_is_exact(self):
    embeddings, queries = _random(300, 16), _random(9, 16, seed=1)
    index = scann_index.ScannIndex.build(embeddings)
    self.assertEqual(index.parameters["mode"], "brute_force")
    ids, scores = index.search(queries, 20)
    want_rows, want_scores = _numpy_top_k(queries, embeddings, 20)
    self.assertAllEqual(ids, want_rows)
    self.assertAllClose(scores, want_scores, rtol=1e-5, atol=1e-5)

  def test_large_k_gives_full_unique_sorted_rows(self):
    embeddings = _clustered(6000, 16, num_clusters=60)
    index = scann_index.ScannIndex.build(embeddings)
    self.assertEqual(index.parameters["mode"], "tree_ah")
    ids, scores = index.search(_near(embeddings, 4), 2000)
    self.assertEqual(ids.shape, (4, 2000))
    for row in ids:
      self.assertLen(set(row.tolist()), 2000)
    self.assertTrue(np.all(np.diff(scores, axis=1) <= 0))

  def test_short_scann_results_fall_back_to_exact_search(self):
    embeddings, queries = _random(6000, 8), _random(3, 8, seed=1)
    index = scann_index.ScannIndex.build(embeddings)
    real_search = index._searcher.search_batched

    def short_search(q, final_num_neighbors, leaves_to_search):
      rows, distances = real_search(q,
                                    final_num_neighbors=final_num_neighbors,
                                    leaves_to_search=leaves_to_search)
      distances = np.array(distances)
      distances[1, 3:] = np.nan  # query 1 found only 3 documents
      return rows, distances

    with mock.patch.object(index._searcher, "search_batched", short_search):
      ids, scores = index.search(queries, 10)
    want_rows, want_scores = _numpy_top_k(queries[1:2], embeddings, 10)
    self.assertAllEqual(ids[1:2], want_rows)
    self.assertAllClose(scores[1:2], want_scores, rtol=1e-5, atol=1e-5)

  def test_parameters_scale_with_num_docs(self):
    options = scann_index.ScannOptions()
    self.assertEqual(options.resolve(4999)["mode"], "brute_force")
    for num_docs, leaves, searched, sample in ((20000, 200, 20, 20000), (100000, 632, 64, 100000),
                                               (1000000, 2000, 200, 100000), (13000000, 2500, 250, 100000)):
      params = options.resolve(num_docs)
      self.assertEqual((params["mode"], params["num_leaves"], params["num_leaves_to_search"],
                        params["training_sample_size"]), ("tree_ah", leaves, searched, sample), num_docs)

  def test_int8_rescoring_defaults_to_more_candidates(self):
    self.assertEqual(scann_index.ScannOptions().resolve(20000)["num_candidates"], 100)
    self.assertEqual(scann_index.ScannOptions(rescoring="int8").resolve(20000)["num_candidates"], 300)
    self.assertEqual(
        scann_index.ScannOptions(rescoring="int8", num_candidates=40).resolve(20000)["num_candidates"], 40)

  def test_options_are_overridable_and_checked(self):
    index = scann_index.ScannIndex.build(_clustered(6000, 8, 60),
                                         num_leaves=30,
                                         num_leaves_to_search=3,
                                         num_candidates=50,
                                         anisotropic_quantization_threshold=0.2)
    self.assertEqual(index.parameters["num_leaves"], 30)
    self.assertEqual(index.parameters["num_leaves_to_search"], 3)
    self.assertEqual(index.parameters["num_candidates"], 50)
    self.assertEqual(index.parameters["anisotropic_quantization_threshold"], 0.2)
    with self.assertRaisesRegex(ValueError, "num_leaves must be a positive integer"):
      scann_index.ScannIndex.build(_random(6000, 4), num_leaves=0)
    with self.assertRaisesRegex(ValueError, "num_leaves_to_search=40 exceeds num_leaves=30"):
      scann_index.ScannIndex.build(_random(6000, 4), num_leaves=30, num_leaves_to_search=40)
    with self.assertRaises(TypeError):
      scann_index.ScannIndex.build(_random(10, 4), leaves=3)


class CompressedIndexTest(tf.test.TestCase):

  def test_int8_rescoring_keeps_recall_and_scores_its_dequantized_vectors(self):
    embeddings = _clustered(20000, 64, num_clusters=200)
    queries = _near(embeddings, 64)
    exact_ids, _ = brute_force_index.BruteForceIndex.build(embeddings).search(queries, 10)
    for shaping in (0.2, None):
      with self.subTest(int8_anisotropic_threshold=shaping):
        index = scann_index.ScannIndex.build(embeddings, rescoring="int8", int8_anisotropic_threshold=shaping)
        self.assertEqual(index.parameters["rescoring"], "int8")
        self.assertEqual(index.parameters["num_candidates"], 300)
        ids, scores = index.search(queries, 10)
        self.assertGreaterEqual(index_lib.recall_at_k(ids, exact_ids, 10), 0.95)
        vectors = index.embeddings
        step = np.max(np.abs(embeddings), axis=0) / 127
        error = np.abs(vectors - embeddings)
        self.assertGreater(np.max(error), 0)  # int8 vectors, not the originals ...
        # ... within a few quantization steps (plain rounding: half of one) of them ...
        self.assertTrue(np.all(error <= (step / 2 + 1e-6 if shaping is None else 4 * step)))
        # ... and the scores are their inner products, sorted.
        self.assertAllClose(scores, np.einsum("bd,bkd->bk", queries, vectors[ids]), rtol=1e-5, atol=1e-4)
        self.assertTrue(np.all(np.diff(scores, axis=1) <= 0))

  def test_saved_compressed_index_holds_int8_vectors_and_loads_them(self):
    embeddings = _clustered(6000, 16, num_clusters=60)
    queries = _near(embeddings, 16)
    sizes = {}
    for rescoring in ("float32", "int8"):
      index = scann_index.ScannIndex.build(embeddings, rescoring=rescoring)
      directory = os.path.join(self.create_tempdir().full_path, rescoring)
      manifest = index.save(directory, step=3)
      sizes[rescoring] = sum(entry["bytes"] for entry in manifest["files"].values())
      loaded = index_lib.load_index(directory)
      for got, want in zip(loaded.search(queries, 10), index.search(queries, 10)):
        self.assertAllEqual(got, want)
      self.assertAllEqual(loaded.embeddings, index.embeddings)
    self.assertEqual(manifest["dtype"], "int8")
    self.assertIn("scann/int8_dataset.npy", manifest["files"])  # ScaNN's own, not a second copy
    self.assertNotIn("embeddings.npy", manifest["files"])
    self.assertNotIn("embeddings_int8.npy", manifest["files"])
    self.assertEqual(np.load(os.path.join(directory, "scann", "int8_dataset.npy")).dtype, np.int8)
    # 48 of the 64 float32 bytes per document saved, less small files (D=16: the ScaNN files weigh
    # more here than at D=128).
    self.assertLessEqual(sizes["int8"], sizes["float32"] - 6000 * 48 + 1024)
    # A damaged int8 file is caught like any other.
    with open(os.path.join(directory, "scann", "int8_dataset.npy"), "r+b") as f:
      f.seek(-1, os.SEEK_END)
      f.write(b"\x7f" if f.read(1) != b"\x7f" else b"\x00")
    with self.assertRaisesRegex(index_format.CorruptIndexError, "int8_dataset.npy"):
      index_lib.load_index(directory)

  def test_format_1_compressed_index_still_loads(self):
    # Format 1 kept its own int8 vectors beside a ScaNN searcher without reordering.
    embeddings = _clustered(6000, 16, num_clusters=60)
    queries = _near(embeddings, 16)
    directory = os.path.join(self.create_tempdir().full_path, "v1")
    manifest = scann_index.ScannIndex.build(embeddings).save(directory)
    scales = np.max(np.abs(embeddings), axis=0) / 127
    codes = np.rint(embeddings / scales).astype(np.int8)
    os.remove(os.path.join(directory, "embeddings.npy"))
    del manifest["files"]["embeddings.npy"]
    for name, array in (("embeddings_int8.npy", codes), ("embedding_scales.npy", scales)):
      path = os.path.join(directory, name)
      np.save(path, array)
      manifest["files"][name] = {
          "sha256": index_format.sha256(path),  # pylint: disable=protected-access
          "bytes": os.path.getsize(path)
      }
    manifest["parameters"]["rescoring"] = "int8"
    del manifest["parameters"]["int8_anisotropic_threshold"]
    manifest.update(format_version=1, dtype="int8")
    with open(os.path.join(directory, "manifest.json"), "w") as f:
      json.dump(manifest, f)
    loaded = index_lib.load_index(directory)
    self.assertAllClose(loaded.embeddings, codes * scales)
    ids, scores = loaded.search(queries, 10)
    self.assertAllClose(scores, np.einsum("bd,bkd->bk", queries, (codes * scales)[ids]), rtol=1e-5, atol=1e-4)
    exact_ids, _ = brute_force_index.BruteForceIndex.build(embeddings).search(queries, 10)
    self.assertGreaterEqual(index_lib.recall_at_k(ids, exact_ids, 10), 0.9)

  def test_bad_rescoring(self):
    with self.assertRaisesRegex(ValueError, "rescoring must be one of"):
      scann_index.ScannIndex.build(_random(100, 8), rescoring="int4")


class RecallAtKTest(tf.test.TestCase):

  def test_values(self):
    exact = np.array([[1, 2, 3], [4, 5, 6]])
    self.assertEqual(index_lib.recall_at_k(exact, exact, 3), 1.0)
    self.assertAlmostEqual(index_lib.recall_at_k(np.array([[3, 9, 1], [7, 8, 9]]), exact, 3), 2 / 6)
    self.assertAlmostEqual(index_lib.recall_at_k(np.array([[2, 1], [4, 0]]), exact, 2), 3 / 4)
    self.assertEqual(index_lib.recall_at_k(exact, exact, 10), 1.0)  # k clamped to 3 columns

  def test_shape_errors(self):
    with self.assertRaisesRegex(ValueError, "same non-zero batch"):
      index_lib.recall_at_k(np.zeros([2, 3]), np.zeros([3, 3]), 3)
    with self.assertRaisesRegex(ValueError, "fewer than k=3"):
      index_lib.recall_at_k(np.zeros([2, 2]), np.zeros([2, 3]), 3)


class SaveLoadTest(tf.test.TestCase):

  def _built(self, implementation, num_docs=6000):
    embeddings = _clustered(num_docs, 16, num_clusters=60)
    doc_ids = np.arange(num_docs, dtype=np.int64) * 3 + 100
    return index_lib.build_index(embeddings, doc_ids, implementation=implementation), embeddings

  def _saved(self, implementation="scann", num_docs=6000):
    index, _ = self._built(implementation, num_docs)
    directory = os.path.join(self.create_tempdir().full_path, "index", "42")
    index.save(directory, step=42)
    return directory

  def test_round_trip_gives_identical_results(self):
    for implementation in ("brute_force", "scann"):
      index, embeddings = self._built(implementation)
      queries = _near(embeddings, 16)
      want_ids, want_scores = index.search(queries, 10)
      parent = os.path.join(self.create_tempdir().full_path, "index")
      manifest = index.save(os.path.join(parent, "42"), step=42, extra={"checkpoint": "ckpt-42"})
      self.assertEqual(os.listdir(parent), ["42"])  # no temporary directory left behind
      loaded = index_lib.load_index(os.path.join(parent, "42"))
      self.assertIs(type(loaded), type(index))
      got_ids, got_scores = loaded.search(queries, 10)
      self.assertAllEqual(got_ids, want_ids)
      self.assertAllEqual(got_scores, want_scores)
      self.assertAllEqual(loaded.doc_ids, index.doc_ids)
      self.assertAllEqual(loaded.embeddings, embeddings)
      self.assertEqual(loaded.parameters, index.parameters)
      self.assertEqual(loaded.step, 42)
      self.assertEqual(loaded.manifest, manifest)
      self.assertEqual(manifest["implementation"], implementation)
      self.assertEqual((manifest["num_docs"], manifest["dim"]), (6000, 16))
      self.assertEqual(manifest["format_version"], index_format.FORMAT_VERSION)
      self.assertEqual(manifest["extra"], {"checkpoint": "ckpt-42"})
      self.assertIn("created", manifest)
      self.assertEqual(
          np.load(os.path.join(parent, "42", "embeddings.npy"), allow_pickle=False).dtype, np.float32)
      with open(os.path.join(parent, "42", "manifest.json")) as f:
        self.assertEqual(json.load(f), manifest)

  def test_scann_files_are_listed_and_no_pickle_is_written(self):
    directory = self._saved("scann")
    manifest = index_format.verify_index(directory)
    self.assertIn("scann/scann_assets.pbtxt", manifest["files"])
    self.assertIn("scann/hashed_dataset.npy", manifest["files"])
    self.assertNotIn("scann/dataset.npy", manifest["files"])  # the float copy is embeddings.npy only
    self.assertFalse([f for f in manifest["files"] if f.endswith(".pkl")])

  def test_existing_directory_needs_overwrite(self):
    index, _ = self._built("brute_force", num_docs=20)
    directory = os.path.join(self.create_tempdir().full_path, "7")
    index.save(directory, step=7)
    with self.assertRaisesRegex(FileExistsError, "overwrite=True"):
      index.save(directory, step=8)
    index.save(directory, step=8, overwrite=True)
    self.assertEqual(index_lib.load_index(directory).step, 8)
    self.assertEqual(os.listdir(os.path.dirname(directory)), ["7"])

  def test_failed_save_leaves_nothing(self):
    index, _ = self._built("scann")
    parent = self.create_tempdir().full_path
    with mock.patch.object(scann_index.ScannIndex,
                           "_write_implementation_files",
                           side_effect=OSError("disk full")):
      with self.assertRaisesRegex(OSError, "disk full"):
        index.save(os.path.join(parent, "1"))
    self.assertEqual(os.listdir(parent), [])

  def test_bad_save_arguments(self):
    index, _ = self._built("brute_force", num_docs=20)
    directory = os.path.join(self.create_tempdir().full_path, "x")
    with self.assertRaisesRegex(ValueError, "JSON-serializable"):
      index.save(directory, extra={"array": np.zeros(2)})
    with self.assertRaisesRegex(ValueError, "step must be a non-negative integer"):
      index.save(directory, step=-1)
    with self.assertRaisesRegex(ValueError, "POSIX"):
      index.save("gs://bucket/index/1")
    self.assertFalse(os.path.exists(directory))

  def test_flipped_bytes_are_detected(self):
    directory = self._saved("brute_force")
    path = os.path.join(directory, "embeddings.npy")
    with open(path, "r+b") as f:
      f.seek(os.path.getsize(path) - 100)
      byte = f.read(1)
      f.seek(-1, os.SEEK_CUR)
      f.write(bytes([byte[0] ^ 0xFF]))
    with self.assertRaisesRegex(CorruptIndexError, r"embeddings\.npy does not match its sha256"):
      index_lib.load_index(directory)

  def test_corrupt_scann_file_is_detected(self):
    directory = self._saved("scann")
    with open(os.path.join(directory, "scann", "hashed_dataset.npy"), "ab") as f:
      f.write(b"\0")
    with self.assertRaisesRegex(CorruptIndexError, r"hashed_dataset\.npy has \d+ bytes"):
      index_format.verify_index(directory)

  def test_doc_ids_are_stored_only_when_they_are_not_the_rows(self):
    embeddings = _random(300, 8)
    queries = _near(embeddings, 4)
    parent = self.create_tempdir().full_path
    cases = (("rows", None, None), ("rows", np.arange(300), None),
             ("stored", np.arange(300) * 7 + 5, np.int32), ("stored", np.arange(300) + 2**40, np.int64))
    for i, (kind, doc_ids, dtype) in enumerate(cases):
      index = brute_force_index.BruteForceIndex.build(embeddings, doc_ids)
      directory = os.path.join(parent, str(i))
      self.assertEqual(index.save(directory)["doc_ids"], kind)
      path = os.path.join(directory, "doc_ids.npy")
      if dtype is None:
        self.assertFalse(os.path.exists(path))
      else:
        self.assertEqual(np.load(path, allow_pickle=False).dtype, dtype)
      loaded = index_lib.load_index(directory)
      want = np.arange(300) if doc_ids is None else doc_ids
      self.assertAllEqual(loaded.doc_ids, want)
      ids, _ = loaded.search(queries, 5)
      rows, _ = index.search(queries, 5)
      self.assertEqual(ids.dtype, np.int64)
      self.assertAllEqual(ids, rows)

  def test_format_1_index_with_int64_doc_ids_still_loads(self):
    directory = self._saved("brute_force", num_docs=50)
    ids_path = os.path.join(directory, "doc_ids.npy")
    old_ids = np.arange(50, dtype=np.int64) * 3 + 100
    np.save(ids_path, old_ids)
    manifest_path = os.path.join(directory, "manifest.json")
    with open(manifest_path) as f:
      manifest = json.load(f)
    del manifest["doc_ids"]
    manifest["format_version"] = 1
    manifest["files"]["doc_ids.npy"] = {
        "sha256": index_format.sha256(ids_path),  # pylint: disable=protected-access
        "bytes": os.path.getsize(ids_path)
    }
    with open(manifest_path, "w") as f:
      json.dump(manifest, f)
    self.assertAllEqual(index_lib.load_index(directory).doc_ids, old_ids)
    manifest["format_version"] = 3
    with open(manifest_path, "w") as f:
      json.dump(manifest, f)
    with self.assertRaisesRegex(CorruptIndexError, r"format_version is 3, this realm_tf reads \[1, 2\]"):
      index_lib.load_index(directory)

  def test_missing_or_unlisted_files_are_detected(self):
    directory = self._saved("scann")
    with open(os.path.join(directory, "scann", "scann_docids.pkl"), "wb") as f:
      f.write(b"not listed")
    with self.assertRaisesRegex(CorruptIndexError, r"scann_docids\.pkl is not listed"):
      index_lib.load_index(directory)
    os.remove(os.path.join(directory, "scann", "scann_docids.pkl"))
    os.remove(os.path.join(directory, "doc_ids.npy"))
    with self.assertRaisesRegex(CorruptIndexError, r"doc_ids\.npy is missing"):
      index_lib.load_index(directory)

  def test_missing_or_bad_manifest(self):
    directory = self._saved("brute_force", num_docs=20)
    manifest_path = os.path.join(directory, "manifest.json")
    with open(manifest_path) as f:
      manifest = json.load(f)
    with open(manifest_path, "w") as f:
      f.write("{not json")
    with self.assertRaisesRegex(CorruptIndexError, "not readable JSON"):
      index_lib.load_index(directory)
    with open(manifest_path, "w") as f:
      json.dump(dict(manifest, num_docs=21), f)
    with self.assertRaisesRegex(CorruptIndexError, r"float32 \[20, 16\], the manifest says float32 "
                                r"\[21, 16\]"):
      index_lib.load_index(directory)
    with open(manifest_path, "w") as f:
      json.dump(dict(manifest, format_version=99), f)
    with self.assertRaisesRegex(CorruptIndexError, "format_version is 99"):
      index_lib.load_index(directory)
    os.remove(manifest_path)
    with self.assertRaisesRegex(CorruptIndexError, "has no manifest.json"):
      index_lib.load_index(directory)
    with self.assertRaisesRegex(CorruptIndexError, "does not exist"):
      index_format.verify_index(os.path.join(directory, "nope"))

  def test_temporary_directory_is_never_loaded(self):
    directory = self._saved("brute_force", num_docs=20)
    # A complete save renamed back to a temporary name, as a crash between writing and publishing
    # would leave it: still refused.
    temporary = os.path.join(os.path.dirname(directory), ".tmp-42-123-abcdef01")
    os.rename(directory, temporary)
    with self.assertRaisesRegex(CorruptIndexError, "temporary directory of an unfinished"):
      index_lib.load_index(temporary)

  def test_wrong_class_load(self):
    directory = self._saved("scann", num_docs=20)
    with self.assertRaisesRegex(ValueError, "holds a 'scann' index"):
      brute_force_index.BruteForceIndex.load(directory)
    self.assertIsInstance(scann_index.ScannIndex.load(directory), scann_index.ScannIndex)


if __name__ == "__main__":
  tf.test.main()
