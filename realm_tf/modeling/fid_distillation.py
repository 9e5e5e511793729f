"""FiD-KD's retriever loss: KL from the reader's passage scores to the retriever's, and the model under it.

Izacard & Grave, "Distilling Knowledge from Reader to Retriever" (ICLR 2021): the FiD reader's
cross-attention scores of the n retrieved passages (realm_tf.modeling.fid_reader.FidReader.passage_scores)
are the target distribution of the retriever's scores of the same passages. Per question (Atlas's "adist"
with temperatures),
  KL( softmax(reader_scores / T_reader) || softmax(retriever_scores / T_retriever) )
over its n passages, with the reader scores a stop-gradient target, averaged over questions ("batchmean";
FiD's KLDivLoss(reduction="mean") divides by n as well, which only rescales the learning rate).
"""

from typing import Dict

import tensorflow as tf
import tf_keras

from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import losses


def distillation_loss(retriever_scores: tf.Tensor,
                      reader_scores: tf.Tensor,
                      reader_temperature: float = 1.0,
                      retriever_temperature: float = 1.0) -> losses.LossOutput:
  """KL(softmax(reader / T_reader) || softmax(retriever / T_retriever)) per question.

  Args:
    retriever_scores: float [B, n], trainable.
    reader_scores: float [B, n], the target; its gradient is stopped.
    reader_temperature, retriever_temperature: positive temperatures.

  Returns:
    LossOutput: sum of the per-question KLs, weight B; metric "top1_agreement" (the retriever's best
    passage is the reader's best).
  """
  if reader_temperature <= 0 or retriever_temperature <= 0:
    raise ValueError(f"distillation_loss: temperatures must be positive, got reader "
                     f"{reader_temperature}, retriever {retriever_temperature}")
  target_logits = tf.stop_gradient(tf.cast(reader_scores, tf.float32)) / reader_temperature
  target = tf.nn.softmax(target_logits, axis=-1)
  log_target = tf.nn.log_softmax(target_logits, axis=-1)
  log_student = tf.nn.log_softmax(tf.cast(retriever_scores, tf.float32) / retriever_temperature, axis=-1)
  kl = tf.reduce_sum(target * (log_target - log_student), axis=-1)
  count = tf.cast(tf.shape(kl)[0], tf.float32)
  agree = tf.cast(tf.equal(tf.argmax(retriever_scores, -1), tf.argmax(reader_scores, -1)), tf.float32)
  return losses.LossOutput(loss_sum=tf.reduce_sum(kl),
                           loss_weight=count,
                           metrics={
                               "kl": (tf.reduce_sum(kl), count),
                               "top1_agreement": (tf.reduce_sum(agree), count)
                           })


class RetrieverDistillation(tf_keras.Model):
  """The retriever under the FiD-KD loss, for realm_tf.training.train_lib.TrainStep.

  Args:
    retriever: realm_tf.modeling.embedder.Retriever (scores q.d).
    reader_temperature, retriever_temperature: see distillation_loss.

  compute_loss features:
    query_token_ids, query_mask, query_segment_ids: int32 [B, Q].
    candidate_token_ids, candidate_mask, candidate_segment_ids: int32 [B, n, C], the retrieved passages.
    reader_scores: float32 [B, n], aggregate_cross_attention of the reader on the same passages.
  """

  def __init__(self,
               retriever: embedder_lib.Retriever,
               reader_temperature: float = 1.0,
               retriever_temperature: float = 1.0,
               name: str = "fid_kd",
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.retriever = retriever
    self.reader_temperature = reader_temperature
    self.retriever_temperature = retriever_temperature

  def call(self, features, training=None):
    return self.retriever(
        ((features["query_token_ids"], features["query_mask"], features["query_segment_ids"]),
         (features["candidate_token_ids"], features["candidate_mask"], features["candidate_segment_ids"])),
        training=training)

  def compute_loss(self, features: Dict[str, tf.Tensor], training=None) -> losses.LossOutput:
    scores = self(features, training=training)
    return distillation_loss(scores, features["reader_scores"], self.reader_temperature,
                             self.retriever_temperature)
