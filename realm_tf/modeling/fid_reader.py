"""The Fusion-in-Decoder (FiD) reader: configuration, the encoder-decoder, and its passage scores.

FiD (Izacard & Grave 2021, facebookresearch/FiD src/model.py): each (question, passage) pair, formatted
"question: Q title: T context: P" (realm_tf.data.fid_features), is encoded ON ITS OWN ([B*n, L]); the
decoder cross-attends over the concatenation of all n encoder outputs ([B, n*L]) and generates the
answer. FiD-KD (Izacard & Grave, "Distilling Knowledge from Reader to Retriever", ICLR 2021) turns the
decoder's cross-attention into a relevance score per passage (passage_scores) and trains the retriever to
match it (realm_tf.modeling.fid_distillation).

The reader is a compact T5-style encoder-decoder (realm_tf.modeling.t5_layers: pre-LayerNorm blocks, ReLU
feed-forward, T5's relative position buckets, shared by the layers, in the encoder and decoder
self-attention; none in the cross-attention, as in T5, so its logits are a plain q.k / sqrt(d_head)), with
the token embedding tied with the output softmax and T5's initialization (see FidReader). A reader
trained from scratch must learn to copy the answer's wordpieces from a passage, which needs "the token
after the one just copied" attention; a bias per distance gives that directly. (Learned absolute position
embeddings were replaced together with the initialization; only the pair was measured, see FidReader.)

The encoder may instead be a pre-trained BERT (FidConfig.encoder = "bert": Model Garden's BertEncoderV2
from realm_tf.modeling.bert, warm-started by realm_tf.checkpoints.fid_warm_start from anything
realm_tf.checkpoints.bert_mapping reads: a bin/train_mlm export, TF1 BERT, Hugging Face safetensors such
as all-MiniLM-L6-v2), with a Dense projection to the decoder width when they differ. Why: the paper's
reader is pre-trained T5 and reads from its first step; a reader encoder trained from scratch on testdata
reached 1% dev exact match on the passages of a distilled retriever (issue 19), too weak a teacher. The
encoder-decoder of a BERT encoder and a small decoder trained from scratch is still Fusion-in-Decoder:
passages encoded on their own, the decoder cross-attending over all of them.

The decoder starts from [CLS] and ends with [SEP].

Attention scores, one per passage [B, n], from the cross-attention of the FIRST decoded token in every
decoder layer and head (SCORE_AGGREGATIONS):
  "pre_softmax" (FiD's get_crossattention_scores, the paper's choice): its pre-softmax logits averaged
    over heads, layers and the passage's NON-PADDING tokens;
  "attention_mass": the log of its attention probability summed over the passage's tokens, averaged over
    heads and layers (Atlas's attention distillation without the value norms), so that
    softmax(scores) is where the reader reads. Why offered: the paper's readers are pretrained T5, whose
    logits rise over a whole relevant passage; a reader trained from scratch attends sharply to the answer
    span and the rest of the passage dominates the mean logit. On testdata, a reader with 75% exact match
    on its training questions ranked the gold passage first among 3 for 47% of them by pre_softmax
    (layer 0 alone 22%, below chance) and for 76% by attention_mass.
"""

import dataclasses
from typing import ClassVar, Dict, Optional

import tensorflow as tf
import tf_keras

from realm_tf import json_config
from realm_tf.modeling import bert as bert_lib
from realm_tf.modeling import losses
from realm_tf.modeling import t5_layers

CONFIG_NAME = "fid_config.json"
ENCODERS = ("t5", "bert")


