"""ORQA fine-tuning (Lee et al. 2019; REALM sec. 4): retrieve from a FROZEN index, read spans, marginalize.

  q            = Embed_query(question)                        the query tower: trainable
  retrieval    = top retriever_beam blocks by q . d over ALL N frozen block embeddings
                 (brute-force matmul + top_k, in the step; the original used ScaNN for the ids only)
  logit(z)     = q . d_z, recomputed exactly for the beam, so the gradient reaches the query tower
  reader       = SpanReader over [CLS] question [SEP] block [SEP] of the top reader_beam blocks;
                 span logit = span score + logit(z)
  loss         = retriever loss: -log sum p(z) over the beam blocks that contain an answer
               + reader loss:    -log sum p(z, span) over the read blocks x gold spans
                 (each zero when it has no positive; losses.orqa_loss)

Everything from the question ids to the loss is one XLA-compilable function: the block embeddings
[N, D] and the corpus' block wordpieces [N, C] (+ lengths) live on the device as non-trainable
variables, so retrieval, gathering the blocks, packing them with the question
(realm_tf.data.orqa_features.pack_reader_inputs) and labelling happen in the step, with no host round
trip and any batch size (the original ran one question per step).

retriever_correct: the original tests the raw answer string against the raw block text (case-sensitive
substring). In the graph we have wordpiece ids only, so here a block is correct when some answer's
wordpiece sequence occurs in the block's wordpieces (orqa_features.contains_answer); the reader's gold
spans are wordpiece-sequence matches in the original too.

The retriever keeps two towers: the query tower trains, the document tower is frozen (it produced the
block embeddings and is exported as the document embedder, so new documents land in the same space).
The frozen corpus variables are NOT part of the model's checkpoint (they are the index, saved once per
run; see realm_tf.runs.frozen_index), as the original kept them in local variables.
"""

import dataclasses
from typing import Any, Callable, ClassVar, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import json_config
from realm_tf.data import orqa_features
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import losses
from realm_tf.modeling import reader as reader_lib
from realm_tf.modeling import realm_config as realm_config_lib

ORQA_CONFIG_NAME = "orqa_config.json"


@dataclasses.dataclass(frozen=True)
class OrqaConfig(json_config.JsonConfig):
  """What ORQA adds to a run's RealmConfig (saved as MODEL_DIR/orqa_config.json).

  Attributes:
    reader_seq_len: L of [CLS] question [SEP] block [SEP] (320 in ORQA).
    span_hidden_size: the span head's width (256).
    max_span_width: longest span in wordpieces (10).
    retriever_beam_size: blocks of the retriever loss (5000 in ORQA; clamped to the corpus size).
    reader_beam_size: blocks the reader reads (5); prediction retrieves only these, as the original.
    max_answers: gold spans kept per block (the original op's max_answers).
    max_num_answers, max_answer_len: answers per question and wordpieces per answer that the in-graph
      labelling sees (orqa_features module docstring).
    reader_layer_norm_epsilon: the span head's LayerNorm (1e-3, Keras's default, as the original).
    retrieval_corpus_path: the corpus whose rows the frozen index embeds.
  """
  FILE_NAME: ClassVar[str] = ORQA_CONFIG_NAME
  DESCRIPTION: ClassVar[str] = "an ORQA configuration"
  WRITTEN_BY: ClassVar[str] = "bin/train_orqa"

  reader_seq_len: int = 320
  span_hidden_size: int = 256
  max_span_width: int = 10
  retriever_beam_size: int = 5000
  reader_beam_size: int = 5
  max_answers: int = 10
  max_num_answers: int = 10
  max_answer_len: int = 16
  reader_layer_norm_epsilon: float = 1e-3
  retrieval_corpus_path: str = ""

  def __post_init__(self):
    for name in ("span_hidden_size", "max_span_width", "retriever_beam_size", "reader_beam_size",
                 "max_answers", "max_num_answers", "max_answer_len"):
      if getattr(self, name) < 1:
        raise ValueError(f"ORQA {name} must be positive, got {getattr(self, name)}")
    if self.reader_seq_len < 4:
      raise ValueError(f"ORQA reader_seq_len must be at least 4, got {self.reader_seq_len}")
    if self.reader_beam_size > self.retriever_beam_size:
      raise ValueError(f"reader_beam_size {self.reader_beam_size} exceeds retriever_beam_size "
                       f"{self.retriever_beam_size}: the reader reads the top of the retriever's beam")

  @property
  def max_block_len(self) -> int:
    """Block wordpieces that can ever fit beside an empty question."""
    return self.reader_seq_len - 3


