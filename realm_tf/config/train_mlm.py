"""bin/train_mlm's configuration tree: BERT masked-LM pre-training (realm_tf.tasks.mlm_trainer).

  model_dir
  data       input_path eval_percent
  model      vocab_path do_lower_case bert_config
  mlm        init_checkpoint max_seq_len max_predictions_per_seq masked_lm_prob short_seq_prob
             whole_word_masking random_next_rate warmup_steps
  device     strategy tpu num_cpu_devices mixed_precision
  train      batch_size learning_rate ... seed (sections.Train)
"""

import dataclasses
from typing import ClassVar, Optional

from realm_tf.config import sections
from realm_tf.config.run_config import option
from realm_tf.config.run_config import section
from realm_tf.data import mlm as mlm_data
from realm_tf.modeling import bert as bert_lib
from realm_tf.tasks import mlm_trainer


@dataclasses.dataclass(frozen=True)
class MlmData:
  """The documents to pre-train on and the share held out."""
  input_path: Optional[str] = option(None,
                                     "JSONL or TSV documents to pre-train on.",
                                     required=True,
                                     daily=True)
  eval_percent: float = option(5.0,
                               "Percent of the documents held out for masked-token accuracy.",
                               lower_bound=0.0,
                               upper_bound=100.0)


@dataclasses.dataclass(frozen=True)
class Mlm:
  """The warm start, how pairs are packed and masked (realm_tf.data.mlm.MaskingOptions), the warmup."""
  init_checkpoint: Optional[str] = option(
      None, "Continue pre-training from this BERT (TF1 Google BERT, Model Garden TF2, Hugging Face "
      "safetensors file or directory); without it, random weights.")
  max_seq_len: int = option(128, "Packed length of [CLS] a [SEP] b [SEP].", lower_bound=8)
  max_predictions_per_seq: int = option(20, "Predicted positions per example.", lower_bound=1)
  masked_lm_prob: float = option(0.15,
                                 "Share of wordpieces predicted (BERT: 0.15).",
                                 lower_bound=0.0,
                                 upper_bound=1.0)
  short_seq_prob: float = option(0.1,
                                 "Probability of a shorter packed example.",
                                 lower_bound=0.0,
                                 upper_bound=1.0)
  whole_word_masking: bool = option(False, "Mask all wordpieces of a word together.")
  random_next_rate: float = option(
      0.0, "Share of pairs whose second segment comes from another random document (BERT's random next "
      "sentences, 0.5 in BERT; no next-sentence loss). 0: it always follows the first.",
      lower_bound=0.0,
      upper_bound=1.0)
  warmup_steps: Optional[int] = option(None,
                                       "Learning-rate warmup steps (default: the original's rule).",
                                       lower_bound=0)


@dataclasses.dataclass(frozen=True)
class TrainMlmConfig:
  """bin/train_mlm: BERT masked-LM pre-training, the reader's warm start."""
  BINARY: ClassVar[str] = "train_mlm"

  model_dir: Optional[str] = option(None, sections.MODEL_DIR_HELP, required=True, daily=True)
  data: MlmData = section(MlmData)
  model: sections.Bert = section(sections.Bert)
  mlm: Mlm = section(Mlm)
  device: sections.Device = section(sections.Device)
  train: sections.Train = section(sections.Train,
                                  batch_size=32,
                                  learning_rate=1e-4,
                                  num_train_steps=10000,
                                  save_checkpoints_steps=1000)

  def trainer_options(self, bert: bert_lib.BertConfig) -> mlm_trainer.MlmTrainerOptions:
    """What mlm_trainer.train takes; bert: model.bert_config resolved (Bert.bert())."""
    mlm = self.mlm
    masking = mlm_data.MaskingOptions(max_seq_len=mlm.max_seq_len,
                                      max_predictions=mlm.max_predictions_per_seq,
                                      mask_rate=mlm.masked_lm_prob,
                                      short_seq_prob=mlm.short_seq_prob,
                                      whole_word_masking=mlm.whole_word_masking,
                                      random_next_rate=mlm.random_next_rate)
    return mlm_trainer.MlmTrainerOptions(bert_config=bert,
                                         loop=self.train.loop_options(self.model_dir),
                                         masking=masking,
                                         **sections.values(self.model, "vocab_path", "do_lower_case"),
                                         **dataclasses.asdict(self.data),
                                         **sections.values(self.train, "batch_size", "learning_rate",
                                                           "adam_bias_correction", "seed"),
                                         **sections.values(mlm, "warmup_steps", "init_checkpoint"))
