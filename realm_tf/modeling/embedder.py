"""The REALM/ORQA retriever: BERT embedders of queries and documents and their inner-product scores.

Embedder (Guu et al. 2020, sec. 3.2; the released ICT and REALM modules):
  BERT(pooled_output) -> Dense(projection_size, default 128) -> LayerNorm -> Dropout (training only)
The pooled output is BERT's tanh pooler over [CLS], not the raw [CLS] vector. Two released flavours differ
only in numerics: the REALM-released embedder uses a BERT-style LayerNorm (epsilon 1e-12), the ICT module
Keras LayerNormalization (epsilon 1e-3) with dropout 0.1 in training; both are constructor arguments.

Pooling (`pooling`): "pooler" is the above, REALM's and ORQA's. "mean" averages BERT's last hidden
states over the non-padding tokens instead, as sentence-transformers embedders (all-MiniLM-L6-v2) do.
A sentence-transformers embedder is this model with pooling="mean", projection_size=None (no projection
and no LayerNorm: the embedding is the pooled vector itself) and cosine_score_scale=1 (divided by its L2
norm, so that inner products are cosines), over its own converted encoder (`encoder`).

Cosine scores (`cosine_score_scale` s > 0): each embedding is L2-normalised and multiplied by sqrt(s), so
the inner product of a query and a document is s x their cosine. Such a model's space is a cosine space
(all-MiniLM-L6-v2 ranks 89.2% of SQuAD-open's dev answers into its top 5 of the 2,067 dev paragraphs by
cosine, 80.8% by the raw inner product of its mean-pooled vectors, whose norms vary by document), and
REALM's softmax over cosines in [-1, 1] would be nearly flat, so s is the inverse temperature (20 in
sentence-transformers' own contrastive training). Scaling both towers by sqrt(s) keeps every score an
inner product: the MIPS index, REALM's retrieval logits and the exported towers need nothing else.
0 (the default, REALM's and ORQA's): the embedding as computed, raw inner products.
Mean pooling passes every token's representation straight into the embedding, so a small BERT learns to
match the names and rare words of a query with a document's far sooner than through [CLS] (on testdata a
2-layer BERT's ICT in-batch accuracy is about 0.4 with the pooler and 0.9 with mean pooling after the
same steps).

The query and document towers share one embedder by default (the original's share_embedders=True). With
share_embedders=False they are two embedders with their own weights; the original's separate-tower path
was broken (both towers ended up with one set of weights), so ours has a test of its own.
"""

from typing import Optional

import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert

POOLER = "pooler"
MEAN = "mean"
POOLINGS = (POOLER, MEAN)


def check_pooling(pooling: str) -> str:
  if pooling not in POOLINGS:
    raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
  return pooling


