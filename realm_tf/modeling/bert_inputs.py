"""Packed BERT inputs in exported graphs: their TensorSpecs and unpacking them back into wordpieces.

The token-id SavedModels take [CLS] a [SEP] (b [SEP]) [PAD]* as a client packed it, at any length, and
pack the pieces again exactly as the raw-text signatures do, so both give the same outputs. Core
TensorFlow ops only: these graphs must load in stock saved_model_cli and any TF Serving build.
"""

from typing import Tuple

import tensorflow as tf


def ids_spec(name: str) -> tf.TensorSpec:
  """int32 [B, T] of any B and T, named as the signature input."""
  return tf.TensorSpec([None, None], tf.int32, name=name)


def unpack_segments(input_word_ids,
                    input_mask,
                    input_type_ids=None) -> Tuple[tf.RaggedTensor, tf.RaggedTensor]:
  """Packed BERT inputs [CLS] a [SEP] (b [SEP]) [PAD]* -> the wordpieces of a and b, int64 RaggedTensors
  [B, (pieces)] (b is empty without input_type_ids). Core ops only."""
  word_ids = tf.cast(input_word_ids, tf.int64)
  mask = tf.cast(input_mask, tf.int32) > 0
  second = (tf.zeros_like(mask) if input_type_ids is None else tf.logical_and(
      mask,
      tf.cast(input_type_ids, tf.int32) > 0))
  first = tf.logical_and(mask, tf.logical_not(second))
  position = tf.range(tf.shape(word_ids)[1])[tf.newaxis, :]
  first_len = tf.reduce_sum(tf.cast(first, tf.int32), 1, keepdims=True)  # [CLS] a [SEP]
  total_len = tf.reduce_sum(tf.cast(mask, tf.int32), 1, keepdims=True)
  keep_first = tf.logical_and(first, tf.logical_and(position >= 1, position < first_len - 1))
  keep_second = tf.logical_and(second, position < total_len - 1)
  return (tf.ragged.boolean_mask(word_ids, keep_first), tf.ragged.boolean_mask(word_ids, keep_second))
