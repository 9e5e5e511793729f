"""Span substitution against hand-written examples."""

import numpy as np
import tensorflow as tf

from realm_tf.training import span_substitution


class SpanSubstitutionTest(tf.test.TestCase):

  def test_replaces_every_copy_in_the_document_segment_only(self):
    # [CLS] 5 6 [SEP] | 7 5 6 8 5 6 [SEP] pad: the span (5, 6) sits in the query and twice in the document.
    ids = tf.constant([[101, 5, 6, 102, 7, 5, 6, 8, 5, 6, 102, 0],
                       [101, 5, 6, 102, 5, 9, 5, 102, 0, 0, 0, 0],
                       [101, 5, 6, 102, 5, 6, 102, 0, 0, 0, 0, 0]])
    segments = tf.constant([[0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0],
                            [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0],
                            [0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0]])
    targets = tf.constant([[5, 6, 0], [5, 0, 0], [5, 6, 0]])
    mask = tf.constant([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # row 3: not substituted
    replacement = tf.constant([[50, 51, 52], [60, 61, 62], [70, 71, 72]])
    result = span_substitution.substitute(ids, segments, targets, mask, replacement)
    self.assertAllEqual(result, [[101, 5, 6, 102, 7, 50, 51, 8, 50, 51, 102, 0],
                                 [101, 5, 6, 102, 60, 9, 60, 102, 0, 0, 0, 0],
                                 [101, 5, 6, 102, 5, 6, 102, 0, 0, 0, 0, 0]])

  def test_a_partial_copy_or_one_running_past_the_document_is_kept(self):
    ids = tf.constant([[101, 5, 102, 5, 7, 5]])
    segments = tf.constant([[0, 0, 0, 1, 1, 1]])  # the last 5 is the end of the document
    result = span_substitution.substitute(ids, segments, tf.constant([[5, 6]]), tf.constant([[1.0, 1.0]]),
                                          tf.constant([[80, 81]]))
    self.assertAllEqual(result, ids)

  def test_replacements_avoid_special_tokens_and_follow_the_rate(self):
    vocab = ["[PAD]", "[unused0]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", "the", "##s", "valley"]
    candidates = span_substitution.replacement_ids(vocab)
    self.assertAllEqual(candidates, [6, 7, 8])
    apply, replacement = span_substitution.draw_replacements(candidates, 0.25, 4000, 3,
                                                             tf.constant([1, 2], tf.int64))
    self.assertTrue(np.all(np.isin(replacement.numpy(), [6, 7, 8])))
    self.assertNear(float(np.mean(apply.numpy())), 0.25, 0.03)
    again = span_substitution.draw_replacements(candidates, 0.25, 4000, 3, tf.constant([1, 2], tf.int64))
    self.assertAllEqual(replacement, again[1])
    with self.assertRaisesRegex(ValueError, "no ordinary tokens"):
      span_substitution.replacement_ids(["[PAD]", "[CLS]"])


if __name__ == "__main__":
  tf.test.main()
