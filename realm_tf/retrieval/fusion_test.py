"""Tests for reciprocal rank fusion."""

from absl.testing import absltest
import numpy as np

from realm_tf.retrieval import fusion


class ReciprocalRankFusionTest(absltest.TestCase):

  def test_hand_computed(self):
    bm25 = np.array([[3, 7, 9]])
    dense = np.array([[5, 7, 3]])
    fused = fusion.reciprocal_rank_fusion([bm25, dense], depth=4)
    # 7: 2/62 = .03226; 3: 1/61 + 1/63 = .03227 (3rd in dense too) beats 7; 5: 1/61; 9: 1/63.
    np.testing.assert_array_equal(fused, [[3, 7, 5, 9]])

  def test_k_changes_the_order(self):
    # k = 0: a first place (1/1) equals two second places (1/2 + 1/2): a tie, smaller id first; k = 60:
    # two second places (2/62) beat one first place (1/61).
    a = np.array([[1, 2]])
    b = np.array([[3, 2]])
    np.testing.assert_array_equal(fusion.reciprocal_rank_fusion([a, b], depth=3, k=0), [[1, 2, 3]])
    np.testing.assert_array_equal(fusion.reciprocal_rank_fusion([a, b], depth=3, k=60), [[2, 1, 3]])
    c = np.array([[1, 4, 2]])
    d = np.array([[3, 4, 5]])
    # k = 0: 1 and 3 score 1, 4 scores 1/2 + 1/2 = 1: three-way tie -> 1, 3, 4.
    np.testing.assert_array_equal(fusion.reciprocal_rank_fusion([c, d], depth=3, k=0), [[1, 3, 4]])
    # k = 60: 4 (2/62) beats 1 and 3 (1/61 each).
    np.testing.assert_array_equal(fusion.reciprocal_rank_fusion([c, d], depth=3, k=60), [[4, 1, 3]])

  def test_padding_and_short_rows(self):
    fused = fusion.reciprocal_rank_fusion(
        [np.array([[4, -1], [0, 1]]), np.array([[-1, -1], [1, 0]])], depth=3)
    np.testing.assert_array_equal(fused, [[4, -1, -1], [0, 1, -1]])

  def test_single_ranking_is_unchanged(self):
    ranking = np.array([[9, 2, 5, 0], [1, 3, 2, 8]])
    np.testing.assert_array_equal(fusion.reciprocal_rank_fusion([ranking], depth=4), ranking)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "no rankings"):
      fusion.reciprocal_rank_fusion([], depth=1)
    with self.assertRaisesRegex(ValueError, r"rankings\[1\] has shape"):
      fusion.reciprocal_rank_fusion([np.zeros([2, 3]), np.zeros([3, 3])], depth=1)
    with self.assertRaisesRegex(ValueError, "depth >= 1"):
      fusion.reciprocal_rank_fusion([np.zeros([2, 3])], depth=0)


class WeightedScoreFusionTest(absltest.TestCase):

  def test_scale_free_weighted_sum(self):
    # BM25-like scores in the tens, cosines below 1: only their standardised values count.
    sparse, sparse_scores = np.array([[7, 3, 5]]), np.array([[30.0, 20.0, 10.0]])
    dense, dense_scores = np.array([[5, 8, 3]]), np.array([[0.9, 0.5, 0.1]])
    # z: sparse 7 +1.22, 3 0, 5 -1.22; dense 5 +1.22, 8 0, 3 -1.22; absent -> that side's minimum.
    fused = fusion.weighted_score_fusion([sparse, dense], [sparse_scores, dense_scores], [0.5, 0.5], 5)
    # 7: 0.5*1.22 + 0.5*-1.22 = 0; 5: 0; 3: -0.61; 8: -0.61 (ties -> smaller id first).
    np.testing.assert_array_equal(fused, [[5, 7, 3, 8, -1]])
    # All weight on one side: its own order, the other side's documents after.
    np.testing.assert_array_equal(
        fusion.weighted_score_fusion([sparse, dense], [sparse_scores, dense_scores], [1.0, 0.0], 3),
        [[7, 3, 5]])
    np.testing.assert_array_equal(
        fusion.weighted_score_fusion([sparse, dense], [sparse_scores * 100, dense_scores], [0.0, 1.0], 3),
        [[5, 8, 3]])

  def test_a_strong_document_of_one_side_beats_the_rank_fusion_choice(self):
    # Dense is sure of 4 (far above its others); BM25 ranks 4 third, barely below 1. Rank fusion sees
    # ranks only and prefers 1 (1st and 2nd against 3rd and 1st); the score sum sees the margins.
    sparse, sparse_scores = np.array([[1, 2, 4, 3]]), np.array([[10.0, 9.95, 9.9, 1.0]])
    dense, dense_scores = np.array([[4, 1, 2, 3]]), np.array([[0.95, 0.30, 0.29, 0.28]])
    self.assertEqual(fusion.reciprocal_rank_fusion([sparse, dense], 1)[0, 0], 1)
    self.assertEqual(
        fusion.weighted_score_fusion([sparse, dense], [sparse_scores, dense_scores], [0.5, 0.5], 1)[0, 0], 4)

  def test_padding_and_errors(self):
    fused = fusion.weighted_score_fusion([np.array([[2, -1]]), np.array([[-1, -1]])],
                                         [np.array([[1.0, 0.0]]), np.zeros([1, 2])], [0.5, 0.5], 2)
    np.testing.assert_array_equal(fused, [[2, -1]])
    with self.assertRaisesRegex(ValueError, "as many rankings, scores and weights"):
      fusion.weighted_score_fusion([np.zeros([1, 2])], [np.zeros([1, 2])], [0.5, 0.5], 1)
    with self.assertRaisesRegex(ValueError, r"scores\[0\] \(1, 3\)"):
      fusion.weighted_score_fusion([np.zeros([1, 2])], [np.zeros([1, 3])], [1.0], 1)


if __name__ == "__main__":
  absltest.main()
