r"""Benchmark of the training steps of REALM, ICT and ORQA: model sizes, and step time with and without XLA.

Why: TrainStep compiles the forward and backward pass with XLA by default (the CPU stand-in for TPU). This
measures what that costs or buys per step once compiled, and how long the first (compiling) step takes,
for the laptop-sized BERT of tests and demos and for BERT-base (REALM/ORQA's size), so a user can tell
what a CPU run can afford and whether --jit_compile should stay on.

  python bench/train_step_bench.py                     # tiny and BERT-base (~10 min on 2 idle cores)
  python bench/train_step_bench.py --configs=tiny      # a quick run
  python bench/train_step_bench.py --configs=minilm    # all-MiniLM-L6-v2's shape (6 layers, hidden 384)

For each BERT config: the parameter counts of RetrieverEmbedder, Retriever (shared towers, the default,
and separate ones), KnowledgeAugmentedEncoder, RealmPretrainer, IctModel and SpanReader; then for each
task the step time (and examples/s) with jit_compile=True and False, on the default strategy with the
project's AdamW (realm_tf.training.optimization): the first step (which compiles), then the median over
--steps steps after --warmup_steps. The XLA and plain steps are timed alternately, so a change of load on
a shared machine hits both alike, and process CPU time is reported next to wall time (other processes
competing for the cores inflate the wall time much more than the CPU time). Shapes (B examples, N
candidates including the null document, Q query / C candidate length, M masks):
  REALM  retriever over [B, Q] and [B, N, C]; reader over [B, N, Q + C - 1] ([CLS] query [SEP] body
         [SEP]) with M masks.
  ICT    B queries of length Q against B blocks of length C (in-batch softmax).
  ORQA   B questions, N blocks each read at length Q + C by the span reader (width <= 10), with fixed
         synthetic retriever logits over a beam of 4 N (the retriever tower is not benchmarked here).
Prints a table and writes JSON (with a machine description) to --output.
"""

import gc
import os
import statistics
import time

from absl import app
from absl import flags
import numpy as np

import tensorflow as tf
import tf_keras

from bench import throughput_lib
from bench import tiny_tasks
from realm_tf import io_utils
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import knowledge_augmented_encoder as kae_lib
from realm_tf.modeling import reader
from realm_tf.training import optimization
from realm_tf.training import train_lib

_CONFIGS = flags.DEFINE_list("configs", ["tiny", "bert_base"], "BERT configs: tiny, minilm, bert_base.")
_TASKS = flags.DEFINE_list("tasks", ["realm", "ict", "orqa"], "Training steps to time.")
_STEPS = flags.DEFINE_integer("steps", 3, "Timed steps per measurement (the median is reported).")
_WARMUP_STEPS = flags.DEFINE_integer("warmup_steps", 1, "Untimed steps first (the first compiles).")
_OUTPUT = flags.DEFINE_string(
    "output", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "train_step_bench.json"),
    "Where to write the JSON results.")


def _count(model) -> int:
  """Parameters (each variable once, trainable or not) of a model whose variables exist."""
  unique = {id(v): v for v in model.weights}
  return int(sum(np.prod(v.shape) for v in unique.values()))


def _parameter_counts(config: bert.BertConfig):
  """Parameters of each model class with this BERT config (a fresh model each, built on a dummy batch)."""
  dummy = tf.zeros([1, 4], tf.int32)
  triple = (dummy, dummy, dummy)
  counts = {}
  embedder = embedder_lib.RetrieverEmbedder(config, tiny_tasks.PROJECTION_SIZE)
  embedder(triple)
  counts["RetrieverEmbedder"] = _count(embedder)
  counts["Retriever"] = _count(embedder_lib.build_retriever(config, tiny_tasks.PROJECTION_SIZE))
  counts["Retriever (separate towers)"] = _count(
      embedder_lib.build_retriever(config, tiny_tasks.PROJECTION_SIZE, share_embedders=False))
  encoder = kae_lib.KnowledgeAugmentedEncoder(config)
  encoder((triple, tf.zeros([1, 1], tf.int32)))
  counts["KnowledgeAugmentedEncoder"] = _count(encoder)
  small = dict(B=1, N=2, Q=4, C=4, M=1)
  counts["RealmPretrainer"] = _count(tiny_tasks.task("realm", config, small)[0])
  counts["IctModel"] = _count(tiny_tasks.task("ict", config, small)[0])
  span_reader = reader.SpanReader(config,
                                  seq_len=8,
                                  span_hidden_size=tiny_tasks.SPAN_HIDDEN_SIZE,
                                  max_span_width=tiny_tasks.MAX_SPAN_WIDTH)
  reader_ids = tf.zeros([1, 1, 8], tf.int32)
  span_reader(((reader_ids,) * 3, tf.ones([1, 1, 8], tf.int32), tf.zeros([1, 1])))
  counts["SpanReader"] = _count(span_reader)
  tf_keras.backend.clear_session()
  return counts


def _timed_step(step, features):
  """(wall seconds, process CPU seconds, loss) of one step; float() waits for it to finish."""
  wall, cpu = time.perf_counter(), time.process_time()
  loss = float(step(features)["loss"])
  return time.perf_counter() - wall, time.process_time() - cpu, loss


