"""Tests of the training questions' candidate rows (bin/train_orqa --retriever=bm25|hybrid): searched
once and kept in the model dir, reused by a restart, searched again when the run they describe changed,
and the retrievers a run cannot train on refused by name."""

import os

import numpy as np
import tensorflow as tf

from realm_tf.data import corpus_table
from realm_tf.retrieval import hybrid
from realm_tf.runs import train_candidates
from realm_tf.testing import tiny_inputs


class TrainingRowsTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tf.compat.v1.test.get_temp_dir()
    cls.paths = tiny_inputs.testdata_qa_slice(os.path.join(cls.tmp, "data"), 6, 0, 12)
    blocks = corpus_table.CorpusTable.load(cls.paths["corpus"])
    cls.sparse = hybrid.build_bm25(blocks.titles, blocks.bodies)
    cls.questions = ["who wrote the novel", "what is the capital city", "when did the war end"]

  def setUp(self):
    super().setUp()
    self.model_dir = self.create_tempdir().full_path
    self.searches = []
    self.logs = []

  def _sparse_fn(self):
    self.searches.append("bm25")
    return self.sparse

  def _dense_fn(self, depth):
    # A fixed dense ranking (row i + 1 first for question i), so the hybrid's fusion is checkable.
    self.searches.append("dense")
    n = self.sparse.num_docs
    rows = np.array([[(i + 1 + j) % n for j in range(depth)] for i in range(len(self.questions))])
    return rows, -np.arange(depth, dtype=np.float32)[None].repeat(len(self.questions), 0)

  def _rows(self, retriever="bm25", depth=5, questions=None, weight=None):
    return train_candidates.training_rows(self.model_dir,
                                          retriever,
                                          questions or self.questions,
                                          depth,
                                          self.paths["corpus"],
                                          self._sparse_fn,
                                          self._dense_fn,
                                          weight,
                                          log=self.logs.append)

  def test_bm25_rows_are_searched_once_and_reused(self):
    rows = self._rows()
    # Said before the search (minutes on a real training set) and after it.
    self.assertEqual(self.logs[0], "searching 3 training questions with bm25 (top 5) before the first step")
    self.assertStartsWith(self.logs[1], "searched 3 training questions with bm25 (top 5)")
    self.assertEqual(rows.dtype, np.int32)
    self.assertAllEqual(rows, self.sparse.search(self.questions, 5)[0])
    self.assertEqual(self.searches, ["bm25"])
    self.assertTrue(os.path.exists(os.path.join(self.model_dir, train_candidates.CANDIDATES_NAME)))
    self.assertEqual([n for n in os.listdir(self.model_dir) if n != train_candidates.CANDIDATES_NAME], [])

    again = self._rows()
    self.assertAllEqual(again, rows)
    self.assertEqual(self.searches, ["bm25"])  # nothing searched the second time
    self.assertIn("reusing the bm25 candidates", self.logs[-1])

  def test_a_changed_run_is_searched_again(self):
    self._rows(depth=5)
    rows = self._rows(depth=3)
    self.assertEqual(rows.shape, (3, 3))
    self.assertIn("depth 5 -> 3", self.logs[-2])
    self._rows(depth=3, questions=self.questions[:2])
    self.assertIn("num_questions 3 -> 2", self.logs[-2])
    self.assertEqual(self.searches, ["bm25"] * 3)

  def test_an_unreadable_file_is_searched_again(self):
    self._rows()
    with open(os.path.join(self.model_dir, train_candidates.CANDIDATES_NAME), "wb") as f:
      f.write(b"not an npz")
    rows = self._rows()
    self.assertAllEqual(rows, self.sparse.search(self.questions, 5)[0])
    self.assertIn("(unreadable)", self.logs[-2])

  def test_hybrid_fuses_bm25_with_the_dense_ranking(self):
    rows = self._rows("hybrid", depth=4)
    self.assertCountEqual(self.searches, ["bm25", "dense"])
    self.assertEqual(
        self.logs[0], "searching 3 training questions with hybrid (top 4) before the first step, each "
        "embedded by the warm-start query tower")
    sparse_rows, sparse_scores = self.sparse.search(self.questions, hybrid.FUSION_DEPTH)
    dense_rows, _ = self._dense_fn(self.sparse.num_docs)
    expected = hybrid.fuse(hybrid.unmatched_as_padding(sparse_rows, sparse_scores), dense_rows, 4)
    self.assertAllEqual(rows, expected)
    # The weighted fusion is another run: searched again, under its own label.
    self._rows("hybrid", depth=4, weight=0.5)
    self.assertIn("retriever hybrid -> hybrid_w0.5", self.logs[-2])

  def test_untrainable_retrievers_are_refused_by_name(self):
    with self.assertRaisesRegex(ValueError, r"--retriever=gold: .* evaluation ceiling"):
      train_candidates.check_retriever("gold", None)
    with self.assertRaisesRegex(ValueError, r"--retriever=splade: .*dense, bm25, hybrid"):
      train_candidates.check_retriever("splade", None)
    with self.assertRaisesRegex(ValueError, r"--hybrid_bm25_weight=0.5 .*--retriever=bm25 fuses nothing"):
      train_candidates.check_retriever("bm25", 0.5)
    with self.assertRaisesRegex(ValueError, r"--hybrid_bm25_weight=1.5: .*\[0, 1\]"):
      train_candidates.check_retriever("hybrid", 1.5)
    with self.assertRaisesRegex(ValueError, "searches in the training step"):
      self._rows("dense")


if __name__ == "__main__":
  tf.test.main()
