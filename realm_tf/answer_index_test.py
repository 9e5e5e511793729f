"""Tests of realm_tf.answer_index: its rows must be exactly the texts evaluation.has_answer(mode="normalized")
accepts."""

import numpy as np
import tensorflow as tf

from realm_tf import answer_index
from realm_tf import evaluation

_TEXTS = [
    "The city of New  York lies on the Hudson.", "Paris is the capital of France; Parisians say so.",
    "In 1990 and in the 1990s, nothing happened.", "", "new\nyork, again: NEW YORK."
]


class AnswerIndexTest(tf.test.TestCase):

  def test_agrees_with_has_answer(self):
    index = answer_index.AnswerIndex(_TEXTS)
    for answers in (["new york"], ["ew yor"], ["Paris"], ["parisians say"], ["1990"], ["990s,"], ["hudson."],
                    ["capital of france"], ["Tokyo"], ["   "], [""], ["york", "France"], ["the"],
                    ["k lies on"], ["new york, again"]):
      expected = [
          row for row, text in enumerate(_TEXTS) if evaluation.has_answer(text, answers, mode="normalized")
      ]
      self.assertEqual(index.rows(answers).tolist(), expected, msg=str(answers))
      self.assertEqual(index.rows(answers).dtype, np.int32)


if __name__ == "__main__":
  tf.test.main()