def _time_task(task_name: str, config: bert.BertConfig, shapes):
  """{"xla": timing, "no_xla": timing} of TrainStep on the default strategy.

  Both variants are built and warmed up first, then their timed steps alternate (XLA, plain, plain,
  XLA, ...), so a change of load on a shared machine hits both alike. Process CPU time is reported next
  to wall time: it is much less sensitive to other processes competing for the cores.
  """
  tf_keras.backend.clear_session()
  steps, first = {}, {}
  features = None
  for variant, jit in (("xla", True), ("no_xla", False)):
    tf_keras.utils.set_random_seed(0)
    model, features = tiny_tasks.task(task_name, config, shapes)
    optimizer = optimization.create_optimizer(1e-5, num_train_steps=1000, num_warmup_steps=0)
    steps[variant] = train_lib.TrainStep(model, optimizer, jit_compile=jit)
  for i in range(max(_WARMUP_STEPS.value, 1)):
    for variant, step in steps.items():
      wall, _, _ = _timed_step(step, features)
      if i == 0:
        first[variant] = wall
  gc.collect()  # the tracing garbage would otherwise be collected during a timed step
  samples = {variant: [] for variant in steps}
  for i in range(_STEPS.value):
    order = ("xla", "no_xla") if i % 2 == 0 else ("no_xla", "xla")
    for variant in order:
      samples[variant].append(_timed_step(steps[variant], features))
  timings = {}
  for variant, runs in samples.items():
    walls, cpus, losses_ = zip(*runs)
    if not all(np.isfinite(losses_)):
      raise RuntimeError(f"{task_name} ({variant}) produced a non-finite loss: {losses_}")
    timings[variant] = {
        "first_step_s": first[variant],
        "median_step_s": statistics.median(walls),
        "min_step_s": min(walls),
        "median_step_cpu_s": statistics.median(cpus),
        "step_times_s": list(walls),
        "step_cpu_s": list(cpus),
        "last_loss": losses_[-1]
    }
  return timings


def main(argv):
  del argv
  results = {
      "machine": throughput_lib.machine(),
      "steps": _STEPS.value,
      "warmup_steps": _WARMUP_STEPS.value,
      "configs": {}
  }
  for name in _CONFIGS.value:
    config = tiny_tasks.bert_config(name)
    shapes = tiny_tasks.SHAPES[name]
    print(
        f"== {name}: {config.num_layers} layers, hidden {config.hidden_size}, vocab "
        f"{config.vocab_size}; shapes {shapes}",
        flush=True)
    counts = _parameter_counts(config)
    for model_name, count in counts.items():
      print(f"  {model_name:<28} {count:>13,d} parameters", flush=True)
    timings = {}
    for task_name in _TASKS.value:
      for variant, timing in _time_task(task_name, config, shapes).items():
        timing["examples_per_second"] = shapes["B"] / timing["median_step_s"]
        timings[f"{task_name}/{variant}"] = timing
        print(
            f"  {task_name:<5} {variant:<7} first step {timing['first_step_s']:7.2f} s  median step "
            f"{timing['median_step_s']:7.3f} s wall, {timing['median_step_cpu_s']:7.3f} s CPU, "
            f"{timing['examples_per_second']:7.2f} examples/s",
            flush=True)
    results["configs"][name] = {
        "bert": config.to_dict(),
        "shapes": shapes,
        "parameters": counts,
        "timings": timings
    }
  results["machine"]["load_average_at_end"] = throughput_lib.load_average()

  print("\nParameters")
  names = list(next(iter(results["configs"].values()))["parameters"])
  print(f"  {'model':<28}" + "".join(f"{c:>15}" for c in results["configs"]))
  for model_name in names:
    print(f"  {model_name:<28}" +
          "".join(f"{r['parameters'][model_name]:>15,d}" for r in results["configs"].values()))
  print("\nStep time: median of %d alternating steps after %d warm-up (the first step compiles); wall "
        "seconds, process CPU seconds in brackets" % (_STEPS.value, _WARMUP_STEPS.value))
  print(f"  {'config':<10}{'task':<6}{'XLA step':>18}{'no-XLA step':>18}{'speedup':>9}"
        f"{'XLA ex/s':>10}{'no-XLA ex/s':>13}{'XLA 1st':>9}{'no-XLA 1st':>12}")
  for config_name, r in results["configs"].items():
    for task_name in _TASKS.value:
      xla, plain = r["timings"][f"{task_name}/xla"], r["timings"][f"{task_name}/no_xla"]
      cells = [f"{t['median_step_s']:.3f}s ({t['median_step_cpu_s']:.2f})" for t in (xla, plain)]
      print(f"  {config_name:<10}{task_name:<6}{cells[0]:>18}{cells[1]:>18}"
            f"{plain['median_step_s'] / xla['median_step_s']:>8.2f}x{xla['examples_per_second']:>10.2f}"
            f"{plain['examples_per_second']:>13.2f}{xla['first_step_s']:>8.1f}s"
            f"{plain['first_step_s']:>11.1f}s")
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  io_utils.write_json_atomic(_OUTPUT.value, results)
  print(f"\nWrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
