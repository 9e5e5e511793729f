"""Tests for bench/squad_open_orqa_bench.py's pieces, without MiniLM weights or SQuAD data: the answer
index must agree with evaluation.has_answer, the loss must be ORQA's marginal over the answer-bearing
paragraphs, and a training step must move the question tower and nothing else."""

import math
import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import squad_open_orqa_bench as orqa  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf import evaluation  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.data import qa  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.modeling import bert  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.training import optimization  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.training import train_lib  # pylint: disable=g-import-not-at-top,wrong-import-position

_TEXTS = ["The city of New  York lies on the Hudson.",
          "Paris is the capital of France; Parisians say so.",
          "In 1990 and in the 1990s, nothing happened.",
          "",
          "new\nyork, again: NEW YORK."]


class AnswerIndexTest(tf.test.TestCase):

  def test_agrees_with_has_answer(self):
    index = orqa.AnswerIndex(_TEXTS)
    for answers in (["new york"], ["ew yor"], ["Paris"], ["parisians say"], ["1990"], ["990s,"],
                    ["hudson."], ["capital of france"], ["Tokyo"], ["   "], [""], ["york", "France"],
                    ["the"], ["k lies on"], ["new york, again"]):
      expected = [row for row, text in enumerate(_TEXTS)
                  if evaluation.has_answer(text, answers, mode="normalized")]
      self.assertEqual(index.rows(answers).tolist(), expected, msg=str(answers))
      self.assertEqual(index.rows(answers).dtype, np.int32)

  def test_training_questions_skips_and_counts(self):
    index = orqa.AnswerIndex(_TEXTS)
    train = [qa.QAExample("q0", ["Tokyo"]), qa.QAExample("q1", ["new york"]),
             qa.QAExample("q2", ["Berlin"]), qa.QAExample("q3", ["1990"])]
    chosen, positives, examined, skipped = orqa._training_questions(train, index, needed=5, seed=3)
    self.assertLen(chosen, 5)  # more than the two usable questions: the order starts over
    self.assertContainsSubset(set(chosen), {1, 3})
    self.assertEqual((examined, skipped), (4, 2))
    for i, rows in zip(chosen, positives):
      self.assertEqual(rows.tolist(), [0, 4] if i == 1 else [2])

  def test_training_questions_without_any_answer_raises(self):
    index = orqa.AnswerIndex(_TEXTS)
    with self.assertRaisesRegex(RuntimeError, "no training question"):
      orqa._training_questions([qa.QAExample("q", ["Tokyo"])], index, needed=1, seed=0)


class BatchTest(tf.test.TestCase):

  def test_positive_mask(self):
    mask = orqa.positive_mask([np.array([0, 3], np.int32), np.array([], np.int32)], 4)
    self.assertAllEqual(mask, [[1, 0, 0, 1], [0, 0, 0, 0]])
    self.assertEqual(mask.dtype, np.float32)

  def test_pad_batch(self):
    ids, mask = orqa.pad_batch([np.array([101, 7, 102]), np.array([101, 102])], bucket=4, max_len=16)
    self.assertAllEqual(ids, [[101, 7, 102, 0], [101, 102, 0, 0]])
    self.assertAllEqual(mask, [[1, 1, 1, 0], [1, 1, 0, 0]])
    ids, _ = orqa.pad_batch([np.arange(6)], bucket=4, max_len=6)
    self.assertEqual(ids.shape, (1, 6))  # rounded up to 8, capped at max_len


class RetrieverLossTest(tf.test.TestCase):

  def test_four_paragraph_example(self):
    paragraphs = tf.constant(np.eye(4, dtype=np.float32))
    questions = tf.constant([[0.6, 0.8, 0.0, 0.0],   # scores 0.6, 0.8, 0, 0
                             [0.0, 0.0, 1.0, 0.0]], tf.float32)
    positives = tf.constant([[1, 0, 0, 1], [0, 0, 0, 0]], tf.float32)
    output = orqa.retriever_loss(questions, paragraphs, positives, scale=2.0)
    logits = [1.2, 1.6, 0.0, 0.0]
    total = sum(math.exp(x) for x in logits)
    expected = -math.log((math.exp(1.2) + math.exp(0.0)) / total)
    # The second question has no answer-bearing paragraph: no loss, as in ORQA, but it still counts.
    self.assertAllClose(output.loss_sum, expected, atol=1e-5)
    self.assertEqual(float(output.loss_weight), 2.0)
    top1, count = output.metrics["top1_positive"]
    self.assertEqual((float(top1), float(count)), (0.0, 2.0))  # paragraph 1 wins and bears no answer
    mass, _ = output.metrics["positive_mass"]
    self.assertAllClose(mass, math.exp(-expected) + 1.0, atol=1e-5)


class QuestionTowerTest(tf.test.TestCase):

  def test_step_trains_the_encoder_and_not_the_index(self):
    tf.keras.utils.set_random_seed(0)
    encoder = bert.build_encoder(bert.tiny_config(50, hidden_dropout_prob=0.0,
                                                  attention_probs_dropout_prob=0.0))
    paragraphs = np.random.default_rng(0).normal(size=[6, 64]).astype(np.float32)
    paragraphs /= np.linalg.norm(paragraphs, axis=1, keepdims=True)
    model = orqa.QuestionTower(encoder, paragraphs, scale=20.0)
    ids, mask = orqa.pad_batch([np.array([1, 5, 7, 2]), np.array([1, 9, 2])], bucket=4, max_len=8)
    features = {"token_ids": tf.constant(ids), "mask": tf.constant(mask),
                "positives": tf.constant(orqa.positive_mask([np.array([2]), np.array([4, 5])], 6))}
    emb = model(features)
    self.assertAllClose(tf.norm(emb, axis=-1), [1.0, 1.0], atol=1e-5)
    self.assertNotIn(model.paragraph_emb.ref(), {v.ref() for v in model.trainable_variables})
    step = train_lib.TrainStep(model, optimization.create_optimizer(1e-3, 20, num_warmup_steps=0),
                               jit_compile=False)
    losses = [float(step(features)["loss"]) for _ in range(5)]
    self.assertLess(losses[-1], losses[0])
    self.assertAllEqual(model.paragraph_emb.numpy(), paragraphs)


if __name__ == "__main__":
  tf.test.main()
