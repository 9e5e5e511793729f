"""The best checkpoint of a run: MODEL_DIR/best/ckpt-S and MODEL_DIR/best_metric.json.

best/ckpt-S holds the model (no optimizer) at the dev evaluation with the best SELECTION_METRIC so far;
best_metric.json says which checkpoint that is, its step and its dev metrics. The JSON is written
atomically AFTER best/ckpt-S is complete and the previous best is deleted only after that, so a reader
following best_metric.json (bin/eval_orqa, bin/export_saved_model) never sees a partial checkpoint.
"""

import json
import os
from typing import Dict, Optional

import tensorflow as tf

from realm_tf import io_utils

BEST_DIR = "best"
BEST_METRIC_NAME = "best_metric.json"
SELECTION_METRIC = "accuracy"


def read_best(model_dir: str) -> Optional[Dict]:
  """MODEL_DIR/best_metric.json, or None before the first dev evaluation."""
  path = os.path.join(model_dir, BEST_METRIC_NAME)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}: unreadable ({e}); delete it to re-select on the next evaluation") from e


def save_best(model: tf.Module, model_dir: str, step: int, metrics: Dict[str, float]) -> Dict:
  """Writes best/ckpt-<step> (model weights), then points best_metric.json at it, then deletes the
  previous best checkpoint: at every moment best_metric.json names a complete checkpoint."""
  best_dir = os.path.join(model_dir, BEST_DIR)
  tf.io.gfile.makedirs(best_dir)
  previous = read_best(model_dir)
  name = f"ckpt-{step}"
  tf.train.Checkpoint(model=model).write(os.path.join(best_dir, name))
  record = {
      "step": int(step),
      "checkpoint": os.path.join(BEST_DIR, name),
      "metric": SELECTION_METRIC,
      "value": float(metrics[SELECTION_METRIC]),
      "metrics": metrics
  }
  io_utils.write_json_atomic(os.path.join(model_dir, BEST_METRIC_NAME), record)
  if previous and previous.get("checkpoint") != record["checkpoint"]:
    old = os.path.join(model_dir, previous["checkpoint"])
    for path in tf.io.gfile.glob(old + ".*"):
      tf.io.gfile.remove(path)
  return record
