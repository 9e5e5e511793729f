"""Fusion-in-Decoder (FiD) reader and the FiD-KD distillation of its cross-attention into the retriever.

FiD (Izacard & Grave 2021, facebookresearch/FiD src/model.py): each (question, passage) pair, formatted
"question: Q title: T context: P", is encoded ON ITS OWN ([B*n, L]); the decoder cross-attends over the
concatenation of all n encoder outputs ([B, n*L]) and generates the answer. FiD-KD (Izacard & Grave,
"Distilling Knowledge from Reader to Retriever", ICLR 2021) turns the decoder's cross-attention into a
relevance score per passage and trains the retriever to match it with a KL loss.

Why not Model Garden's official.nlp.modeling.models.t5: its attention returns only the post-softmax
weights, and only of the encoder's self-attention; FiD-KD needs the PRE-softmax cross-attention logits of
every decoder layer. The reader here is therefore a compact T5-style encoder-decoder of tf_keras layers
(pre-LayerNorm blocks, ReLU feed-forward, token embedding tied with the output softmax, and T5's relative
position buckets: a learned bias per head and bucket of key-minus-query distance, shared by the layers,
in the encoder and decoder self-attention; none in the cross-attention, as in T5, so its logits are a
plain q.k / sqrt(d_head)) and T5's initialization (see FidReader). A reader trained from scratch must
learn to copy the answer's wordpieces from a passage, which needs "the token after the one just copied"
attention; a bias per distance gives that directly. (Learned absolute position embeddings were replaced
together with the initialization; only the pair was measured, see FidReader.)

The encoder may instead be a pre-trained BERT (FidConfig.encoder = "bert": Model Garden's BertEncoderV2
from realm_tf.modeling.bert, warm-started by load_encoder_weights from anything
realm_tf.modeling.bert_conversion reads: a bin/train_mlm export, TF1 BERT, Hugging Face safetensors such
as all-MiniLM-L6-v2), with a Dense projection to the decoder width when they differ. Why: the paper's
reader is pre-trained T5 and reads from its first step; a reader encoder trained from scratch on testdata
reached 1% dev exact match on the passages of a distilled retriever (issue 19), too weak a teacher. The
encoder-decoder of a BERT encoder and a small decoder trained from scratch is still Fusion-in-Decoder:
passages encoded on their own, the decoder cross-attending over all of them.

Tokenization is realm_tf.tokenization (WordPiece); the decoder starts from [CLS] and ends with [SEP].
On a vocab without the words "question", "title", "context" (testdata/vocab.txt) the markers are [UNK]
pieces, which still separate the fields positionally.

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

Distillation loss (FiD-KD; Atlas's "adist" with temperatures): per question,
  KL( softmax(reader_scores / T_reader) || softmax(retriever_scores / T_retriever) )
over its n passages, with the reader scores a stop-gradient target, averaged over questions ("batchmean";
FiD's KLDivLoss(reduction="mean") divides by n as well, which only rescales the learning rate).
"""

import dataclasses
from typing import ClassVar, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import evaluation
from realm_tf import json_config
from realm_tf.modeling import bert as bert_lib
from realm_tf.modeling import bert_conversion
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import losses

CONFIG_NAME = "fid_config.json"
ENCODERS = ("t5", "bert")
# Additive bias of masked attention positions (as realm_tf.modeling.losses.MASK_VALUE).
_MASK_BIAS = -1e9


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
      BertEncoderV2 of config `bert`, meant to be warm-started: load_encoder_weights; num_encoder_layers
      is then unused). hidden_size, num_heads, intermediate_size are the decoder's either way.
    bert: the BERT encoder's configuration (encoder "bert" only); its vocab_size must be vocab_size.
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
      if self.passage_seq_len > self.bert.max_position_embeddings:
        raise ValueError(f"FidConfig: passage_seq_len {self.passage_seq_len} exceeds the BERT encoder's "
                         f"max_position_embeddings {self.bert.max_position_embeddings}")
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


