"""The losses of REALM, ICT and ORQA, in one place.

Every loss is returned as a (sum, weight) pair per replica rather than a mean: the training loop divides
by the weight summed over ALL replicas (see realm_tf.training.train_lib), so that under a distribution
strategy the gradient is that of the mean over the global batch (REALM: over all real masked tokens of the
global batch), not a mean of per-replica means.
"""

from typing import Dict, NamedTuple, Optional

import tensorflow as tf

# The original masks with -10000 rather than -inf, which keeps logsumexp finite when nothing is correct.
MASK_VALUE = -10000.0


class LossOutput(NamedTuple):
  """A replica's loss and metrics as sums with their weights.

  Attributes:
    loss_sum: float32 scalar, sum of the per-item losses on this replica.
    loss_weight: float32 scalar, how many items (tokens, examples) that sum covers.
    metrics: name -> (sum, weight) float32 scalars; the reported value is sum / weight over replicas.
  """
  loss_sum: tf.Tensor
  loss_weight: tf.Tensor
  metrics: Dict[str, tuple]


def realm_marginal_log_likelihood(candidate_log_probs: tf.Tensor, gold_log_probs: tf.Tensor):
  """log p(y_j | x) = logsumexp_z [log p(z | x) + log p(y_j | z, x)], for EACH masked token j.

  Args:
    candidate_log_probs: float32 [B, N], log_softmax of the retrieval scores (null document at 0).
    gold_log_probs: float32 [B, N, M], log p(target_j | candidate n, x).

  Returns:
    (marginal [B, M], joint [B, N, M]). The original marginalizes each token separately, not
    log sum_z p(z|x) prod_j p(y_j|z,x); we do the same.
  """
  joint = candidate_log_probs[:, :, tf.newaxis] + gold_log_probs
  return tf.reduce_logsumexp(joint, axis=1), joint


def realm_loss(candidate_log_probs: tf.Tensor, gold_log_probs: tf.Tensor, mlm_mask: tf.Tensor) -> LossOutput:
  """REALM's MLM loss and its metrics.

  Args:
    candidate_log_probs: float32 [B, N].
    gold_log_probs: float32 [B, N, M].
    mlm_mask: float32 [B, M], 1.0 for a real masked token.

  Metrics:
    retrieval_utility: marginal minus the null document's log-likelihood, per token (higher: retrieval
      helps more than the null document would).
    null_document_share: posterior p(z = null | x, y_j), per token.
  """
  marginal, joint = realm_marginal_log_likelihood(candidate_log_probs, gold_log_probs)
  mlm_mask = tf.cast(mlm_mask, tf.float32)
  num_masks = tf.reduce_sum(mlm_mask)
  utility = marginal - gold_log_probs[:, 0, :]
  null_share = tf.exp(joint[:, 0, :] - marginal)
  return LossOutput(loss_sum=-tf.reduce_sum(marginal * mlm_mask),
                    loss_weight=num_masks,
                    metrics={
                        "retrieval_utility": (tf.reduce_sum(utility * mlm_mask), num_masks),
                        "null_document_share": (tf.reduce_sum(null_share * mlm_mask), num_masks),
                        "mlm_log_likelihood": (tf.reduce_sum(marginal * mlm_mask), num_masks),
                    })


def in_batch_softmax_loss(query_emb: tf.Tensor,
                          block_emb: tf.Tensor,
                          labels: tf.Tensor,
                          accuracy_groups: Optional[Dict[str, tf.Tensor]] = None) -> LossOutput:
  """ICT's loss: each query against every block of the global batch.

  Args:
    query_emb: float32 [b, D], this replica's queries.
    block_emb: float32 [G, D], the blocks of all replicas (G = global batch).
    labels: int32 [b], the row of each query's own block in block_emb.
    accuracy_groups: extra accuracy metrics, name -> float32 [b] example weights (e.g. the examples
      whose sentence was removed from the block); "accuracy" over all examples is always reported.
  """
  logits = tf.matmul(query_emb, block_emb, transpose_b=True)
  losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
  count = tf.cast(tf.shape(losses)[0], tf.float32)
  metrics = {"accuracy": (tf.reduce_sum(correct), count)}
  for name, weights in (accuracy_groups or {}).items():
    weights = tf.cast(weights, tf.float32)
    metrics[name] = (tf.reduce_sum(correct * weights), tf.reduce_sum(weights))
  return LossOutput(loss_sum=tf.reduce_sum(losses), loss_weight=count, metrics=metrics)


