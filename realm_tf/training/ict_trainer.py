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
  model = ict_model.IctModel(config.retriever_bert, config.projection_size,
                             config.embedder_layer_norm_epsilon, config.embedder_dropout_rate,
                             pooling=config.embedder_pooling,
                             cosine_score_scale=config.cosine_score_scale)
  dummy = tf.zeros([1, 4], tf.int32)
  model.embedder((dummy, dummy, dummy))
  return model


def train(options: IctTrainerOptions, strategy: tf.distribute.Strategy,
          log: Callable[[str], None] = print) -> Dict[str, float]:
  config = options.config
  config.save_or_check(options.loop.model_dir)
  tokenizer = config.tokenizer()
  featurizer = config.featurizer(tokenizer)
  # --seed also fixes the initialization and dropout (mlm_trainer says why).
  tf_keras.utils.set_random_seed(options.seed)
  with strategy.scope():
    model = build_model(config)
    optimizer = optimization.create_optimizer(options.learning_rate, options.loop.num_train_steps,
                                              bias_correction=options.adam_bias_correction)

  def warm_start():
    if options.init_bert_checkpoint:
      report = bert_mapping.load_bert_weights(model.embedder.encoder, options.init_bert_checkpoint,
                                              strict=False)
      log(f"ICT embedder's BERT warm-started: {report.summary()}")

  def dataset_fn(batches_done: int) -> tf.data.Dataset:
    return ict_data.ict_dataset(
        pretraining.pretraining_dataset(options.pretraining_corpus_path), tokenizer, featurizer,
        options.block_seq_len, options.batch_size, options.mask_rate, options.seed,
        skip_batches=batches_done)

  return loop.train(model, optimizer, strategy, dataset_fn, options.loop, warm_start, log=log)