def bert_encoder_config(checkpoint: str, vocab_size: int, flag: str = "--reader_init_checkpoint"
                        ) -> bert_lib.BertConfig:
  """The BertConfig of a warm-start checkpoint (bert_conversion.config_from_source), checked against the
  corpus vocab: the reader's ids come from that vocab, and a BERT of another vocab would read them as
  other words."""
  try:
    config = bert_conversion.config_from_source(checkpoint)
  except (bert_conversion.ConversionError, FileNotFoundError, ValueError) as e:
    raise ValueError(f"{flag}={checkpoint}: not a BERT checkpoint realm_tf can read ({e}); pass a "
                     "bin/train_mlm export, a TF1 BERT checkpoint or a Hugging Face BERT directory with "
                     "its bert_config.json / config.json") from e
  if config.vocab_size != vocab_size:
    raise ValueError(f"{flag}={checkpoint}: its BERT has a vocabulary of {config.vocab_size} wordpieces, "
                     f"the corpus vocab (--vocab_path) {vocab_size}; warm-start from a BERT of the same "
                     "vocab (e.g. bin/train_mlm with this --vocab_path)")
  return config


def load_encoder_weights(reader: "FidReader", checkpoint: str) -> "bert_conversion.ConversionReport":
  """Warm-starts a BERT-encoder reader's encoder from `checkpoint`; strict: every encoder weight must be
  found (a partly random encoder is not the pre-trained reader the run asks for)."""
  if reader.config.encoder != "bert":
    raise ValueError(f"load_encoder_weights: the reader's encoder is {reader.config.encoder!r}, not 'bert'")
  return bert_conversion.load_bert_weights(reader.bert_encoder, checkpoint, strict=True)


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


class TokenizedExamples(NamedTuple):
  """Reader examples as wordpiece id lists, before truncation and padding (what answer substitution edits).

  pairs: B lists of n id lists, the formatted (question, passage) pairs, untruncated.
  answers: B id lists, the target answers without [SEP] (empty lists for prediction).
  answer_texts: B strings, the answers as written ("" for prediction).
  """
  pairs: List[List[List[int]]]
  answers: List[List[int]]
  answer_texts: List[str]


def tokenize_examples(tokenizer, questions: Sequence[str], passages: Sequence[Sequence[Tuple[str, str]]],
                      answers: Optional[Sequence[str]] = None) -> TokenizedExamples:
  """Formats and tokenizes B questions with their n passages each (and their answers, if given)."""
  num_passages = {len(p) for p in passages}
  if len(num_passages) > 1:
    raise ValueError(f"fid.tokenize_examples: every question needs the same number of passages, got "
                     f"{sorted(num_passages)}")
  n = num_passages.pop() if num_passages else 0
  texts = [format_passage(q, t, b) for q, ps in zip(questions, passages) for t, b in ps]
  tokenized = [t.ids for t in tokenizer.tokenize_texts(texts)]
  pairs = [tokenized[i * n:(i + 1) * n] for i in range(len(questions))]
  answer_ids = ([t.ids for t in tokenizer.tokenize_texts(list(answers))] if answers is not None
                else [[] for _ in questions])
  return TokenizedExamples(pairs, answer_ids, list(answers) if answers is not None else [""] * len(pairs))


