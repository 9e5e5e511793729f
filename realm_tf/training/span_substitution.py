"""Salient-span substitution: relabel a masked span, and its copies in the retrieved documents, at random.

Why: the knowledge-augmented encoder can lower REALM's loss in two ways, by reading the span off a
retrieved document that holds it, or by memorizing the pre-training sentences (and the priors of
spans: a year, a profession). A reader trained from scratch on a small corpus learns the second far sooner;
then p(y | z, x) hardly depends on z and the retriever's gradient, which flows only through the
differences between documents, is noise that walks it away from its warm start (bench/
realm_learning_bench.py measured ICT's recall@5 halving). Replacing the span by random wordpieces, the same
ones in the target and in every candidate document that contains the span's wordpieces, makes the
memorized answer wrong and leaves copying from a document that holds the span as the only way to predict
it, so retrieving that document is what lowers the loss. The replacement has the span's length, so
shapes stay static. The retriever's candidate inputs are left alone: it must score the real documents the
index holds. This is the answer-substitution augmentation realm_tf's FiD reader uses, transferred to
masked spans; the original REALM has no counterpart (its reader starts from pre-trained BERT).
"""

from typing import Sequence

import numpy as np
import tensorflow as tf


def replacement_ids(vocab: Sequence[str]) -> np.ndarray:
  """Ids of the tokens a replacement is drawn from: every token but [PAD], [CLS], [unused0] and the like."""
  ids = [i for i, token in enumerate(vocab) if not (token.startswith("[") and token.endswith("]"))]
  if not ids:
    raise ValueError("the vocabulary has no ordinary tokens to draw span replacements from")
  return np.asarray(ids, np.int32)


def draw_replacements(candidates: tf.Tensor, rate: float, batch_size: int, max_masks: int,
                      seed: tf.Tensor):
  """Per example: whether to substitute (bool [B], with probability rate) and the new wordpieces [B, M].

  Stateless in seed (int64 [2]), so a batch's substitutions are a function of the seed and batch number.
  """
  seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2)
  apply = tf.random.stateless_uniform([batch_size], seed=seeds[0]) < rate
  picks = tf.random.stateless_uniform([batch_size, max_masks], seed=seeds[1], minval=0,
                                      maxval=len(candidates), dtype=tf.int32)
  return apply, tf.gather(tf.constant(candidates), picks)


def span_starts(token_ids: tf.Tensor, segment_ids: tf.Tensor, targets: tf.Tensor,
                target_mask: tf.Tensor) -> tf.Tensor:
  """bool [R, L]: the span's wordpieces begin at this position and lie wholly inside the document.

  Args:
    token_ids: int [R, L] joint inputs, [CLS] query [SEP] document [SEP].
    segment_ids: int [R, L]; 1 marks the document, the only part searched.
    targets: int [R, M] the span's wordpieces (the first target_mask-many are real).
    target_mask: [R, M] 1 for the span's wordpieces; an all-zero row matches nowhere.
  """
  length = tf.shape(token_ids)[1]
  max_masks = targets.shape[1]
  targets = tf.cast(targets, token_ids.dtype)
  span_length = _span_length(target_mask)
  padded_ids = tf.pad(token_ids, [[0, 0], [0, max_masks]], constant_values=-1)
  padded_doc = tf.pad(tf.equal(segment_ids, 1), [[0, 0], [0, max_masks]], constant_values=False)
  starts = tf.broadcast_to(span_length > 0, tf.shape(token_ids))
  for j in range(max_masks):
    same = tf.logical_and(tf.equal(padded_ids[:, j:j + length], targets[:, j:j + 1]),
                          padded_doc[:, j:j + length])
    starts = tf.logical_and(starts, tf.logical_or(same, j >= span_length))
  return starts


def _span_length(target_mask: tf.Tensor) -> tf.Tensor:
  return tf.reduce_sum(tf.cast(target_mask > 0, tf.int32), axis=1)[:, tf.newaxis]  # [R, 1]


def substitute(token_ids: tf.Tensor, segment_ids: tf.Tensor, targets: tf.Tensor, target_mask: tf.Tensor,
               replacement: tf.Tensor) -> tf.Tensor:
  """Replaces every occurrence of a span's wordpieces in the document segment by its replacement.

  Args:
    token_ids, segment_ids, targets, target_mask: as span_starts.
    replacement: int [R, M] the new wordpieces, position by position.
  Returns:
    int [R, L] token ids.
  """
  length = tf.shape(token_ids)[1]
  starts = span_starts(token_ids, segment_ids, targets, target_mask)
  span_length = _span_length(target_mask)
  replacement = tf.cast(replacement, token_ids.dtype)
  result = token_ids
  for j in range(targets.shape[1]):
    # Position q holds the span's j-th wordpiece when a match starts at q - j.
    at = tf.pad(starts, [[0, 0], [j, 0]])[:, :length]
    at = tf.logical_and(at, j < span_length)
    result = tf.where(at, replacement[:, j:j + 1], result)
  return result