def marginal_log_loss(logits: tf.Tensor, correct: tf.Tensor) -> tf.Tensor:
  """-log sum_{correct} p, over the last axis; 0 for rows with nothing correct (as ORQA).

  Args:
    logits: float32 [..., K].
    correct: bool or 0/1 [..., K].

  Returns:
    float32 [...].
  """
  correct = tf.cast(correct, tf.float32)
  log_correct = tf.reduce_logsumexp(logits + (1.0 - correct) * MASK_VALUE, axis=-1)
  loss = tf.reduce_logsumexp(logits, axis=-1) - log_correct
  return loss * tf.cast(tf.reduce_any(correct > 0, axis=-1), tf.float32)


def retriever_loss(retriever_logits: tf.Tensor, retriever_correct: tf.Tensor) -> LossOutput:
  """ORQA's retriever loss alone (the query tower trained against a fixed index, no reader): -log of the
  probability mass the softmax over blocks puts on the blocks that contain an answer, per question.

  Args:
    retriever_logits: float32 [B, K], the scores of the blocks searched (a beam, or the whole index).
    retriever_correct: bool or 0/1 [B, K], the block contains an answer string.

  Metrics (means over questions; a question without a correct block counts, with loss 0 as in ORQA):
    retriever_top1_match: the best-scored block contains an answer.
    retriever_correct_mass: the probability on the blocks that contain one.
  """
  correct = tf.cast(retriever_correct, tf.float32)
  per_question = marginal_log_loss(retriever_logits, correct)
  best = tf.argmax(retriever_logits, axis=-1, output_type=tf.int32)
  log_probs = tf.nn.log_softmax(retriever_logits, axis=-1)
  mass = tf.reduce_sum(tf.exp(log_probs) * correct, axis=-1)
  count = tf.cast(tf.shape(retriever_logits)[0], tf.float32)
  return LossOutput(loss_sum=tf.reduce_sum(per_question),
                    loss_weight=count,
                    metrics={
                        "retriever_top1_match": (tf.reduce_sum(tf.gather(correct, best,
                                                                         batch_dims=1)), count),
                        "retriever_correct_mass": (tf.reduce_sum(mass), count)
                    })


def reader_loss(reader_logits: tf.Tensor, reader_correct: tf.Tensor) -> LossOutput:
  """ORQA's reader loss alone (blocks given, no retriever score): -log of the probability mass on the
  gold spans, one softmax over all spans of all the question's blocks (shared normalisation, so that span
  scores compare across blocks at prediction time).

  Args:
    reader_logits: float32 [B, K, num_spans].
    reader_correct: [B, K, num_spans], the span is a gold answer span.

  The mean is over the questions that have a gold span: one whose answer the blocks lost (cut off by
  the reader's length) adds nothing, and the others' step does not shrink with it.
  Metrics: reader_oracle (a gold span was read), exact_match (the best span is gold); means over all
  questions.
  """
  batch = tf.shape(reader_logits)[0]
  logits = tf.reshape(reader_logits, [batch, -1])
  correct = tf.cast(tf.reshape(reader_correct, [batch, -1]), tf.float32)
  supervised = tf.reduce_sum(tf.cast(tf.reduce_any(correct > 0, axis=-1), tf.float32))
  best = tf.argmax(logits, axis=-1, output_type=tf.int32)
  count = tf.cast(batch, tf.float32)
  return LossOutput(loss_sum=tf.reduce_sum(marginal_log_loss(logits, correct)),
                    loss_weight=tf.maximum(supervised, 1.0),
                    metrics={
                        "reader_oracle": (supervised, count),
                        "exact_match": (tf.reduce_sum(tf.gather(correct, best, batch_dims=1)), count)
                    })


def orqa_loss(retriever_logits: tf.Tensor, retriever_correct: tf.Tensor, reader_logits: tf.Tensor,
              reader_correct: tf.Tensor) -> LossOutput:
  """ORQA's loss: the retriever ("early") loss over its beam plus the reader ("full") loss over the
  top blocks x spans, whose logits already include the retriever score.

  Args:
    retriever_logits: float32 [B, retriever_beam].
    retriever_correct: [B, retriever_beam], the block contains an answer string.
    reader_logits: float32 [B, reader_beam, num_spans].
    reader_correct: [B, reader_beam, num_spans], the span is a gold answer span.
  """
  batch = tf.shape(retriever_logits)[0]
  retriever_loss = marginal_log_loss(retriever_logits, retriever_correct)
  reader_loss = marginal_log_loss(tf.reshape(reader_logits, [batch, -1]),
                                  tf.reshape(reader_correct, [batch, -1]))
  count = tf.cast(batch, tf.float32)
  return LossOutput(loss_sum=tf.reduce_sum(retriever_loss + reader_loss),
                    loss_weight=count,
                    metrics={
                        "retriever_loss": (tf.reduce_sum(retriever_loss), count),
                        "reader_loss": (tf.reduce_sum(reader_loss), count)
                    })
