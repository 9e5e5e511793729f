"""Tests of the REALM, ICT and ORQA losses on examples small enough to compute by hand.

The REALM example is chosen so that the original's per-token marginal and the "textbook" marginal of the
product over tokens give different numbers: the loss must match the former.
"""

import numpy as np
import tensorflow as tf

from realm_tf.modeling import losses

# REALM: B=2 examples, N=3 candidates (null document first), M=2 mask slots.
_P_Z = np.array([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]])
# p(y_j | z, x), [B, N, M]. Example 1's second slot is padding with a tiny probability that must not count.
_P_Y = np.array([[[0.2, 0.8], [0.4, 0.4], [0.8, 0.2]], [[0.1, 1e-6], [0.5, 1e-6], [0.5, 1e-6]]])
_MLM_MASK = np.array([[1.0, 1.0], [1.0, 0.0]])
# By hand: sum_z p(z) p(y_j|z):
#   ex 0, token 0: 0.5*0.2 + 0.25*0.4 + 0.25*0.8 = 0.4;  token 1: 0.5*0.8 + 0.25*0.4 + 0.25*0.2 = 0.55
#   ex 1, token 0: 0.25*0.1 + 0.25*0.5 + 0.5*0.5 = 0.4
_MARGINALS = np.array([[0.4, 0.55], [0.4, np.nan]])
# Null-document posteriors p(z=0|x,y_j) = p(0) p(y_j|0) / marginal: 0.1/0.4, 0.4/0.55, 0.025/0.4.
_NULL_SHARES = [0.25, 0.4 / 0.55, 0.0625]
# Utilities log(marginal / p(y_j|0)): log 2, log(0.55/0.8), log 4.
_UTILITIES = [np.log(2.0), np.log(0.55 / 0.8), np.log(4.0)]


def _realm_inputs():
  return (tf.constant(np.log(_P_Z), tf.float32), tf.constant(np.log(_P_Y),
                                                             tf.float32), tf.constant(_MLM_MASK, tf.float32))


def _value(pair):
  total, weight = pair
  return float(total) / float(weight)


class RealmLossTest(tf.test.TestCase):

  def test_per_token_marginal(self):
    candidate_log_probs, gold_log_probs, _ = _realm_inputs()
    marginal, joint = losses.realm_marginal_log_likelihood(candidate_log_probs, gold_log_probs)
    self.assertEqual(marginal.shape, [2, 2])
    self.assertEqual(joint.shape, [2, 3, 2])
    self.assertAllClose(np.log(_MARGINALS[0]), marginal[0], atol=1e-6)
    self.assertAllClose(np.log(0.4), marginal[1, 0], atol=1e-6)

  def test_loss_is_mean_over_real_masks(self):
    output = losses.realm_loss(*_realm_inputs())
    expected = -(np.log(0.4) + np.log(0.55) + np.log(0.4)) / 3
    self.assertAllClose(3.0, output.loss_weight)
    self.assertAllClose(expected, output.loss_sum / output.loss_weight, atol=1e-6)
    # Not the marginal of the product over tokens (log sum_z p(z) prod_j p(y_j|z)):
    # ex 0 would be log(0.5*0.16 + 0.25*0.16 + 0.25*0.16) = log 0.16, not log(0.4 * 0.55) = log 0.22.
    product = -(np.log((_P_Z[0] * _P_Y[0].prod(-1)).sum()) + np.log(0.4)) / 3
    self.assertGreater(abs(product - expected), 0.05)
    # Not a mean of per-example means either (that would weigh example 1's single token as two).
    per_example = -(np.log(0.4 * 0.55) / 2 + np.log(0.4)) / 2
    self.assertGreater(abs(per_example - expected), 0.01)

  def test_padding_does_not_count(self):
    candidate_log_probs, gold_log_probs, mlm_mask = _realm_inputs()
    base = losses.realm_loss(candidate_log_probs, gold_log_probs, mlm_mask)
    other = gold_log_probs.numpy()
    other[1, :, 1] = np.log([0.9, 0.9, 0.9])
    changed = losses.realm_loss(candidate_log_probs, tf.constant(other), mlm_mask)
    self.assertAllClose(base.loss_sum, changed.loss_sum)
    for name in base.metrics:
      self.assertAllClose(base.metrics[name], changed.metrics[name])

  def test_metrics(self):
    output = losses.realm_loss(*_realm_inputs())
    self.assertAllClose(np.mean(_UTILITIES), _value(output.metrics["retrieval_utility"]), atol=1e-5)
    self.assertAllClose(np.mean(_NULL_SHARES), _value(output.metrics["null_document_share"]), atol=1e-5)
    self.assertAllClose(np.log([0.4, 0.55, 0.4]).mean(),
                        _value(output.metrics["mlm_log_likelihood"]),
                        atol=1e-6)
    for name, (_, weight) in output.metrics.items():
      self.assertAllClose(3.0, weight, msg=name)

  def test_no_masks_gives_zero_weight(self):
    candidate_log_probs, gold_log_probs, _ = _realm_inputs()
    output = losses.realm_loss(candidate_log_probs, gold_log_probs, tf.zeros([2, 2]))
    self.assertAllEqual(0.0, output.loss_weight)
    self.assertAllEqual(0.0, output.loss_sum)


