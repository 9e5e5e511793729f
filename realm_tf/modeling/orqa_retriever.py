"""ORQA's retriever fine-tuned alone: a query tower scored against a fixed index with ORQA's retriever loss.

ORQA (Lee et al. 2019) fine-tunes the query tower against block embeddings that do not move; OrqaModel
(realm_tf.modeling.orqa) does that together with the reader, over a top-k beam found in the step. This is
the retriever half on its own, for a corpus small enough to score every block exactly in every step (no
beam): the loss is -log of the softmax mass over ALL blocks on those that contain an answer, the blocks
that do being given as a feature (decided on the host, e.g. by realm_tf.answer_index, since the in-graph
wordpiece test of orqa_features.contains_answer needs the corpus' wordpieces on the device).

  logits = scale x (q . d) for every block d of the index       [B, N]
  loss   = losses.retriever_loss(logits, retriever_correct)

`scale` is a fixed inverse temperature: 1 in ORQA (raw inner products of unnormalised 128-d embeddings);
a sentence-transformers tower (cosine_score_scale=1) scores cosines in [-1, 1], whose softmax over thousands
of blocks is flat unless scaled (its own training used 20).
"""

from typing import Dict

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.data import orqa_features
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import losses

# float32 or bool [B, N]: block n contains an answer of question b.
RETRIEVER_CORRECT = "retriever_correct"


class _FixedIndex:
  """The block embeddings as a device variable the model deliberately does NOT track (a plain object,
  not a tf.Module): no optimizer updates it and no checkpoint holds it, as ORQA's index."""

  def __init__(self, embeddings: np.ndarray):
    self.embeddings = tf.Variable(embeddings, trainable=False, name="block_embeddings")  # [N, D]


class OrqaRetriever(tf_keras.Model):
  """A trainable query tower over a fixed index of block embeddings.

  Args:
    query_embedder: the query tower (e.g. a RetrieverEmbedder with pooling="mean", projection_size=None
      and cosine_score_scale=1 for a sentence-transformers model); trains.
    block_embeddings: float32 [N, D], row n embeds block n (D = query_embedder.output_size).
    scale: the fixed inverse temperature of the scores (see the module docstring).

  Features: orqa_features.QUERY_FIELDS, int32 [B, Q]; for the loss also RETRIEVER_CORRECT [B, N].
  Call returns the query embeddings, float32 [B, D].
  """

  def __init__(self,
               query_embedder: embedder_lib.RetrieverEmbedder,
               block_embeddings: np.ndarray,
               scale: float = 1.0,
               name: str = "orqa_retriever",
               **kwargs):
    super().__init__(name=name, **kwargs)
    block_embeddings = np.asarray(block_embeddings, np.float32)
    if block_embeddings.ndim != 2 or block_embeddings.shape[1] != query_embedder.output_size:
      raise ValueError(f"block embeddings have shape {block_embeddings.shape}, expected [N, "
                       f"{query_embedder.output_size}] (the query tower's output size); embed the corpus "
                       "with the matching document tower")
    if scale <= 0:
      raise ValueError(f"OrqaRetriever: scale must be positive, got {scale}")
    self.query_embedder = query_embedder
    self.scale = float(scale)
    self.num_blocks = int(block_embeddings.shape[0])
    self.index = _FixedIndex(block_embeddings)

  def call(self, features: Dict[str, tf.Tensor], training=None) -> tf.Tensor:
    query = tuple(features[name] for name in orqa_features.QUERY_FIELDS)
    return tf.cast(self.query_embedder(query, training=training), tf.float32)

  def retriever_logits(self, features: Dict[str, tf.Tensor], training=None) -> tf.Tensor:
    """float32 [B, N]: scale x q . d for every block, differentiable in the query tower."""
    query = self(features, training=training)
    return self.scale * tf.matmul(query, self.index.embeddings, transpose_b=True)

  def compute_loss(self, features: Dict[str, tf.Tensor], training=None) -> losses.LossOutput:
    """ORQA's retriever loss over all blocks, for realm_tf.training.loop (see losses.retriever_loss)."""
    return losses.retriever_loss(self.retriever_logits(features, training=training),
                                 features[RETRIEVER_CORRECT])
