"""Fusion-in-Decoder (FiD) reader and the FiD-KD distillation of its cross-attention into the retriever.

FiD (Izacard & Grave 2021, facebookresearch/FiD src/model.py): each (question, passage) pair, formatted
"question: Q title: T context: P", is encoded ON ITS OWN ([B*n, L]); the decoder cross-attends over the
concatenation of all n encoder outputs ([B, n*L]) and generates the answer. FiD-KD (Izacard & Grave,
"Distilling Knowledge from Reader to Retriever", ICLR 2021) turns the decoder's cross-attention into a
relevance score per passage and trains the retriever to match it with a KL loss.

Why not Model Garden's official.nlp.modeling.models.t5: its attention returns only the post-softmax
weights, and only of the encoder's self-attention; FiD-KD needs the PRE-softmax cross-attention logits of
every decoder layer. The reader here is therefore a compact T5-style encoder-decoder of tf_keras layers
(pre-LayerNorm blocks, ReLU feed-forward, token embedding tied with the output softmax as in T5), with
learned absolute position embeddings instead of T5's relative position buckets (no pretrained T5 weights
are loaded, so the bias scheme is free; absolute positions keep the logits a plain q.k / sqrt(d_head)).

Tokenization is realm_tf.tokenization (WordPiece); the decoder starts from [CLS] and ends with [SEP].
On a vocab without the words "question", "title", "context" (testdata/vocab.txt) the markers are [UNK]
pieces, which still separate the fields positionally.

Attention scores (FiD's get_crossattention_scores): the pre-softmax cross-attention logits of the FIRST
decoded token, for every decoder layer and head, averaged over heads, layers and the passage's
NON-PADDING tokens: one score per passage, [B, n].

Distillation loss (FiD-KD; Atlas's "adist" with temperatures): per question,
  KL( softmax(reader_scores / T_reader) || softmax(retriever_scores / T_retriever) )
over its n passages, with the reader scores a stop-gradient target, averaged over questions ("batchmean";
FiD's KLDivLoss(reduction="mean") divides by n as well, which only rescales the learning rate).
"""

import dataclasses
import json
import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import evaluation
from realm_tf import io_utils
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import losses

CONFIG_NAME = "fid_config.json"
# Additive bias of masked attention positions (as realm_tf.modeling.losses.MASK_VALUE).
_MASK_BIAS = -1e9


@dataclasses.dataclass(frozen=True)
class FidConfig:
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
    initializer_range: stddev of the truncated-normal initializers.
  """
  vocab_size: int
  hidden_size: int = 64
  num_heads: int = 2
  num_encoder_layers: int = 2
  num_decoder_layers: int = 2
  intermediate_size: int = 128
  dropout_rate: float = 0.0
  passage_seq_len: int = 64
  answer_seq_len: int = 12
  initializer_range: float = 0.02

  def __post_init__(self):
    if self.hidden_size % self.num_heads:
      raise ValueError(f"FidConfig: hidden_size {self.hidden_size} is not a multiple of num_heads "
                       f"{self.num_heads}")
    if self.passage_seq_len < 2 or self.answer_seq_len < 2:
      raise ValueError(f"FidConfig: passage_seq_len ({self.passage_seq_len}) and answer_seq_len "
                       f"({self.answer_seq_len}) must be at least 2")

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  def save(self, model_dir: str) -> str:
    tf.io.gfile.makedirs(model_dir)
    path = os.path.join(model_dir, CONFIG_NAME)
    io_utils.write_json_atomic(path, self.to_dict())
    return path

  @classmethod
  def load(cls, model_dir: str) -> "FidConfig":
    path = os.path.join(model_dir, CONFIG_NAME)
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"{path} does not exist; bin/train_fid_kd writes it when it starts")
    with tf.io.gfile.GFile(path) as f:
      try:
        return cls(**json.load(f))
      except (json.JSONDecodeError, TypeError) as e:
        raise ValueError(f"{path}: not a FiD reader configuration ({e})") from e


# ---------------------------------------------------------------------------------------------------------
# Input formatting.


def format_passage(question: str, title: str, body: str) -> str:
  """FiD's reader input text (src/data.py)."""
  return f"question: {question} title: {title} context: {body}"


