"""BERT masked-LM pre-training (Devlin et al. 2019), the objective that teaches REALM's reader to read.

The network is the knowledge-augmented encoder itself (BERT + Model Garden's MaskedLM head), so what
this pre-trains is exactly what REALM's reader, ORQA's and FiD's encoders warm-start from:
`reader_items` names its parts as Model Garden's BertPretrainerV2.checkpoint_items do (encoder,
masked_lm), the layout realm_tf.checkpoints.bert_mapping.load_bert_weights restores.
"""

from typing import Dict

import tensorflow as tf
import tf_keras

from realm_tf.data import mlm as mlm_data
from realm_tf.modeling import bert
from realm_tf.modeling import knowledge_augmented_encoder as kae_lib
from realm_tf.modeling import losses
from realm_tf.modeling import realm as realm_model


class MaskedLmPretrainer(tf_keras.Model):
  """BERT + masked-LM head trained by the cross-entropy of the masked wordpieces.

  Args:
    config: the BERT configuration.

  compute_loss(features) takes a batch of realm_tf.data.mlm (token_ids, mask, segment_ids [B, L];
  mlm_positions, mlm_targets [B, P] int32; mlm_weights [B, P] float32) and returns the summed negative
  log-likelihood over real predictions, weighted by their count, with masked_lm_accuracy.
  """

  def __init__(self, config: bert.BertConfig, name: str = "masked_lm_pretrainer", **kwargs):
    super().__init__(name=name, **kwargs)
    self.config = config
    self.encoder = kae_lib.KnowledgeAugmentedEncoder(config)
    positions = tf.zeros([1, 1], tf.int32)
    self.encoder(((positions, positions, positions), positions))

  def reader_items(self) -> Dict[str, tf.Module]:
    """What a reader warm start reads: tf.train.Checkpoint(**reader_items()) is Model Garden's layout."""
    return {"encoder": self.encoder.encoder, "masked_lm": self.encoder.masked_lm}

  def call(self, features: Dict[str, tf.Tensor], training=None) -> tf.Tensor:
    """Logits [B, P, vocab_size]."""
    inputs = (features[mlm_data.TOKEN_IDS], features[mlm_data.MASK], features[mlm_data.SEGMENT_IDS])
    return self.encoder((inputs, features[mlm_data.MLM_POSITIONS]), training=training)

  def compute_loss(self, features: Dict[str, tf.Tensor], training=None) -> losses.LossOutput:
    logits = self(features, training=training)
    targets = features[mlm_data.MLM_TARGETS]
    weights = tf.cast(features[mlm_data.MLM_WEIGHTS], tf.float32)
    log_probs = realm_model.gather_target_log_probs(logits, targets)
    correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), targets), tf.float32)
    count = tf.reduce_sum(weights)
    return losses.LossOutput(loss_sum=-tf.reduce_sum(log_probs * weights),
                             loss_weight=count,
                             metrics={"masked_lm_accuracy": (tf.reduce_sum(correct * weights), count)})
