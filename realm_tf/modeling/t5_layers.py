"""T5-style transformer layers that also return their pre-softmax attention logits (the FiD reader's).

Pre-LayerNorm blocks, a ReLU feed-forward, and T5's relative position buckets (Raffel et al. 2020;
mesh_tensorflow's _relative_position_bucket): a learned bias per head and bucket of key-minus-query
distance, exact for short distances and logarithmic up to a maximum.

Why not Model Garden's official.nlp.modeling.models.t5: its attention returns only the post-softmax
weights, and only of the encoder's self-attention; FiD-KD (realm_tf.modeling.fid_reader) needs the
PRE-softmax cross-attention logits of every decoder layer.

Every layer takes `initializer`: fan_in -> a fresh Keras initializer (one instance per weight; a reused
unseeded Keras initializer returns the same values at each call).
"""

import numpy as np
import tensorflow as tf
import tf_keras

# Additive bias of masked attention positions (as realm_tf.modeling.losses.MASK_VALUE).
MASK_BIAS = -1e9


class Attention(tf_keras.layers.Layer):
  """Multi-head attention that also returns its PRE-softmax logits.

  Call:
    query: [B, Tq, H]; memory: [B, Tk, H]; bias: additive, broadcastable to [B, heads, Tq, Tk].
    Returns (output [B, Tq, H], logits [B, heads, Tq, Tk] = q.k / sqrt(d_head), without the bias).
  """

  def __init__(self, hidden_size: int, num_heads: int, initializer, **kwargs):
    """initializer: fan_in -> a fresh Keras initializer (one instance per weight)."""
    super().__init__(**kwargs)
    self.num_heads = num_heads
    self.head_size = hidden_size // num_heads
    dense = lambda name: tf_keras.layers.EinsumDense(  # pylint: disable=g-long-lambda
        "btd,dnh->btnh",
        output_shape=[None, num_heads, self.head_size],
        kernel_initializer=initializer(hidden_size),
        name=name)
    self.query = dense("query")
    self.key = dense("key")
    self.value = dense("value")
    self.output_dense = tf_keras.layers.EinsumDense("btnh,nhd->btd",
                                                    output_shape=[None, hidden_size],
                                                    kernel_initializer=initializer(hidden_size),
                                                    name="output")

  def call(self, query, memory, bias):
    q = self.query(query)
    k = self.key(memory)
    v = self.value(memory)
    logits = tf.einsum("bqnh,bknh->bnqk", q, k) / tf.math.sqrt(float(self.head_size))
    weights = tf.nn.softmax(logits + bias, axis=-1)
    context = tf.einsum("bnqk,bknh->bqnh", weights, v)
    return self.output_dense(context), logits


def relative_position_bucket(relative_position: tf.Tensor, bidirectional: bool, num_buckets: int,
                             max_distance: int) -> tf.Tensor:
  """T5's bucket of each key-minus-query distance (mesh_tensorflow's _relative_position_bucket).

  Half the buckets (of each direction, when bidirectional) hold exact distances; the rest grow
  logarithmically up to max_distance, beyond which all distances share the last bucket. Unidirectional
  (causal) attention maps every future position to bucket 0.
  """
  n = -tf.cast(relative_position, tf.int32)
  bucket = tf.zeros_like(n)
  if bidirectional:
    num_buckets //= 2
    bucket += tf.cast(n < 0, tf.int32) * num_buckets
    n = tf.abs(n)
  else:
    n = tf.maximum(n, 0)
  max_exact = num_buckets // 2
  large = max_exact + tf.cast(
      tf.math.log(tf.maximum(tf.cast(n, tf.float32), 1.0) / max_exact) / np.log(max_distance / max_exact) *
      (num_buckets - max_exact), tf.int32)
  large = tf.minimum(large, num_buckets - 1)
  return bucket + tf.where(n < max_exact, n, large)


