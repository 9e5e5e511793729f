"""The training loop of the SQuAD-open benches: run a compiled step over batches, stop on a non-finite
loss, log windowed means and keep them as a loss curve.

Why shared: squad_open_orqa_bench (question tower) and squad_open_qa_bench (reader) train different
models on different batches but report progress the same way; one loop keeps their curves comparable.
"""

import collections
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from bench import minilm_lib


def run(step_fn: Callable[[Dict], Dict], batch_features: Callable[[int], Dict], steps: int,
        batch_size: int, log_every: int, label: str, describe: Callable[[Dict], str],
        point_extras: Optional[Callable[[int], Dict]] = None) -> Tuple[List[Dict], List[float], float]:
  """Runs step_fn(batch_features(step)) for steps steps.

  Args:
    step_fn: a train_lib.TrainStep (or any call returning a dict of scalar tensors with "loss").
    batch_features: step index -> that step's features (built before the step is timed).
    describe: a logged point -> the metrics part of its progress line.
    point_extras: step number -> more fields for its curve point (e.g. the learning rate).

  Returns:
    (curve: one point per log_every steps with the window's mean metrics and elapsed seconds,
     seconds of each step, total seconds).
  """
  curve, window, step_seconds = [], collections.defaultdict(list), []
  start = last = time.perf_counter()
  for step in range(steps):
    features = batch_features(step)
    step_start = time.perf_counter()
    metrics = {k: float(v) for k, v in step_fn(features).items()}  # float() waits for the step
    step_seconds.append(time.perf_counter() - step_start)
    if not np.isfinite(metrics["loss"]):
      raise RuntimeError(f"{label} step {step + 1}: non-finite loss {metrics['loss']}")
    for k, v in metrics.items():
      window[k].append(v)
    if (step + 1) % log_every == 0 or step + 1 == steps:
      now = time.perf_counter()
      point = {"step": step + 1, **{k: float(np.mean(v)) for k, v in window.items()},
               **(point_extras(step + 1) if point_extras else {}), "seconds": now - start}
      curve.append(point)
      minilm_lib.log(f"{label} step {step + 1}/{steps}: {describe(point)}, "
                     f"{len(window['loss']) * batch_size / (now - last):.2f} questions/s")
      window.clear()
      last = now
  return curve, step_seconds, time.perf_counter() - start