def pad_examples(tokenizer, config: FidConfig, examples: TokenizedExamples,
                 with_answers: bool = True) -> ReaderFeatures:
  """Truncates the pairs at L wordpieces (FiD truncates at text_maxlength), the answers at T - 1, and
  pads; with_answers=False gives empty targets (prediction)."""
  n = len(examples.pairs[0]) if examples.pairs else 0
  passage_ids, passage_mask = _pad([ids for pairs in examples.pairs for ids in pairs],
                                   config.passage_seq_len)
  shape = [len(examples.pairs), n, config.passage_seq_len]
  steps = config.answer_seq_len
  answer_ids = [list(a)[:steps - 1] for a in examples.answers]
  decoder_input_ids, _ = _pad([[tokenizer.cls_id] + a for a in answer_ids], steps)
  target_ids, target_mask = _pad([a + [tokenizer.sep_id] for a in answer_ids], steps)
  if not with_answers:
    target_mask[:] = 0
  return ReaderFeatures(passage_ids.reshape(shape), passage_mask.reshape(shape), decoder_input_ids,
                        target_ids, target_mask)


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
    ReaderFeatures; the formatted text is truncated at L wordpieces, the answer at T - 1 pieces.
  """
  return pad_examples(tokenizer, config, tokenize_examples(tokenizer, questions, passages, answers),
                      with_answers=answers is not None)


# ---------------------------------------------------------------------------------------------------------
# Answer substitution (reader training augmentation).


def answer_shape(answer: str) -> Tuple[str, ...]:
  """A coarse, dataset-independent answer type: per word "d" (has a digit), "X" (capitalized) or "x".

  "19 October 1793" -> ("d", "X", "d"), "Lunithpry Guild" -> ("X", "X"), "Briarmer hymn" -> ("X", "x").
  """
  return tuple("d" if any(c.isdigit() for c in w) else "X" if w[:1].isupper() else "x"
               for w in answer.split())


def continuation_ids(tokenizer) -> FrozenSet[int]:
  """Ids of the "##" wordpieces: a match that ends before one of them is only part of a word."""
  return frozenset(i for i, token in enumerate(tokenizer.vocab) if token.startswith("##"))


Pattern = Tuple[int, ...]


def _by_first_piece(patterns) -> Dict[int, List[Pattern]]:
  """Patterns indexed by their first wordpiece, longest first (for leftmost-longest matching)."""
  index: Dict[int, List[Pattern]] = {}
  for pattern in sorted({tuple(p) for p in patterns if p}, key=lambda p: (-len(p), p)):
    index.setdefault(pattern[0], []).append(pattern)
  return index


def find_spans(ids: Sequence[int], patterns: Dict[int, List[Pattern]],
               continuation: FrozenSet[int]) -> List[Tuple[int, Pattern]]:
  """Leftmost-longest, non-overlapping whole-word occurrences [(start, pattern)] of the patterns
  (_by_first_piece) in ids. A pattern's first piece starts a word (no "##" piece does), so only its end
  needs a word-boundary check."""
  spans, i = [], 0
  while i < len(ids):
    match = next((p for p in patterns.get(ids[i], ())
                  if tuple(ids[i:i + len(p)]) == p
                  and (i + len(p) == len(ids) or ids[i + len(p)] not in continuation)), None)
    if match is None:
      i += 1
    else:
      spans.append((i, match))
      i += len(match)
  return spans


def replace_spans(ids: Sequence[int], spans: Sequence[Tuple[int, Pattern]],
                  mapping: Dict[Pattern, Sequence[int]]) -> List[int]:
  """ids with every span's pattern replaced by mapping[pattern] (patterns not in mapping stay)."""
  out, last = [], 0
  for start, pattern in spans:
    out.extend(ids[last:start])
    out.extend(mapping.get(pattern, pattern))
    last = start + len(pattern)
  out.extend(ids[last:])
  return out


def answer_passages(examples: TokenizedExamples, continuation: FrozenSet[int]) -> List[int]:
  """Per example, the index of its first (highest-ranked) pair holding its answer as whole words; -1 if
  none does (or the answer is empty)."""
  found = []
  for pairs, answer in zip(examples.pairs, examples.answers):
    patterns = _by_first_piece([answer])
    found.append(next((i for i, ids in enumerate(pairs) if find_spans(ids, patterns, continuation)), -1))
  return found


def single_passage_examples(examples: TokenizedExamples, continuation: FrozenSet[int]) -> TokenizedExamples:
  """The examples whose answer is in one of their pairs, each with that pair alone (answer_passages)."""
  keep = [(i, p) for i, p in enumerate(answer_passages(examples, continuation)) if p >= 0]
  return TokenizedExamples([[examples.pairs[i][p]] for i, p in keep], [examples.answers[i] for i, _ in keep],
                           [examples.answer_texts[i] for i, _ in keep])


