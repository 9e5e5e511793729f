"""Tests of the knowledge-augmented encoder: logits shape and dtype, and the MLM decoder tied to the
word embeddings (what makes Google BERT and the REALM `bert` module convert one to one)."""

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import knowledge_augmented_encoder as kae_lib

_VOCAB = 30
_CONFIG = bert.tiny_config(_VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_B, _N, _L, _M = 2, 3, 9, 2
# Token 7 never occurs in the inputs, so its embedding row only acts through the MLM decoder.
_UNUSED_TOKEN = 7


def _inputs():
  rng = np.random.default_rng(0)
  token_ids = rng.integers(8, _VOCAB, [_B, _N, _L]).astype(np.int32)
  mask = np.ones([_B, _N, _L], np.int32)
  mask[:, :, -1] = 0
  segment_ids = np.zeros([_B, _N, _L], np.int32)
  segment_ids[:, :, 4:] = 1
  positions = np.tile(np.array([[[1, 3]], [[2, 0]]], np.int32), [1, _N, 1])
  return (tuple(tf.constant(x) for x in (token_ids, mask, segment_ids)), tf.constant(positions))


class _SeededTestCase(tf.test.TestCase):
  """Seeds Keras's initializers, so every run builds the same weights (unseeded ones differ per run)."""

  def setUp(self):
    super().setUp()
    tf_keras.utils.set_random_seed(0)


class KnowledgeAugmentedEncoderTest(_SeededTestCase):

  def tearDown(self):
    tf_keras.mixed_precision.set_global_policy("float32")
    super().tearDown()

  def test_logits_shape_and_dtype(self):
    model = kae_lib.KnowledgeAugmentedEncoder(_CONFIG)
    logits = model(_inputs())
    self.assertEqual(logits.shape, [_B, _N, _M, _VOCAB])
    self.assertEqual(logits.dtype, tf.float32)
    # [B, N, ...] inputs give the same logits as their [B * N, ...] flattening.
    bert_inputs, positions = _inputs()
    flat = model(
        (tuple(tf.reshape(x, [_B * _N, _L]) for x in bert_inputs), tf.reshape(positions, [_B * _N, _M])))
    self.assertAllClose(tf.reshape(logits, [_B * _N, _M, _VOCAB]), flat, atol=1e-5)

  def test_logits_are_float32_under_mixed_bfloat16(self):
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = kae_lib.KnowledgeAugmentedEncoder(_CONFIG)
    logits = model(_inputs())
    self.assertEqual(logits.dtype, tf.float32)
    self.assertEqual(logits.shape, [_B, _N, _M, _VOCAB])

  def test_decoder_is_tied_to_the_word_embeddings(self):
    model = kae_lib.KnowledgeAugmentedEncoder(_CONFIG)
    inputs = _inputs()
    before = model(inputs).numpy()
    table = model.encoder.get_embedding_table()
    self.assertIs(model.masked_lm.embedding_table, table)
    # No second [V, H] matrix: the decoder has only its transform and output bias of its own.
    vocab_matrices = [v for v in model.trainable_variables if v.shape == (_VOCAB, _CONFIG.hidden_size)]
    self.assertLen(vocab_matrices, 1)
    self.assertIs(vocab_matrices[0], table)
    # Changing the row of a token absent from the inputs changes exactly that token's logits.
    # (A random direction: a constant shift would be invisible after the transform's LayerNorm, whose
    # output sums to zero.)
    noise = np.random.default_rng(2).normal(0.0, 0.5, [_CONFIG.hidden_size]).astype(np.float32)
    table[_UNUSED_TOKEN].assign(table[_UNUSED_TOKEN] + noise)
    after = model(inputs).numpy()
    changed = np.abs(after - before).max(axis=(0, 1, 2))
    self.assertGreater(changed[_UNUSED_TOKEN], 1e-2)
    self.assertAllClose(np.delete(after, _UNUSED_TOKEN, -1), np.delete(before, _UNUSED_TOKEN, -1), atol=1e-6)

  def test_logits_are_transform_times_embedding_table_plus_bias(self):
    model = kae_lib.KnowledgeAugmentedEncoder(_CONFIG)
    bert_inputs, positions = _inputs()
    logits = model((bert_inputs, positions)).numpy()
    sequence = model.encoder(bert.encoder_inputs(
        *(tf.reshape(x, [-1, _L]) for x in bert_inputs)))["sequence_output"].numpy().reshape([_B, _N, _L, -1])
    gathered = np.take_along_axis(sequence, positions.numpy()[..., np.newaxis], axis=2)
    hidden = model.masked_lm.layer_norm(model.masked_lm.dense(gathered.reshape([-1, _CONFIG.hidden_size])))
    hidden = hidden.numpy().reshape([_B, _N, _M, -1])
    table = model.encoder.get_embedding_table().numpy()
    expected = hidden @ table.T + model.masked_lm.bias.numpy()
    self.assertAllClose(expected, logits, atol=1e-4)


if __name__ == "__main__":
  tf.test.main()
