"""Text to BERT features, exactly as the original REALM release packed them.

All functions are TensorFlow ops over batches (RaggedTensors of wordpiece ids in, dense int32 out), so the
same code runs eagerly in tests, inside the tf.data input pipeline and inside exported SavedModels.

Packing (reference: language/realm/featurization.py `bert_format`):
  [CLS] s1 [SEP] s2 [SEP] ... [PAD]*
  - the wordpiece budget is max_len - 1 - num_segments; earlier segments are kept whole first and later
    ones truncated (a "waterfall");
  - [CLS] and s1 [SEP] get segment id 0, s2 [SEP] gets 1;
  - padding (id 0, mask 0, segment 0) goes at the end.

Feature groups:
  query      [CLS] masked_sentence [SEP]                   (segment ids all 0)
  candidate  [CLS] title [SEP] body [SEP]                  (0 for [CLS] title [SEP], 1 for body [SEP])
  joint      [CLS] masked_sentence [SEP] body [SEP]        (no title: the original's reader input)
  null doc   [CLS] [SEP] [SEP] as a candidate, [CLS] query [SEP] [SEP] as a joint input

Salient-span masking (reference: `Featurizer.mask_query`): exactly one span; every wordpiece lying wholly
inside its byte range becomes [MASK] (no 80/10/10 rule); at most max_masks positions are predicted (more
masked pieces stay [MASK] but are not predicted, as in the original); mlm_positions are shifted by one for
[CLS]; an example is skipped when the span covers no wordpiece or its last masked piece would be cut off
by the query length.
"""

import enum
from typing import Callable, NamedTuple, Sequence

import tensorflow as tf
import tensorflow_text as text

from realm_tf import traced_once


class BertInputs(NamedTuple):
  """Dense BERT inputs; every field int32 [batch, seq_len] (or [seq_len] for one example)."""
  token_ids: tf.Tensor
  mask: tf.Tensor
  segment_ids: tf.Tensor


class MaskingStatus(enum.IntEnum):
  """Why a salient span could or could not be masked. The values travel as int32 in tensors."""
  OK = 0
  SPAN_COVERS_NO_WORDPIECE = 1
  MASK_WOULD_BE_TRUNCATED = 2


SKIP_REASONS = {
    MaskingStatus.SPAN_COVERS_NO_WORDPIECE:
        "the salient span covers no whole wordpiece (it starts or ends inside a word)",
    MaskingStatus.MASK_WOULD_BE_TRUNCATED:
        "the salient span lies past the query length, so its [MASK] would be truncated",
}


class MaskingError(ValueError):
  """Salient-span masking failed for one example; `status` says why (see SKIP_REASONS)."""

  def __init__(self, status: MaskingStatus):
    super().__init__(SKIP_REASONS[status])
    self.status = status


class MaskedQuery(NamedTuple):
  """Result of salient-span masking for a batch.

  Attributes:
    token_ids: int64 RaggedTensor [batch, (num_wordpieces)], the sentence with [MASK] on the span.
    mlm_positions: int32 [batch, max_masks], positions in the packed query ([CLS] is position 0).
    mlm_targets: int32 [batch, max_masks], the original ids at those positions.
    mlm_mask: float32 [batch, max_masks], 1.0 for a real prediction, 0.0 for padding.
    status: int32 [batch], a MaskingStatus per example; only OK examples are usable.
  """
  token_ids: tf.RaggedTensor
  mlm_positions: tf.Tensor
  mlm_targets: tf.Tensor
  mlm_mask: tf.Tensor
  status: tf.Tensor


def _as_ragged(ids) -> tf.RaggedTensor:
  """Batches of wordpiece ids as int64 RaggedTensor: from a RaggedTensor, nested lists, or a dense
  [batch, length] tensor (every row full length)."""
  if isinstance(ids, tf.RaggedTensor):
    return tf.cast(ids, tf.int64)
  if isinstance(ids, (list, tuple)):
    return tf.ragged.constant(ids, dtype=tf.int64)
  return tf.RaggedTensor.from_tensor(tf.cast(ids, tf.int64))