def mean_pool(sequence_output: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
  """Mean of sequence_output [b, L, H] over the positions where mask [b, L] is 1 -> [b, H]."""
  weights = tf.cast(mask, sequence_output.dtype)[..., tf.newaxis]
  # An all-padding row (never produced by the featurizer) gives zeros instead of NaN.
  count = tf.maximum(tf.reduce_sum(weights, axis=1), tf.ones([], sequence_output.dtype))
  return tf.reduce_sum(sequence_output * weights, axis=1) / count


def flatten_bert_inputs(inputs):
  """(token_ids, mask, segment_ids) with any leading shape [..., L] -> a BertEncoderV2 dict of [-1, L]."""
  token_ids, mask, segment_ids = inputs
  seq_len = tf.shape(token_ids)[-1]
  return bert.encoder_inputs(tf.reshape(token_ids, [-1, seq_len]), tf.reshape(mask, [-1, seq_len]),
                             tf.reshape(segment_ids, [-1, seq_len]))


class RetrieverEmbedder(tf_keras.Model):
  """Embeds BERT inputs into projection_size vectors.

  Args:
    config: the BERT encoder's configuration.
    projection_size: D, the index dimension (128 in REALM and ORQA); None or 0: no projection and no
      LayerNorm, the embedding is the pooled vector (D = config.hidden_size), as sentence-transformers.
    layer_norm_epsilon: 1e-12 for the REALM-released embedder, 1e-3 for the ICT module.
    dropout_rate: dropout after the LayerNorm in training (ICT: 0.1; REALM embedder: 0).
    pooling: "pooler" (BERT's tanh pooler over [CLS], the original) or "mean" (see the module doc).
    cosine_score_scale: s > 0: L2-normalise each embedding and multiply it by sqrt(s), so that scores
      are s x cosine (the module docstring); 0: no normalisation (REALM and ORQA).
    encoder: an existing BertEncoderV2 of config to embed with (e.g. a converted Hugging Face model,
      whose weights it keeps); default: a new one.

  Call:
    inputs: (token_ids, mask, segment_ids), int32 [..., seq_len].
    Returns float32 [..., D].
  """

  def __init__(self,
               config: bert.BertConfig,
               projection_size: Optional[int] = 128,
               layer_norm_epsilon: float = 1e-12,
               dropout_rate: float = 0.0,
               name: str = "embedder",
               pooling: str = POOLER,
               cosine_score_scale: float = 0.0,
               encoder: Optional[tf_keras.Model] = None,
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.config = config
    self.pooling = check_pooling(pooling)
    if cosine_score_scale < 0:
      raise ValueError(f"cosine_score_scale must be >= 0 (0: raw inner products), got {cosine_score_scale}")
    self.cosine_score_scale = float(cosine_score_scale)
    # 0 is the flags' and RealmConfig's spelling of "no projection".
    projection_size = projection_size or None
    self.projection_size = projection_size
    self.output_size = config.hidden_size if projection_size is None else projection_size
    self.encoder = encoder if encoder is not None else bert.build_encoder(config, name="bert")
    if projection_size is None:
      self.projection = self.layer_norm = None
    else:
      self.projection = tf_keras.layers.Dense(
          projection_size,
          kernel_initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range),
          name="projection")
      # float32: the scores that feed softmaxes stay in full precision under mixed_bfloat16.
      self.layer_norm = tf_keras.layers.LayerNormalization(epsilon=layer_norm_epsilon,
                                                           name="layer_norm",
                                                           dtype=tf.float32)
    # float32 as well: under mixed_bfloat16 a default-policy Dropout would cast the embedding back.
    self.dropout = tf_keras.layers.Dropout(dropout_rate, dtype=tf.float32)

  def call(self, inputs, training=None):
    token_ids = inputs[0]
    bert_inputs = flatten_bert_inputs(inputs)
    outputs = self.encoder(bert_inputs, training=training)
    if self.pooling == MEAN:
      pooled = mean_pool(outputs["sequence_output"], bert_inputs["input_mask"])
    else:
      pooled = outputs["pooled_output"]
    if self.projection is None:
      embedding = tf.cast(pooled, tf.float32)
    else:
      embedding = self.layer_norm(self.projection(pooled))
    embedding = self.dropout(embedding, training=training)
    if self.cosine_score_scale:
      embedding = tf.math.l2_normalize(embedding, axis=-1) * (self.cosine_score_scale**0.5)
    return tf.reshape(embedding, tf.concat([tf.shape(token_ids)[:-1], [self.output_size]], 0))


def sentence_transformers_embedder(config: bert.BertConfig,
                                   encoder: Optional[tf_keras.Model] = None,
                                   name: str = "embedder") -> RetrieverEmbedder:
  """The embedder of a sentence-transformers model such as all-MiniLM-L6-v2: mean pooling over the real
  tokens, no projection, L2-normalised; over encoder (its converted BERT) if given."""
  return RetrieverEmbedder(config,
                           projection_size=None,
                           name=name,
                           pooling=MEAN,
                           cosine_score_scale=1.0,
                           encoder=encoder)


# The query tower's layer name: its variables are named .../query_embedder/... (what a per-tower learning
# rate selects them by, realm_tf.tasks.orqa_trainer).
QUERY_TOWER_NAME = "query_embedder"


class Retriever(tf_keras.Model):
  """Query and document towers; scores are raw inner products (no temperature), as in REALM.

  Args:
    config, projection_size, layer_norm_epsilon, dropout_rate, pooling, cosine_score_scale: see
      RetrieverEmbedder.
    share_embedders: one embedder for both towers (default) or two.
  """

  def __init__(self,
               config: bert.BertConfig,
               projection_size: int = 128,
               layer_norm_epsilon: float = 1e-12,
               dropout_rate: float = 0.0,
               share_embedders: bool = True,
               name: str = "retriever",
               pooling: str = POOLER,
               cosine_score_scale: float = 0.0,
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.share_embedders = share_embedders
    self.doc_embedder = RetrieverEmbedder(config,
                                          projection_size,
                                          layer_norm_epsilon,
                                          dropout_rate,
                                          name="doc_embedder",
                                          pooling=pooling,
                                          cosine_score_scale=cosine_score_scale)
    self.query_embedder = self.doc_embedder if share_embedders else RetrieverEmbedder(
        config,
        projection_size,
        layer_norm_epsilon,
        dropout_rate,
        name=QUERY_TOWER_NAME,
        pooling=pooling,
        cosine_score_scale=cosine_score_scale)

  def embed_queries(self, inputs, training=None):
    """[..., Q] query inputs -> float32 [..., D]."""
    return self.query_embedder(inputs, training=training)

  def embed_documents(self, inputs, training=None):
    """[..., C] candidate inputs -> float32 [..., D]."""
    return self.doc_embedder(inputs, training=training)

  def call(self, inputs, training=None):
    """Scores candidates of each query.

    Args:
      inputs: (query_inputs, candidate_inputs): BertInputs-like triples, [B, Q] and [B, N, C].

    Returns:
      float32 [B, N], q . d for each candidate.
    """
    query_inputs, candidate_inputs = inputs
    query = self.embed_queries(query_inputs, training=training)
    candidates = self.embed_documents(candidate_inputs, training=training)
    return tf.einsum("bd,bnd->bn", query, candidates)


def build_retriever(config: bert.BertConfig,
                    projection_size: int = 128,
                    layer_norm_epsilon: float = 1e-12,
                    dropout_rate: float = 0.0,
                    share_embedders: bool = True,
                    seq_len: Optional[int] = 8,
                    pooling: str = POOLER,
                    cosine_score_scale: float = 0.0) -> Retriever:
  """A Retriever with its variables created (a forward pass on a dummy batch), ready to restore into."""
  retriever = Retriever(config,
                        projection_size,
                        layer_norm_epsilon,
                        dropout_rate,
                        share_embedders,
                        pooling=pooling,
                        cosine_score_scale=cosine_score_scale)
  dummy = tf.zeros([1, seq_len], tf.int32)
  retriever.embed_queries((dummy, dummy, dummy))
  retriever.embed_documents((dummy, dummy, dummy))
  return retriever
