r"""Benchmark of the training loop's host overhead: steps/s of the tiny ICT, REALM and ORQA steps through
realm_tf.training.loop.train with --steps_per_loop 1, 10 and 100, in one run.

Why: with steps_per_loop 1 the host reads the step counter and every metric after each step, so a TPU
(or any fast device) idles while Python runs; larger loops run in one compiled tf.while_loop (orbit's
StandardTrainer). On this CPU the device is the host, so the gain shows how much of a tiny step was
loop overhead.

  python bench/loop_overhead_bench.py                    # ~5 min on 2 cores
  python bench/loop_overhead_bench.py --steps=500 --loops=1,10,100,500

Each (task, steps_per_loop) trains the same model and batch (bench/tiny_tasks.py's tiny shapes,
XLA on, the default strategy, SGD) for --steps steps after a first --warm_steps that compile; steps/s
are timed between loop boundaries, so compilation is excluded. The loop lengths alternate within a task
and the whole set repeats --repeats times (the median is reported), so load changes on a shared machine
hit every length alike. Prints a table and writes JSON (with a machine description) to --output.
"""

import os
import statistics
import tempfile
import time

from absl import app
from absl import flags

import tensorflow as tf
import tf_keras

from bench import throughput_lib
from bench import tiny_tasks
from realm_tf import io_utils
from realm_tf.training import loop

_TASKS = flags.DEFINE_list("tasks", ["ict", "realm", "orqa"], "Training steps to time.")
_LOOPS = flags.DEFINE_list("loops", ["1", "10", "100"], "steps_per_loop values (each divides --steps "
                           "and --warm_steps).")
_STEPS = flags.DEFINE_integer("steps", 300, "Timed steps per measurement.")
_WARM_STEPS = flags.DEFINE_integer("warm_steps", 100, "Untimed steps first (compilation).")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Measurements per (task, loop length); the median counts.")
_OUTPUT = flags.DEFINE_string(
    "output", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "loop_overhead_bench.json"),
    "Where to write the JSON results.")


def _steps_per_second(task_name: str, steps_per_loop: int, model_dir: str) -> float:
  tf_keras.utils.set_random_seed(0)
  model, features = tiny_tasks.task(task_name, tiny_tasks.bert_config("tiny"), tiny_tasks.SHAPES["tiny"])
  total = _WARM_STEPS.value + _STEPS.value
  options = loop.LoopOptions(model_dir=model_dir,
                             num_train_steps=total,
                             save_checkpoints_steps=total,
                             log_every_steps=total,
                             jit_compile=True,
                             steps_per_loop=steps_per_loop)
  marks = {}

  def after_step(step, _):
    marks[step] = time.perf_counter()
    return {}

  loop.train(model,
             tf_keras.optimizers.SGD(1e-4),
             tf.distribute.get_strategy(),
             lambda _: tf.data.Dataset.from_tensors(features).repeat(),
             options,
             after_step=after_step,
             log=lambda _: None)
  return _STEPS.value / (marks[total] - marks[_WARM_STEPS.value])


def main(argv):
  del argv
  loops = [int(n) for n in _LOOPS.value]
  for n in loops:
    if _STEPS.value % n or _WARM_STEPS.value % n:
      raise app.UsageError(f"--loops: {n} does not divide --steps={_STEPS.value} and --warm_steps="
                           f"{_WARM_STEPS.value}")
  results = {
      "machine": throughput_lib.machine(),
      "shapes": tiny_tasks.SHAPES["tiny"],
      "steps": _STEPS.value,
      "warm_steps": _WARM_STEPS.value,
      "repeats": _REPEATS.value,
      "steps_per_second": {}
  }
  measured = {(t, n): [] for t in _TASKS.value for n in loops}
  with tempfile.TemporaryDirectory() as tmp:
    for repeat in range(_REPEATS.value):
      for task_name in _TASKS.value:
        order = loops if repeat % 2 == 0 else loops[::-1]
        for n in order:
          rate = _steps_per_second(task_name, n, os.path.join(tmp, f"{task_name}_{n}_{repeat}"))
          measured[(task_name, n)].append(rate)
          print(f"repeat {repeat}: {task_name:<5} steps_per_loop {n:>4d}: {rate:8.1f} steps/s", flush=True)
  results["machine"]["load_average_at_end"] = throughput_lib.load_average()
  print(f"\n{'task':<6}" + "".join(f"{f'loop {n}':>12}" for n in loops) + f"{'gain':>8}")
  for task_name in _TASKS.value:
    medians = {n: statistics.median(measured[(task_name, n)]) for n in loops}
    results["steps_per_second"][task_name] = {
        str(n): {
            "median": medians[n],
            "all": measured[(task_name, n)]
        } for n in loops
    }
    print(f"{task_name:<6}" + "".join(f"{medians[n]:12.1f}" for n in loops) +
          f"{medians[loops[-1]] / medians[loops[0]]:7.2f}x")
  io_utils.write_json_atomic(_OUTPUT.value, results)
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