class _FrozenCorpus:
  """The index and block wordpieces as device variables, deliberately NOT tracked by the model (a plain
  object, not a tf.Module): they stay out of every checkpoint (saved once as the run's index instead)."""

  def __init__(self, embeddings: np.ndarray, token_ids: np.ndarray, lengths: np.ndarray):
    self.embeddings = tf.Variable(np.asarray(embeddings, np.float32),
                                  trainable=False,
                                  name="block_embeddings")  # [N, D]
    self.token_ids = tf.Variable(np.asarray(token_ids, np.int32), trainable=False,
                                 name="block_token_ids")  # [N, C]
    self.lengths = tf.Variable(np.asarray(lengths, np.int32), trainable=False, name="block_lengths")  # [N]


class OrqaModel(tf_keras.Model):
  """Query tower + frozen index + span reader, trained with ORQA's loss.

  Args:
    config: the run's RealmConfig (retriever_bert, reader_bert, projection, embedder numerics). Its
      share_embedders is ignored: ORQA always keeps two towers (see the module docstring).
    orqa: OrqaConfig.
    block_embeddings: float32 [N, D], row i embeds corpus document i.
    block_token_ids: int32 [N, C] body wordpieces of each block (C <= orqa.max_block_len), padded.
    block_lengths: int32 [N].
    cls_id, sep_id: the vocab's special tokens.

  Features (realm_tf.data.orqa_features names): query_{token_ids,mask,segment_ids} int32 [B, Q],
  question_ids int32 [B, L - 3], question_len [B]; for the loss also answer_ids [B, A, M] and
  answer_len [B, A].
  """

  def __init__(self,
               config: realm_config_lib.RealmConfig,
               orqa: OrqaConfig,
               block_embeddings: np.ndarray,
               block_token_ids: np.ndarray,
               block_lengths: np.ndarray,
               cls_id: int,
               sep_id: int,
               name: str = "orqa",
               **kwargs):
    super().__init__(name=name, **kwargs)
    block_embeddings = np.asarray(block_embeddings)
    if block_embeddings.ndim != 2 or block_embeddings.shape[1] != config.embedding_dim:
      raise ValueError(f"block embeddings have shape {block_embeddings.shape}, expected [N, "
                       f"{config.embedding_dim}] (projection_size); embed the corpus with this "
                       "run's document tower")
    if block_token_ids.shape[0] != block_embeddings.shape[0] or block_lengths.shape != (
        block_embeddings.shape[0],):
      raise ValueError(f"{block_embeddings.shape[0]} block embeddings but block wordpieces of shape "
                       f"{block_token_ids.shape} and lengths {block_lengths.shape}: the index and the "
                       "corpus must have the same rows")
    if block_token_ids.shape[1] > orqa.max_block_len:
      raise ValueError(f"block wordpieces are {block_token_ids.shape[1]} wide; at most reader_seq_len - 3 "
                       f"= {orqa.max_block_len} (CorpusTable.dense_bodies truncates them)")
    self.config = config
    self.orqa = orqa
    self.cls_id, self.sep_id = int(cls_id), int(sep_id)
    self.num_blocks = int(block_embeddings.shape[0])
    self.retriever = embedder_lib.Retriever(config.retriever_bert,
                                            config.projection_size,
                                            config.embedder_layer_norm_epsilon,
                                            config.embedder_dropout_rate,
                                            share_embedders=False,
                                            pooling=config.embedder_pooling,
                                            cosine_score_scale=config.cosine_score_scale)
    self.retriever.doc_embedder.trainable = False
    self.reader = reader_lib.SpanReader(config.reader_bert,
                                        seq_len=orqa.reader_seq_len,
                                        span_hidden_size=orqa.span_hidden_size,
                                        max_span_width=orqa.max_span_width,
                                        layer_norm_epsilon=orqa.reader_layer_norm_epsilon)
    self.corpus = _FrozenCorpus(block_embeddings, block_token_ids, block_lengths)

  @property
  def retriever_beam(self) -> int:
    return min(self.orqa.retriever_beam_size, self.num_blocks)

  @property
  def reader_beam(self) -> int:
    return min(self.orqa.reader_beam_size, self.num_blocks)

  def build_variables(self) -> None:
    """Creates every weight (both towers and the reader) with a dummy batch, so checkpoints can be
    restored into the model and warm starts assigned."""
    dummy = tf.zeros([1, 4], tf.int32)
    self.retriever.embed_documents((dummy, dummy, dummy))
    features = {name: tf.zeros([1, 4], tf.int32) for name in orqa_features.QUERY_FIELDS}
    features[orqa_features.QUESTION_IDS] = tf.zeros([1, self.orqa.max_block_len], tf.int32)
    features[orqa_features.QUESTION_LEN] = tf.zeros([1], tf.int32)
    self(features)

  # -- the pieces of the step ------------------------------------------------------------------------

  def retrieve(
      self,
      features: Dict[str, tf.Tensor],
      beam: int,
      training=None,
      candidate_fn: Optional[Callable[[tf.Tensor], tf.Tensor]] = None) -> Tuple[tf.Tensor, tf.Tensor]:
    """Top `beam` blocks of each question.

    Args:
      features: the query inputs.
      beam: blocks to return.
      candidate_fn: optional approximate search (an exported ScaNN searcher): query embeddings float32
        [B, D] -> candidate rows int [B, R >= beam], -1 for none; the candidates are then ranked by
        their exact q . d. Without it, exact brute force over all N blocks.

    Returns:
      block_rows int32 [B, beam] (best first) and retriever_logits float32 [B, beam], exact q . d
      differentiable in the query tower.
    """
    query = self.retriever.embed_queries(tuple(features[name] for name in orqa_features.QUERY_FIELDS),
                                         training=training)
    query = tf.cast(query, tf.float32)  # [B, D]
    if candidate_fn is None:
      scores = tf.matmul(tf.stop_gradient(query), self.corpus.embeddings, transpose_b=True)  # [B, N]
      _, block_rows = tf.math.top_k(scores, k=beam)
    else:
      # An external op may not report its output's rank; the reshape restores [B, R].
      candidates = tf.reshape(tf.cast(candidate_fn(tf.stop_gradient(query)), tf.int32),
                              [tf.shape(query)[0], -1])  # [B, R]
      valid = tf.logical_and(candidates >= 0, candidates < self.num_blocks)
      candidates = tf.where(valid, candidates, 0)
      scores = tf.einsum("bd,brd->br", tf.stop_gradient(query), tf.gather(self.corpus.embeddings, candidates))
      _, order = tf.math.top_k(tf.where(valid, scores, float("-inf")), k=beam)
      block_rows = tf.gather(candidates, order, batch_dims=1)
    block_embeddings = tf.gather(self.corpus.embeddings, block_rows)  # [B, beam, D]
    return block_rows, tf.einsum("bd,bkd->bk", query, block_embeddings)

  def blocks(self, block_rows: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Wordpieces int32 [..., C] and lengths int32 [...] of the given rows."""
    return tf.gather(self.corpus.token_ids, block_rows), tf.gather(self.corpus.lengths, block_rows)

  def read(self,
           features: Dict[str, tf.Tensor],
           block_rows: tf.Tensor,
           retriever_logits: tf.Tensor,
           training=None) -> Tuple[orqa_features.ReaderInputs, reader_lib.ReaderOutput]:
    """The reader over the first reader_beam of block_rows [B, >= reader_beam]."""
    rows = block_rows[:, :self.reader_beam]
    block_ids, block_len = self.blocks(rows)
    inputs = orqa_features.pack_reader_inputs(features[orqa_features.QUESTION_IDS],
                                              features[orqa_features.QUESTION_LEN], block_ids, block_len,
                                              self.orqa.reader_seq_len, self.cls_id, self.sep_id)
    output = self.reader(((inputs.token_ids, inputs.mask, inputs.segment_ids), inputs.block_mask,
                          retriever_logits[:, :self.reader_beam]),
                         training=training)
    return inputs, output

  # -- training --------------------------------------------------------------------------------------

  def call(self, features: Dict[str, tf.Tensor], training=None) -> Dict[str, tf.Tensor]:
    """Prediction with num_retrieved = reader_beam; see predict_answers."""
    return self.predict_answers(features, training=training)

  def compute_loss(self, features: Dict[str, tf.Tensor], training=None) -> losses.LossOutput:
    """ORQA's loss for realm_tf.training.loop (sums per replica; see losses.LossOutput).

    Metrics (means over questions): retriever_loss, reader_loss; exact_match, the token-level match of
    the predicted span with a gold span (the original's checkpoint-selection metric); reader_oracle,
    some read block has a gold span; retriever_top{K}_match for K = reader and retriever beam, some of
    the top K blocks contains an answer.
    """
    answer_ids = features[orqa_features.ANSWER_IDS]
    answer_len = features[orqa_features.ANSWER_LEN]
    if orqa_features.CANDIDATE_ROWS in features:
      # Another retriever's rows (bin/train_orqa --retriever=bm25|hybrid): the reader trains on what it
      # will read, and the query tower learns to score those rows.
      block_rows = tf.cast(features[orqa_features.CANDIDATE_ROWS][:, :self.retriever_beam], tf.int32)
      retriever_logits = self.score_rows(features, block_rows, training=training)
    else:
      block_rows, retriever_logits = self.retrieve(features, self.retriever_beam, training=training)
    block_ids, block_len = self.blocks(block_rows)
    retriever_correct = orqa_features.contains_answer(block_ids, block_len, answer_ids,
                                                      answer_len)  # [B, retriever_beam]
    inputs, output = self.read(features, block_rows, retriever_logits, training=training)
    gold_starts, gold_ends = orqa_features.reader_gold_spans(inputs, answer_ids, answer_len,
                                                             self.orqa.max_answers)
    reader_correct = reader_lib.reader_correct(output.span_starts, output.span_ends, gold_starts,
                                               gold_ends)  # [B, reader_beam, S]
    result = losses.orqa_loss(retriever_logits, retriever_correct, output.logits, reader_correct)

    batch = tf.shape(block_rows)[0]
    # The global argmax over blocks x spans (reader_lib.predict_spans), and whether it is gold.
    best = tf.argmax(tf.reshape(output.logits, [batch, -1]), axis=-1, output_type=tf.int32)
    predicted_correct = tf.gather(tf.reshape(reader_correct, [batch, -1]), best, batch_dims=1)
    count = tf.cast(batch, tf.float32)

    def mean(values):
      return (tf.reduce_sum(tf.cast(values, tf.float32)), count)

    metrics = dict(result.metrics)
    metrics["exact_match"] = mean(predicted_correct)
    metrics["reader_oracle"] = mean(tf.reduce_any(reader_correct, axis=[1, 2]))
    metrics[f"retriever_top{self.reader_beam}_match"] = mean(
        tf.reduce_any(retriever_correct[:, :self.reader_beam], axis=1))
    metrics[f"retriever_top{self.retriever_beam}_match"] = mean(tf.reduce_any(retriever_correct, axis=1))
    return losses.LossOutput(result.loss_sum, result.loss_weight, metrics)

  # -- prediction ------------------------------------------------------------------------------------

  def score_rows(self, features: Dict[str, tf.Tensor], block_rows: tf.Tensor, training=None) -> tf.Tensor:
    """Exact retriever logits q . d float32 [B, R] of given corpus rows int [B, R] (another retriever's
    candidates, e.g. BM25's or a hybrid's), differentiable in the query tower."""
    query = tf.cast(
        self.retriever.embed_queries(tuple(features[name] for name in orqa_features.QUERY_FIELDS),
                                     training=training), tf.float32)
    return tf.einsum("bd,bkd->bk", query, tf.gather(self.corpus.embeddings, block_rows))

  def predict_answers(self,
                      features: Dict[str, tf.Tensor],
                      num_retrieved: Optional[int] = None,
                      training=None,
                      candidate_fn: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
                      block_rows: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
    """Retrieves max(reader_beam, num_retrieved) blocks (candidate_fn: see retrieve), reads the top
    reader_beam, takes the best span.

    block_rows: int [B, R] corpus rows, best first, chosen by another retriever (BM25, a hybrid, the gold
    block): read in this order instead of the dense search, each with its exact q . d as the retriever
    logit the reader adds to its spans (as in training); num_retrieved and candidate_fn are then unused.

    Returns (each [B] unless noted):
      block_rows: int32 [B, R], corpus rows of the retrieved blocks, best first;
      retriever_logits: float32 [B, R];
      predicted_row: the corpus row of the block holding the best span;
      first_piece, last_piece: the span as wordpiece indices within that block's wordpieces, for
        orqa_features.extract_answers (-1 when the reader saw no block wordpiece at all);
      start, end: the span's positions in the reader sequence; score: its logit.
    """
    if block_rows is None:
      num_retrieved = min(max(self.reader_beam, num_retrieved or 0), self.num_blocks)
      block_rows, retriever_logits = self.retrieve(features,
                                                   num_retrieved,
                                                   training=training,
                                                   candidate_fn=candidate_fn)
    else:
      block_rows = tf.cast(block_rows, tf.int32)
      retriever_logits = self.score_rows(features, block_rows, training=training)
    inputs, output = self.read(features, block_rows, retriever_logits, training=training)
    best = reader_lib.predict_spans(output)
    block_index = best["block_index"]
    block_start = tf.gather(inputs.block_start, block_index, batch_dims=1)
    has_block = tf.gather(inputs.block_length, block_index, batch_dims=1) > 0
    return {
        "block_rows": block_rows,
        "retriever_logits": retriever_logits,
        "predicted_row": tf.gather(block_rows, block_index, batch_dims=1),
        "first_piece": tf.where(has_block, best["start"] - block_start, -1),
        "last_piece": tf.where(has_block, best["end"] - block_start, -1),
        "start": best["start"],
        "end": best["end"],
        "score": best["score"],
    }


def copy_retriever_weights(source: embedder_lib.Retriever, target: embedder_lib.Retriever) -> None:
  """Assigns source's towers to target's (source shared or not; target with two towers): the query
  tower from source's query tower, the document tower from its document tower.

  Raises ValueError naming the first weight whose shape differs (e.g. another hidden size).
  """
  for name in ("query_embedder", "doc_embedder"):
    source_weights = getattr(source, name).weights
    target_weights = getattr(target, name).weights
    if len(source_weights) != len(target_weights):
      raise ValueError(f"the retriever's {name} has {len(source_weights)} weights, the ORQA model's "
                       f"{len(target_weights)}: they are different architectures")
    for s, t in zip(source_weights, target_weights):
      if s.shape != t.shape:
        raise ValueError(f"retriever weight {s.name} has shape {s.shape} but the ORQA model's "
                         f"{t.name} has {t.shape}")
      t.assign(s)


def answer_texts(tokenizer, bodies, predictions: Dict[str, Any]) -> np.ndarray:
  """Host helper: predicted answer strings (bytes [B]) from predict_answers' outputs and the corpus
  bodies (a list indexed by corpus row); the original text's slice (orqa_features.extract_answers)."""
  rows = np.asarray(predictions["predicted_row"])
  texts = [bodies[int(r)] for r in rows]
  if not texts:
    return np.zeros([0], object)
  return orqa_features.extract_answers(tokenizer, tf.constant(texts, tf.string), predictions["first_piece"],
                                       predictions["last_piece"]).numpy()
