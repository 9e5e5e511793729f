r"""Corpus-embedding throughput (docs/s) of the document tower, with and without XLA.

  .venv/bin/python bench/embedding_bench.py                 # tiny and MiniLM configs, 288 tokens
  .venv/bin/python bench/embedding_bench.py --configs=tiny --seq_len=128

Forward pass of RetrieverEmbedder (BERT -> pooled -> Dense(128) -> LayerNorm) on full batches of
random token ids, the refresher's hot loop. Speed does not depend on the weight values, so the MiniLM
config (6 layers, hidden 384, 12 heads, intermediate 1536, as all-MiniLM-L6-v2) runs with random weights.
Also reports the achieved FLOP/s against a measured fp32 matmul peak. Prints a table and writes
bench/results/embedding_bench.json. bench/hf_compare_bench.py times the same pass against Hugging Face
PyTorch.
"""

import os
import statistics

from absl import app
from absl import flags

from bench import throughput_lib
from realm_tf import io_utils

_CONFIGS = flags.DEFINE_list("configs", ["tiny", "minilm"], "Configs: tiny, minilm, bert_base.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 288, "Tokens per document.")
_BATCH = flags.DEFINE_integer("batch_size", 64, "Documents per batch.")
_BATCHES = flags.DEFINE_integer("batches", 3, "Timed batches (after one warm-up); the median is kept.")
_OUTPUT = flags.DEFINE_string(
    "output", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "embedding_bench.json"),
    "JSON output path.")


def main(argv):
  del argv
  machine = throughput_lib.machine()
  peak = throughput_lib.matmul_peak()[0]
  rows = []
  for name in _CONFIGS.value:
    config = throughput_lib.bench_config(name)
    for jit in (False, True):
      call = throughput_lib.embedding_call(config, _BATCH.value, _SEQ_LEN.value, jit_compile=jit)
      first = throughput_lib.timed(call)[0]
      seconds = statistics.median(throughput_lib.timed(call)[0] for _ in range(_BATCHES.value))
      docs_per_s = _BATCH.value / seconds
      flops = docs_per_s * throughput_lib.forward_flops(config, _SEQ_LEN.value)
      rows.append({
          "config": name,
          "xla": jit,
          "seq_len": _SEQ_LEN.value,
          "batch_size": _BATCH.value,
          "docs_per_second": docs_per_s,
          "batch_seconds": seconds,
          "first_batch_seconds": first,
          "gflops": flops / 1e9,
          "fraction_of_matmul_peak": flops / peak
      })
  print(f"fp32 2048^3 matmul peak: {peak / 1e9:.0f} GFLOP/s")
  print(f"{'config':10s} {'xla':5s} {'docs/s':>8s} {'GFLOP/s':>8s} {'of peak':>8s} {'1st batch s':>11s}")
  for r in rows:
    print(f"{r['config']:10s} {str(r['xla']):5s} {r['docs_per_second']:8.1f} {r['gflops']:8.1f} "
          f"{r['fraction_of_matmul_peak']:8.1%} {r['first_batch_seconds']:11.1f}")
  machine["load_average_at_end"] = throughput_lib.load_average()
  result = {
      "benchmark": "embedding_bench",
      "machine": machine,
      "matmul_peak_gflops": peak / 1e9,
      "results": rows
  }
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  io_utils.write_json_atomic(_OUTPUT.value, result)
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
