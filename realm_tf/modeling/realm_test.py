"""Tests of the REALM pre-training model, above all REALM's gradient identity (Guu et al. 2020, sec. 3.4):

  d log p(y|x) / d theta_retriever = sum_z r(z) d f(x,z) / d theta,
  r(z) = [p(y|z,x) / p(y|x) - 1] p(z|x),

checked against autodiff on a tiny model: it holds only if the scores are recomputed from the live
retriever weights, the softmax runs over every candidate (the null document included) and the
marginal is the per-token one. Also: the null document takes part, the loss is a mean over the masks of
the whole batch, and the model compiles with XLA.
"""

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import realm

_VOCAB = 30
# One layer of width 32 and positions for the longest input (the joint one, 10 tokens) exercise every path
# at the least cost (the XLA test's tracing and compile time grow with the layers). initializer_range 0.5
# makes p(y|z,x) differ visibly between its documents (max/min ~4.5; 0.2 gives only ~1.1 at this size),
# so r(z) is far from zero.
_CONFIG = bert.tiny_config(_VOCAB,
                           hidden_size=32,
                           num_layers=1,
                           intermediate_size=64,
                           max_position_embeddings=16,
                           hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0,
                           initializer_range=0.5)
_D = 16
_Q, _C = 6, 7
_CLS, _SEP = 2, 3


def _features(num_candidates, mlm_positions, mlm_targets, mlm_mask, seed=0):
  """A REALM batch: random queries and documents, the null document ([CLS][SEP][SEP]) at index 0."""
  rng = np.random.default_rng(seed)
  batch = len(mlm_positions)
  query = rng.integers(5, _VOCAB, [batch, _Q]).astype(np.int32)
  query[:, 0], query[:, -1] = _CLS, _SEP
  for b, (positions, mask) in enumerate(zip(mlm_positions, mlm_mask)):
    for p, m in zip(positions, mask):
      if m:
        query[b, p] = 4  # [MASK]
  candidates = rng.integers(5, _VOCAB, [batch, num_candidates, _C]).astype(np.int32)
  candidates[:, :, 0], candidates[:, :, -1] = _CLS, _SEP
  candidate_mask = np.ones_like(candidates)
  candidate_segments = np.zeros_like(candidates)
  candidate_segments[:, :, 3:] = 1
  candidates[:, 0] = [_CLS, _SEP, _SEP] + [0] * (_C - 3)
  candidate_mask[:, 0] = [1, 1, 1] + [0] * (_C - 3)
  candidate_segments[:, 0] = [0, 0, 1] + [0] * (_C - 3)
  # Joint input: [CLS] query [SEP] body [SEP] (the query already holds its [CLS] and [SEP]).
  joint = np.concatenate([np.repeat(query[:, np.newaxis], num_candidates, 1), candidates[:, :, 3:]], -1)
  joint_mask = np.concatenate([np.ones([batch, num_candidates, _Q], np.int32), candidate_mask[:, :, 3:]], -1)
  joint_segments = np.concatenate(
      [np.zeros([batch, num_candidates, _Q], np.int32),
       np.ones_like(candidates[:, :, 3:])], -1) * joint_mask
  features = {
      "query_token_ids": query,
      "query_mask": np.ones_like(query),
      "query_segment_ids": np.zeros_like(query),
      "candidate_token_ids": candidates,
      "candidate_mask": candidate_mask,
      "candidate_segment_ids": candidate_segments,
      "joint_token_ids": joint,
      "joint_mask": joint_mask,
      "joint_segment_ids": joint_segments,
      "mlm_positions": np.array(mlm_positions, np.int32),
      "mlm_targets": np.array(mlm_targets, np.int32),
      "mlm_mask": np.array(mlm_mask, np.float32),
  }
  return {k: tf.constant(v) for k, v in features.items()}


def _model(share_embedders=True):
  return realm.RealmPretrainer(_CONFIG, projection_size=_D, share_embedders=share_embedders)


def _flat(gradients):
  return np.concatenate([tf.reshape(tf.convert_to_tensor(g), [-1]).numpy() for g in gradients])


