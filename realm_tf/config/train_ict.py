"""bin/train_ict's configuration tree: ICT pre-training of the retriever (realm_tf.tasks.ict_trainer).

  model_dir
  data       pretraining_corpus_path
  model      vocab_path do_lower_case bert_config
  ict        embedder_pooling cosine_score_scale projection_size query_seq_len layer_norm_epsilon
             dropout_rate block_seq_len mask_rate init_bert_checkpoint
  device     strategy tpu num_cpu_devices mixed_precision
  train      batch_size learning_rate ... seed (sections.Train)

The ICT module's own option names (layer_norm_epsilon, block_seq_len) are those its flags always had.
"""

import dataclasses
from typing import ClassVar, Optional

from realm_tf.config import sections
from realm_tf.config.run_config import option
from realm_tf.config.run_config import section
from realm_tf.modeling import bert as bert_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.tasks import ict_trainer


@dataclasses.dataclass(frozen=True)
class IctData:
  """The pre-training sentences whose blocks ICT's queries are cut from."""
  pretraining_corpus_path: Optional[str] = option(None,
                                                  sections.PRETRAINING_CORPUS_HELP,
                                                  required=True,
                                                  daily=True)


@dataclasses.dataclass(frozen=True)
class Ict(sections.Embedding):
  """The ICT embedder (the original's module: LayerNorm epsilon 1e-3, dropout 0.1) and its task."""
  layer_norm_epsilon: float = option(1e-3, "Embedder LayerNorm epsilon (ICT: 1e-3).", lower_bound=0.0)
  dropout_rate: float = option(0.1,
                               "Embedder dropout in training (ICT: 0.1).",
                               lower_bound=0.0,
                               upper_bound=1.0)
  block_seq_len: int = option(288, "Block length.", lower_bound=1)
  mask_rate: float = option(0.9,
                            "Probability of removing the sentence from its block.",
                            lower_bound=0.0,
                            upper_bound=1.0)
  init_bert_checkpoint: Optional[str] = option(
      None, "BERT warm start (TF1 Google BERT, HF safetensors, Model Garden TF2).")


@dataclasses.dataclass(frozen=True)
class TrainIctConfig:
  """bin/train_ict: the Inverse Cloze Task, the warm start of REALM's retriever."""
  BINARY: ClassVar[str] = "train_ict"

  model_dir: Optional[str] = option(None, sections.MODEL_DIR_HELP, required=True, daily=True)
  data: IctData = section(IctData)
  model: sections.Bert = section(sections.Bert)
  ict: Ict = section(Ict, query_seq_len=64)
  device: sections.Device = section(sections.Device)
  train: sections.Train = section(sections.Train,
                                  batch_size=32,
                                  learning_rate=1e-4,
                                  num_train_steps=1000,
                                  save_checkpoints_steps=1000)

  def trainer_options(self, bert: bert_lib.BertConfig) -> ict_trainer.IctTrainerOptions:
    """What ict_trainer.train takes; bert: model.bert_config resolved (Bert.bert())."""
    ict = self.ict
    config = realm_config_lib.RealmConfig(retriever_bert=bert,
                                          reader_bert=bert,
                                          **sections.values(self.model, "vocab_path", "do_lower_case"),
                                          **sections.values(ict, "embedder_pooling", "cosine_score_scale",
                                                            "projection_size", "query_seq_len"),
                                          embedder_layer_norm_epsilon=ict.layer_norm_epsilon,
                                          embedder_dropout_rate=ict.dropout_rate,
                                          candidate_seq_len=ict.block_seq_len)
    return ict_trainer.IctTrainerOptions(config=config,
                                         loop=self.train.loop_options(self.model_dir),
                                         **dataclasses.asdict(self.data),
                                         **sections.values(self.train, "batch_size", "learning_rate",
                                                           "adam_bias_correction", "seed"),
                                         **sections.values(ict, "block_seq_len", "mask_rate",
                                                           "init_bert_checkpoint"))