@dataclasses.dataclass(frozen=True)
class FidConfig(json_config.JsonConfig):
  """The reader's architecture and input lengths.

  Attributes:
    vocab_size: V, the WordPiece vocab size.
    hidden_size: H; num_heads must divide it.
    num_heads: attention heads of every layer.
    num_encoder_layers, num_decoder_layers: depths.
    intermediate_size: width of the ReLU feed-forward.
    dropout_rate: dropout on residual branches in training.
    passage_seq_len: L, wordpieces per formatted (question, passage) pair.
    answer_seq_len: T, decoder length (answer pieces + [SEP]; [CLS] is the start token).
    relative_attention_num_buckets, relative_attention_max_distance: T5's relative position buckets
      (exact distances up to half the buckets, logarithmic buckets up to max_distance).
    initializer_factor: scales T5's initialization (normal, stddev fan_in^-0.5 per weight; 1 for
      embeddings and position biases).
    encoder: "t5" (the T5-style encoder of num_encoder_layers here, trained from scratch) or "bert" (a
      BertEncoderV2 of config `bert`, meant to be warm-started: checkpoints.fid_warm_start; num_encoder_layers
      is then unused). hidden_size, num_heads, intermediate_size are the decoder's either way.
    bert: the BERT encoder's configuration (encoder "bert" only); its vocab_size must be vocab_size.
    share_embeddings: the decoder's input embedding and output softmax are the BERT encoder's word
      embeddings (encoder "bert", hidden_size = bert.hidden_size), as T5 shares one embedding between
      its encoder, decoder and softmax. Why: a decoder with its own embedding starts with 30k random
      output vectors and must learn each answer word's before it can emit it; on SQuAD (MiniLM encoder,
      a 128-wide decoder, 5 passages) its loss was still 8.4 nats after 100 single-passage and 170
      five-passage steps. With the pre-trained table, emitting a word the encoder read is one linear map
      away (see FidReader.decode for the scales).
    copy_attention: a pointer-generator output (See et al. 2017): each decoded token's distribution is
      a gated mixture of the vocabulary softmax and a copy distribution, the last decoder layer's
      cross-attention (mean over heads) over the fused passages' wordpieces, summed per wordpiece id.
      Why: an answer is a span of a passage, and a decoder trained from scratch on a few thousand
      questions did not learn to emit the words it attends to (SQuAD, MiniLM encoder, shared embeddings:
      7.7 nats per answer wordpiece after 200 single-passage steps, unigram level); with a pointer,
      copying is attending, so the loss trains the cross-attention directly, the signal FiD-KD distils.
  """
  FILE_NAME: ClassVar[str] = CONFIG_NAME
  DESCRIPTION: ClassVar[str] = "a FiD reader configuration"
  WRITTEN_BY: ClassVar[str] = "bin/train_fid_kd"

  vocab_size: int
  hidden_size: int = 64
  num_heads: int = 2
  num_encoder_layers: int = 2
  num_decoder_layers: int = 2
  intermediate_size: int = 128
  dropout_rate: float = 0.0
  passage_seq_len: int = 64
  answer_seq_len: int = 12
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  initializer_factor: float = 1.0
  encoder: str = "t5"
  bert: Optional[bert_lib.BertConfig] = None
  share_embeddings: bool = False
  copy_attention: bool = False

  def __post_init__(self):
    if self.encoder not in ENCODERS:
      raise ValueError(f"FidConfig: encoder must be one of {ENCODERS}, got {self.encoder!r}")
    if (self.encoder == "bert") != (self.bert is not None):
      raise ValueError(f"FidConfig: a BERT configuration is needed with encoder 'bert' and only then "
                       f"(encoder {self.encoder!r}, bert {self.bert})")
    if self.bert is not None:
      if self.bert.vocab_size != self.vocab_size:
        raise ValueError(f"FidConfig: the BERT encoder's vocab_size {self.bert.vocab_size} differs from the "
                         f"reader's {self.vocab_size}; both read the same wordpiece ids")
      if self.share_embeddings and self.bert.hidden_size != self.hidden_size:
        raise ValueError(f"FidConfig: share_embeddings needs the decoder as wide as the BERT encoder's "
                         f"word embeddings (hidden_size {self.hidden_size}, BERT {self.bert.hidden_size})")
      if self.passage_seq_len > self.bert.max_position_embeddings:
        raise ValueError(f"FidConfig: passage_seq_len {self.passage_seq_len} exceeds the BERT encoder's "
                         f"max_position_embeddings {self.bert.max_position_embeddings}")
    if self.share_embeddings and self.encoder != "bert":
      raise ValueError("FidConfig: share_embeddings shares the BERT encoder's word embeddings; it needs "
                       f"encoder 'bert', not {self.encoder!r}")
    if self.hidden_size % self.num_heads:
      raise ValueError(f"FidConfig: hidden_size {self.hidden_size} is not a multiple of num_heads "
                       f"{self.num_heads}")
    if self.passage_seq_len < 2 or self.answer_seq_len < 2:
      raise ValueError(f"FidConfig: passage_seq_len ({self.passage_seq_len}) and answer_seq_len "
                       f"({self.answer_seq_len}) must be at least 2")

  def to_dict(self) -> Dict:
    values = dataclasses.asdict(self)
    values["bert"] = self.bert.to_dict() if self.bert is not None else None
    return values

  @classmethod
  def from_dict(cls, values: Dict) -> "FidConfig":
    values = dict(values)
    if values.get("bert") is not None:
      values["bert"] = bert_lib.BertConfig(**values["bert"])
    return cls(**values)


