"""ORQA's span reader (Lee et al. 2019; reference/original_realm_orqa.md 3.7).

BERT reads [CLS] question [SEP] block [SEP] for each of the top reader_beam blocks. Every span of width
1..max_span_width over the whole sequence is a candidate (width-major order: all width-1 spans, then
width 2, ...; 3155 spans for length 320 and width 10), masked to spans whose both ends lie on block
wordpieces. A span's score:
  h = ReLU(start_proj[s] + end_proj[e]);  h = LayerNorm(h) (epsilon 1e-3);  score = w . h + b
(start_proj/end_proj are the halves of one Dense(2 x span_hidden_size)), plus the block's retriever logit;
masked spans get -10000. Variable names follow the original (`dense`, `layer_normalization`, `dense_1`)
so converted ORQA checkpoints map one to one.
"""

from typing import Dict, NamedTuple, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import losses


def span_candidates(seq_len: int, max_span_width: int) -> Tuple[np.ndarray, np.ndarray]:
  """All (start, end) pairs of width 1..max_span_width in [0, seq_len), width-major; int32 [S] each."""
  starts, ends = [], []
  for width in range(1, max_span_width + 1):
    s = np.arange(0, seq_len - width + 1, dtype=np.int32)
    starts.append(s)
    ends.append(s + width - 1)
  return np.concatenate(starts), np.concatenate(ends)


class ReaderOutput(NamedTuple):
  """logits: float32 [B, K, S] (span score + retriever logit, masked spans at -10000);
  span_starts, span_ends: int32 [S] positions in the reader sequence."""
  logits: tf.Tensor
  span_starts: tf.Tensor
  span_ends: tf.Tensor