class Featurizer:
  """Builds the query, candidate and joint BERT features of REALM and ORQA.

  Args:
    cls_id, sep_id, mask_id: special token ids of the vocab (Tokenizer.cls_id etc.).
    query_seq_len: Q, length of the packed query.
    candidate_seq_len: C, length of the packed candidate document; joint inputs are Q + C long.
    max_masks: M, number of predicted positions per query.
  """

  def __init__(self, cls_id: int, sep_id: int, mask_id: int, query_seq_len: int, candidate_seq_len: int,
               max_masks: int):
    if query_seq_len < 3 or candidate_seq_len < 3:
      raise ValueError(f"query_seq_len ({query_seq_len}) and candidate_seq_len "
                       f"({candidate_seq_len}) must be at least 3 ([CLS] x [SEP])")
    if max_masks < 1:
      raise ValueError(f"max_masks must be positive, got {max_masks}")
    self.cls_id = cls_id
    self.sep_id = sep_id
    self.mask_id = mask_id
    self.query_seq_len = query_seq_len
    self.candidate_seq_len = candidate_seq_len
    self.max_masks = max_masks

  @classmethod
  def from_tokenizer(cls, tokenizer, **kwargs) -> "Featurizer":
    if tokenizer.pad_id != 0:
      # Padding writes id 0 (tensorflow_text.pad_model_inputs), as every BERT vocab expects.
      raise ValueError(f"{tokenizer.vocab_path}: [PAD] must be the first token (id 0), found at id "
                       f"{tokenizer.pad_id}")
    return cls(tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id, **kwargs)

  @property
  def joint_seq_len(self) -> int:
    return self.query_seq_len + self.candidate_seq_len

  def bert_format(self, segments: Sequence, max_len: int) -> BertInputs:
    """Packs segments (each a batch of wordpiece ids) into [CLS] s1 [SEP] s2 [SEP] ..., [batch, max_len]."""
    segments = [_as_ragged(s) for s in segments]
    budget = max_len - 1 - len(segments)
    if budget < 0:
      raise ValueError(f"max_len {max_len} cannot hold {len(segments)} segments")
    trimmed = text.WaterfallTrimmer(budget).trim(segments)
    ids, segment_ids = text.combine_segments(trimmed, self.cls_id, self.sep_id)
    token_ids, mask = text.pad_model_inputs(ids, max_len)
    segment_ids, _ = text.pad_model_inputs(segment_ids, max_len)
    return BertInputs(tf.cast(token_ids, tf.int32), tf.cast(mask, tf.int32), tf.cast(segment_ids, tf.int32))

  def query_inputs(self, query_ids) -> BertInputs:
    """[CLS] query [SEP], [batch, Q]."""
    return self.bert_format([query_ids], self.query_seq_len)

  def candidate_inputs(self, title_ids, body_ids) -> BertInputs:
    """[CLS] title [SEP] body [SEP], [batch, C]."""
    return self.bert_format([title_ids, body_ids], self.candidate_seq_len)

  def settings(self) -> tuple:
    """What every featurizing op depends on: two featurizers of equal settings compute the same."""
    return (self.cls_id, self.sep_id, self.mask_id, self.query_seq_len, self.candidate_seq_len,
            self.max_masks)

  def candidate_inputs_function(self) -> Callable:
    """candidate_inputs as one tf.function of int64 ragged [batch, (ids)] titles and bodies returning the
    BertInputs fields as a dict, traced once per process for these settings (realm_tf.traced_once). A
    tf.data pipeline that calls it records a call of the traced function instead of tracing
    tensorflow_text's trimmer and combiner again (about 1,000 graph ops, a second or two of CPU), which
    every pipeline over a corpus did: the refresher builds one per refresh."""
    spec = tf.RaggedTensorSpec([None, None], tf.int64)
    return traced_once.function(
        ("candidate_inputs",) + self.settings(),
        lambda: tf.function(lambda titles, bodies: self.candidate_inputs(titles, bodies)._asdict(),
                            input_signature=[spec, spec],
                            autograph=False))

  def joint_inputs(self, query_ids, body_ids) -> BertInputs:
    """[CLS] query [SEP] body [SEP], [batch, Q + C]; the query keeps its Q - 2 pieces, the title is dropped."""
    query_ids = _as_ragged(query_ids)[:, :self.query_seq_len - 2]
    body_ids = _as_ragged(body_ids)[:, :self.candidate_seq_len - 2]
    return self.bert_format([query_ids, body_ids], self.joint_seq_len)

  def mask_salient_span(self, token_ids, token_starts, token_limits, span_starts, span_limits) -> MaskedQuery:
    """Masks one salient span per example.

    Args:
      token_ids, token_starts, token_limits: RaggedTensors [batch, (num_wordpieces)] from
        Tokenizer.tokenize_with_offsets of the sentence; offsets in bytes of the sentence.
      span_starts, span_limits: [batch] byte range of the span (limit exclusive), relative to the
        sentence.

    Returns:
      A MaskedQuery. Examples whose status is not OK must be skipped by the caller.
    """
    token_ids = _as_ragged(token_ids)
    token_starts = _as_ragged(token_starts)
    token_limits = _as_ragged(token_limits)
    span_starts = tf.cast(tf.reshape(span_starts, [-1, 1]), tf.int64)
    span_limits = tf.cast(tf.reshape(span_limits, [-1, 1]), tf.int64)
    inside = tf.logical_and(token_starts >= span_starts, token_limits <= span_limits)
    masked = token_ids.with_flat_values(
        tf.where(inside.flat_values, tf.constant(self.mask_id, tf.int64), token_ids.flat_values))

    positions = tf.ragged.boolean_mask(tf.ragged.range(token_ids.row_lengths()), inside)
    targets = tf.ragged.boolean_mask(token_ids, inside)
    num_masked = positions.row_lengths()
    # The query keeps Q - 2 wordpieces ([CLS] and [SEP] take two), so a mask at piece index >= Q - 2 is lost.
    last_position = tf.reduce_max(positions, axis=1)  # -inf-like minimum for empty rows; not read then.
    status = tf.where(
        num_masked == 0, int(MaskingStatus.SPAN_COVERS_NO_WORDPIECE),
        tf.where(last_position >= self.query_seq_len - 2, int(MaskingStatus.MASK_WOULD_BE_TRUNCATED),
                 int(MaskingStatus.OK)))

    batch_size = tf.shape(num_masked)[0]
    shape = tf.stack([batch_size, self.max_masks])
    mlm_positions = (positions[:, :self.max_masks] + 1).to_tensor(default_value=0, shape=shape)
    mlm_targets = targets[:, :self.max_masks].to_tensor(default_value=0, shape=shape)
    mlm_mask = tf.sequence_mask(tf.minimum(num_masked, self.max_masks), self.max_masks, tf.float32)
    return MaskedQuery(masked, tf.cast(mlm_positions, tf.int32), tf.cast(mlm_targets, tf.int32), mlm_mask,
                       tf.cast(status, tf.int32))
