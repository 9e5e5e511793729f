"""bin/train_orqa's configuration tree: ORQA fine-tuning on a frozen index (realm_tf.tasks.orqa_trainer).

  model_dir
  data       train_path dev_path max_eval_examples retrieval_corpus_path skip_invalid
  model      vocab_path do_lower_case bert_config
  retriever  embedder_pooling cosine_score_scale projection_size query_seq_len embedder_layer_norm_epsilon
             candidate_seq_len embedder_dropout_rate retriever_checkpoint index_dir embed_batch_size
             retriever hybrid_bm25_weight retriever_learning_rate
  reader     reader_checkpoint reader_seq_len span_hidden_size max_span_width retriever_beam_size
             reader_beam_size max_answers max_num_answers max_answer_len
  evaluation eval_every_steps eval_batch_size
  device     strategy tpu num_cpu_devices mixed_precision
  train      batch_size learning_rate ... seed (sections.Train)
"""

import dataclasses
from typing import ClassVar, Optional

from realm_tf.config import sections
from realm_tf.config.run_config import option
from realm_tf.config.run_config import section
from realm_tf.modeling import bert as bert_lib
from realm_tf.modeling import orqa as orqa_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.runs import train_candidates
from realm_tf.tasks import orqa_trainer


@dataclasses.dataclass(frozen=True)
class OrqaData(sections.QaData):
  skip_invalid: bool = option(False, "Skip malformed QA records instead of failing.")


@dataclasses.dataclass(frozen=True)
class OrqaRetriever(sections.Retriever):
  """The retriever: its warm start and the frozen index of its document tower."""
  embedder_dropout_rate: float = option(0.0,
                                        "Query tower dropout in training (ICT: 0.1).",
                                        lower_bound=0.0,
                                        upper_bound=1.0)
  retriever_checkpoint: Optional[str] = option(
      None, "REALM / ICT / ORQA / converted checkpoint (or its directory).")
  index_dir: Optional[str] = option(
      None, "A published index (MODEL_DIR/index/<step> of a REALM run) over --retrieval_corpus_path, "
      "instead of embedding the corpus.")
  embed_batch_size: int = option(128, "Batch size of the corpus embedding.", lower_bound=1)
  retriever: str = option(
      "dense", "What the reader trains on (and the dev evaluation reads): the dense tower's search, "
      "BM25's rows, or their hybrid's (reciprocal rank fusion, or --hybrid_bm25_weight's score sum; the "
      "dense side from the warm-start tower); evaluate with the same bin/eval_orqa --retriever.",
      choices=train_candidates.TRAINABLE)
  hybrid_bm25_weight: Optional[float] = option(
      None, "With --retriever=hybrid: fuse by W x BM25's + (1 - W) x the dense tower's z-normalised "
      "scores instead of reciprocal rank fusion (tune W on held-out questions).",
      lower_bound=0.0,
      upper_bound=1.0)
  retriever_learning_rate: Optional[float] = option(
      None, "Peak learning rate of the query tower, on the same warmup and decay; default "
      "train.learning_rate (the original trains both at one rate).",
      lower_bound=0.0)


@dataclasses.dataclass(frozen=True)
class OrqaReader:
  """The span reader and the beams (realm_tf.modeling.orqa.OrqaConfig)."""
  reader_checkpoint: Optional[str] = option(
      None, "BERT warm start of the reader (TF1 Google BERT, Hugging Face safetensors or Model Garden TF2).")
  reader_seq_len: int = option(320, "Reader length L.", lower_bound=1)
  span_hidden_size: int = option(256, "Span head width.", lower_bound=1)
  max_span_width: int = option(10, "Longest answer span in wordpieces.", lower_bound=1)
  retriever_beam_size: int = option(5000, "Blocks of the retriever loss.", lower_bound=1)
  reader_beam_size: int = option(5, "Blocks the reader reads.", lower_bound=1)
  max_answers: int = option(10, "Gold spans kept per block.", lower_bound=1)
  max_num_answers: int = option(10, "Answers per question used in training.", lower_bound=1)
  max_answer_len: int = option(16, "Wordpieces per answer matched in training.", lower_bound=1)


@dataclasses.dataclass(frozen=True)
class OrqaEval:
  """The periodic dev evaluation that picks the best checkpoint."""
  eval_every_steps: int = option(500, "Dev evaluation interval (and at the end).", lower_bound=1)
  eval_batch_size: int = option(32, "Dev prediction batch size.", lower_bound=1)


@dataclasses.dataclass(frozen=True)
class TrainOrqaConfig:
  """bin/train_orqa: ORQA fine-tuning, open-domain QA on a frozen index."""
  BINARY: ClassVar[str] = "train_orqa"

  model_dir: Optional[str] = option(None, sections.MODEL_DIR_HELP, required=True, daily=True)
  data: OrqaData = section(OrqaData)
  model: sections.Bert = section(sections.Bert)
  retriever: OrqaRetriever = section(OrqaRetriever, query_seq_len=64, candidate_seq_len=288)
  reader: OrqaReader = section(OrqaReader)
  evaluation: OrqaEval = section(OrqaEval)
  device: sections.Device = section(sections.Device)
  train: sections.Train = section(sections.Train,
                                  batch_size=8,
                                  learning_rate=1e-5,
                                  num_train_steps=1000,
                                  save_checkpoints_steps=500)

  def trainer_options(self, bert: bert_lib.BertConfig) -> orqa_trainer.OrqaTrainerOptions:
    """What orqa_trainer.train takes; bert: model.bert_config resolved (Bert.bert())."""
    retriever, reader = self.retriever, self.reader
    config = realm_config_lib.RealmConfig(retriever_bert=bert,
                                          reader_bert=bert,
                                          share_embedders=False,
                                          **sections.values(self.model, "vocab_path", "do_lower_case"),
                                          **sections.values(retriever, *sections.names(sections.Retriever)),
                                          embedder_dropout_rate=retriever.embedder_dropout_rate)
    orqa = orqa_lib.OrqaConfig(
        retrieval_corpus_path=self.data.retrieval_corpus_path,
        **sections.values(reader,
                          *(name for name in sections.names(OrqaReader) if name != "reader_checkpoint")))
    return orqa_trainer.OrqaTrainerOptions(config=config,
                                           orqa=orqa,
                                           loop=self.train.loop_options(self.model_dir),
                                           **sections.values(self.data, "train_path", "dev_path",
                                                             "max_eval_examples", "skip_invalid"),
                                           **sections.values(retriever, "retriever_checkpoint", "index_dir",
                                                             "embed_batch_size", "retriever",
                                                             "hybrid_bm25_weight", "retriever_learning_rate"),
                                           reader_checkpoint=reader.reader_checkpoint,
                                           **dataclasses.asdict(self.evaluation),
                                           **sections.values(self.train, "batch_size", "learning_rate",
                                                             "adam_bias_correction", "seed"))
