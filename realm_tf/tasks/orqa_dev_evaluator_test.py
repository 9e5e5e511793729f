"""Tests of OrqaDevEvaluator run by the training loop's controller: dev metrics written once per
evaluation, at multiples of the interval, and the best checkpoint kept (also across a restart)."""

import os
import types

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.data import qa as qa_lib
from realm_tf.modeling import losses
from realm_tf.runs import best_checkpoint
from realm_tf.tasks import orqa_dev_evaluator
from realm_tf.training import loop


class _Regression(tf_keras.Model):
  """A model to train: y = w.x with a squared-error loss sum."""

  reader_beam = 1  # what orqa_evaluation.evaluate reads of an ORQA model

  def __init__(self):
    super().__init__()
    self.dense = tf_keras.layers.Dense(1, kernel_initializer="zeros")

  def call(self, x):
    return self.dense(x)

  def compute_loss(self, features, training=None):
    error = self(features["x"]) - features["y"]
    weight = tf.cast(tf.shape(error)[0], tf.float32)
    return losses.LossOutput(tf.reduce_sum(tf.square(error)), weight, {})


class _ScriptedPredictor:
  """Stands in for OrqaPredictor: the i-th evaluation answers the dev questions with answers[i]."""

  def __init__(self, model, answers):
    self.model = model
    self.blocks = types.SimpleNamespace(bodies=["Paris is in France."], doc_ids=["d0"])
    self._answers = list(answers)

  def featurize(self, questions):
    return {"question": np.arange(len(questions))}

  def predict(self, features):
    n = len(features["question"])
    return {
        "answer": np.array(self._answers.pop(0), object),
        "score": np.zeros(n),
        "block_rows": np.zeros([n, 1], np.int32),
        "predicted_row": np.zeros(n, np.int32)
    }


_DEV = [qa_lib.QAExample("where is Paris?", ["France"]), qa_lib.QAExample("capital of France?", ["Paris"])]


def _batches(batches_done):
  del batches_done
  x = np.arange(8, dtype=np.float32).reshape(4, 2) / 10.0
  return tf.data.Dataset.from_tensors({"x": x, "y": x.sum(axis=1, keepdims=True)}).repeat()


def _scalars(directory, tag):
  found = []
  for path in sorted(tf.io.gfile.glob(os.path.join(directory, "events.out.tfevents.*"))):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == tag:
          found.append((event.step, round(float(tf.make_ndarray(value.tensor)), 3)))
  return found


class OrqaDevEvaluatorTest(tf.test.TestCase):

  def _train(self, model_dir, num_train_steps, answers):
    model = _Regression()
    model(tf.zeros([1, 2]))
    optimizer = tf_keras.optimizers.legacy.SGD(0.01)
    evaluator = orqa_dev_evaluator.OrqaDevEvaluator(_ScriptedPredictor(model, answers),
                                                    _DEV,
                                                    model_dir,
                                                    optimizer.iterations,
                                                    log=lambda _: None)
    options = loop.LoopOptions(model_dir=model_dir,
                               num_train_steps=num_train_steps,
                               save_checkpoints_steps=2,
                               log_every_steps=2,
                               jit_compile=False,
                               steps_per_loop=2)
    loop.train(model,
               optimizer,
               tf.distribute.get_strategy(),
               _batches,
               options,
               log=lambda _: None,
               evaluator=evaluator,
               eval_every_steps=2,
               eval_name="dev")
    return evaluator

  def test_metrics_once_per_evaluation_and_the_best_checkpoint(self):
    model_dir = os.path.join(self.get_temp_dir(), "orqa")
    # Accuracy 50, then 0, then 100: the best moves from step 2 to step 6.
    evaluator = self._train(model_dir, 6, [["France", "London"], ["Rome", "Rome"], ["France", "Paris"]])
    self.assertEqual([(h["step"], h["accuracy"]) for h in evaluator.history], [(2, 50.0), (4, 0.0),
                                                                               (6, 100.0)])
    self.assertEqual(_scalars(os.path.join(model_dir, "dev"), "accuracy"), [(2, 50.0), (4, 0.0), (6, 100.0)])
    self.assertEqual(_scalars(os.path.join(model_dir, "dev"), "num_examples"), [])
    self.assertEqual(_scalars(os.path.join(model_dir, "train"), "accuracy"), [])
    best = best_checkpoint.read_best(model_dir)
    self.assertEqual((best["step"], best["checkpoint"], best["value"]), (6, "best/ckpt-6", 100.0))
    self.assertTrue(all(name.startswith("ckpt-6.") for name in os.listdir(os.path.join(model_dir, "best"))))

    # A restarted run compares with the best of the process before: 50 at step 8 does not replace it.
    evaluator = self._train(model_dir, 8, [["France", "London"]])
    self.assertEqual([h["step"] for h in evaluator.history], [8])
    self.assertEqual(best_checkpoint.read_best(model_dir)["step"], 6)
    self.assertEqual(_scalars(os.path.join(model_dir, "dev"), "accuracy"), [(2, 50.0), (4, 0.0), (6, 100.0),
                                                                            (8, 50.0)])

  def test_only_whole_dev_set_evaluations(self):
    model = _Regression()
    evaluator = orqa_dev_evaluator.OrqaDevEvaluator(_ScriptedPredictor(model, []), _DEV, self.get_temp_dir(),
                                                    tf.Variable(0, dtype=tf.int64))
    with self.assertRaisesRegex(ValueError, "whole dev set"):
      evaluator.evaluate(tf.constant(3))


if __name__ == "__main__":
  tf.test.main()
