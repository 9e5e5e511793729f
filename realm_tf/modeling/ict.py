"""Inverse Cloze Task (Lee et al. 2019, ORQA): the retriever warm start of REALM.

A sentence is the pseudo-query; its block (with the sentence removed, with probability mask_rate) is the
positive; every other block of the GLOBAL batch is a negative. One embedder (one set of weights) embeds
queries and blocks, as the released ORQA code does. Under a distribution strategy the blocks of all
replicas are gathered (the original's cross_shard_concat) so the softmax runs over the global batch.
"""

from typing import Dict

import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import losses
from realm_tf.modeling import realm

QUERY = "query"  # query_{token_ids,mask,segment_ids}  int32 [b, Q]: [CLS] sentence [SEP]
BLOCK = "block"  # block_{token_ids,mask,segment_ids}  int32 [b, C]: [CLS] title [SEP] block [SEP]
MASK_QUERY = "mask_query"  # float32 [b], 1.0 where the sentence was removed from the block


class IctModel(tf_keras.Model):
  """ICT: one embedder, in-batch softmax over the global batch.

  Args:
    config: BERT of the embedder.
    projection_size: D (128).
    layer_norm_epsilon: 1e-3, the ICT module's Keras LayerNormalization default.
    dropout_rate: 0.1 in the released ICT module.
    pooling, cosine_score_scale: see embedder.RetrieverEmbedder.
  """

  # The loss gathers the blocks of all replicas (see realm_tf.training.train_lib).
  cross_replica_loss = True

  def __init__(self,
               config: bert.BertConfig,
               projection_size: int = 128,
               layer_norm_epsilon: float = 1e-3,
               dropout_rate: float = 0.1,
               name: str = "ict",
               pooling: str = embedder_lib.POOLER,
               cosine_score_scale: float = 0.0,
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.embedder = embedder_lib.RetrieverEmbedder(config,
                                                   projection_size,
                                                   layer_norm_epsilon,
                                                   dropout_rate,
                                                   name="embedder",
                                                   pooling=pooling,
                                                   cosine_score_scale=cosine_score_scale)

  def call(self, features: Dict[str, tf.Tensor], training=None):
    """Returns (query_emb [b, D], block_emb [b, D])."""
    return (self.embedder(realm.bert_triple(features, QUERY), training=training),
            self.embedder(realm.bert_triple(features, BLOCK), training=training))

  def compute_loss(self, features: Dict[str, tf.Tensor], training=None) -> losses.LossOutput:
    query_emb, block_emb = self(features, training=training)
    context = tf.distribute.get_replica_context()
    local_batch = tf.shape(block_emb)[0]
    if context is not None and context.num_replicas_in_sync > 1:
      all_blocks = context.all_gather(block_emb, axis=0)
      offset = tf.cast(context.replica_id_in_sync_group, tf.int32) * local_batch
    else:
      all_blocks, offset = block_emb, 0
    labels = offset + tf.range(local_batch)
    groups = None
    if MASK_QUERY in features:
      masked = tf.cast(features[MASK_QUERY], tf.float32)
      groups = {"masked_accuracy": masked, "unmasked_accuracy": 1.0 - masked}
    return losses.in_batch_softmax_loss(query_emb, all_blocks, labels, groups)
