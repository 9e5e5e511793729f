"""REALM's knowledge-augmented encoder: BERT over [CLS] query [SEP] document [SEP] with a masked-LM head.

The head is Model Garden's MaskedLM (dense transform, activation, LayerNorm, decoder tied to the word
embeddings plus an output bias), the same structure as BERT's `cls/predictions`, so Google BERT and the
released REALM `bert` module convert into it one to one.
"""

import tensorflow as tf
import tf_keras
from official.nlp.modeling import layers

from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib


class KnowledgeAugmentedEncoder(tf_keras.Model):
  """BERT + masked-LM head.

  Args:
    config: the BERT configuration.

  Call:
    inputs: ((token_ids, mask, segment_ids) int32 [..., L], mlm_positions int32 [..., M]); the leading
      shapes of both must agree, e.g. [B * N, L] and [B * N, M].
    Returns float32 logits [..., M, vocab_size] (float32 even under mixed_bfloat16).
  """

  def __init__(self, config: bert.BertConfig, name: str = "knowledge_augmented_encoder", **kwargs):
    super().__init__(name=name, **kwargs)
    self.config = config
    self.encoder = bert.build_encoder(config, name="bert")
    # The word embedding table exists only once the encoder is built; the MLM decoder is tied to it.
    dummy = tf.zeros([1, 2], tf.int32)
    self.encoder(bert.encoder_inputs(dummy, dummy, dummy))
    self.masked_lm = layers.MaskedLM(
        embedding_table=self.encoder.get_embedding_table(),
        activation=bert.activation(config.hidden_act),
        initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range),
        output="logits",
        name="cls")

  def call(self, inputs, training=None):
    bert_inputs, mlm_positions = inputs
    token_ids = bert_inputs[0]
    num_masks = tf.shape(mlm_positions)[-1]
    sequence = self.encoder(embedder_lib.flatten_bert_inputs(bert_inputs),
                            training=training)["sequence_output"]
    logits = self.masked_lm(sequence, masked_positions=tf.reshape(mlm_positions, [-1, num_masks]))
    logits = tf.cast(logits, tf.float32)
    out_shape = tf.concat([tf.shape(token_ids)[:-1], [num_masks, self.config.vocab_size]], 0)
    return tf.reshape(logits, out_shape)
