"""Tests of the in-graph BM25 and reciprocal rank fusion: equal to bm25s where the analyses agree (whole
vocab words), the graph equal to the numpy reference, the fusion equal to fusion.py's."""

import os

import numpy as np
import tensorflow as tf

from realm_tf import tokenization
from realm_tf.retrieval import bm25
from realm_tf.retrieval import fusion
from realm_tf.retrieval import sparse_in_graph
from realm_tf.testing import test_paths

# Whole words of testdata/vocab.txt, so WordPiece keeps each one and the analyses agree: stopwords
# ("the", "in", "was"), inflections the stemmer folds ("founded"/"found", "lies"/"lie"), punctuation.
_TITLES = ["Essix", "", "Wenor", "Kelarle", "Hulova", "Lunene"]
_BODIES = [
    "the village lies on the river. it was recorded in may.", "an engineer founded the workshop; the "
    "engineer studied under a poet.", "a painter worked in the village, found the river garden.",
    "the telescope was found by an astronomer in june, the astronomer taught.", "the bridge on the "
    "northern valley lie under the clock.", "what school did the weaver found? the weaver worked."
]
_QUERIES = [
    "who founded the workshop?", "where does the river lie", "astronomer telescope telescope", "the on",
    "Essix village river", "weaver founded school in Lunene", ""
]


class SparseInGraphTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tokenizer = tokenization.Tokenizer(os.path.join(test_paths.repo_root(), "testdata", "vocab.txt"))
    cls.index = sparse_in_graph.build(cls.tokenizer, _TITLES, _BODIES)
    cls.queries = sparse_in_graph.question_pieces(_QUERIES, cls.tokenizer)

  def test_scores_equal_bm25s_on_whole_words(self):
    # Titles that WordPiece splits ("Essix", "Lunene") are not whole words: compare the rest of the corpus.
    index = sparse_in_graph.build(self.tokenizer, [""] * 5, _BODIES[:5])
    reference = bm25.Bm25Index(_BODIES[:5])
    # Not a query of stopwords only: bm25s then scores something else than nothing.
    queries = _QUERIES[:3]
    rows, scores = reference.search(queries, 5)
    expected = np.zeros([len(queries), 5], np.float32)
    np.put_along_axis(expected, rows, scores, 1)
    actual = index.scores(sparse_in_graph.question_pieces(queries, self.tokenizer))
    self.assertAllClose(expected, actual, rtol=1e-5, atol=1e-6)
    self.assertGreater(actual[0, 1], 0.0)  # "founded" matches through the stem

  def test_graph_equals_numpy(self):
    module = sparse_in_graph.InGraphBm25(self.index)
    width = max(len(q) for q in self.queries)
    ids = np.array([list(q) + [0] * (width - len(q)) for q in self.queries], np.int32)
    lengths = np.array([len(q) for q in self.queries], np.int32)
    expected = self.index.scores(self.queries)
    self.assertAllClose(expected, module.scores(ids, lengths).numpy(), rtol=1e-6)
    rows, _ = module.search(ids, lengths, 3)
    expected_rows, _ = self.index.search(self.queries, 3)
    self.assertAllEqual(expected_rows, rows.numpy())
    self.assertAllEqual(np.zeros(len(_TITLES)), expected[-1])  # the empty query scores 0

  def test_rrf_equals_fusion(self):
    rng = np.random.default_rng(0)
    num_docs = 50
    dense = np.stack([rng.permutation(num_docs)[:20] for _ in range(8)])
    sparse = np.stack([rng.permutation(num_docs)[:20] for _ in range(8)])
    sparse[0, 5:] = -1  # padding is ignored
    # Symmetric ranks tie exactly: both break ties towards the smaller row.
    others = [d for d in rng.permutation(num_docs) if d not in (3, 7)]
    dense[1], sparse[1] = [7, 3] + others[:18], [3, 7] + others[18:36]
    expected = fusion.reciprocal_rank_fusion([sparse, dense], 10)
    actual = sparse_in_graph.reciprocal_rank_fusion([tf.constant(sparse), tf.constant(dense)], num_docs, 10)
    self.assertAllEqual(expected, actual.numpy())
    self.assertAllEqual([3, 7], actual.numpy()[1, :2])

  def test_weighted_fusion_equals_fusion(self):
    rng = np.random.default_rng(3)
    num_docs, width = 40, 12
    rows = [np.stack([rng.permutation(num_docs)[:width] for _ in range(5)]) for _ in range(2)]
    rows[0][1, 8:] = -1  # padding: BM25's unmatched documents
    rows[0][2, :] = -1  # a question BM25 matches nothing for
    scores = [-np.sort(-rng.normal(size=(5, width)), axis=1) for _ in range(2)]
    scores[1][3] = 0.5  # every score equal: standard deviation 0
    for weight in (0.0, 0.3, 0.5, 1.0):
      actual = sparse_in_graph.weighted_score_fusion([tf.constant(r) for r in rows],
                                                     [tf.constant(s, tf.float32) for s in scores],
                                                     [weight, 1 - weight], num_docs, 10)
      # The graph takes float32 scores (as BM25's and the tower's are): the reference gets the same.
      expected = fusion.weighted_score_fusion(rows, [s.astype(np.float32) for s in scores],
                                              [weight, 1 - weight], 10)
      self.assertAllEqual(actual, expected, msg=f"weight {weight}")

  def test_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, "no documents"):
      sparse_in_graph.WordpieceBm25([], self.index.term_of)
    with self.assertRaisesRegex(ValueError, "another vocabulary"):
      sparse_in_graph.WordpieceBm25([[100000]], self.index.term_of)


if __name__ == "__main__":
  tf.test.main()