class _SeededTestCase(tf.test.TestCase):
  """Seeds Keras's initializers, so every run builds the same weights (unseeded ones differ per run)."""

  def setUp(self):
    super().setUp()
    tf_keras.utils.set_random_seed(0)


class RealmGradientTest(_SeededTestCase):

  def test_retriever_gradient_identity(self):
    features = _features(num_candidates=4, mlm_positions=[[2]], mlm_targets=[[11]], mlm_mask=[[1.0]])
    model = _model()
    model(features)
    variables = model.retriever.trainable_variables
    with tf.GradientTape() as tape:
      log_likelihood = -model.compute_loss(features, training=True).loss_sum  # one mask: log p(y|x)
    autodiff = _flat(tape.gradient(log_likelihood, variables))

    # The identity's ingredients, each from its own forward pass.
    outputs = model(features, training=True)
    scores = outputs["retrieval_logits"].numpy()[0]
    p_z = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
    p_y_given_z = np.exp(outputs["gold_log_probs"].numpy()[0, :, 0])
    p_y = (p_z * p_y_given_z).sum()
    self.assertAllClose(np.log(p_y), log_likelihood, atol=1e-5)
    r = (p_y_given_z / p_y - 1.0) * p_z
    score_gradients = []
    for z in range(4):
      with tf.GradientTape() as tape:
        score = model.retriever(
            (realm.bert_triple(features, realm.QUERY), realm.bert_triple(features, realm.CANDIDATE)),
            training=True)[0, z]
      score_gradients.append(_flat(tape.gradient(score, variables)))
    identity = sum(r_z * g for r_z, g in zip(r, score_gradients))

    # The test is only meaningful if the documents disagree about y and the gradient is not ~0.
    self.assertGreater(p_y_given_z.max() / p_y_given_z.min(), 1.5)
    scale = np.abs(autodiff).max()
    self.assertGreater(scale, 1e-4)
    self.assertAllClose(identity, autodiff, atol=1e-3 * scale, rtol=1e-3)
    # Without the "- 1" (the baseline that comes from the softmax normalizer) it would not hold.
    no_baseline = sum(p_y_given_z[z] / p_y * p_z[z] * score_gradients[z] for z in range(4))
    self.assertGreater(np.abs(no_baseline - autodiff).max(), 0.1 * scale)

  def test_both_separate_towers_get_gradients(self):
    """The scores are recomputed with the live weights, so both the query and document towers learn."""
    features = _features(num_candidates=3, mlm_positions=[[2]], mlm_targets=[[11]], mlm_mask=[[1.0]])
    model = _model(share_embedders=False)
    model(features)
    with tf.GradientTape() as tape:
      loss = model.compute_loss(features, training=True).loss_sum
    retriever = model.retriever
    towers = (retriever.query_embedder.trainable_variables, retriever.doc_embedder.trainable_variables)
    query_grads, doc_grads = tape.gradient(loss, towers)
    for grads in (query_grads, doc_grads):
      self.assertNotIn(None, grads)
      self.assertGreater(np.abs(_flat(grads)).max(), 1e-6)