class ReaderFeatures(NamedTuple):
  """Padded reader inputs (numpy int32).

  passage_ids, passage_mask: [B, n, L] formatted pairs, 1 on real tokens.
  decoder_input_ids: [B, T] [CLS] a_1 ... a_{T-1} (teacher forcing).
  target_ids, target_mask: [B, T] a_1 ... [SEP], 1 on real target tokens.
  """
  passage_ids: np.ndarray
  passage_mask: np.ndarray
  decoder_input_ids: np.ndarray
  target_ids: np.ndarray
  target_mask: np.ndarray


def _pad(rows: Sequence[Sequence[int]], length: int) -> Tuple[np.ndarray, np.ndarray]:
  ids = np.zeros([len(rows), length], np.int32)
  mask = np.zeros([len(rows), length], np.int32)
  for i, row in enumerate(rows):
    row = list(row)[:length]
    ids[i, :len(row)] = row
    mask[i, :len(row)] = 1
  return ids, mask


def featurize(tokenizer, config: FidConfig, questions: Sequence[str],
              passages: Sequence[Sequence[Tuple[str, str]]],
              answers: Optional[Sequence[str]] = None) -> ReaderFeatures:
  """Tokenizes and pads reader inputs.

  Args:
    tokenizer: realm_tf.tokenization.Tokenizer (pad id 0, [CLS] start, [SEP] end).
    config: passage_seq_len L and answer_seq_len T.
    questions: B question strings.
    passages: B lists of n (title, body) pairs, the same n for every question.
    answers: B target strings (training); None gives empty targets (prediction).

  Returns:
    ReaderFeatures; the formatted text is truncated at L wordpieces (FiD truncates at text_maxlength),
    the answer at T - 1 pieces.
  """
  num_passages = {len(p) for p in passages}
  if len(num_passages) > 1:
    raise ValueError(f"fid.featurize: every question needs the same number of passages, got "
                     f"{sorted(num_passages)}")
  n = num_passages.pop() if num_passages else 0
  texts = [format_passage(q, t, b) for q, ps in zip(questions, passages) for t, b in ps]
  tokenized = [t.ids for t in tokenizer.tokenize_texts(texts)]
  passage_ids, passage_mask = _pad(tokenized, config.passage_seq_len)
  shape = [len(questions), n, config.passage_seq_len]
  steps = config.answer_seq_len
  answer_ids = ([t.ids[:steps - 1] for t in tokenizer.tokenize_texts(list(answers))] if answers is not None
                else [[] for _ in questions])
  decoder_input_ids, _ = _pad([[tokenizer.cls_id] + a for a in answer_ids], steps)
  target_ids, target_mask = _pad([a + [tokenizer.sep_id] for a in answer_ids], steps)
  if answers is None:
    target_mask[:] = 0
  return ReaderFeatures(passage_ids.reshape(shape), passage_mask.reshape(shape), decoder_input_ids,
                        target_ids, target_mask)


def detokenize(tokenizer, ids: Sequence[int]) -> str:
  """Wordpiece ids up to the first [SEP] (exclusive) -> text ("##" pieces joined to their word)."""
  pieces = []
  for i in ids:
    i = int(i)
    if i == tokenizer.sep_id:
      break
    if i in (tokenizer.pad_id, tokenizer.cls_id):
      continue
    pieces.append(tokenizer.vocab[i])
  return " ".join(pieces).replace(" ##", "").replace("##", "")


# ---------------------------------------------------------------------------------------------------------
# The model.


class Attention(tf_keras.layers.Layer):
  """Multi-head attention that also returns its PRE-softmax logits.

  Call:
    query: [B, Tq, H]; memory: [B, Tk, H]; bias: additive, broadcastable to [B, heads, Tq, Tk].
    Returns (output [B, Tq, H], logits [B, heads, Tq, Tk] = q.k / sqrt(d_head), without the bias).
  """

  def __init__(self, hidden_size: int, num_heads: int, initializer, **kwargs):
    """initializer: a zero-argument factory of Keras initializers (one fresh instance per weight)."""
    super().__init__(**kwargs)
    self.num_heads = num_heads
    self.head_size = hidden_size // num_heads
    dense = lambda name: tf_keras.layers.EinsumDense(  # pylint: disable=g-long-lambda
        "btd,dnh->btnh", output_shape=[None, num_heads, self.head_size], kernel_initializer=initializer(),
        name=name)
    self.query = dense("query")
    self.key = dense("key")
    self.value = dense("value")
    self.output_dense = tf_keras.layers.EinsumDense("btnh,nhd->btd", output_shape=[None, hidden_size],
                                                    kernel_initializer=initializer(), name="output")

  def call(self, query, memory, bias):
    q = self.query(query)
    k = self.key(memory)
    v = self.value(memory)
    logits = tf.einsum("bqnh,bknh->bnqk", q, k) / tf.math.sqrt(float(self.head_size))
    weights = tf.nn.softmax(logits + bias, axis=-1)
    context = tf.einsum("bnqk,bknh->bqnh", weights, v)
    return self.output_dense(context), logits