class MarginalLogLossTest(tf.test.TestCase):

  def test_value_by_hand(self):
    # p = softmax(log [1, 2, 3]) = [1/6, 2/6, 3/6]; correct {0, 2}: -log(4/6).
    logits = tf.constant(np.log([[1.0, 2.0, 3.0]]), tf.float32)
    loss = losses.marginal_log_loss(logits, tf.constant([[True, False, True]]))
    self.assertAllClose([-np.log(4.0 / 6.0)], loss, atol=1e-6)
    # 0/1 integers work like booleans.
    self.assertAllClose(loss, losses.marginal_log_loss(logits, tf.constant([[1, 0, 1]])))

  def test_zero_when_nothing_correct(self):
    logits = tf.constant([[0.3, -1.0, 2.0], [1.0, 2.0, 3.0]])
    correct = tf.constant([[0, 0, 0], [0, 1, 0]])
    loss = losses.marginal_log_loss(logits, correct).numpy()
    self.assertEqual(0.0, loss[0])
    p = np.exp([1.0, 2.0, 3.0]) / np.exp([1.0, 2.0, 3.0]).sum()
    self.assertAllClose(-np.log(p[1]), loss[1], atol=1e-6)

  def test_masks_incorrect_entries_with_minus_10000(self):
    """Incorrect entries get -10000 added, not -inf: the loss stays finite and saturates near 10000."""
    self.assertEqual(-10000.0, losses.MASK_VALUE)
    logits = tf.constant([[-20000.0, 0.0, 0.0]])
    loss = losses.marginal_log_loss(logits, tf.constant([[1, 0, 0]]))
    # log_correct = logsumexp(-20000, -10000, -10000) = -10000 + log 2; logsumexp(logits) = log 2.
    self.assertAllClose([10000.0], loss, atol=1e-2)

  def test_leading_dimensions(self):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=[2, 3, 5]).astype(np.float32)
    correct = rng.random([2, 3, 5]) < 0.4
    correct[0, 1] = False
    loss = losses.marginal_log_loss(tf.constant(logits), tf.constant(correct)).numpy()
    self.assertEqual(loss.shape, (2, 3))
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = np.where(correct.any(-1), -np.log(np.where(correct, p, 0.0).sum(-1) + 1e-30), 0.0)
    self.assertAllClose(expected, loss, atol=1e-5)


class OrqaLossTest(tf.test.TestCase):

  def test_value(self):
    rng = np.random.default_rng(0)
    retriever_logits = rng.normal(size=[2, 6]).astype(np.float32)
    retriever_correct = np.array([[0, 1, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0]], bool)
    reader_logits = rng.normal(size=[2, 3, 4]).astype(np.float32)
    reader_correct = np.zeros([2, 3, 4], bool)
    reader_correct[0, 1, 2] = reader_correct[0, 2, 0] = reader_correct[1, 0, 3] = True

    def nll(logits, correct):
      p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
      return -np.log(p[correct].sum()) if correct.any() else 0.0

    retriever = [nll(retriever_logits[b], retriever_correct[b]) for b in range(2)]
    # The reader marginalizes over blocks x spans jointly.
    reader = [nll(reader_logits[b].ravel(), reader_correct[b].ravel()) for b in range(2)]
    self.assertEqual(0.0, retriever[1])
    output = losses.orqa_loss(
        *(tf.constant(x) for x in (retriever_logits, retriever_correct, reader_logits, reader_correct)))
    self.assertAllClose(2.0, output.loss_weight)
    self.assertAllClose(sum(retriever) + sum(reader), output.loss_sum, atol=1e-5)
    self.assertAllClose(np.mean(retriever), _value(output.metrics["retriever_loss"]), atol=1e-5)
    self.assertAllClose(np.mean(reader), _value(output.metrics["reader_loss"]), atol=1e-5)
    # Per-block marginals would differ from the joint one.
    per_block = sum(nll(reader_logits[0, k], reader_correct[0, k]) for k in range(3))
    self.assertGreater(abs(per_block - reader[0]), 0.1)


