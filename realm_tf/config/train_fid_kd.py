"""bin/train_fid_kd's configuration tree: retriever distillation from a FiD reader (realm_tf.tasks.fid_kd).

  model_dir
  data       train_path dev_path max_eval_examples retrieval_corpus_path max_train_examples
  model      vocab_path do_lower_case bert_config
  retriever  embedder_pooling cosine_score_scale projection_size query_seq_len embedder_layer_norm_epsilon
             candidate_seq_len retriever_checkpoint initial_passages embed_batch_size
  reader     reader_init_checkpoint reader_hidden_size reader_share_embeddings reader_copy_attention
             reader_num_heads reader_encoder_layers reader_decoder_layers reader_intermediate_size
             reader_dropout_rate passage_seq_len answer_seq_len
  rounds     iterations num_passages reader_steps reader_single_passage_steps retriever_steps
             reader_batch_size retriever_batch_size reader_learning_rate retriever_learning_rate
             reader_score_aggregation reader_temperature retriever_temperature
             reader_answer_substitution_rate distill_answer_bearing_only keep_better_retriever
             selection_metric recall_ks jit_compile seed
"""

import dataclasses
import os
from typing import ClassVar, List, Optional, Tuple

import tensorflow as tf

from realm_tf.checkpoints import fid_warm_start
from realm_tf.config import sections
from realm_tf.config.run_config import ConfigError
from realm_tf.config.run_config import option
from realm_tf.config.run_config import section
from realm_tf.modeling import bert as bert_lib
from realm_tf.modeling import embedder
from realm_tf.modeling import fid_reader
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.tasks import fid_kd


@dataclasses.dataclass(frozen=True)
class FidData(sections.QaData):
  """The questions (a dev file is needed: it accepts or rejects each round) and the corpus."""
  dev_path: Optional[str] = option(None,
                                   "Dev QA file: recall@k and reader exact match per iteration.",
                                   required=True,
                                   daily=True)
  max_train_examples: Optional[int] = option(None, "Use the first N training questions only.", lower_bound=1)


@dataclasses.dataclass(frozen=True)
class FidRetriever(sections.Retriever):
  """The retriever being distilled, where it starts and what round 0's reader reads."""
  retriever_checkpoint: Optional[str] = option(
      None, "Initial retriever (REALM / ICT / ORQA / converted checkpoint or its directory); default: an "
      "untrained one.")
  initial_passages: str = option(
      "bm25", "Passages the iteration-0 reader reads: BM25's, as the paper starts, or the initial "
      "retriever's (dense; for a trained --retriever_checkpoint).",
      choices=fid_kd.INITIAL_PASSAGES)
  embed_batch_size: int = option(128, "Batch size of the corpus embedding.", lower_bound=1)


@dataclasses.dataclass(frozen=True)
class FidReader:
  """The Fusion-in-Decoder reader trained afresh each round (realm_tf.modeling.fid_reader.FidConfig)."""
  reader_init_checkpoint: Optional[str] = option(
      None, "Pre-trained BERT for the reader's ENCODER (a bin/train_mlm export, TF1 BERT checkpoint, Hugging "
      "Face BERT directory / safetensors; its config beside it, its vocab that of --vocab_path), re-loaded "
      "at the start of every iteration; the decoder (--reader_hidden_size ...) is trained from scratch and "
      "cross-attends over a projection of the BERT outputs when the widths differ. Default: the T5-style "
      "encoder of --reader_encoder_layers, trained from scratch.")
  reader_hidden_size: int = option(64, "FiD reader (decoder) width H.", lower_bound=1)
  reader_share_embeddings: bool = option(
      False, "With --reader_init_checkpoint: the decoder's input and output embeddings are the BERT "
      "encoder's word embeddings (as T5 shares one), so it can emit the words it reads from the first step; "
      "needs --reader_hidden_size equal to the BERT's hidden size.")
  reader_copy_attention: bool = option(
      False, "Pointer-generator reader: each answer wordpiece is a gated mixture of the vocabulary softmax "
      "and a copy of the wordpieces the last decoder layer's cross-attention points at (see "
      "realm_tf.modeling.fid_reader.FidConfig.copy_attention).")
  reader_num_heads: int = option(2, "FiD reader attention heads.", lower_bound=1)
  reader_encoder_layers: int = option(2, "FiD reader encoder layers.", lower_bound=1)
  reader_decoder_layers: int = option(2, "FiD reader decoder layers.", lower_bound=1)
  reader_intermediate_size: int = option(128, "FiD reader feed-forward width.", lower_bound=1)
  reader_dropout_rate: float = option(0.0,
                                      "FiD reader dropout in training.",
                                      lower_bound=0.0,
                                      upper_bound=1.0)
  passage_seq_len: int = option(96, "Reader wordpieces per (question, passage) pair L.", lower_bound=1)
  answer_seq_len: int = option(12, "Reader answer length T (with [SEP]).", lower_bound=1)