class AnswerSubstitution:
  """Answer substitution for reader training: answers in the passages and the target are relabeled.

  The pool is the examples' own answers. In a substituted example, EVERY whole-word occurrence of ANY
  pool answer in its n (question, passage) pairs is replaced, one mapping per example, by another pool
  answer of the same answer_shape (distinct originals get distinct replacements), and the target becomes
  its own answer's replacement.

  Why: a reader trained from scratch lowers its loss by memorizing question -> answer instead of reading,
  and then its cross-attention says nothing about the passages (FiD-KD's teacher signal); a substituted
  answer can only be produced by copying it from the passage that holds it. Why every answer, not only
  the example's own: with only the gold one replaced, the reader learned to spot the passage whose
  answer-like span differs from what it had memorized of the corpus (testdata: 96% training token
  accuracy, 2% dev exact match); relabeling all of them leaves matching the question to the passage as
  the only way to the answer. The same shape keeps the answer type (a date stays a date), which the
  reader needs to find the answer's place. A fresh draw every epoch keeps the pairs from being memorized.

  Left as they are: examples whose answer occurs in none of their passages (a substituted target would
  be in no passage: noise to the reader, not reading), answers holding [UNK] (their pieces cannot be
  located reliably) and answers whose shape no other answer has.

  Args:
    examples: from tokenize_examples, with answers.
    continuation: continuation_ids(tokenizer).
    unk_id: the tokenizer's [UNK] id.
  """

  def __init__(self, examples: TokenizedExamples, continuation: FrozenSet[int], unk_id: int):
    self.examples = examples
    shapes: Dict[Pattern, Tuple[str, ...]] = {}
    for ids, text in zip(examples.answers, examples.answer_texts):
      if ids and unk_id not in ids:
        shapes.setdefault(tuple(ids), answer_shape(text))
    self._shape = shapes
    self._texts = {}
    for ids, text in zip(examples.answers, examples.answer_texts):
      self._texts.setdefault(tuple(ids), text)
    self._by_shape: Dict[Tuple[str, ...], List[Pattern]] = {}
    for pattern, shape in sorted(shapes.items()):
      self._by_shape.setdefault(shape, []).append(pattern)
    patterns = _by_first_piece(shapes)
    # Where the pool answers are does not change between draws: found once.
    self._spans = [[find_spans(ids, patterns, continuation) for ids in pairs] for pairs in examples.pairs]

  def substitute(self, rate: float, rng: np.random.Generator) -> Tuple[TokenizedExamples, int]:
    """(the examples with a `rate` fraction substituted, the number substituted); deterministic for rng."""
    if not 0.0 <= rate <= 1.0:
      raise ValueError(f"answer substitution rate must be in [0, 1], got {rate}")
    pairs, answers = list(self.examples.pairs), list(self.examples.answers)
    texts = list(self.examples.answer_texts)
    substituted = 0
    chosen = rng.random(len(answers)) < rate  # one draw per example, so a rate's choices nest
    for i in np.flatnonzero(chosen):
      gold = tuple(answers[i])
      present = list(dict.fromkeys(p for spans in self._spans[i] for _, p in spans))  # first-seen order
      if gold not in present:
        continue
      mapping = self._draw_mapping(present, rng)
      if gold not in mapping:
        continue
      pairs[i] = [replace_spans(ids, spans, mapping) for ids, spans in zip(pairs[i], self._spans[i])]
      answers[i], texts[i] = list(mapping[gold]), self._texts[mapping[gold]]
      substituted += 1
    return TokenizedExamples(pairs, answers, texts), substituted

  def _draw_mapping(self, present: Sequence[Pattern], rng: np.random.Generator) -> Dict[Pattern, Pattern]:
    """Each present answer -> an answer of its shape drawn uniformly among those not present and not yet
    drawn (an answer with none left keeps itself, i.e. stays out of the mapping)."""
    mapping: Dict[Pattern, Pattern] = {}
    used = set(present)
    for pattern in present:
      group = self._by_shape[self._shape[pattern]]
      # Rejection sampling is uniform over the free answers and cheap while most are free; the list of
      # free ones is built only when a few draws all hit used ones.
      draws = (group[int(rng.integers(len(group)))] for _ in range(8))
      candidate = next((c for c in draws if c not in used), None)
      if candidate is None:
        free = [c for c in group if c not in used]
        if not free:
          continue
        candidate = free[int(rng.integers(len(free)))]
      mapping[pattern] = candidate
      used.add(candidate)
    return mapping


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
    """initializer: fan_in -> a fresh Keras initializer (one instance per weight)."""
    super().__init__(**kwargs)
    self.num_heads = num_heads
    self.head_size = hidden_size // num_heads
    dense = lambda name: tf_keras.layers.EinsumDense(  # pylint: disable=g-long-lambda
        "btd,dnh->btnh", output_shape=[None, num_heads, self.head_size],
        kernel_initializer=initializer(hidden_size),
        name=name)
    self.query = dense("query")
    self.key = dense("key")
    self.value = dense("value")
    self.output_dense = tf_keras.layers.EinsumDense("btnh,nhd->btd", output_shape=[None, hidden_size],
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
      tf.math.log(tf.maximum(tf.cast(n, tf.float32), 1.0) / max_exact) / np.log(max_distance / max_exact)
      * (num_buckets - max_exact), tf.int32)
  large = tf.minimum(large, num_buckets - 1)
  return bucket + tf.where(n < max_exact, n, large)