class RetrieverLossTest(tf.test.TestCase):

  def test_four_block_example(self):
    # Scores 1.2, 1.6, 0, 0 (a bench's scale 2 x cosine); blocks 0 and 3 contain an answer.
    logits = tf.constant([[1.2, 1.6, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0]], tf.float32)
    correct = tf.constant([[1, 0, 0, 1], [0, 0, 0, 0]], tf.float32)
    output = losses.retriever_loss(logits, correct)
    total = sum(np.exp([1.2, 1.6, 0.0, 0.0]))
    mass = (np.exp(1.2) + 1.0) / total
    # The second question has no answer-bearing block: no loss, as in ORQA, but it still counts.
    self.assertAllClose(-np.log(mass), output.loss_sum, atol=1e-5)
    self.assertEqual(2.0, float(output.loss_weight))
    self.assertAllClose(0.0, _value(output.metrics["retriever_top1_match"]))  # block 1 wins, no answer
    self.assertAllClose(mass / 2, _value(output.metrics["retriever_correct_mass"]), atol=1e-6)

  def test_top1_match_and_bool_correct(self):
    output = losses.retriever_loss(tf.constant([[0.0, 3.0], [5.0, 1.0]]),
                                   tf.constant([[False, True], [False, True]]))
    self.assertAllClose(0.5, _value(output.metrics["retriever_top1_match"]))


class ReaderLossTest(tf.test.TestCase):

  def test_one_softmax_over_blocks_and_spans_mean_over_answerable(self):
    rng = np.random.default_rng(1)
    logits = rng.normal(size=[3, 2, 4]).astype(np.float32)
    correct = np.zeros([3, 2, 4], bool)
    correct[0, 1, 2] = correct[0, 0, 3] = True
    correct[2, 0, int(logits[2, 0].argmax())] = True
    if logits[2].ravel().argmax() != int(logits[2, 0].argmax()):
      logits[2, 0, int(logits[2, 0].argmax())] += 10.0  # question 2's best span is its gold one
    output = losses.reader_loss(tf.constant(logits), tf.constant(correct))

    def nll(row_logits, row_correct):
      p = np.exp(row_logits - row_logits.max())
      p /= p.sum()
      return -np.log(p[row_correct].sum())

    expected = nll(logits[0].ravel(), correct[0].ravel()) + nll(logits[2].ravel(), correct[2].ravel())
    self.assertAllClose(expected, output.loss_sum, atol=1e-5)
    # Question 1 has no gold span (its answer was cut off): it adds nothing and is not counted.
    self.assertEqual(2.0, float(output.loss_weight))
    self.assertAllClose(2 / 3, _value(output.metrics["reader_oracle"]))
    predicted_gold = [correct[b].ravel()[logits[b].ravel().argmax()] for b in range(3)]
    self.assertAllClose(np.mean(predicted_gold), _value(output.metrics["exact_match"]))


class InBatchSoftmaxLossTest(tf.test.TestCase):

  def test_against_numpy_cross_entropy(self):
    rng = np.random.default_rng(0)
    query = rng.normal(size=[3, 4]).astype(np.float32)
    blocks = rng.normal(size=[6, 4]).astype(np.float32)
    labels = np.array([3, 4, 5], np.int32)  # the second replica's queries of a global batch of 6
    groups = {"masked_accuracy": tf.constant([1.0, 0.0, 1.0])}
    output = losses.in_batch_softmax_loss(tf.constant(query), tf.constant(blocks), tf.constant(labels),
                                          groups)
    logits = query @ blocks.T
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -log_probs[np.arange(3), labels]
    self.assertAllClose(3.0, output.loss_weight)
    self.assertAllClose(expected.sum(), output.loss_sum, atol=1e-5)
    correct = (logits.argmax(-1) == labels).astype(np.float32)
    self.assertAllClose(correct.mean(), _value(output.metrics["accuracy"]))
    self.assertAllClose((correct * [1, 0, 1]).sum(), output.metrics["masked_accuracy"][0])
    self.assertAllClose(2.0, output.metrics["masked_accuracy"][1])

  def test_accuracy_counts_argmax_hits(self):
    # Query i is block i scaled up: a sure hit; query 2 points at block 0: a sure miss.
    blocks = np.eye(3, dtype=np.float32)
    query = np.array([[5, 0, 0], [0, 5, 0], [5, 0, 0]], np.float32)
    output = losses.in_batch_softmax_loss(tf.constant(query), tf.constant(blocks), tf.range(3),
                                          {"first": tf.constant([1.0, 0.0, 1.0])})
    self.assertAllClose(2.0 / 3.0, _value(output.metrics["accuracy"]))
    self.assertAllClose(0.5, _value(output.metrics["first"]))


if __name__ == "__main__":
  tf.test.main()