def aggregate_cross_attention(first_token_logits: tf.Tensor, passage_mask: tf.Tensor) -> tf.Tensor:
  """One relevance score per passage from the first decoded token's cross-attention logits.

  FiD's get_crossattention_scores: padding set to 0, summed over layers, heads and passage tokens, divided
  by (#non-padding tokens of the passage) x layers x heads. A passage without any real token scores 0.

  Args:
    first_token_logits: float [B, layers, heads, n*L], pre-softmax logits of decoder position 0.
    passage_mask: [B, n, L], 1 on real tokens.

  Returns:
    float32 [B, n].
  """
  logits = tf.cast(first_token_logits, tf.float32)
  mask = tf.cast(passage_mask, tf.float32)
  shape = tf.shape(mask)
  num_layers, num_heads = tf.shape(logits)[1], tf.shape(logits)[2]
  logits = tf.reshape(logits, [shape[0], num_layers, num_heads, shape[1], shape[2]])
  total = tf.einsum("bahnl,bnl->bn", logits, mask)
  count = tf.reduce_sum(mask, axis=-1) * tf.cast(num_layers * num_heads, tf.float32)
  return tf.math.divide_no_nan(total, count)


def aggregate_attention_mass(first_token_logits: tf.Tensor, passage_mask: tf.Tensor) -> tf.Tensor:
  """log of the attention probability of each passage, from the first decoded token's logits.

  The softmax runs over all n*L memory tokens (padding excluded, as in the decoder), the probabilities are
  summed over each passage's tokens and averaged over layers and heads; a passage without real tokens
  gets log(1e-20). Arguments and result as aggregate_cross_attention.
  """
  logits = tf.cast(first_token_logits, tf.float32)
  mask = tf.cast(passage_mask, tf.float32)
  shape = tf.shape(mask)
  flat_mask = tf.reshape(mask, [shape[0], 1, 1, -1])
  probabilities = tf.nn.softmax(logits + (1.0 - flat_mask) * t5_layers.MASK_BIAS, axis=-1) * flat_mask
  per_passage = tf.reduce_sum(tf.reshape(
      probabilities,
      [shape[0], tf.shape(logits)[1], tf.shape(logits)[2], shape[1], shape[2]]),
                              axis=-1)
  return tf.math.log(tf.maximum(tf.reduce_mean(per_passage, axis=[1, 2]), 1e-20))


SCORE_AGGREGATIONS = {"pre_softmax": aggregate_cross_attention, "attention_mass": aggregate_attention_mass}