class RelativePositionBias(tf_keras.layers.Layer):
  """A learned bias per head and relative-position bucket: call(q_len, k_len) -> [1, heads, q_len, k_len].

  Args:
    num_heads: attention heads (one bias each).
    num_buckets, max_distance: see relative_position_bucket.
    bidirectional: False for causal self-attention (every future key in bucket 0).
    initializer: fan_in -> a Keras initializer.
  """

  def __init__(self, num_heads: int, num_buckets: int, max_distance: int, bidirectional: bool, initializer,
               **kwargs):
    super().__init__(**kwargs)
    self.num_buckets = num_buckets
    self.max_distance = max_distance
    self.bidirectional = bidirectional
    self.bias = tf_keras.layers.Embedding(num_buckets,
                                          num_heads,
                                          embeddings_initializer=initializer(1),
                                          name="bias")

  def call(self, query_length, key_length):
    relative = tf.range(key_length)[tf.newaxis, :] - tf.range(query_length)[:, tf.newaxis]
    buckets = relative_position_bucket(relative, self.bidirectional, self.num_buckets, self.max_distance)
    return tf.transpose(self.bias(buckets), [2, 0, 1])[tf.newaxis]


class FeedForward(tf_keras.layers.Layer):
  """T5's ReLU feed-forward: Dense(intermediate_size, relu) then Dense(hidden_size), [..., H] -> [..., H]."""

  def __init__(self, hidden_size: int, intermediate_size: int, initializer, **kwargs):
    super().__init__(**kwargs)
    self.inner = tf_keras.layers.Dense(intermediate_size,
                                       activation="relu",
                                       kernel_initializer=initializer(hidden_size),
                                       name="inner")
    self.outer = tf_keras.layers.Dense(hidden_size,
                                       kernel_initializer=initializer(intermediate_size),
                                       name="outer")

  def call(self, x):
    return self.outer(self.inner(x))


class EncoderLayer(tf_keras.layers.Layer):
  """Pre-LayerNorm block: x + SelfAttn(LN(x)); x + FFN(LN(x)).

  Call: x [B, T, H], bias broadcastable to [B, heads, T, T] -> [B, T, H].
  """

  def __init__(self, hidden_size: int, num_heads: int, intermediate_size: int, dropout_rate: float,
               initializer, **kwargs):
    super().__init__(**kwargs)
    self.attention_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="attention_norm")
    self.attention = Attention(hidden_size, num_heads, initializer, name="self_attention")
    self.ffn_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="ffn_norm")
    self.ffn = FeedForward(hidden_size, intermediate_size, initializer, name="ffn")
    self.dropout = tf_keras.layers.Dropout(dropout_rate)

  def call(self, x, bias, training=None):
    attended, _ = self.attention(self.attention_norm(x), self.attention_norm(x), bias)
    x = x + self.dropout(attended, training=training)
    return x + self.dropout(self.ffn(self.ffn_norm(x)), training=training)


class DecoderLayer(tf_keras.layers.Layer):
  """Causal self-attention, cross-attention over the fused encoder outputs, FFN (pre-LayerNorm each).

  Call: x [B, T, H], memory [B, M, H], self_bias [.., T, T], cross_bias [B, 1, 1, M] -> (x [B, T, H],
  the cross-attention logits [B, heads, T, M]).
  """

  def __init__(self, hidden_size: int, num_heads: int, intermediate_size: int, dropout_rate: float,
               initializer, **kwargs):
    super().__init__(**kwargs)
    self.self_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="self_attention_norm")
    self.self_attention = Attention(hidden_size, num_heads, initializer, name="self_attention")
    self.cross_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="cross_attention_norm")
    self.cross_attention = Attention(hidden_size, num_heads, initializer, name="cross_attention")
    self.ffn_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="ffn_norm")
    self.ffn = FeedForward(hidden_size, intermediate_size, initializer, name="ffn")
    self.dropout = tf_keras.layers.Dropout(dropout_rate)

  def call(self, x, memory, self_bias, cross_bias, training=None):
    normed = self.self_norm(x)
    attended, _ = self.self_attention(normed, normed, self_bias)
    x = x + self.dropout(attended, training=training)
    attended, cross_logits = self.cross_attention(self.cross_norm(x), memory, cross_bias)
    x = x + self.dropout(attended, training=training)
    return x + self.dropout(self.ffn(self.ffn_norm(x)), training=training), cross_logits