class _FeedForward(tf_keras.layers.Layer):

  def __init__(self, config: FidConfig, initializer, **kwargs):
    super().__init__(**kwargs)
    self.inner = tf_keras.layers.Dense(config.intermediate_size, activation="relu",
                                       kernel_initializer=initializer(), name="inner")
    self.outer = tf_keras.layers.Dense(config.hidden_size, kernel_initializer=initializer(),
                                       name="outer")

  def call(self, x):
    return self.outer(self.inner(x))


class _EncoderLayer(tf_keras.layers.Layer):
  """Pre-LayerNorm block: x + SelfAttn(LN(x)); x + FFN(LN(x))."""

  def __init__(self, config: FidConfig, initializer, **kwargs):
    super().__init__(**kwargs)
    self.attention_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="attention_norm")
    self.attention = Attention(config.hidden_size, config.num_heads, initializer, name="self_attention")
    self.ffn_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="ffn_norm")
    self.ffn = _FeedForward(config, initializer, name="ffn")
    self.dropout = tf_keras.layers.Dropout(config.dropout_rate)

  def call(self, x, bias, training=None):
    attended, _ = self.attention(self.attention_norm(x), self.attention_norm(x), bias)
    x = x + self.dropout(attended, training=training)
    return x + self.dropout(self.ffn(self.ffn_norm(x)), training=training)