class RelativePositionBias(tf_keras.layers.Layer):
  """A learned bias per head and relative-position bucket: call(q_len, k_len) -> [1, heads, q_len, k_len]."""

  def __init__(self, config: FidConfig, bidirectional: bool, initializer, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.bidirectional = bidirectional
    self.bias = tf_keras.layers.Embedding(config.relative_attention_num_buckets, config.num_heads,
                                          embeddings_initializer=initializer(1), name="bias")

  def call(self, query_length, key_length):
    relative = tf.range(key_length)[tf.newaxis, :] - tf.range(query_length)[:, tf.newaxis]
    buckets = relative_position_bucket(relative, self.bidirectional,
                                       self.config.relative_attention_num_buckets,
                                       self.config.relative_attention_max_distance)
    return tf.transpose(self.bias(buckets), [2, 0, 1])[tf.newaxis]


class _FeedForward(tf_keras.layers.Layer):

  def __init__(self, config: FidConfig, initializer, **kwargs):
    super().__init__(**kwargs)
    self.inner = tf_keras.layers.Dense(config.intermediate_size, activation="relu",
                                       kernel_initializer=initializer(config.hidden_size), name="inner")
    self.outer = tf_keras.layers.Dense(config.hidden_size,
                                       kernel_initializer=initializer(config.intermediate_size),
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
  probabilities = tf.nn.softmax(logits + (1.0 - flat_mask) * _MASK_BIAS, axis=-1) * flat_mask
  per_passage = tf.reduce_sum(tf.reshape(probabilities, [shape[0], tf.shape(logits)[1], tf.shape(logits)[2],
                                                          shape[1], shape[2]]), axis=-1)
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
    initializer = lambda fan_in: tf_keras.initializers.RandomNormal(
        stddev=config.initializer_factor * fan_in ** -0.5)
    # Embeddings at stddev 1 (fan_in 1), with the H^-0.5 logit scale of T5's tied softmax below.
    self.token_embedding = tf_keras.layers.Embedding(config.vocab_size, config.hidden_size,
                                                     embeddings_initializer=initializer(1),
                                                     name="token_embedding")
    self.decoder_position_bias = RelativePositionBias(config, False, initializer,
                                                      name="decoder_position_bias")
    if config.encoder == "bert":
      # The decoder keeps its own token embedding (the BERT word embeddings stay the encoder's, and the
      # decoder's width may differ).
      self.bert_encoder = bert_lib.build_encoder(config.bert, name="bert_encoder")
      self.encoder_projection = (
          tf_keras.layers.Dense(config.hidden_size, kernel_initializer=initializer(config.bert.hidden_size),
                                name="encoder_projection")
          if config.bert.hidden_size != config.hidden_size else None)
    else:
      self.encoder_position_bias = RelativePositionBias(config, True, initializer,
                                                        name="encoder_position_bias")
      self.encoder_layers = [_EncoderLayer(config, initializer, name=f"encoder_layer_{i}")
                             for i in range(config.num_encoder_layers)]
      self.encoder_norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")
    self.decoder_layers = [_DecoderLayer(config, initializer, name=f"decoder_layer_{i}")
                           for i in range(config.num_decoder_layers)]
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
    if self.config.encoder == "bert":
      int_mask = tf.cast(mask, tf.int32)
      x = self.bert_encoder(bert_lib.encoder_inputs(tf.cast(ids, tf.int32), int_mask, tf.zeros_like(int_mask)),
                            training=training)["sequence_output"]
      if self.encoder_projection is not None:
        x = self.encoder_projection(x)
    else:
      x = self.dropout(self.token_embedding(ids), training=training)
      bias = ((1.0 - mask) * _MASK_BIAS)[:, tf.newaxis, tf.newaxis, :] + self.encoder_position_bias(
          seq_len, seq_len)
      for layer in self.encoder_layers:
        x = layer(x, bias, training=training)
      x = self.encoder_norm(x)
    memory = tf.reshape(tf.cast(x, tf.float32), [shape[0], shape[1] * seq_len, self.config.hidden_size])
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
    x = self.dropout(self.token_embedding(decoder_input_ids), training=training)
    causal = tf.linalg.band_part(tf.ones([steps, steps]), -1, 0)
    self_bias = ((1.0 - causal) * _MASK_BIAS)[tf.newaxis, tf.newaxis] + self.decoder_position_bias(
        steps, steps)
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

  def passage_scores(self, passage_ids, passage_mask, start_id: int,
                     aggregation: str = "pre_softmax") -> tf.Tensor:
    """FiD-KD relevance of each passage, float32 [B, n], by one of SCORE_AGGREGATIONS.

    Only the first decoder position is run: its cross-attention does not depend on later tokens (causal
    decoder), so this equals the first step of greedy decoding.
    """
    memory, memory_mask = self.encode(passage_ids, passage_mask, training=False)
    start = tf.fill([tf.shape(passage_ids)[0], 1], tf.cast(start_id, tf.int32))
    _, cross = self.decode(start, memory, memory_mask, training=False)
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
