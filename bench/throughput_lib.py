"""What the throughput benchmarks share: the machine description, timing (with Python's collector paused),
a matmul peak, FLOP counts, and realm_tf's document tower as the refresher runs it (a forward pass) and as
a trainer runs it (a training step).

The document tower is RetrieverEmbedder (BERT -> pooled -> Dense(128) -> LayerNorm). Speed does not depend
on the weight values, so every config runs with random weights on random token ids.
"""

import contextlib
import gc
import os
import platform
import statistics
import time
from typing import Callable, Dict, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import losses
from realm_tf.training import optimization
from realm_tf.training import train_lib

PROJECTION_SIZE = 128
# A training step costs about 3 forward passes: the backward pass computes two matmuls (the gradients of
# the activations and of the weights) for each forward one.
TRAIN_FLOPS_PER_FORWARD = 3.0


def load_average() -> Tuple[float, float, float]:
  return os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3


# /proc/stat's first line: the cores' cumulative time by kind since boot, in clock ticks (proc(5)).
_PROC_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_times(path: str = "/proc/stat") -> Dict[str, float]:
  """The machine's cumulative CPU seconds by kind (Linux); {} where there is no /proc/stat."""
  try:
    with open(path) as f:
      fields = f.readline().split()
  except OSError:
    return {}
  ticks = os.sysconf("SC_CLK_TCK")
  return {name: int(value) / ticks for name, value in zip(_PROC_STAT_FIELDS, fields[1:])}


def cpu_use(before: Dict[str, float], after: Dict[str, float]) -> Dict:
  """How the cores' time between two cpu_times() went: `busy` (user and system time at nice 0 or below,
  interrupts: the measured jobs), `niced` (user time at a positive nice value: background jobs), `idle`
  (I/O wait included) and `stolen` (by the hypervisor), in seconds and shares of the whole. Whether a
  run's wall time was CPU-bound, which a load average cannot say. {} without both."""
  if not before or not after:
    return {}
  spent = {kind: after[kind] - before[kind] for kind in _PROC_STAT_FIELDS}
  groups = {
      "busy": spent["user"] + spent["system"] + spent["irq"] + spent["softirq"],
      "niced": spent["nice"],
      "idle": spent["idle"] + spent["iowait"],
      "stolen": spent["steal"],
  }
  total = sum(groups.values())
  return {
      "seconds": {
          kind: round(value, 1) for kind, value in groups.items()
      },
      "shares": {
          kind: round(value / total, 3) if total else 0.0 for kind, value in groups.items()
      },
  }


def machine() -> Dict:
  """Where the numbers were taken; timings on a shared machine mean little without the load."""
  try:
    with open("/proc/cpuinfo") as f:
      model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
  except OSError:
    model = ""
  return {
      "platform": platform.platform(),
      "processor": model or platform.processor(),
      "cpu_count": os.cpu_count(),
      "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
      "python": platform.python_version(),
      "tensorflow": tf.__version__,
      "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
      "load_average_at_start": load_average()
  }


def bench_config(name: str) -> bert.BertConfig:
  """tiny (as tests, with BERT's vocabulary and 512 positions so 288-token documents fit), minilm
  (all-MiniLM-L6-v2's shape: 6 layers, hidden 384, 12 heads, intermediate 1536) or bert_base."""
  if name == "tiny":
    return bert.tiny_config(30522, max_position_embeddings=512)
  if name == "minilm":
    return bert.minilm_l6_config()
  if name == "bert_base":
    return bert.bert_base_config()
  raise ValueError(f"unknown config {name!r}; use tiny, minilm or bert_base")


@contextlib.contextmanager
def collector_paused():
  """Python's collector off for a timed region, as timeit times: a collection that the warm-up's garbage
  triggers would otherwise land in a timed call. A full collection before the region does the same but
  walks every model and trace the bench holds: 0.3 s each time, 7 s of input_pipeline_bench's smoke
  test's minute when it did so before each timing."""
  enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if enabled:
      gc.enable()


def timed(fn: Callable[[], object]) -> Tuple[float, float]:
  """(wall seconds, process CPU seconds) of fn(), which must return only once its work is done."""
  wall, cpu = time.perf_counter(), time.process_time()
  fn()
  return time.perf_counter() - wall, time.process_time() - cpu