class SpanReader(tf_keras.Model):
  """Span scorer over BERT.

  Args:
    config: the reader BERT.
    seq_len: reader sequence length L (320 in ORQA); spans are enumerated for it statically.
    span_hidden_size: 256 in ORQA.
    max_span_width: 10 in ORQA.
    layer_norm_epsilon: 1e-3 (Keras LayerNormalization default, as the original).

  Call:
    inputs: ((token_ids, mask, segment_ids) int32 [B, K, L], block_mask [B, K, L] (1 on block
      wordpieces), retriever_logits float32 [B, K]).
    Returns a ReaderOutput.
  """

  def __init__(self,
               config: bert.BertConfig,
               seq_len: int = 320,
               span_hidden_size: int = 256,
               max_span_width: int = 10,
               layer_norm_epsilon: float = 1e-3,
               name: str = "reader",
               **kwargs):
    super().__init__(name=name, **kwargs)
    if not 1 <= seq_len <= config.max_position_embeddings:
      raise ValueError(f"reader seq_len {seq_len} must be in [1, {config.max_position_embeddings}]: the "
                       f"reader BERT's position table holds {config.max_position_embeddings} positions; "
                       "pass a shorter reader_seq_len (--reader_seq_len) or a BERT with more positions")
    self.seq_len = seq_len
    self.span_hidden_size = span_hidden_size
    starts, ends = span_candidates(seq_len, max_span_width)
    self._span_starts = tf.constant(starts)
    self._span_ends = tf.constant(ends)

    # One initializer instance per layer: a reused unseeded tf_keras initializer repeats its values, so
    # dense_1's kernel would start as a copy of the first entries of dense's.
    def initializer():
      return tf_keras.initializers.TruncatedNormal(stddev=0.02)

    self.encoder = bert.build_encoder(config, name="bert")
    self.span_projection = tf_keras.layers.Dense(2 * span_hidden_size,
                                                 kernel_initializer=initializer(),
                                                 name="dense")
    self.layer_norm = tf_keras.layers.LayerNormalization(epsilon=layer_norm_epsilon,
                                                         name="layer_normalization",
                                                         dtype=tf.float32)
    self.span_output = tf_keras.layers.Dense(1,
                                             kernel_initializer=initializer(),
                                             name="dense_1",
                                             dtype=tf.float32)

  @property
  def num_spans(self) -> int:
    return int(self._span_starts.shape[0])

  def _check_length(self, tensor: tf.Tensor, what: str) -> tf.Tensor:
    """tensor, checked to be [..., seq_len]: the spans were enumerated for seq_len, so another length
    would gather out of range or misalign the block mask, failing far from the cause (GatherV2,
    reshape). Statically when the length is known (always under XLA), else in the graph. what: the
    input and its verb, e.g. "block mask has"."""
    built = (f"SpanReader {self.name!r} was built for sequences of length {self.seq_len} (its span "
             f"enumeration), but its {what}")
    fix = (f"pack the reader inputs to {self.seq_len} wordpieces, or build the reader with seq_len "
           "(reader_seq_len) equal to their length")
    length = tensor.shape[-1]
    if length is not None:
      if length != self.seq_len:
        raise ValueError(f"{built} length {length}; {fix}")
      return tensor
    with tf.control_dependencies([
        tf.debugging.assert_equal(tf.shape(tensor)[-1],
                                  self.seq_len,
                                  message=f"{built} another length (below); {fix}")
    ]):
      return tf.identity(tensor)

  def call(self, inputs, training=None) -> ReaderOutput:
    bert_inputs, block_mask, retriever_logits = inputs
    bert_inputs = (self._check_length(bert_inputs[0], "token ids have"),) + tuple(bert_inputs[1:])
    block_mask = self._check_length(block_mask, "block mask has")
    batch, beam = tf.shape(bert_inputs[0])[0], tf.shape(bert_inputs[0])[1]
    sequence = self.encoder(embedder_lib.flatten_bert_inputs(bert_inputs),
                            training=training)["sequence_output"]  # [B*K, L, H]
    projected = self.span_projection(sequence)
    start_proj, end_proj = tf.split(projected, 2, axis=-1)
    hidden = tf.nn.relu(
        tf.gather(start_proj, self._span_starts, axis=1) +
        tf.gather(end_proj, self._span_ends, axis=1))  # [B*K, S, span_hidden]
    scores = tf.squeeze(self.span_output(self.layer_norm(hidden)), -1)  # [B*K, S]
    block_mask = tf.cast(tf.reshape(block_mask, [-1, self.seq_len]), tf.float32)
    span_mask = tf.gather(block_mask, self._span_starts, axis=1) * tf.gather(
        block_mask, self._span_ends, axis=1)
    scores = scores + (1.0 - span_mask) * losses.MASK_VALUE
    logits = tf.reshape(scores, [batch, beam, self.num_spans])
    logits += tf.cast(retriever_logits, tf.float32)[:, :, tf.newaxis]
    return ReaderOutput(logits, self._span_starts, self._span_ends)


def reader_correct(span_starts: tf.Tensor, span_ends: tf.Tensor, gold_starts: tf.Tensor,
                   gold_ends: tf.Tensor) -> tf.Tensor:
  """Which candidate spans equal a gold span.

  Args:
    span_starts, span_ends: int32 [S].
    gold_starts, gold_ends: int32 [B, K, A], gold spans per block, padded with -1.

  Returns:
    bool [B, K, S].
  """
  match = tf.logical_and(
      tf.equal(span_starts[tf.newaxis, tf.newaxis, :, tf.newaxis], gold_starts[:, :, tf.newaxis, :]),
      tf.equal(span_ends[tf.newaxis, tf.newaxis, :, tf.newaxis], gold_ends[:, :, tf.newaxis, :]))
  return tf.reduce_any(match, axis=-1)


def predict_spans(output: ReaderOutput) -> Dict[str, tf.Tensor]:
  """The global argmax over blocks x spans: block index, start, end and score, each [B]."""
  logits = output.logits
  batch, num_spans = tf.shape(logits)[0], tf.shape(logits)[2]
  best = tf.argmax(tf.reshape(logits, [batch, -1]), axis=-1, output_type=tf.int32)
  span = best % num_spans
  return {
      "block_index": best // num_spans,
      "start": tf.gather(output.span_starts, span),
      "end": tf.gather(output.span_ends, span),
      "score": tf.reduce_max(tf.reshape(logits, [batch, -1]), axis=-1),
  }
