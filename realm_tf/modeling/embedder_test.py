"""Tests of the retriever embedders: shapes, the pooled-output path, numerics and the two-tower option.

The separate-tower case matters most: the original's share_embedders=False path ended up with one set of
weights for both towers, so here the towers must own different variables, give different outputs, be
trained independently and survive a checkpoint round trip as two towers.
"""

import os

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import embedder

_VOCAB = 30
_CONFIG = bert.tiny_config(_VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_D = 16


def _inputs(shape, seed=0):
  """A (token_ids, mask, segment_ids) triple of `shape` with some padding at the end of each row."""
  rng = np.random.default_rng(seed)
  token_ids = rng.integers(5, _VOCAB, shape).astype(np.int32)
  mask = np.ones(shape, np.int32)
  mask[..., -2:] = 0
  token_ids[..., -2:] = 0
  segment_ids = np.zeros(shape, np.int32)
  segment_ids[..., shape[-1] // 2:-2] = 1
  return tuple(tf.constant(x) for x in (token_ids, mask, segment_ids))


def _layer_norm(x, gamma, beta, epsilon):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean)**2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


class _SeededTestCase(tf.test.TestCase):
  """Seeds Keras's initializers, so every run builds the same weights (unseeded ones differ per run)."""

  def setUp(self):
    super().setUp()
    tf_keras.utils.set_random_seed(0)


class RetrieverEmbedderTest(_SeededTestCase):

  def test_output_shape_for_flat_and_nested_inputs(self):
    model = embedder.RetrieverEmbedder(_CONFIG, projection_size=_D)
    self.assertEqual(model(_inputs([3, 7])).shape, [3, _D])
    nested = model(_inputs([2, 4, 7]))
    self.assertEqual(nested.shape, [2, 4, _D])
    self.assertEqual(nested.dtype, tf.float32)
    # [B, N, L] is the same as embedding the B * N rows one by one.
    flat = model(tuple(tf.reshape(x, [8, 7]) for x in _inputs([2, 4, 7])))
    self.assertAllClose(tf.reshape(nested, [8, _D]), flat, atol=1e-5)

  def test_pooled_output_projection_layer_norm(self):
    """The embedding is LayerNorm(Dense(pooled_output)): BERT's tanh pooler, not the raw [CLS] vector."""
    model = embedder.RetrieverEmbedder(_CONFIG, projection_size=_D)
    inputs = _inputs([3, 7])
    got = model(inputs, training=False)
    outputs = model.encoder(bert.encoder_inputs(*inputs), training=False)
    expected = model.layer_norm(model.projection(outputs["pooled_output"]))
    self.assertAllClose(expected, got, atol=1e-6)
    # Sensitivity: the raw [CLS] vector would give something else.
    from_cls = model.layer_norm(model.projection(outputs["sequence_output"][:, 0]))
    self.assertGreater(np.abs(from_cls - got).max(), 1e-2)

  def test_mean_pooling_averages_non_padding_tokens(self):
    model = embedder.RetrieverEmbedder(_CONFIG, projection_size=_D, pooling=embedder.MEAN)
    token_ids, mask, segment_ids = _inputs([3, 7])
    got = model((token_ids, mask, segment_ids), training=False)
    sequence = model.encoder(bert.encoder_inputs(token_ids, mask, segment_ids),
                             training=False)["sequence_output"].numpy()
    # The last 2 positions of every row are padding (see _inputs): only the first 5 are averaged.
    mean = sequence[:, :5].mean(axis=1)
    self.assertAllClose(model.layer_norm(model.projection(mean)), got, atol=1e-5)
    with_padding = model.layer_norm(model.projection(sequence.mean(axis=1)))
    self.assertGreater(np.abs(with_padding - got).max(), 1e-3)
    # A padding token's id cannot change the embedding; a real token's can.
    changed_pad = token_ids.numpy().copy()
    changed_pad[:, -1] = 7
    self.assertAllClose(got, model((tf.constant(changed_pad), mask, segment_ids), training=False), atol=1e-5)
    changed_real = token_ids.numpy().copy()
    changed_real[:, 2] = (changed_real[:, 2] + 1 - 5) % (_VOCAB - 5) + 5
    self.assertGreater(
        np.abs(got - model((tf.constant(changed_real), mask, segment_ids), training=False)).max(), 1e-3)

  def test_sentence_transformers_embedder_is_the_normalised_mean(self):
    """No projection, no LayerNorm: the unit-norm mean of the encoder's outputs over the real tokens
    (sentence-transformers' mean pooling), over the encoder it is given."""
    encoder = bert.build_encoder(_CONFIG)
    model = embedder.sentence_transformers_embedder(_CONFIG, encoder)
    self.assertIs(model.encoder, encoder)
    self.assertIsNone(model.projection)
    token_ids, mask, segment_ids = _inputs([3, 7])
    got = model((token_ids, mask, segment_ids), training=False)
    self.assertEqual(got.shape, [3, _CONFIG.hidden_size])
    self.assertEqual(model.output_size, _CONFIG.hidden_size)
    sequence = encoder(bert.encoder_inputs(token_ids, mask, segment_ids),
                       training=False)["sequence_output"].numpy()
    mean = sequence[:, :5].mean(axis=1)
    self.assertAllClose(mean / np.linalg.norm(mean, axis=1, keepdims=True), got, atol=1e-5)
    self.assertLen(model.trainable_variables, len(encoder.trainable_variables))

  def test_cosine_score_scale_makes_scores_scaled_cosines(self):
    """projection_size=0 is no projection; cosine_score_scale=s: q . d = s x cosine of the pooled vectors,
    whatever their norms, in a retriever's scores as in its towers."""
    tf_keras.utils.set_random_seed(3)
    retriever = embedder.build_retriever(_CONFIG, 0, pooling=embedder.MEAN, cosine_score_scale=20.0)
    raw = embedder.RetrieverEmbedder(_CONFIG,
                                     None,
                                     pooling=embedder.MEAN,
                                     encoder=retriever.doc_embedder.encoder)
    self.assertIsNone(retriever.doc_embedder.projection)
    query_inputs, candidate_inputs = _inputs([2, 7], seed=3), _inputs([2, 4, 9], seed=4)
    q, d = raw(query_inputs).numpy(), raw(candidate_inputs).numpy()
    self.assertGreater(np.abs(np.linalg.norm(d, axis=-1) - 1.0).max(), 0.05)  # not unit vectors already
    cosine = np.einsum("bh,bnh->bn", q,
                       d) / (np.linalg.norm(q, axis=-1)[:, None] * np.linalg.norm(d, axis=-1))
    self.assertAllClose(20.0 * cosine, retriever((query_inputs, candidate_inputs)), atol=1e-4)
    self.assertAllClose(np.full([2, 4], np.sqrt(20.0)),
                        np.linalg.norm(retriever.embed_documents(candidate_inputs), axis=-1),
                        atol=1e-5)
    with self.assertRaisesRegex(ValueError, "cosine_score_scale must be >= 0"):
      embedder.RetrieverEmbedder(_CONFIG, None, cosine_score_scale=-1.0)

  def test_mean_pool_of_an_all_padding_row_is_zero_not_nan(self):
    sequence = tf.ones([2, 3, 4])
    pooled = embedder.mean_pool(sequence, tf.constant([[1, 1, 0], [0, 0, 0]]))
    self.assertAllClose([[1.0] * 4, [0.0] * 4], pooled)

  def test_unknown_pooling_is_rejected(self):
    with self.assertRaisesRegex(ValueError, "pooling must be one of"):
      embedder.RetrieverEmbedder(_CONFIG, projection_size=_D, pooling="max")

  def test_layer_norm_epsilon_is_configurable_and_used(self):
    inputs = _inputs([3, 7])
    small = embedder.RetrieverEmbedder(_CONFIG, projection_size=_D, layer_norm_epsilon=1e-12)
    large = embedder.RetrieverEmbedder(_CONFIG, projection_size=_D, layer_norm_epsilon=1e-3)
    small(inputs)
    large(inputs)
    large.set_weights(small.get_weights())
    self.assertEqual(small.layer_norm.epsilon, 1e-12)
    self.assertEqual(large.layer_norm.epsilon, 1e-3)
    # At initialization the projection's variance is small, so epsilon 1e-3 changes the output visibly.
    projected = large.projection(large.encoder(bert.encoder_inputs(*inputs))["pooled_output"]).numpy()
    self.assertLess(projected.var(-1).max(), 1e-2)
    gamma, beta = (w.numpy() for w in large.layer_norm.weights)
    self.assertAllClose(_layer_norm(projected, gamma, beta, 1e-3), large(inputs), atol=1e-5)
    self.assertAllClose(_layer_norm(projected, gamma, beta, 1e-12), small(inputs), atol=1e-4)
    self.assertGreater(np.abs(large(inputs) - small(inputs)).max(), 1e-2)

  def test_dropout_only_in_training(self):
    inputs = _inputs([4, 7])
    model = embedder.RetrieverEmbedder(_CONFIG, projection_size=_D, dropout_rate=0.5)
    eval_1 = model(inputs, training=False)
    eval_2 = model(inputs, training=False)
    self.assertAllEqual(eval_1, eval_2)
    self.assertAllEqual(eval_1, model(inputs))  # training=None is inference, as in Keras.
    train_1 = model(inputs, training=True)
    train_2 = model(inputs, training=True)
    self.assertGreater(np.abs(train_1 - train_2).max(), 1e-3)
    self.assertGreater(np.abs(train_1 - eval_1).max(), 1e-3)
    # Inverted dropout: kept units are scaled by 1 / (1 - rate), dropped ones are 0.
    train_1, eval_1 = train_1.numpy(), eval_1.numpy()
    dropped = train_1 == 0.0
    self.assertTrue(dropped.any() and not dropped.all())
    self.assertAllClose(train_1[~dropped], 2.0 * eval_1[~dropped], atol=1e-5)
    # With rate 0 training and inference agree (the BERT config has no dropout here).
    no_dropout = embedder.RetrieverEmbedder(_CONFIG, projection_size=_D, dropout_rate=0.0)
    self.assertAllClose(no_dropout(inputs, training=True), no_dropout(inputs, training=False))

  def test_float32_under_mixed_bfloat16(self):
    """Scores feed softmaxes: the embedding must stay float32 (the dropout layer once cast it back)."""
    inputs = _inputs([3, 7])
    reference = embedder.RetrieverEmbedder(_CONFIG, projection_size=_D, dropout_rate=0.1)
    expected = reference(inputs)
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
      model = embedder.RetrieverEmbedder(_CONFIG, projection_size=_D, dropout_rate=0.1)
      model(inputs)
      model.set_weights(reference.get_weights())
      for training in (False, True):
        self.assertEqual(tf.float32, model(inputs, training=training).dtype)
      self.assertAllClose(expected, model(inputs), atol=0.1)
    finally:
      tf_keras.mixed_precision.set_global_policy("float32")


class RetrieverTest(_SeededTestCase):

  def _build(self, share_embedders):
    return embedder.build_retriever(_CONFIG, projection_size=_D, share_embedders=share_embedders)

  def test_shared_towers_are_one_embedder(self):
    retriever = self._build(share_embedders=True)
    self.assertIs(retriever.query_embedder, retriever.doc_embedder)
    self.assertLen(retriever.trainable_variables, len(retriever.doc_embedder.trainable_variables))
    inputs = _inputs([3, 7])
    self.assertAllEqual(retriever.embed_queries(inputs), retriever.embed_documents(inputs))

  def test_separate_towers_have_their_own_weights(self):
    retriever = self._build(share_embedders=False)
    query_vars = retriever.query_embedder.trainable_variables
    doc_vars = retriever.doc_embedder.trainable_variables
    self.assertIsNot(retriever.query_embedder, retriever.doc_embedder)
    self.assertLen(query_vars, len(doc_vars))
    self.assertEmpty({id(v) for v in query_vars} & {id(v) for v in doc_vars})
    self.assertLen(retriever.trainable_variables, 2 * len(doc_vars))
    self.assertTrue(all("query_embedder" in v.name for v in query_vars))
    self.assertTrue(all("doc_embedder" in v.name for v in doc_vars))
    inputs = _inputs([3, 7])
    self.assertGreater(
        np.abs(retriever.embed_queries(inputs) - retriever.embed_documents(inputs)).max(), 1e-2)

  def test_query_loss_trains_only_the_query_tower(self):
    retriever = self._build(share_embedders=False)
    inputs = _inputs([3, 7])
    direction = tf.constant(np.random.default_rng(1).normal(size=[3, _D]), tf.float32)
    query_before = [v.numpy() for v in retriever.query_embedder.trainable_variables]
    doc_before = [v.numpy() for v in retriever.doc_embedder.trainable_variables]
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(retriever.embed_queries(inputs, training=True) * direction)
    variables = retriever.trainable_variables
    gradients = tape.gradient(loss, variables)
    optimizer = tf_keras.optimizers.SGD(1.0)
    optimizer.apply_gradients([(g, v) for g, v in zip(gradients, variables) if g is not None])
    for v, before in zip(retriever.doc_embedder.trainable_variables, doc_before):
      self.assertAllEqual(before, v.numpy(), msg=v.name)
    changed = [
        not np.array_equal(before, v.numpy())
        for v, before in zip(retriever.query_embedder.trainable_variables, query_before)
    ]
    self.assertTrue(
        all(changed),
        msg=[v.name for v, c in zip(retriever.query_embedder.trainable_variables, changed) if not c])

  def test_separate_towers_survive_a_checkpoint(self):
    """A round trip must restore two different towers, not one set of weights twice."""
    retriever = self._build(share_embedders=False)
    inputs = _inputs([3, 7])
    query, docs = retriever.embed_queries(inputs), retriever.embed_documents(inputs)
    path = tf.train.Checkpoint(model=retriever).write(os.path.join(self.get_temp_dir(), "ckpt"))
    restored = self._build(share_embedders=False)
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    self.assertAllClose(query, restored.embed_queries(inputs))
    self.assertAllClose(docs, restored.embed_documents(inputs))

  def test_call_is_inner_product_of_the_two_towers(self):
    retriever = self._build(share_embedders=False)
    query_inputs = _inputs([2, 7], seed=3)
    candidate_inputs = _inputs([2, 5, 9], seed=4)
    scores = retriever((query_inputs, candidate_inputs))
    self.assertEqual(scores.shape, [2, 5])
    query = retriever.embed_queries(query_inputs).numpy()
    docs = retriever.embed_documents(candidate_inputs).numpy()
    self.assertAllClose(np.einsum("bd,bnd->bn", query, docs), scores, atol=1e-4)
    # Towers swapped would give other scores: the query tower must embed the queries.
    swapped = np.einsum("bd,bnd->bn",
                        retriever.embed_documents(query_inputs).numpy(),
                        retriever.embed_queries(candidate_inputs).numpy())
    self.assertGreater(np.abs(swapped - scores).max(), 1e-2)


if __name__ == "__main__":
  tf.test.main()