def matmul_peak(size: int = 2048, repeats: int = 5) -> Tuple[float, float]:
  """(FLOP per wall second, FLOP per process CPU second) of TensorFlow's fp32 size^3 matmul on this
  machine, medians of `repeats` after a warm-up. The second counts only the time the cores spent on this
  process, so unlike the first it hardly moves when other processes compete for the cores."""
  a = tf.random.normal([size, size])
  f = tf.function(lambda x: tf.matmul(x, x))
  f(a).numpy()
  walls, cpus = zip(*(timed(lambda: f(a).numpy()) for _ in range(repeats)))
  flops = 2 * size**3
  return flops / statistics.median(walls), flops / statistics.median(cpus)


def forward_flops(config: bert.BertConfig, seq_len: int) -> float:
  """FLOPs (2 x multiply-adds) of one document's forward pass: dense layers, attention, pooler and
  projection (embedding lookups, softmax and layer norms are negligible beside them)."""
  h, i, n = config.hidden_size, config.intermediate_size, seq_len
  per_layer = 4 * n * h * h + 2 * n * n * h + 2 * n * h * i
  return 2.0 * (config.num_layers * per_layer + h * h + h * PROJECTION_SIZE)


def doc_inputs(batch_size: int, seq_len: int, seed: int):
  """A (token_ids, mask, segment_ids) batch of full-length random documents."""
  rng = np.random.default_rng(seed)
  shape = [batch_size, seq_len]
  return (tf.constant(rng.integers(1000, 30000, shape),
                      tf.int32), tf.ones(shape, tf.int32), tf.zeros(shape, tf.int32))


def embedding_call(config: bert.BertConfig, batch_size: int, seq_len: int,
                   jit_compile: bool) -> Callable[[], np.ndarray]:
  """A no-argument call that embeds one batch (the refresher's hot loop) and returns the embeddings."""
  model = embedder_lib.RetrieverEmbedder(config, PROJECTION_SIZE)
  inputs = doc_inputs(batch_size, seq_len, seed=0)
  fn = tf.function(lambda x: model(x, training=False), jit_compile=jit_compile)
  return lambda: fn(inputs).numpy()


class DocTowerTrainer(tf_keras.Model):
  """The document tower trained with an in-batch softmax against fixed random query vectors (document
  i is the positive of query i): ICT's loss with the query tower taken out, so a step costs exactly one
  tower's forward and backward pass per example, which bench/hf_compare.py reproduces in PyTorch."""

  def __init__(self, config: bert.BertConfig, **kwargs):
    super().__init__(**kwargs)
    self.embedder = embedder_lib.RetrieverEmbedder(config, PROJECTION_SIZE)

  def call(self, features, training=None):
    return self.embedder((features["token_ids"], features["mask"], features["segment_ids"]),
                         training=training)

  def compute_loss(self, features, training=None) -> losses.LossOutput:
    embeddings = self(features, training=training)
    return losses.in_batch_softmax_loss(features["queries"], embeddings, tf.range(tf.shape(embeddings)[0]))


def train_step_call(config: bert.BertConfig, batch_size: int, seq_len: int,
                    jit_compile: bool) -> Callable[[], float]:
  """A no-argument call of one training step (train_lib.TrainStep with the project's AdamW: forward,
  backward, clipping, update) of DocTowerTrainer; returns the loss."""
  token_ids, mask, segment_ids = doc_inputs(batch_size, seq_len, seed=1)
  queries = tf.constant(np.random.default_rng(2).normal(size=[batch_size, PROJECTION_SIZE]), tf.float32)
  features = {"token_ids": token_ids, "mask": mask, "segment_ids": segment_ids, "queries": queries}
  model = DocTowerTrainer(config)
  model(features)
  optimizer = optimization.create_optimizer(1e-5, num_train_steps=1000, num_warmup_steps=0)
  step = train_lib.TrainStep(model, optimizer, jit_compile=jit_compile)

  def call() -> float:
    loss = float(step(features)["loss"])  # float() waits for the step to finish
    if not np.isfinite(loss):
      raise RuntimeError(f"non-finite loss {loss}")
    return loss

  return call
