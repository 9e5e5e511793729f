"""ICT pre-training of the retriever embedder (bin/train_ict): REALM's warm start.

Its checkpoints (model/embedder/...) warm-start bin/train_realm's retriever and the refresher's bootstrap
index; MODEL_DIR/realm_config.json describes the embedder (LayerNorm epsilon 1e-3 and dropout 0.1, as the
released ICT module), and train_realm's retriever flags must agree with it.
"""

import dataclasses
from typing import Callable, Dict, Optional

import tensorflow as tf
import tf_keras

from realm_tf.checkpoints import bert_mapping
from realm_tf.data import ict as ict_data
from realm_tf.data import pretraining
from realm_tf.modeling import ict as ict_model
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.training import loop
from realm_tf.training import optimization
from realm_tf.training import task as task_lib


@dataclasses.dataclass(frozen=True)
class IctTrainerOptions:
  """What bin/train_ict's flags set."""
  config: realm_config_lib.RealmConfig  # retriever_bert, projection, epsilon, dropout, query_seq_len
  loop: loop.LoopOptions
  pretraining_corpus_path: str
  block_seq_len: int = 288
  batch_size: int = 32
  learning_rate: float = 1e-4
  mask_rate: float = 0.9
  adam_bias_correction: bool = False
  init_bert_checkpoint: Optional[str] = None
  seed: int = 0


def build_model(config: realm_config_lib.RealmConfig) -> ict_model.IctModel:
  model = ict_model.IctModel(config.retriever_bert,
                             config.projection_size,
                             config.embedder_layer_norm_epsilon,
                             config.embedder_dropout_rate,
                             pooling=config.embedder_pooling,
                             cosine_score_scale=config.cosine_score_scale)
  dummy = tf.zeros([1, 4], tf.int32)
  model.embedder((dummy, dummy, dummy))
  return model


@task_lib.register("ict")
class IctTask(task_lib.Task):
  """The inverse cloze task: a pseudo-query (a sentence) against its block and the batch's other blocks."""

  def __init__(self, options: IctTrainerOptions, log: Callable[[str], None] = print):
    self.options = options
    self.log = log
    self.tokenizer = options.config.tokenizer()
    self.featurizer = options.config.featurizer(self.tokenizer)

  def build_model(self) -> ict_model.IctModel:
    # --seed also fixes the initialization and dropout (mlm_trainer says why).
    tf_keras.utils.set_random_seed(self.options.seed)
    return build_model(self.options.config)

  def create_optimizer(self):
    return optimization.create_optimizer(self.options.learning_rate,
                                         self.options.loop.num_train_steps,
                                         bias_correction=self.options.adam_bias_correction)

  def build_inputs(self, batches_done: int) -> tf.data.Dataset:
    options = self.options
    return ict_data.ict_dataset(pretraining.pretraining_dataset(options.pretraining_corpus_path),
                                self.tokenizer,
                                self.featurizer,
                                options.block_seq_len,
                                options.batch_size,
                                options.mask_rate,
                                options.seed,
                                skip_batches=batches_done)

  def initialize(self, model: ict_model.IctModel) -> None:
    if self.options.init_bert_checkpoint:
      report = bert_mapping.load_bert_weights(model.embedder.encoder,
                                              self.options.init_bert_checkpoint,
                                              strict=False)
      self.log(f"ICT embedder's BERT warm-started: {report.summary()}")


def train(options: IctTrainerOptions,
          strategy: tf.distribute.Strategy,
          log: Callable[[str], None] = print) -> Dict[str, float]:
  """Trains the ICT embedder to options.loop.num_train_steps; returns the last loop's metrics."""
  options.config.save_or_check(options.loop.model_dir)
  return loop.train(IctTask(options, log), options.loop, strategy, log=log)
