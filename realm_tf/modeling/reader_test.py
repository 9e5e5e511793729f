"""Tests of ORQA's span reader: the span enumeration (count and order must match the original's, or
converted checkpoints and gold-span indices misalign), the span score formula, block masking, the
retriever logit, gold-span matching, global prediction, and the variable names of converted checkpoints."""

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import losses
from realm_tf.modeling import reader

_VOCAB = 30
_CONFIG = bert.tiny_config(_VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_B, _K, _L, _WIDTH, _HIDDEN = 2, 3, 8, 3, 8


def _inputs(seed=0):
  """[CLS] q q [SEP] block... [SEP]: the block covers positions 4..6 (5..6 in the second block)."""
  rng = np.random.default_rng(seed)
  token_ids = rng.integers(5, _VOCAB, [_B, _K, _L]).astype(np.int32)
  segment_ids = np.zeros_like(token_ids)
  segment_ids[:, :, 4:] = 1
  block_mask = np.zeros([_B, _K, _L], np.int32)
  block_mask[:, :, 4:7] = 1
  block_mask[:, 1, 4] = 0
  retriever_logits = rng.normal(size=[_B, _K]).astype(np.float32)
  bert_inputs = tuple(tf.constant(x) for x in (token_ids, np.ones_like(token_ids), segment_ids))
  return bert_inputs, tf.constant(block_mask), tf.constant(retriever_logits)


def _reader(**kwargs):
  return reader.SpanReader(_CONFIG, seq_len=_L, span_hidden_size=_HIDDEN, max_span_width=_WIDTH, **kwargs)


class _SeededTestCase(tf.test.TestCase):
  """Seeds Keras's initializers, so every run builds the same weights (unseeded ones differ per run)."""

  def setUp(self):
    super().setUp()
    tf_keras.utils.set_random_seed(0)


class SpanCandidatesTest(tf.test.TestCase):

  def test_orqa_count_and_width_major_order(self):
    starts, ends = reader.span_candidates(320, 10)
    self.assertEqual(starts.shape, (3155,))
    self.assertEqual(ends.shape, (3155,))
    widths = ends - starts + 1
    self.assertTrue((np.diff(widths) >= 0).all())  # width-major
    self.assertAllEqual(np.bincount(widths)[1:], [321 - w for w in range(1, 11)])
    self.assertAllEqual(starts[:320], np.arange(320))  # all width-1 spans first, by start
    self.assertAllEqual(ends[:320], np.arange(320))
    self.assertEqual((0, 1), (starts[320], ends[320]))  # then width 2
    self.assertEqual((310, 319), (starts[-1], ends[-1]))
    self.assertLen(set(zip(starts.tolist(), ends.tolist())), 3155)
    self.assertTrue((starts >= 0).all() and (ends < 320).all())

  def test_small_example(self):
    starts, ends = reader.span_candidates(3, 2)
    self.assertAllEqual([0, 1, 2, 0, 1], starts)
    self.assertAllEqual([0, 1, 2, 1, 2], ends)


class SpanReaderTest(_SeededTestCase):

  def test_score_formula(self):
    """score = dense_1(LayerNorm(relu(start_proj[s] + end_proj[e]))) + retriever logit."""
    model = _reader()
    bert_inputs, block_mask, retriever_logits = _inputs()
    output = model((bert_inputs, tf.ones_like(block_mask), retriever_logits))
    self.assertEqual(output.logits.shape, [_B, _K, model.num_spans])
    self.assertEqual(output.logits.dtype, tf.float32)
    sequence = model.encoder(
        bert.encoder_inputs(*(tf.reshape(x, [-1, _L]) for x in bert_inputs)))["sequence_output"].numpy()
    kernel, bias = (w.numpy() for w in model.span_projection.weights)
    projected = sequence @ kernel + bias
    start_proj, end_proj = projected[..., :_HIDDEN], projected[..., _HIDDEN:]
    starts, ends = output.span_starts.numpy(), output.span_ends.numpy()
    hidden = np.maximum(start_proj[:, starts] + end_proj[:, ends], 0.0)
    mean = hidden.mean(-1, keepdims=True)
    var = ((hidden - mean)**2).mean(-1, keepdims=True)
    gamma, beta = (w.numpy() for w in model.layer_norm.weights)
    hidden = (hidden - mean) / np.sqrt(var + 1e-3) * gamma + beta
    out_kernel, out_bias = (w.numpy() for w in model.span_output.weights)
    scores = (hidden @ out_kernel)[..., 0] + out_bias
    expected = scores.reshape([_B, _K, -1]) + retriever_logits.numpy()[:, :, np.newaxis]
    self.assertAllClose(expected, output.logits, atol=1e-4)

  def test_spans_outside_the_block_are_masked(self):
    model = _reader()
    bert_inputs, block_mask, retriever_logits = _inputs()
    unmasked = model((bert_inputs, tf.ones_like(block_mask), retriever_logits)).logits.numpy()
    output = model((bert_inputs, block_mask, retriever_logits))
    logits = output.logits.numpy()
    starts, ends = output.span_starts.numpy(), output.span_ends.numpy()
    mask = block_mask.numpy()
    inside = mask[:, :, starts] * mask[:, :, ends]  # [B, K, S]
    self.assertGreater(inside.sum(), 0)
    self.assertGreater((1 - inside).sum(), 0)
    # Masked spans get exactly MASK_VALUE added; spans inside the block keep their score.
    self.assertAllClose(np.where(inside == 1, 0.0, losses.MASK_VALUE), logits - unmasked, atol=1e-2)
    bound = losses.MASK_VALUE + np.abs(unmasked).max()
    self.assertTrue((logits[inside == 0] <= bound).all())
    # The block of positions 4..6 has 3 + 2 + 1 spans of width <= 3; the second one (5..6) has 2 + 1.
    self.assertAllEqual([[6, 3, 6], [6, 3, 6]], inside.sum(-1))

  def test_retriever_logit_is_added_per_block(self):
    model = _reader()
    bert_inputs, block_mask, retriever_logits = _inputs()
    with_logits = model((bert_inputs, block_mask, retriever_logits)).logits.numpy()
    without = model((bert_inputs, block_mask, tf.zeros_like(retriever_logits))).logits.numpy()
    difference = with_logits - without
    self.assertAllClose(np.broadcast_to(retriever_logits.numpy()[:, :, np.newaxis], difference.shape),
                        difference,
                        atol=2e-3)  # atol: float32 steps near -10000 are ~1e-3

  def test_layer_norm_epsilon_default(self):
    self.assertEqual(1e-3, _reader().layer_norm.epsilon)
    self.assertEqual(1e-5, _reader(layer_norm_epsilon=1e-5).layer_norm.epsilon)

  def test_inputs_of_another_length_are_a_clear_error(self):
    """Not GatherV2's "indices[4] = 4 is not in [0, 4)" (shorter) or an AddV2 shape clash (longer)."""
    model = _reader()
    bert_inputs, block_mask, retriever_logits = _inputs()
    for length in (_L - 3, _L + 2):
      ids = tf.zeros([_B, _K, length], tf.int32)
      with self.assertRaisesRegex(
          ValueError, rf"built for sequences of length {_L} \(its span "
          rf"enumeration\), but its token ids have length {length}"):
        model(((ids, ids, ids), block_mask, retriever_logits))
    with self.assertRaisesRegex(ValueError, rf"its block mask has length {_L - 1}"):
      model((bert_inputs, block_mask[..., 1:], retriever_logits))
    # A length only known when the graph runs is checked there.
    call = tf.function(lambda ids: model(((ids, ids, ids), tf.zeros_like(ids), retriever_logits)),
                       input_signature=[tf.TensorSpec([_B, _K, None], tf.int32)])
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                rf"built for sequences of length {_L} .*another length"):
      call(tf.zeros([_B, _K, _L - 3], tf.int32))
    self.assertEqual(call(bert_inputs[0]).logits.shape, [_B, _K, model.num_spans])

  def test_a_length_beyond_the_position_table_is_refused(self):
    with self.assertRaisesRegex(ValueError, r"reader seq_len 300 must be in \[1, 256\].*--reader_seq_len"):
      reader.SpanReader(_CONFIG, seq_len=300)

  def test_variable_names_match_orqa(self):
    model = _reader()
    model(_inputs())
    head = {v.name for v in model.trainable_variables if "/bert/" not in v.name}
    self.assertEqual(
        {
            "reader/dense/kernel:0", "reader/dense/bias:0", "reader/layer_normalization/gamma:0",
            "reader/layer_normalization/beta:0", "reader/dense_1/kernel:0", "reader/dense_1/bias:0"
        }, head)
    self.assertEqual([_CONFIG.hidden_size, 2 * _HIDDEN], model.span_projection.kernel.shape)
    self.assertEqual([_HIDDEN, 1], model.span_output.kernel.shape)

  def test_head_kernels_are_initialized_independently(self):
    # A shared unseeded initializer would make dense_1's kernel a copy of dense's first entries.
    model = _reader()
    model(_inputs())
    first = model.span_projection.kernel.numpy().ravel()[:_HIDDEN]
    self.assertGreater(np.abs(first - model.span_output.kernel.numpy().ravel()).max(), 1e-4)


