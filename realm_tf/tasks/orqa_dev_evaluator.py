"""ORQA's dev evaluation during fine-tuning, as the orbit evaluator of the training loop: dev metrics and
the best checkpoint.

realm_tf.training.loop's orbit.Controller runs it every --eval_every_steps and at the end, and writes what
it returns (the dev metrics, percentages; not the counts) to MODEL_DIR/dev, once per evaluation. An
evaluation whose SELECTION_METRIC beats the best so far (best_metric.json, also that of an earlier process
of the same run) writes best/ckpt-<step> (realm_tf.runs.best_checkpoint).

An orbit.AbstractEvaluator, not a StandardEvaluator: a dev evaluation is one pass of OrqaPredictor over
the whole dev set (its own batches under the strategy and its compiled step) followed by string matching
of all answers on the host; a StandardEvaluator's per-batch eval_step and eval_reduce would be a second
copy of OrqaPredictor.predict and orqa_evaluation.evaluate.
"""

import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import orbit
import tensorflow as tf

from realm_tf.data import qa as qa_lib
from realm_tf.runs import best_checkpoint
from realm_tf.runs import orqa_evaluation


class OrqaDevEvaluator(orbit.AbstractEvaluator):
  """Evaluates the predictor's model on the dev examples and keeps the best checkpoint.

  Args:
    predictor: over the model being trained (its strategy and eval batch size).
    examples: the dev set; featurized once here (tracing the tokenizer costs seconds).
    model_dir: the run's model dir (best/, best_metric.json).
    global_step: the optimizer's iterations, the step an evaluation is recorded at.
    log: logger.
    rows_fn: None (the model's dense search), or the dev questions' features -> int [n, R] corpus rows
      of another retriever for the reader to read (bin/train_orqa --retriever=bm25|hybrid), called at
      each evaluation.

  Attributes:
    history: every evaluation's metrics with its "step", in order.
    best: best_metric.json's record (None before the run's first evaluation).
  """

  def __init__(self,
               predictor: orqa_evaluation.OrqaPredictor,
               examples: Sequence[qa_lib.QAExample],
               model_dir: str,
               global_step: tf.Variable,
               log: Callable[[str], None] = print,
               rows_fn: Optional[Callable[[Dict[str, np.ndarray]], np.ndarray]] = None):
    if not examples:
      raise ValueError("no dev examples to evaluate; pass a --dev_path with QA examples or none")
    self._predictor = predictor
    self._examples = list(examples)
    self._features = predictor.featurize([e.question for e in self._examples])
    self._model_dir = model_dir
    self._global_step = global_step
    self._log = log
    self._rows_fn = rows_fn
    self.history: List[Dict] = []
    self.best: Optional[Dict] = best_checkpoint.read_best(model_dir)

  def evaluate(self, num_steps: tf.Tensor) -> Dict[str, float]:
    """One pass over the whole dev set (orbit's num_steps must be -1, "all"); returns the dev metrics
    to summarize."""
    if int(num_steps) != -1:
      raise ValueError(f"the ORQA dev evaluation reads the whole dev set; it was asked for {int(num_steps)} "
                       "steps (call the controller's evaluate() with steps=-1)")
    step = int(self._global_step.numpy())
    started = time.time()
    block_rows = self._rows_fn(self._features) if self._rows_fn else None
    metrics, _ = orqa_evaluation.evaluate(self._predictor,
                                          self._examples,
                                          features=self._features,
                                          block_rows=block_rows)
    self.history.append(dict(metrics, step=step))
    selection = best_checkpoint.SELECTION_METRIC
    if self.best is None or metrics[selection] > self.best["value"]:
      self.best = best_checkpoint.save_best(self._predictor.model, self._model_dir, step, metrics)
      self._log(f"step {step}: new best dev {selection} {metrics[selection]:.2f} -> "
                f"{self.best['checkpoint']}")
    shown = {name: float(value) for name, value in metrics.items() if not name.startswith("num_")}
    self._log(f"step {step}: dev evaluation in {time.time() - started:.1f} s: " +
              ", ".join(f"dev_{k}={v:.2f}" for k, v in sorted(shown.items())))
    return shown