class RealmPretrainerTest(_SeededTestCase):

  def test_null_document_takes_part_in_the_softmax(self):
    features = _features(num_candidates=3, mlm_positions=[[2]], mlm_targets=[[11]], mlm_mask=[[1.0]])
    model = _model()
    outputs = model(features)
    scores = outputs["retrieval_logits"].numpy()
    self.assertEqual(scores.shape, (1, 3))
    # The null document is scored by the embedder like any other: q . embed([CLS][SEP][SEP]).
    query = model.retriever.embed_queries(realm.bert_triple(features, realm.QUERY)).numpy()
    null = model.retriever.embed_documents(
        tuple(x[:, 0] for x in realm.bert_triple(features, realm.CANDIDATE))).numpy()
    self.assertAllClose((query * null).sum(-1), scores[:, 0], atol=1e-4)
    log_probs = outputs["candidate_log_probs"].numpy()
    self.assertAllClose(scores - np.log(np.exp(scores).sum(-1, keepdims=True)), log_probs, atol=1e-5)
    # The marginal includes the null document's term.
    joint = log_probs + outputs["gold_log_probs"].numpy()[:, :, 0]
    loss = model.compute_loss(features).loss_sum.numpy()
    self.assertAllClose(-np.log(np.exp(joint).sum()), loss, atol=1e-5)
    self.assertGreater(abs(-np.log(np.exp(joint[:, 1:]).sum()) - loss), 1e-3)

  def test_loss_is_mean_over_masks_of_the_batch(self):
    # Example 0 has three masks, example 1 one (and two padding slots with arbitrary targets).
    features = _features(num_candidates=3,
                         mlm_positions=[[1, 2, 3], [4, 0, 0]],
                         mlm_targets=[[11, 12, 13], [20, 0, 0]],
                         mlm_mask=[[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    model = _model()
    outputs = model(features)
    self.assertEqual(outputs["gold_log_probs"].shape, [2, 3, 3])
    joint = outputs["candidate_log_probs"].numpy()[:, :, np.newaxis] + outputs["gold_log_probs"].numpy()
    token_nll = -np.log(np.exp(joint).sum(1))  # [B, M]
    output = model.compute_loss(features)
    self.assertAllClose(4.0, output.loss_weight)
    expected = (token_nll[0].sum() + token_nll[1, 0]) / 4
    self.assertAllClose(expected, output.loss_sum / output.loss_weight, atol=1e-5)
    per_example = (token_nll[0].mean() + token_nll[1, 0]) / 2
    self.assertGreater(abs(per_example - expected), 1e-3)
    # Padding slots do not count, whatever their targets.
    other = dict(features, mlm_targets=tf.constant([[11, 12, 13], [20, 7, 9]]))
    self.assertAllClose(output.loss_sum, model.compute_loss(other).loss_sum)

  def test_gold_log_probs_are_mlm_log_softmax_at_targets(self):
    features = _features(num_candidates=2,
                         mlm_positions=[[1, 3]],
                         mlm_targets=[[11, 17]],
                         mlm_mask=[[1.0, 1.0]])
    model = _model()
    outputs = model(features)
    positions = tf.repeat(features["mlm_positions"][:, tf.newaxis], 2, axis=1)
    logits = model.encoder((realm.bert_triple(features, realm.JOINT), positions)).numpy()
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = np.stack([log_probs[0, :, 0, 11], log_probs[0, :, 1, 17]], -1)[np.newaxis]
    self.assertAllClose(expected, outputs["gold_log_probs"], atol=1e-5)

  def test_compiles_with_xla(self):
    features = _features(num_candidates=3,
                         mlm_positions=[[1, 2], [3, 0]],
                         mlm_targets=[[11, 12], [13, 0]],
                         mlm_mask=[[1.0, 1.0], [1.0, 0.0]])
    model = _model()
    model(features)

    def loss_and_gradients(features):
      with tf.GradientTape() as tape:
        output = model.compute_loss(features, training=True)
      gradients = tape.gradient(output.loss_sum, model.trainable_variables)
      # The reader BERT's pooler is unused by the MLM head: no gradient.
      return output, [
          tf.zeros_like(v) if g is None else g for g, v in zip(gradients, model.trainable_variables)
      ]

    eager_output, eager_gradients = loss_and_gradients(features)
    compiled = tf.function(loss_and_gradients, jit_compile=True)
    xla_output, xla_gradients = compiled(features)
    self.assertAllClose(eager_output.loss_sum, xla_output.loss_sum, atol=1e-4)
    self.assertAllClose(eager_output.metrics, xla_output.metrics, atol=1e-4)
    self.assertAllClose(_flat(eager_gradients), _flat(xla_gradients), atol=1e-4)
    # The compiled graph really is XLA: its HLO can be read back.
    self.assertIn("HloModule", compiled.experimental_get_compiler_ir(features)(stage="hlo"))


if __name__ == "__main__":
  tf.test.main()