class ReaderCorrectTest(tf.test.TestCase):

  def test_hand_example_with_padding(self):
    starts, ends = reader.span_candidates(4, 2)  # (0,0) (1,1) (2,2) (3,3) (0,1) (1,2) (2,3)
    gold_starts = tf.constant([[[1, 3, -1], [-1, -1, -1]]])
    gold_ends = tf.constant([[[2, 3, -1], [-1, -1, -1]]])
    correct = reader.reader_correct(tf.constant(starts), tf.constant(ends), gold_starts, gold_ends)
    self.assertEqual(correct.dtype, tf.bool)
    self.assertAllEqual([[[False, False, False, True, False, True, False], [False] * 7]], correct)

  def test_start_and_end_must_match_the_same_gold_span(self):
    starts, ends = reader.span_candidates(4, 2)
    # Gold (0,0) and (1,1): the span (0,1) matches a start of one and an end of the other, not a span.
    correct = reader.reader_correct(tf.constant(starts), tf.constant(ends), tf.constant([[[0, 1]]]),
                                    tf.constant([[[0, 1]]]))
    self.assertAllEqual([[[True, True, False, False, False, False, False]]], correct)


class PredictSpansTest(tf.test.TestCase):

  def test_global_argmax(self):
    starts, ends = reader.span_candidates(4, 2)
    logits = np.full([2, 3, 7], -5.0, np.float32)
    logits[0, 2, 5] = 3.0  # example 0: block 2, span (1, 2)
    logits[0, 0, 1] = 2.5  # best in its block, not globally
    logits[1, 1, 3] = 1.0  # example 1: block 1, span (3, 3)
    logits[1, 0, :] = 0.9  # block 0 is better on average, but has no better single span
    output = reader.ReaderOutput(tf.constant(logits), tf.constant(starts), tf.constant(ends))
    prediction = reader.predict_spans(output)
    self.assertAllEqual([2, 1], prediction["block_index"])
    self.assertAllEqual([1, 3], prediction["start"])
    self.assertAllEqual([2, 3], prediction["end"])
    self.assertAllClose([3.0, 1.0], prediction["score"])


if __name__ == "__main__":
  tf.test.main()
