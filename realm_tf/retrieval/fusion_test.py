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
    fused = fusion.reciprocal_rank_fusion([np.array([[4, -1], [0, 1]]), np.array([[-1, -1], [1, 0]])],
                                          depth=3)
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


if __name__ == "__main__":
  absltest.main()