class _DecoderLayer(tf_keras.layers.Layer):
  """Causal self-attention, cross-attention over the fused encoder outputs, FFN; returns the
  cross-attention logits [B, heads, T, n*L] as well."""

  def __init__(self, config: FidConfig, initializer, **kwargs):
    super().__init__(**kwargs)
    self.self_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="self_attention_norm")
    self.self_attention = Attention(config.hidden_size, config.num_heads, initializer,
                                    name="self_attention")
    self.cross_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="cross_attention_norm")
    self.cross_attention = Attention(config.hidden_size, config.num_heads, initializer,
                                     name="cross_attention")
    self.ffn_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="ffn_norm")
    self.ffn = _FeedForward(config, initializer, name="ffn")
    self.dropout = tf_keras.layers.Dropout(config.dropout_rate)

  def call(self, x, memory, self_bias, cross_bias, training=None):
    normed = self.self_norm(x)
    attended, _ = self.self_attention(normed, normed, self_bias)
    x = x + self.dropout(attended, training=training)
    attended, cross_logits = self.cross_attention(self.cross_norm(x), memory, cross_bias)
    x = x + self.dropout(attended, training=training)
    return x + self.dropout(self.ffn(self.ffn_norm(x)), training=training), cross_logits


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
    # A factory, not one instance: a reused unseeded Keras initializer returns the same values each call.
    initializer = lambda: tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range)
    # T5's embedding initialization (stddev 1) with the H^-0.5 logit scale of its tied softmax below;
    # with stddev initializer_range the tied logits start near 0 and learn very slowly. The position
    # embeddings get the same scale, or the sum would hide the positions (which copying answers needs).
    unit = lambda: tf_keras.initializers.TruncatedNormal(stddev=1.0)
    self.token_embedding = tf_keras.layers.Embedding(config.vocab_size, config.hidden_size,
                                                     embeddings_initializer=unit(), name="token_embedding")
    self.encoder_positions = tf_keras.layers.Embedding(config.passage_seq_len, config.hidden_size,
                                                       embeddings_initializer=unit(),
                                                       name="encoder_positions")
    self.decoder_positions = tf_keras.layers.Embedding(config.answer_seq_len, config.hidden_size,
                                                       embeddings_initializer=unit(),
                                                       name="decoder_positions")
    self.encoder_layers = [_EncoderLayer(config, initializer, name=f"encoder_layer_{i}")
                           for i in range(config.num_encoder_layers)]
    self.decoder_layers = [_DecoderLayer(config, initializer, name=f"decoder_layer_{i}")
                           for i in range(config.num_decoder_layers)]
    self.encoder_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")
    self.decoder_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")
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
    x = self.token_embedding(ids) + self.encoder_positions(tf.range(seq_len))[tf.newaxis]
    x = self.dropout(x, training=training)
    bias = ((1.0 - mask) * _MASK_BIAS)[:, tf.newaxis, tf.newaxis, :]
    for layer in self.encoder_layers:
      x = layer(x, bias, training=training)
    x = self.encoder_norm(x)
    memory = tf.reshape(x, [shape[0], shape[1] * seq_len, self.config.hidden_size])
    return memory, tf.reshape(mask, [shape[0], shape[1] * seq_len])

  def decode(self, decoder_input_ids, memory, memory_mask, training=None):
    """Decoder over the fused memory.

    Args:
      decoder_input_ids: int [B, T'] (T' <= T).
      memory, memory_mask: from encode.

    Returns:
      (logits float32 [B, T', V], cross_logits float [B, layers, heads, T', n*L]).
    """
    steps = tf.shape(decoder_input_ids)[1]
    x = self.token_embedding(decoder_input_ids) + self.decoder_positions(tf.range(steps))[tf.newaxis]
    x = self.dropout(x, training=training)
    causal = tf.linalg.band_part(tf.ones([steps, steps]), -1, 0)
    self_bias = ((1.0 - causal) * _MASK_BIAS)[tf.newaxis, tf.newaxis]
    cross_bias = ((1.0 - memory_mask) * _MASK_BIAS)[:, tf.newaxis, tf.newaxis, :]
    cross = []
    for layer in self.decoder_layers:
      x, cross_logits = layer(x, memory, self_bias, cross_bias, training=training)
      cross.append(cross_logits)
    x = self.decoder_norm(x)
    # Tied output embedding, scaled by H^-0.5 as T5 does when tying.
    logits = tf.einsum("bth,vh->btv", x * self.config.hidden_size ** -0.5, self.token_embedding.embeddings)
    return tf.cast(logits, tf.float32), tf.stack(cross, axis=1)

  def call(self, inputs, training=None):
    """(passage_ids, passage_mask, decoder_input_ids) -> logits [B, T, V]."""
    passage_ids, passage_mask, decoder_input_ids = inputs
    memory, memory_mask = self.encode(passage_ids, passage_mask, training=training)
    return self.decode(decoder_input_ids, memory, memory_mask, training=training)[0]

  def compute_loss(self, features: Dict[str, tf.Tensor], training=None) -> losses.LossOutput:
    logits = self((features["passage_ids"], features["passage_mask"], features["decoder_input_ids"]),
                  training=training)
    mask = tf.cast(features["target_mask"], tf.float32)
    token_losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(features["target_ids"], tf.int32), logits=logits)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32),
                               tf.cast(features["target_ids"], tf.int32)), tf.float32)
    count = tf.reduce_sum(mask)
    return losses.LossOutput(loss_sum=tf.reduce_sum(token_losses * mask), loss_weight=count,
                             metrics={"token_accuracy": (tf.reduce_sum(correct * mask), count)})

  def passage_scores(self, passage_ids, passage_mask, start_id: int) -> tf.Tensor:
    """FiD-KD relevance of each passage, float32 [B, n] (see aggregate_cross_attention).

    Only the first decoder position is run: its cross-attention does not depend on later tokens (causal
    decoder), so this equals the first step of greedy decoding.
    """
    memory, memory_mask = self.encode(passage_ids, passage_mask, training=False)
    start = tf.fill([tf.shape(passage_ids)[0], 1], tf.cast(start_id, tf.int32))
    _, cross = self.decode(start, memory, memory_mask, training=False)
    return aggregate_cross_attention(cross[:, :, :, 0, :], passage_mask)

  def greedy_decode(self, passage_ids, passage_mask, start_id: int) -> tf.Tensor:
    """Greedy answer ids, int32 [B, T] (read up to the first [SEP]).

    Re-runs the decoder on the whole prefix each step (no cache): T is a few tokens for QA answers, and
    the fixed [B, T] shape keeps the computation static.
    """
    memory, memory_mask = self.encode(passage_ids, passage_mask, training=False)
    batch = tf.shape(passage_ids)[0]
    steps = self.config.answer_seq_len
    tokens = tf.concat([tf.fill([batch, 1], tf.cast(start_id, tf.int32)),
                        tf.zeros([batch, steps - 1], tf.int32)], axis=1)
    outputs = []
    for t in range(steps):
      logits, _ = self.decode(tokens, memory, memory_mask, training=False)
      next_ids = tf.argmax(logits[:, t], axis=-1, output_type=tf.int32)
      outputs.append(next_ids)
      if t + 1 < steps:
        tokens = tf.concat([tokens[:, :t + 1], next_ids[:, tf.newaxis], tokens[:, t + 2:]], axis=1)
    return tf.stack(outputs, axis=1)