@dataclasses.dataclass(frozen=True)
class FidRounds:
  """The reader / retriever rounds: their lengths, batches, losses and the keep-better rule.

  Defaults: 10 passages (the paper reads 100 with T5; issue 19 asks for at least 10 on testdata) at a
  CPU cost (bench/fid_kd_learning_bench.py, docs/experiments/benchmarks_notebook.md): a reader step on
  10 passages of 96 wordpieces at batch 16 takes ~1 s on 2 loaded cores, 10x a single-passage step, so
  the reader learns to read on single passages (cheap) before choosing among 10. With the
  MLM-pre-trained tiny BERT encoder, 200 and 500 steps on 10 passages were too few (dev exact match 0
  and 1; its attention ranked the gold passage first for 14% and 28% of the questions) and 1,500 enough
  (exact match 29, 94%; the distilled retriever 10 -> 78 gold recall@5 in round 0). passage_seq_len
  stays 96: on testdata's letter-level vocab 64 wordpieces cut the answer out of 40% of the
  answer-bearing BM25 passages, 96 of none.
  """
  iterations: int = option(2, "Reader / retriever rounds.", lower_bound=1)
  num_passages: int = option(10, "Passages per question n (reader and KD loss).", lower_bound=1)
  reader_steps: int = option(1500, "Reader steps on n passages per iteration.", lower_bound=0)
  reader_single_passage_steps: int = option(
      800, "Reader steps BEFORE --reader_steps on each question's highest-ranked answer-bearing passage "
      "alone (0: none). A reader trained from scratch learns to find and copy an answer there, then to "
      "choose among n passages; on n passages from the start it did not learn to read (the paper's T5 "
      "arrives able to).",
      lower_bound=0)
  retriever_steps: int = option(200, "Retriever steps per iteration.", lower_bound=0)
  reader_batch_size: int = option(
      16, "Reader batch (questions); at 8 a reader from scratch learned to choose among 3 passages far "
      "more slowly on testdata than at 32; 16 halves the cost of a 10-passage step.",
      lower_bound=1)
  retriever_batch_size: int = option(8, "Retriever batch (questions).", lower_bound=1)
  reader_learning_rate: float = option(2e-3, "Reader peak learning rate.", lower_bound=0.0)
  retriever_learning_rate: float = option(1e-3, "Retriever peak learning rate.", lower_bound=0.0)
  reader_score_aggregation: str = option(
      "attention_mass", "How the first decoded token's cross-attention becomes a score per passage: "
      "pre_softmax (the paper's mean logit) or attention_mass (log of the attention probability on the "
      "passage); see realm_tf.modeling.fid_reader.",
      choices=sorted(fid_reader.SCORE_AGGREGATIONS))
  reader_temperature: float = option(
      0.1,
      "Temperature of the reader scores (target); below 1 sharpens the averaged attention mass.",
      lower_bound=0.0)
  retriever_temperature: float = option(1.0, "Temperature of the retriever scores.", lower_bound=0.0)
  reader_answer_substitution_rate: float = option(
      1.0, "Fraction of the reader's training examples whose answer is replaced, in the passages and the "
      "target, by another example's answer, drawn anew every epoch (realm_tf.data.answer_substitution): a "
      "reader that cannot memorize answers must read, so its cross-attention scores mean something.",
      lower_bound=0.0,
      upper_bound=1.0)
  distill_answer_bearing_only: bool = option(
      True, "Distil only the training questions whose n passages hold an answer (the reader's attention "
      "over passages that are all irrelevant is noise to the retriever).")
  keep_better_retriever: bool = option(
      True, "Keep a round's distilled retriever only if its dev --selection_metric is not below the "
      "round's start; otherwise the next round starts from the previous accepted retriever (metrics.json: "
      "accepted, retriever_after). Off: every round continues from its distilled retriever.")
  selection_metric: str = option(
      "gold_recall@5", "Dev recall that decides acceptance: gold_recall@K (needs doc_id in the dev "
      "questions) or answer_recall@K, K one of --recall_ks.")
  recall_ks: Tuple[int, ...] = option(fid_kd.FidKdOptions.recall_ks, "Cut-offs of retriever recall@k.")
  jit_compile: bool = option(
      False, "Compile the train steps with XLA, and the corpus embedding of the refreshed indexes.")
  seed: int = option(0, "Seed of initializations and of the example stream.")


