"""The REALM pre-training model: retrieve-then-predict with a marginal over candidate documents.

Given a masked query x, N candidate documents z (the learned null document at index 0, then the documents
the stale index returned) and the joint inputs [CLS] x [SEP] z_body [SEP]:
  f(x, z)        = Embed_query(x) . Embed_doc(z)          recomputed with the LIVE weights (the index only
                                                           chose the candidates), so both towers learn
  p(z | x)       = softmax_z f(x, z)
  p(y_j | z, x)  = masked-LM of the knowledge-augmented encoder at mask j
  log p(y_j | x) = logsumexp_z [log p(z|x) + log p(y_j|z,x)]   per masked token j
  loss           = mean over the real masked tokens of the global batch of -log p(y_j | x)
(Guu et al. 2020, sec. 2-3; reference/original_realm_orqa.md 3.1, 3.3.)
"""

from typing import Dict, Optional

import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import knowledge_augmented_encoder as kae_lib
from realm_tf.modeling import losses

# Feature names of a REALM pre-training batch; shapes with B examples, N candidates, M masks.
QUERY = "query"  # query_{token_ids,mask,segment_ids}        int32 [B, Q]
CANDIDATE = "candidate"  # candidate_{token_ids,mask,segment_ids}    int32 [B, N, C]
JOINT = "joint"  # joint_{token_ids,mask,segment_ids}        int32 [B, N, Q + C]
MLM_POSITIONS = "mlm_positions"  # int32 [B, M]
MLM_TARGETS = "mlm_targets"  # int32 [B, M]
MLM_MASK = "mlm_mask"  # float32 [B, M]
BERT_FIELDS = ("token_ids", "mask", "segment_ids")


def bert_triple(features: Dict[str, tf.Tensor], prefix: str):
  """(token_ids, mask, segment_ids) of one feature group, e.g. bert_triple(features, "query")."""
  return tuple(features[f"{prefix}_{field}"] for field in BERT_FIELDS)


def gather_target_log_probs(logits: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
  """log_softmax(logits) at the targets: logits [..., M, V], targets int [..., M] -> [..., M].

  Computed as logit[target] - logsumexp(logits) so no [..., M, V] log-probability tensor is kept.
  """
  logits = tf.cast(logits, tf.float32)
  target_logits = tf.gather(logits, targets, batch_dims=len(targets.shape))
  return target_logits - tf.reduce_logsumexp(logits, axis=-1)


class RealmPretrainer(tf_keras.Model):
  """Retriever + knowledge-augmented encoder, trained by REALM's marginal likelihood.

  Args:
    retriever_config: BERT of the embedders.
    reader_config: BERT of the knowledge-augmented encoder (defaults to retriever_config's shape).
    projection_size, layer_norm_epsilon, dropout_rate, share_embedders, pooling, cosine_score_scale:
      see embedder.Retriever.
  """

  def __init__(self,
               retriever_config: bert.BertConfig,
               reader_config: Optional[bert.BertConfig] = None,
               projection_size: int = 128,
               layer_norm_epsilon: float = 1e-12,
               dropout_rate: float = 0.0,
               share_embedders: bool = True,
               name: str = "realm",
               pooling: str = embedder_lib.POOLER,
               cosine_score_scale: float = 0.0,
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.retriever = embedder_lib.Retriever(retriever_config,
                                            projection_size,
                                            layer_norm_epsilon,
                                            dropout_rate,
                                            share_embedders,
                                            pooling=pooling,
                                            cosine_score_scale=cosine_score_scale)
    self.encoder = kae_lib.KnowledgeAugmentedEncoder(reader_config or retriever_config)

  def call(self, features: Dict[str, tf.Tensor], training=None) -> Dict[str, tf.Tensor]:
    """Returns retrieval_logits [B, N], candidate_log_probs [B, N], gold_log_probs [B, N, M]."""
    retrieval_logits = self.retriever((bert_triple(features, QUERY), bert_triple(features, CANDIDATE)),
                                      training=training)
    num_candidates = tf.shape(retrieval_logits)[1]
    # The query's masks sit at the same positions in every joint input ([CLS] query [SEP] body).
    positions = tf.repeat(features[MLM_POSITIONS][:, tf.newaxis, :], num_candidates, axis=1)
    targets = tf.repeat(features[MLM_TARGETS][:, tf.newaxis, :], num_candidates, axis=1)
    logits = self.encoder((bert_triple(features, JOINT), positions), training=training)
    return {
        "retrieval_logits": retrieval_logits,
        "candidate_log_probs": tf.nn.log_softmax(retrieval_logits, axis=-1),
        "gold_log_probs": gather_target_log_probs(logits, targets),
    }

  def compute_loss(self, features: Dict[str, tf.Tensor], training=None) -> losses.LossOutput:
    outputs = self(features, training=training)
    return losses.realm_loss(outputs["candidate_log_probs"], outputs["gold_log_probs"], features[MLM_MASK])