class FidReader(tf_keras.Model):
  """The FiD encoder-decoder.

  Args:
    config: FidConfig.

  compute_loss(features, training) -> LossOutput: teacher-forced token cross-entropy, summed over real
  target tokens (weight: their count), for realm_tf.training.train_lib.TrainStep. features is a dict of
  the ReaderFeatures fields.
  """

  def __init__(self, config: FidConfig, name: str = "fid_reader", **kwargs):
    super().__init__(name=name, **kwargs)
    self.config = config
    # T5's (Mesh TensorFlow's) initialization: stddev fan_in^-0.5, so that attention logits and residual
    # branches start at unit scale. BERT's fixed 0.02 is far too small for a narrow model: with H=64 the
    # initial attention logits are ~0.03 apart and attention stays uniform. Measured on testdata with one
    # passage per question and substituted answers: with 0.02 the reader had not learned to copy an
    # answer after 2,000 steps (0% dev exact match); with this initialization it reached 91% in 3,000.
    # A factory, not one instance: a reused unseeded Keras initializer returns the same values each call.
    initializer = lambda fan_in: tf_keras.initializers.RandomNormal(stddev=config.initializer_factor * fan_in
                                                                    **-0.5)
    # Embeddings at stddev 1 (fan_in 1), with the H^-0.5 logit scale of T5's tied softmax below; none
    # of its own when it shares the BERT encoder's (decode).
    self.token_embedding = (None if config.share_embeddings else tf_keras.layers.Embedding(
        config.vocab_size, config.hidden_size, embeddings_initializer=initializer(1), name="token_embedding"))
    self.decoder_position_bias = t5_layers.RelativePositionBias(config.num_heads,
                                                                config.relative_attention_num_buckets,
                                                                config.relative_attention_max_distance,
                                                                False,
                                                                initializer,
                                                                name="decoder_position_bias")
    if config.encoder == "bert":
      # Unless share_embeddings, the decoder keeps its own token embedding (the BERT word embeddings stay
      # the encoder's, and the decoder's width may differ).
      self.bert_encoder = bert_lib.build_encoder(config.bert, name="bert_encoder")
      self.encoder_projection = (tf_keras.layers.Dense(
          config.hidden_size,
          kernel_initializer=initializer(config.bert.hidden_size),
          name="encoder_projection") if config.bert.hidden_size != config.hidden_size else None)
    else:
      self.encoder_position_bias = t5_layers.RelativePositionBias(config.num_heads,
                                                                  config.relative_attention_num_buckets,
                                                                  config.relative_attention_max_distance,
                                                                  True,
                                                                  initializer,
                                                                  name="encoder_position_bias")
      self.encoder_layers = [
          t5_layers.EncoderLayer(config.hidden_size,
                                 config.num_heads,
                                 config.intermediate_size,
                                 config.dropout_rate,
                                 initializer,
                                 name=f"encoder_layer_{i}") for i in range(config.num_encoder_layers)
      ]
      self.encoder_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")
    self.decoder_layers = [
        t5_layers.DecoderLayer(config.hidden_size,
                               config.num_heads,
                               config.intermediate_size,
                               config.dropout_rate,
                               initializer,
                               name=f"decoder_layer_{i}") for i in range(config.num_decoder_layers)
    ]
    self.decoder_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")
    # p(generate) per decoded token; starts near 0.5.
    self.copy_gate = (tf_keras.layers.Dense(1,
                                            kernel_initializer=initializer(config.hidden_size),
                                            name="copy_gate") if config.copy_attention else None)
    self.dropout = tf_keras.layers.Dropout(config.dropout_rate)

  def encode(self, passage_ids, passage_mask, training=None):
    """Encodes each pair on its own and fuses them.

    Args:
      passage_ids, passage_mask: int [B, n, L].

    Returns:
      (memory float [B, n*L, H], memory_mask float32 [B, n*L]).
    """
    shape = tf.shape(passage_ids)
    seq_len = shape[2]
    ids = tf.reshape(passage_ids, [-1, seq_len])  # [B*n, L]
    mask = tf.cast(tf.reshape(passage_mask, [-1, seq_len]), tf.float32)
    if self.config.encoder == "bert":
      int_mask = tf.cast(mask, tf.int32)
      x = self.bert_encoder(bert_lib.encoder_inputs(tf.cast(ids, tf.int32), int_mask,
                                                    tf.zeros_like(int_mask)),
                            training=training)["sequence_output"]
      if self.encoder_projection is not None:
        x = self.encoder_projection(x)
    else:
      x = self.dropout(self.token_embedding(ids), training=training)
      bias = ((1.0 - mask) * t5_layers.MASK_BIAS)[:, tf.newaxis, tf.newaxis, :] + self.encoder_position_bias(
          seq_len, seq_len)
      for layer in self.encoder_layers:
        x = layer(x, bias, training=training)
      x = self.encoder_norm(x)
    memory = tf.reshape(tf.cast(x, tf.float32), [shape[0], shape[1] * seq_len, self.config.hidden_size])
    return memory, tf.reshape(mask, [shape[0], shape[1] * seq_len])

  def decode(self, decoder_input_ids, memory, memory_mask, memory_ids=None, training=None):
    """Decoder over the fused memory.

    Args:
      decoder_input_ids: int [B, T'] (T' <= T).
      memory, memory_mask: from encode.
      memory_ids: int [B, n*L], the wordpiece of every memory position (passage_ids reshaped); needed
        with copy_attention only.

    Returns:
      (logits float32 [B, T', V], cross_logits float [B, layers, heads, T', n*L]); with copy_attention the
      logits are log-probabilities of the mixture (softmax of them is the mixture itself).
    """
    steps = tf.shape(decoder_input_ids)[1]
    if self.config.share_embeddings:
      # BERT's word embeddings are ~0.05 per dimension (all-MiniLM-L6-v2: norm ~1.07): scaled by
      # sqrt(H) into the unit per-dimension range of the decoder's residual stream (Vaswani et al.), and
      # the softmax below is unscaled (x after the final LayerNorm has norm ~sqrt(H), so a logit is up
      # to ~sqrt(H) x cosine, as in BERT's own tied masked-LM softmax).
      table = self.bert_encoder.get_embedding_table()
      x = tf.gather(table, tf.cast(decoder_input_ids, tf.int32)) * self.config.hidden_size**0.5
      output_table, output_scale = table, 1.0
    else:
      x = self.token_embedding(decoder_input_ids)
      output_table, output_scale = self.token_embedding.embeddings, self.config.hidden_size**-0.5
    x = self.dropout(x, training=training)
    causal = tf.linalg.band_part(tf.ones([steps, steps]), -1, 0)
    self_bias = ((1.0 - causal) * t5_layers.MASK_BIAS)[tf.newaxis, tf.newaxis] + self.decoder_position_bias(
        steps, steps)
    cross_bias = ((1.0 - memory_mask) * t5_layers.MASK_BIAS)[:, tf.newaxis, tf.newaxis, :]
    cross = []
    for layer in self.decoder_layers:
      x, cross_logits = layer(x, memory, self_bias, cross_bias, training=training)
      cross.append(cross_logits)
    x = self.decoder_norm(x)
    # Tied output embedding; its own scaled by H^-0.5 as T5 does when tying.
    logits = tf.cast(tf.einsum("bth,vh->btv",
                               tf.cast(x, output_table.dtype) * output_scale, output_table), tf.float32)
    if self.config.copy_attention:
      if memory_ids is None:
        raise ValueError("FidReader.decode: copy_attention needs memory_ids")
      logits = self._copy_mixture(logits, x, cross[-1], cross_bias, memory_ids)
    return logits, tf.stack(cross, axis=1)

  def _copy_mixture(self, logits, x, last_cross_logits, cross_bias, memory_ids):
    """log(g * softmax(logits) + (1 - g) * copy), copy[v] = attention on the memory positions holding v."""
    attention = tf.reduce_mean(tf.nn.softmax(tf.cast(last_cross_logits, tf.float32) + cross_bias, axis=-1),
                               axis=1)  # [B, T', M]
    shape = tf.shape(attention)
    batch, steps = shape[0], shape[1]
    b = tf.broadcast_to(tf.range(batch)[:, tf.newaxis, tf.newaxis], shape)
    t = tf.broadcast_to(tf.range(steps)[tf.newaxis, :, tf.newaxis], shape)
    v = tf.broadcast_to(tf.cast(memory_ids, tf.int32)[:, tf.newaxis, :], shape)
    # scatter_nd sums the attention of every position holding the same wordpiece.
    copy = tf.scatter_nd(tf.stack([b, t, v], axis=-1), attention,
                         tf.stack([batch, steps, self.config.vocab_size]))
    gate = tf.sigmoid(tf.cast(self.copy_gate(x), tf.float32))  # [B, T', 1]
    return tf.math.log(gate * tf.nn.softmax(logits, axis=-1) + (1.0 - gate) * copy + 1e-12)

  def call(self, inputs, training=None):
    """(passage_ids, passage_mask, decoder_input_ids) -> logits [B, T, V]."""
    passage_ids, passage_mask, decoder_input_ids = inputs
    memory, memory_mask = self.encode(passage_ids, passage_mask, training=training)
    return self.decode(decoder_input_ids, memory, memory_mask, _memory_ids(passage_ids), training=training)[0]

  def compute_loss(self, features: Dict[str, tf.Tensor], training=None) -> losses.LossOutput:
    logits = self((features["passage_ids"], features["passage_mask"], features["decoder_input_ids"]),
                  training=training)
    mask = tf.cast(features["target_mask"], tf.float32)
    token_losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(
        features["target_ids"], tf.int32),
                                                                  logits=logits)
    correct = tf.cast(
        tf.equal(tf.argmax(logits, -1, output_type=tf.int32), tf.cast(features["target_ids"], tf.int32)),
        tf.float32)
    count = tf.reduce_sum(mask)
    return losses.LossOutput(loss_sum=tf.reduce_sum(token_losses * mask),
                             loss_weight=count,
                             metrics={"token_accuracy": (tf.reduce_sum(correct * mask), count)})

  def passage_scores(self,
                     passage_ids,
                     passage_mask,
                     start_id: int,
                     aggregation: str = "pre_softmax") -> tf.Tensor:
    """FiD-KD relevance of each passage, float32 [B, n], by one of SCORE_AGGREGATIONS.

    Only the first decoder position is run: its cross-attention does not depend on later tokens (causal
    decoder), so this equals the first step of greedy decoding.
    """
    memory, memory_mask = self.encode(passage_ids, passage_mask, training=False)
    start = tf.fill([tf.shape(passage_ids)[0], 1], tf.cast(start_id, tf.int32))
    _, cross = self.decode(start, memory, memory_mask, _memory_ids(passage_ids), training=False)
    if aggregation not in SCORE_AGGREGATIONS:
      raise ValueError(f"unknown reader score aggregation {aggregation!r}; use one of "
                       f"{sorted(SCORE_AGGREGATIONS)}")
    return SCORE_AGGREGATIONS[aggregation](cross[:, :, :, 0, :], passage_mask)

  def greedy_decode(self, passage_ids, passage_mask, start_id: int) -> tf.Tensor:
    """Greedy answer ids, int32 [B, T] (read up to the first [SEP]).

    Re-runs the decoder on the whole prefix each step (no cache): T is a few tokens for QA answers, and
    the fixed [B, T] shape keeps the computation static.
    """
    memory, memory_mask = self.encode(passage_ids, passage_mask, training=False)
    memory_ids = _memory_ids(passage_ids)
    batch = tf.shape(passage_ids)[0]
    steps = self.config.answer_seq_len
    tokens = tf.concat(
        [tf.fill([batch, 1], tf.cast(start_id, tf.int32)),
         tf.zeros([batch, steps - 1], tf.int32)], axis=1)
    outputs = []
    for t in range(steps):
      logits, _ = self.decode(tokens, memory, memory_mask, memory_ids, training=False)
      next_ids = tf.argmax(logits[:, t], axis=-1, output_type=tf.int32)
      outputs.append(next_ids)
      if t + 1 < steps:
        tokens = tf.concat([tokens[:, :t + 1], next_ids[:, tf.newaxis], tokens[:, t + 2:]], axis=1)
    return tf.stack(outputs, axis=1)


def _memory_ids(passage_ids) -> tf.Tensor:
  """int [B, n*L]: the wordpiece at every position of the fused memory (encode's order)."""
  shape = tf.shape(passage_ids)
  return tf.reshape(passage_ids, [shape[0], shape[1] * shape[2]])


def build_reader(config: FidConfig) -> FidReader:
  """A FidReader with its variables created (one dummy forward pass)."""
  reader = FidReader(config)
  dummy = tf.zeros([1, 1, config.passage_seq_len], tf.int32)
  reader((dummy, tf.ones_like(dummy), tf.zeros([1, config.answer_seq_len], tf.int32)))
  return reader
