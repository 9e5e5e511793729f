"""Tests of FiD-KD's distillation loss and RetrieverDistillation (realm_tf.modeling.fid_distillation)."""

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import tokenization
from realm_tf.data import fid_features
from realm_tf.modeling import bert
from realm_tf.modeling import embedder
from realm_tf.modeling import fid_distillation
from realm_tf.modeling import fid_reader
from realm_tf.testing import tiny_inputs


class DistillationLossTest(tf.test.TestCase):

  def test_matches_numpy_kl_with_temperatures(self):
    rng = np.random.default_rng(0)
    retriever = rng.normal(size=[3, 5]).astype(np.float32)
    reader = rng.normal(size=[3, 5]).astype(np.float32) * 4
    t_reader, t_retriever = 0.5, 2.0

    def softmax(x):
      e = np.exp(x - x.max(-1, keepdims=True))
      return e / e.sum(-1, keepdims=True)

    p = softmax(reader / t_reader)
    q = softmax(retriever / t_retriever)
    expected = (p * (np.log(p) - np.log(q))).sum(-1)
    output = fid_distillation.distillation_loss(tf.constant(retriever), tf.constant(reader), t_reader,
                                                t_retriever)
    self.assertAllClose(expected.sum(), output.loss_sum, rtol=1e-5)
    self.assertEqual(3.0, float(output.loss_weight))
    # Direction matters: KL(q || p) is another number.
    reverse = (q * (np.log(q) - np.log(p))).sum()
    self.assertGreater(abs(reverse - float(output.loss_sum)), 1e-3)
    # Zero when the distributions agree.
    same = fid_distillation.distillation_loss(tf.constant(reader / t_reader * t_retriever),
                                              tf.constant(reader), t_reader, t_retriever)
    self.assertAllClose(0.0, same.loss_sum, atol=1e-5)

  def test_rejects_non_positive_temperature(self):
    with self.assertRaisesRegex(ValueError, "temperatures must be positive"):
      fid_distillation.distillation_loss(tf.zeros([1, 2]), tf.zeros([1, 2]), 0.0)


class DistillationGradientTest(tf.test.TestCase):

  def test_kd_gradients_reach_only_the_retriever(self):
    tf_keras.utils.set_random_seed(7)
    self.tokenizer = tokenization.Tokenizer(tiny_inputs.write_vocab(self.get_temp_dir()))
    config = fid_reader.FidConfig(vocab_size=self.tokenizer.vocab_size,
                                  hidden_size=32,
                                  num_heads=2,
                                  num_encoder_layers=1,
                                  num_decoder_layers=2,
                                  intermediate_size=64,
                                  passage_seq_len=24,
                                  answer_seq_len=6)
    reader = fid_reader.build_reader(config)
    retriever = embedder.build_retriever(bert.tiny_config(self.tokenizer.vocab_size,
                                                          hidden_size=32,
                                                          num_layers=1,
                                                          intermediate_size=32),
                                         projection_size=8)
    model = fid_distillation.RetrieverDistillation(retriever, reader_temperature=0.5)
    examples = fid_features.tokenize_examples(self.tokenizer, ["q a", "q b"], [[("x", "a b"), ("y", "c"),
                                                                                ("z", "d e")]] * 2,
                                              ["a", "b"])
    features = fid_features.pad_examples(self.tokenizer, examples, config.passage_seq_len,
                                         config.answer_seq_len)
    rng = np.random.default_rng(1)
    ids = rng.integers(5, self.tokenizer.vocab_size, size=[2, 3, 8]).astype(np.int32)
    with tf.GradientTape(persistent=True) as tape:
      reader_scores = reader.passage_scores(features.passage_ids, features.passage_mask,
                                            self.tokenizer.cls_id)
      output = model.compute_loss(
          {
              "query_token_ids": ids[:, 0],
              "query_mask": np.ones([2, 8], np.int32),
              "query_segment_ids": np.zeros([2, 8], np.int32),
              "candidate_token_ids": ids,
              "candidate_mask": np.ones([2, 3, 8], np.int32),
              "candidate_segment_ids": np.zeros([2, 3, 8], np.int32),
              "reader_scores": reader_scores
          },
          training=True)
    reader_grads = tape.gradient(output.loss_sum, reader.trainable_variables)
    retriever_grads = tape.gradient(output.loss_sum, retriever.trainable_variables)
    self.assertTrue(all(g is None for g in reader_grads))
    reached = [g for g in retriever_grads if g is not None]
    self.assertNotEmpty(reached)
    self.assertGreater(max(float(tf.reduce_max(tf.abs(g))) for g in reached), 0.0)
    self.assertGreater(float(output.loss_sum), 0.0)


if __name__ == "__main__":
  tf.test.main()
