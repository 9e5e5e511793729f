r"""Scale-out estimate for the paper's setting: index size, and refresh time per accelerator count.

  .venv/bin/python bench/hf_compare_bench.py --configs=bert_base \
      --output=bench/results/hf_compare_bench_bert_base.json      # the measured per-document cost
  .venv/bin/python bench/scale_out_estimate.py                     # the estimate, from the JSON results

REALM's setting: 13,353,718 blocks of 288 wordpieces, a BERT-base document tower, a 128-d index. Nothing
here is timed; everything is derived from measurements in bench/results/:
  index size   blocks x bytes per document measured by bench/index_bench.py at 1M documents (float32
               embeddings and ids for brute force; ScaNN adds its partitions and quantized codes);
  refresh      blocks / (docs/s per device x devices). On this CPU, docs/s is the median measured by
               hf_compare_bench (realm_tf with XLA). For accelerators, the measured per-document cost is
               scaled by peak FLOP/s: docs/s = peak x utilization / FLOPs per document, where FLOPs per
               document is the forward pass's count (throughput_lib.forward_flops: 52 GFLOP for BERT-base
               at 288 tokens). Utilization is an assumption, so it is tabulated at each of --utilizations:
               "measured" is the fraction of the fp32 matmul peak (per CPU second) that the same
               forward pass reached on this CPU (an accelerator sustaining the same fraction of its own
               dense peak: optimistic), 0.3 a conservative figure for BERT inference in bf16. Embedding
               is embarrassingly parallel (contiguous row ranges per worker, as
               corpus_embedding.worker_rows), so the time divides by the device count; index build and
               the merge are not included.
Prints markdown tables and writes JSON to --output.
"""

import json
import os

from absl import app
from absl import flags

from bench import throughput_lib
from realm_tf import io_utils

_RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

_BLOCKS = flags.DEFINE_integer("blocks", 13_353_718, "Corpus blocks (REALM's Wikipedia 2018-12-20).")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 288, "Wordpieces per block.")
_DEVICES = flags.DEFINE_list("devices", ["1", "8", "16", "64"], "Device counts to tabulate.")
# Vendor dense bf16 peaks per chip: TPU v3 (what REALM used) 123 TFLOP/s, A100 312, H100 SXM 989.
_ACCELERATORS = flags.DEFINE_list("accelerators", ["TPU v3 chip:123", "A100:312", "H100 SXM:989"],
                                  "name:peak TFLOP/s of each accelerator to tabulate.")
_UTILIZATIONS = flags.DEFINE_list(
    "utilizations", ["measured", "0.3"],
    "Fractions of peak an accelerator sustains; 'measured': the fraction "
    "the forward pass reached of the matmul peak on this CPU.")
_THROUGHPUT_JSON = flags.DEFINE_string(
    "throughput_json", os.path.join(_RESULTS, "hf_compare_bench_bert_base.json"),
    "hf_compare_bench output holding the bert_base config's embedding measurement.")
_INDEX_JSON = flags.DEFINE_string("index_json", os.path.join(_RESULTS, "index_bench.json"),
                                  "index_bench output (bytes per document at 1M documents).")
_INDEX_INT8_JSON = flags.DEFINE_string(
    "index_int8_json", os.path.join(_RESULTS, "index_bench_int8.json"),
    "index_bench output with the compressed (scann_int8) index at 1M real-derived documents; its sizes "
    "replace index_json's for that kind when present.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_RESULTS, "scale_out_estimate.json"),
                              "JSON output path.")


def _read_json(path):
  with open(path) as f:
    return json.load(f)


def index_sizes(index_results, blocks, int8_results=None):
  """Bytes on disk and in memory of each index kind, from the largest clustered run of index_bench (the
  compressed index: the largest run of int8_results, any data set, when given)."""
  sizes = {}
  for kind in ("brute_force", "scann", "scann_int8"):
    runs = [
        r for r in index_results["results"] if r["implementation"] == kind and r["dataset"] == "clustered"
    ]
    if kind == "scann_int8" and int8_results:
      runs = [r for r in int8_results["results"] if r["implementation"] == kind] or runs
    if not runs:
      if kind == "scann_int8":  # index_bench runs from before the compressed index have none
        continue
      raise ValueError(f"{_INDEX_JSON.value} has no clustered {kind} run; rerun bench/index_bench.py")
    run = max(runs, key=lambda r: r["num_docs"])
    sizes[kind] = {
        "measured_at_docs": run["num_docs"],
        "dataset": run["dataset"],
        "disk_bytes_per_doc": run["disk_bytes_per_doc"],
        "memory_bytes_per_doc": run["memory_bytes_per_doc"],
        "disk_gb": run["disk_bytes_per_doc"] * blocks / 1e9,
        "memory_gb": run["memory_bytes_per_doc"] * blocks / 1e9,
        # Linear in N (assignment and quantization are per document; not measured at 13M).
        "build_minutes_if_linear": run["build_s"] / run["num_docs"] * blocks / 60
    }
  return sizes


