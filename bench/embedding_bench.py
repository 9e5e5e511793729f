r"""Corpus-embedding throughput (docs/s) of the document tower, with and without XLA.

  .venv/bin/python bench/embedding_bench.py                 # tiny and MiniLM configs, 288 tokens
  .venv/bin/python bench/embedding_bench.py --configs=tiny --seq_len=128

Forward pass of RetrieverEmbedder (BERT -> pooled -> Dense(128) -> LayerNorm) on full batches of
random token ids, the refresher's hot loop. Speed does not depend on the weight values, so the MiniLM
config (6 layers, hidden 384, 12 heads, intermediate 1536, as all-MiniLM-L6-v2) runs with random weights.
Also reports the achieved FLOP/s against a measured fp32 matmul peak. Prints a table and writes
bench/results/embedding_bench.json.
"""

import json
import os
import platform
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib

_CONFIGS = flags.DEFINE_list("configs", ["tiny", "minilm"], "Configs: tiny, minilm, bert_base.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 288, "Tokens per document.")
_BATCH = flags.DEFINE_integer("batch_size", 64, "Documents per batch.")
_BATCHES = flags.DEFINE_integer("batches", 3, "Timed batches (after one warm-up); the median is kept.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "results", "embedding_bench.json"),
                              "JSON output path.")


def _config(name: str) -> bert.BertConfig:
  if name == "tiny":
    return bert.tiny_config(30522, max_position_embeddings=512)
  if name == "minilm":
    return bert.minilm_l6_config()
  if name == "bert_base":
    return bert.bert_base_config()
  raise ValueError(f"unknown config {name!r}; use tiny, minilm or bert_base")


def _forward_flops(config: bert.BertConfig, seq_len: int) -> float:
  """Multiply-adds x 2 of one document's forward pass (dense layers and attention)."""
  h, i, n = config.hidden_size, config.intermediate_size, seq_len
  per_layer = 4 * n * h * h + 2 * n * n * h + 2 * n * h * i
  return 2.0 * (config.num_layers * per_layer + h * h + h * 128)


def _matmul_peak() -> float:
  a = tf.random.normal([2048, 2048])
  f = tf.function(lambda x: tf.matmul(x, x))
  f(a).numpy()
  times = []
  for _ in range(5):
    start = time.perf_counter()
    f(a).numpy()
    times.append(time.perf_counter() - start)
  return 2 * 2048 ** 3 / float(np.median(times))


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  peak = _matmul_peak()
  rows = []
  for name in _CONFIGS.value:
    config = _config(name)
    model = embedder_lib.RetrieverEmbedder(config, 128)
    shape = [_BATCH.value, _SEQ_LEN.value]
    inputs = (tf.constant(rng.integers(1000, 30000, shape), tf.int32), tf.ones(shape, tf.int32),
              tf.zeros(shape, tf.int32))
    for jit in (False, True):
      fn = tf.function(lambda x: model(x, training=False), jit_compile=jit)
      start = time.perf_counter()
      fn(inputs).numpy()
      first = time.perf_counter() - start
      times = []
      for _ in range(_BATCHES.value):
        start = time.perf_counter()
        fn(inputs).numpy()
        times.append(time.perf_counter() - start)
      seconds = float(np.median(times))
      docs_per_s = _BATCH.value / seconds
      flops = docs_per_s * _forward_flops(config, _SEQ_LEN.value)
      rows.append({"config": name, "xla": jit, "seq_len": _SEQ_LEN.value, "batch_size": _BATCH.value,
                   "docs_per_second": docs_per_s, "batch_seconds": seconds,
                   "first_batch_seconds": first, "gflops": flops / 1e9,
                   "fraction_of_matmul_peak": flops / peak})
  print(f"fp32 2048^3 matmul peak: {peak / 1e9:.0f} GFLOP/s")
  print(f"{'config':8s} {'xla':5s} {'docs/s':>8s} {'GFLOP/s':>8s} {'of peak':>8s} {'1st batch s':>11s}")
  for r in rows:
    print(f"{r['config']:8s} {str(r['xla']):5s} {r['docs_per_second']:8.1f} {r['gflops']:8.1f} "
          f"{r['fraction_of_matmul_peak']:8.1%} {r['first_batch_seconds']:11.1f}")
  result = {
      "benchmark": "embedding_bench",
      "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                  "load_average_at_end": os.getloadavg(), "tensorflow": tf.__version__},
      "matmul_peak_gflops": peak / 1e9,
      "results": rows,
  }
  os.makedirs(os.path.dirname(_OUTPUT.value), exist_ok=True)
  tmp = _OUTPUT.value + ".tmp"
  with open(tmp, "w") as f:
    json.dump(result, f, indent=2)
  os.replace(tmp, _OUTPUT.value)
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