def build_reader(config: FidConfig) -> FidReader:
  """A FidReader with its variables created (one dummy forward pass)."""
  reader = FidReader(config)
  dummy = tf.zeros([1, 1, config.passage_seq_len], tf.int32)
  reader((dummy, tf.ones_like(dummy), tf.zeros([1, config.answer_seq_len], tf.int32)))
  return reader


# ---------------------------------------------------------------------------------------------------------
# Distillation.


def distillation_loss(retriever_scores: tf.Tensor, reader_scores: tf.Tensor,
                      reader_temperature: float = 1.0, retriever_temperature: float = 1.0
                      ) -> losses.LossOutput:
  """KL(softmax(reader / T_reader) || softmax(retriever / T_retriever)) per question.

  Args:
    retriever_scores: float [B, n], trainable.
    reader_scores: float [B, n], the target; its gradient is stopped.
    reader_temperature, retriever_temperature: positive temperatures.

  Returns:
    LossOutput: sum of the per-question KLs, weight B; metric "top1_agreement" (the retriever's best
    passage is the reader's best).
  """
  if reader_temperature <= 0 or retriever_temperature <= 0:
    raise ValueError(f"distillation_loss: temperatures must be positive, got reader "
                     f"{reader_temperature}, retriever {retriever_temperature}")
  target_logits = tf.stop_gradient(tf.cast(reader_scores, tf.float32)) / reader_temperature
  target = tf.nn.softmax(target_logits, axis=-1)
  log_target = tf.nn.log_softmax(target_logits, axis=-1)
  log_student = tf.nn.log_softmax(tf.cast(retriever_scores, tf.float32) / retriever_temperature, axis=-1)
  kl = tf.reduce_sum(target * (log_target - log_student), axis=-1)
  count = tf.cast(tf.shape(kl)[0], tf.float32)
  agree = tf.cast(tf.equal(tf.argmax(retriever_scores, -1), tf.argmax(reader_scores, -1)), tf.float32)
  return losses.LossOutput(loss_sum=tf.reduce_sum(kl), loss_weight=count,
                           metrics={"kl": (tf.reduce_sum(kl), count),
                                    "top1_agreement": (tf.reduce_sum(agree), count)})


class RetrieverDistillation(tf_keras.Model):
  """The retriever under the FiD-KD loss, for realm_tf.training.train_lib.TrainStep.

  Args:
    retriever: realm_tf.modeling.embedder.Retriever (scores q.d).
    reader_temperature, retriever_temperature: see distillation_loss.

  compute_loss features:
    query_token_ids, query_mask, query_segment_ids: int32 [B, Q].
    candidate_token_ids, candidate_mask, candidate_segment_ids: int32 [B, n, C], the retrieved passages.
    reader_scores: float32 [B, n], aggregate_cross_attention of the reader on the same passages.
  """

  def __init__(self, retriever: embedder_lib.Retriever, reader_temperature: float = 1.0,
               retriever_temperature: float = 1.0, name: str = "fid_kd", **kwargs):
    super().__init__(name=name, **kwargs)
    self.retriever = retriever
    self.reader_temperature = reader_temperature
    self.retriever_temperature = retriever_temperature

  def call(self, features, training=None):
    return self.retriever(
        ((features["query_token_ids"], features["query_mask"], features["query_segment_ids"]),
         (features["candidate_token_ids"], features["candidate_mask"],
          features["candidate_segment_ids"])), training=training)

  def compute_loss(self, features: Dict[str, tf.Tensor], training=None) -> losses.LossOutput:
    scores = self(features, training=training)
    return distillation_loss(scores, features["reader_scores"], self.reader_temperature,
                             self.retriever_temperature)


def reader_exact_match(tokenizer, predictions: Sequence[Sequence[int]],
                       answers: Sequence[Sequence[str]]) -> List[bool]:
  """EM of decoded ids against the answers; an answer also counts as written back from its wordpieces
  (the tokenizer lower-cases and strips accents, so "Kelarlé" decodes as "kelarle")."""
  results = []
  for ids, golds in zip(predictions, answers):
    prediction = detokenize(tokenizer, ids)
    round_trip = [detokenize(tokenizer, t.ids) for t in tokenizer.tokenize_texts(list(golds))]
    results.append(evaluation.exact_match(prediction, list(golds) + round_trip))
  return results