def rounds_done(model_dir: str) -> List[str]:
  """The rounds whose metrics.json is written (a restarted run skips them): the run's progress, for
  run_config.saved_for_the_run."""
  every_round = fid_kd.iteration_dir(model_dir, "*")  # iteration_<i>, as a glob pattern
  return sorted(tf.io.gfile.glob(os.path.join(every_round, fid_kd.METRICS_NAME)))


@dataclasses.dataclass(frozen=True)
class TrainFidKdConfig:
  """bin/train_fid_kd: FiD-KD, rounds of a fresh reader and a retriever distilled from its attention."""
  BINARY: ClassVar[str] = "train_fid_kd"

  model_dir: Optional[str] = option(None,
                                    "Configs, per-iteration checkpoints, scores, metrics.",
                                    required=True,
                                    daily=True)
  data: FidData = section(FidData)
  model: sections.Bert = section(sections.Bert)
  # Mean pooling by default here: on testdata an untrained mean-pooled retriever starts at 10% recall@5 and
  # the reader's scores lift it to about a third, the [CLS] pooler from 1% to 5%.
  retriever: FidRetriever = section(FidRetriever,
                                    embedder_pooling=embedder.MEAN,
                                    query_seq_len=32,
                                    candidate_seq_len=128)
  reader: FidReader = section(FidReader)
  rounds: FidRounds = section(FidRounds)

  def fid_config(self, bert: bert_lib.BertConfig) -> fid_reader.FidConfig:
    """The reader's config; ConfigError names the options when they do not make a reader."""
    reader = self.reader
    try:
      reader_bert = (fid_warm_start.bert_encoder_config(reader.reader_init_checkpoint, bert.vocab_size)
                     if reader.reader_init_checkpoint else None)
    except ValueError as e:  # it names --reader_init_checkpoint and what the directory lacks
      raise ConfigError(str(e)) from None
    if reader.reader_share_embeddings and not reader_bert:
      raise ConfigError("--reader_share_embeddings shares the pre-trained encoder's word embeddings: pass "
                        "--reader_init_checkpoint too")
    try:
      return fid_reader.FidConfig(vocab_size=bert.vocab_size,
                                  hidden_size=reader.reader_hidden_size,
                                  num_heads=reader.reader_num_heads,
                                  num_encoder_layers=reader.reader_encoder_layers,
                                  num_decoder_layers=reader.reader_decoder_layers,
                                  intermediate_size=reader.reader_intermediate_size,
                                  dropout_rate=reader.reader_dropout_rate,
                                  passage_seq_len=reader.passage_seq_len,
                                  answer_seq_len=reader.answer_seq_len,
                                  encoder="bert" if reader_bert else "t5",
                                  bert=reader_bert,
                                  share_embeddings=reader.reader_share_embeddings,
                                  copy_attention=reader.reader_copy_attention)
    except ValueError as e:
      raise ConfigError(f"the reader flags (--reader_*, --passage_seq_len, --answer_seq_len): {e}") from None

  def trainer_options(self, bert: bert_lib.BertConfig) -> fid_kd.FidKdOptions:
    """What fid_kd.run takes; bert: model.bert_config resolved (Bert.bert()). ConfigError as fid_config."""
    retriever = self.retriever
    config = realm_config_lib.RealmConfig(retriever_bert=bert,
                                          reader_bert=bert,
                                          **sections.values(self.model, "vocab_path", "do_lower_case"),
                                          **sections.values(retriever, *sections.names(sections.Retriever)))
    return fid_kd.FidKdOptions(config=config,
                               fid=self.fid_config(bert),
                               model_dir=self.model_dir,
                               **dataclasses.asdict(self.data),
                               **dataclasses.asdict(self.rounds),
                               **sections.values(retriever, "retriever_checkpoint", "initial_passages",
                                                 "embed_batch_size"),
                               reader_init_checkpoint=self.reader.reader_init_checkpoint)