def cpu_measurement(throughput):
  """The bert_base config's embedding with XLA (what the refresher runs: embed_corpus compiles by
  default): docs/s, and its fraction of the fp32 matmul peak per process CPU second, which unlike the
  wall-clock fraction hardly depends on the load of the shared machine."""
  embedding = throughput["configs"]["bert_base"]["embedding"]
  xla = embedding["variants"]["realm_tf_xla"]
  return {
      "variant":
          "realm_tf_xla",
      "docs_per_second":
          xla["items_per_second"],
      "docs_per_cpu_second":
          embedding["batch_size"] / xla["median_cpu_s"],
      "usable_cpus":
          throughput["machine"]["usable_cpus"],
      "fraction_of_matmul_peak":
          xla["fraction_of_matmul_peak_per_cpu_s"],
      "load_average": [
          throughput["machine"]["load_average_at_start"], throughput["machine"]["load_average_at_end"]
      ]
  }


def refresh_table(blocks, devices, cpu, accelerators, utilizations, flops_per_doc):
  """[{device, utilization, docs_per_second_per_device, refresh_hours: {devices: hours}}]."""
  # The shared machine as measured, and as it would run with its cores to itself: docs per CPU second
  # times the cores (an upper bound: it assumes the two threads never wait for each other).
  rows = [{
      "device": "this 2-core CPU machine (measured, shared)",
      "peak_tflops": None,
      "utilization": None,
      "docs_per_second_per_device": cpu["docs_per_second"]
  }, {
      "device": "this 2-core CPU machine, idle (CPU time x cores)",
      "peak_tflops": None,
      "utilization": None,
      "docs_per_second_per_device": cpu["docs_per_cpu_second"] * cpu["usable_cpus"]
  }]
  for utilization in utilizations:
    for name, peak_tflops in accelerators:
      rows.append({
          "device": name,
          "peak_tflops": peak_tflops,
          "utilization": utilization,
          "docs_per_second_per_device": peak_tflops * 1e12 * utilization / flops_per_doc
      })
  for row in rows:
    row["refresh_hours"] = {n: blocks / (row["docs_per_second_per_device"] * n) / 3600 for n in devices}
  return rows


def _duration(hours):
  if hours >= 48:
    return f"{hours / 24:.1f} days"
  if hours >= 1:
    return f"{hours:.1f} h"
  if hours * 60 >= 1:
    return f"{hours * 60:.1f} min"
  return f"{hours * 3600:.0f} s"


def main(argv):
  del argv
  blocks = _BLOCKS.value
  devices = [int(n) for n in _DEVICES.value]
  accelerators = [(name, float(peak)) for name, peak in (a.rsplit(":", 1) for a in _ACCELERATORS.value)]
  flops_per_doc = throughput_lib.forward_flops(throughput_lib.bench_config("bert_base"), _SEQ_LEN.value)
  cpu = cpu_measurement(_read_json(_THROUGHPUT_JSON.value))
  utilizations = [
      cpu["fraction_of_matmul_peak"] if u == "measured" else float(u) for u in _UTILIZATIONS.value
  ]
  int8_json = _INDEX_INT8_JSON.value
  sizes = index_sizes(_read_json(_INDEX_JSON.value), blocks,
                      _read_json(int8_json) if int8_json and os.path.exists(int8_json) else None)
  rows = refresh_table(blocks, devices, cpu, accelerators, utilizations, flops_per_doc)

  embeddings_gb = blocks * throughput_lib.PROJECTION_SIZE * 4 / 1e9
  print(f"{blocks:,d} blocks x {throughput_lib.PROJECTION_SIZE} float32 = {embeddings_gb:.2f} GB of "
        "embeddings")
  print("| index | B/doc on disk (measured at N) | disk | memory | build, if linear in N |")
  print("|---|---|---|---|---|")
  for kind, s in sizes.items():
    print(f"| {kind} | {s['disk_bytes_per_doc']:.0f} ({s['measured_at_docs']:,d}) | {s['disk_gb']:.1f} GB "
          f"| {s['memory_gb']:.1f} GB | {s['build_minutes_if_linear']:.1f} min |")
  print(f"\nBERT-base forward pass: {flops_per_doc / 1e9:.1f} GFLOP per {_SEQ_LEN.value}-wordpiece block; "
        f"measured on this CPU ({cpu['variant']}): {cpu['docs_per_second']:.2f} docs/s, "
        f"{cpu['fraction_of_matmul_peak']:.0%} of the fp32 matmul peak per CPU second")
  print("| device | utilization (assumed) | docs/s per device | " +
        " | ".join(f"{n} devices" for n in devices) + " |")
  print("|---|---|---|" + "---|" * len(devices))
  for row in rows:
    utilization = "-" if row["utilization"] is None else f"{row['utilization']:.0%}"
    print(f"| {row['device']} | {utilization} | {row['docs_per_second_per_device']:,.1f} | " +
          " | ".join(_duration(row["refresh_hours"][n]) for n in devices) + " |")
  result = {
      "benchmark": "scale_out_estimate",
      "blocks": blocks,
      "seq_len": _SEQ_LEN.value,
      "projection_size": throughput_lib.PROJECTION_SIZE,
      "embeddings_gb": embeddings_gb,
      "index": sizes,
      "flops_per_doc": flops_per_doc,
      "cpu_measurement": cpu,
      "utilizations": utilizations,
      "devices": devices,
      "refresh": rows,
      "inputs": {
          "throughput_json": os.path.relpath(_THROUGHPUT_JSON.value),
          "index_json": os.path.relpath(_INDEX_JSON.value),
          "index_int8_json": int8_json and os.path.relpath(int8_json)
      }
  }
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  io_utils.write_json_atomic(_OUTPUT.value, result)
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
