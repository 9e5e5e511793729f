"""Tests for realm_tf.retrieval.bm25: rankings on a hand-made corpus that a wrong analysis or scoring
would get wrong (stemming, stopwords, IDF, length normalisation), and the input checks."""

import math

import numpy as np
import tensorflow as tf

from realm_tf.retrieval import bm25

_CORPUS = [
    "The river flows past the old mill and the bridge.",  # 0
    "Engineers were running tests on the new bridge design.",  # 1
    "The the the of of and and the the of the and.",  # 2: stopwords only
    "A short note about volcanoes.",  # 3
    "Volcanoes erupt. " + "Plate tectonics and mountains and oceans. " * 12,  # 4: long, one mention
    "The mill grinds wheat; the mill was built in 1820.",  # 5
]


class Bm25IndexTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.index = bm25.Bm25Index(_CORPUS)

  def _top(self, query, k=3):
    ids, scores = self.index.search([query], k)
    return ids[0].tolist(), scores[0]

  def test_stemming_matches_inflections(self):
    # "runs" and "designs" occur nowhere verbatim; only the Snowball stems match document 1.
    ids, scores = self._top("who runs designs")
    self.assertEqual(ids[0], 1)
    self.assertGreater(scores[0], 0)
    self.assertEqual(scores[1], 0)

  def test_stopwords_do_not_score(self):
    # Without stopword removal document 2 (nothing but "the", "of", "and") would win this query.
    ids, scores = self._top("the history of the mill and the river")
    self.assertNotEqual(ids[0], 2)
    self.assertNotIn(2, ids[:2])
    unfiltered = bm25.Bm25Index(_CORPUS, stopwords=None)
    self.assertEqual(unfiltered.search(["the of and the"], 1)[0][0, 0], 2)

  def test_rare_terms_outweigh_common_ones(self):
    # "bridge" occurs in two documents, "1820" in one, all three of similar length: IDF puts the
    # document with the rare term first (plain term counting would tie all three).
    ids, scores = self._top("bridge 1820")
    self.assertEqual(ids[0], 5)
    self.assertCountEqual(ids[1:], [0, 1])
    self.assertGreater(scores[0], scores[1])

  def test_length_normalisation(self):
    # Documents 3 and 4 both mention volcanoes once; the short one ranks first with b > 0, and they tie
    # without length normalisation (b = 0).
    self.assertEqual(self._top("volcanoes", k=2)[0], [3, 4])
    flat = bm25.Bm25Index(_CORPUS, b=0.0)
    ids, scores = flat.search(["volcanoes"], 2)
    self.assertCountEqual(ids[0].tolist(), [3, 4])
    self.assertAllClose(scores[0, 0], scores[0, 1])

  def test_lucene_score_by_hand(self):
    index = bm25.Bm25Index(["apple banana", "banana cherry cherry", "date"],
                           stopwords=None,
                           stemmer_language=None)
    ids, scores = index.search(["cherry"], 3)
    self.assertEqual(ids[0, 0], 1)
    # Lucene BM25: idf = ln(1 + (N - df + 0.5) / (df + 0.5)); tf part = tf / (tf + k1 (1 - b + b dl/avgdl)).
    n, df, tf_, dl, avgdl, k1, b = 3, 1, 2, 3, 6 / 3, 1.5, 0.75
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    want = idf * tf_ / (tf_ + k1 * (1 - b + b * dl / avgdl))
    self.assertAllClose(scores[0, 0], want, rtol=1e-5)
    self.assertAllEqual(scores[0, 1:], [0, 0])

  def test_shapes_and_k_clamp(self):
    ids, scores = self.index.search(["mill", "bridge", "nothing matches zzzz"], 100)
    self.assertEqual(ids.shape, (3, len(_CORPUS)))
    self.assertEqual(ids.dtype, np.int64)
    self.assertEqual(scores.dtype, np.float32)
    self.assertTrue(np.all(np.diff(scores, axis=1) <= 0))  # best first
    self.assertAllEqual(scores[2], np.zeros(len(_CORPUS)))
    for row in ids:
      self.assertCountEqual(row.tolist(), range(len(_CORPUS)))
    empty_ids, empty_scores = self.index.search([], 2)
    self.assertEqual(empty_ids.shape, (0, 2))
    self.assertEqual(empty_scores.shape, (0, 2))

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "no texts"):
      bm25.Bm25Index([])
    with self.assertRaisesRegex(TypeError, r"texts\[1\] is bytes"):
      bm25.Bm25Index(["a text", b"bytes"])
    with self.assertRaisesRegex(ValueError, "0 <= b <= 1"):
      bm25.Bm25Index(["a text"], b=2.0)
    with self.assertRaisesRegex(ValueError, "no 'klingon' stemmer"):
      bm25.Bm25Index(["a text"], stemmer_language="klingon")
    with self.assertRaisesRegex(ValueError, "k must be >= 1"):
      self.index.search(["mill"], 0)


if __name__ == "__main__":
  tf.test.main()
