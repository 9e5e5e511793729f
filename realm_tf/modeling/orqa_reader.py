"""ORQA's reader trained on blocks retrieved beforehand: a SpanReader and ORQA's loss, the retriever's part
given as features (or absent).

OrqaModel (realm_tf.modeling.orqa) retrieves, packs and labels the blocks inside its step. When the blocks
come from elsewhere (another retriever's top passages, a gold paragraph and a BM25 one, synthetic batches
of a step benchmark), the reader's features arrive packed and labelled, and only the loss remains:

  with retriever_logits [B, R] and retriever_correct [B, R] (R >= K, the first K being the read blocks'):
    losses.orqa_loss: the retriever loss over the R blocks + the reader loss over the K blocks' spans,
    each span's logit including its block's retriever logit (ORQA's fine-tuning loss);
  without them: losses.reader_loss, one softmax over all spans of the K blocks (retriever logits 0).
"""

from typing import Dict

import tensorflow as tf
import tf_keras

from realm_tf.modeling import losses
from realm_tf.modeling import reader as reader_lib
from realm_tf.modeling import realm

READER = "reader"
READER_FIELDS = tuple(f"{READER}_{field}" for field in realm.BERT_FIELDS)  # int32 [B, K, L] each
BLOCK_MASK = "block_mask"  # int32 [B, K, L], 1 on block wordpieces
GOLD_STARTS, GOLD_ENDS = "gold_starts", "gold_ends"  # int32 [B, K, G], -1 for none
RETRIEVER_LOGITS, RETRIEVER_CORRECT = "retriever_logits", "retriever_correct"  # [B, R], optional
FEATURES = READER_FIELDS + (BLOCK_MASK, GOLD_STARTS, GOLD_ENDS)


class OrqaReader(tf_keras.Model):
  """A SpanReader trained with ORQA's loss on given blocks (see the module docstring).

  Args:
    reader: the span reader (its BERT possibly warm-started); its seq_len is the features' L.

  Features: FEATURES, and optionally RETRIEVER_LOGITS and RETRIEVER_CORRECT.
  Call returns the reader's ReaderOutput (logits [B, K, S]).
  """

  def __init__(self, reader: reader_lib.SpanReader, name: str = "orqa_reader", **kwargs):
    super().__init__(name=name, **kwargs)
    self.reader = reader

  def call(self, features: Dict[str, tf.Tensor], training=None) -> reader_lib.ReaderOutput:
    token_ids = features[READER_FIELDS[0]]
    if RETRIEVER_LOGITS in features:
      retriever_logits = features[RETRIEVER_LOGITS][:, :tf.shape(token_ids)[1]]
    else:
      retriever_logits = tf.zeros(tf.shape(token_ids)[:2], tf.float32)
    return self.reader((realm.bert_triple(features, READER), features[BLOCK_MASK], retriever_logits),
                       training=training)

  def compute_loss(self, features: Dict[str, tf.Tensor], training=None) -> losses.LossOutput:
    output = self(features, training=training)
    correct = reader_lib.reader_correct(output.span_starts, output.span_ends, features[GOLD_STARTS],
                                        features[GOLD_ENDS])  # [B, K, S]
    if RETRIEVER_LOGITS in features:
      return losses.orqa_loss(features[RETRIEVER_LOGITS], features[RETRIEVER_CORRECT], output.logits, correct)
    return losses.reader_loss(output.logits, correct)
