r"""realm_tf's document tower against Hugging Face PyTorch on the same BERT config, machine and run.

  bench/setup_hf_env.sh                                  # once: the optional .venv-hf (torch, transformers)
  .venv/bin/python bench/hf_compare_bench.py             # tiny and MiniLM configs, 288 tokens
  .venv/bin/python bench/hf_compare_bench.py --configs=bert_base --repeats=3

For each config, variants of the same computation: realm_tf without XLA, realm_tf with XLA
(jit_compile), and transformers.BertModel in PyTorch (bench/hf_compare.py, run in .venv-hf as a
subprocess: torch is never a dependency of realm_tf) with each of --hf_threads intra-op thread counts (the
default, all cores, stalls on a loaded machine; see bench/hf_compare.py); ratios are taken against the
fastest PyTorch variant, the conservative choice. Two measurements of each:
  embedding   docs/s of a forward pass over --embed_batch_size documents (the index refresher's hot loop),
              with the achieved FLOP/s against TensorFlow's measured fp32 matmul peak (per wall second,
              and per process CPU second: the load-robust version of the same fraction);
  train_step  examples/s of forward + backward + AdamW over --train_batch_size documents (the document
              tower trained with an in-batch softmax; see throughput_lib.DocTowerTrainer).
For each measure in turn, every variant is built and warmed up (XLA compiles on its first call) before any
timing. Then --repeats rounds each time one call of every variant, the order rotating from round to round,
so a change of load on a shared machine hits all variants alike; the fp32 matmul peaks (TensorFlow's,
against which FLOP/s fractions are given, and torch's) are measured again in each round. Reported: medians
of wall time, process CPU time next to it (less sensitive to other processes competing for the cores), the
ratios against PyTorch and the XLA speed-up, checked against issue 8's targets. Prints a table and writes
JSON with the machine description and load averages to --output.
"""

import collections
import gc
import json
import os
import statistics
import subprocess

from absl import app
from absl import flags

import tf_keras

from bench import throughput_lib
from realm_tf import io_utils

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CONFIGS = flags.DEFINE_list("configs", ["tiny", "minilm"], "Configs: tiny, minilm, bert_base.")
_MEASURES = flags.DEFINE_list("measures", ["embedding", "train_step"], "embedding and/or train_step.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 288, "Tokens per document (REALM's block length).")
_EMBED_BATCH = flags.DEFINE_integer("embed_batch_size", 64, "Documents per embedding batch.")
_TRAIN_BATCH = flags.DEFINE_integer("train_batch_size", 8, "Documents per training step.")
_WARMUP = flags.DEFINE_integer("warmup", 1, "Untimed calls of each variant first (the first compiles).")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed rounds; medians are reported.")
_HF_THREADS = flags.DEFINE_list(
    "hf_threads", [str(len(os.sched_getaffinity(0))), "1"],
    "torch intra-op thread counts, one PyTorch variant each (default: all usable cores, and 1).")
_HF_PYTHON = flags.DEFINE_string("hf_python", os.path.join(_ROOT, ".venv-hf", "bin", "python"),
                                 "Python of the optional environment (bench/setup_hf_env.sh).")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_ROOT, "bench", "results", "hf_compare_bench.json"),
                              "JSON output path.")

REALM_TF, REALM_TF_XLA = "realm_tf", "realm_tf_xla"
# Issue 8's targets.
EMBEDDING_OVER_HF_TARGET = 1.5
FRACTION_OF_PEAK_TARGET = 0.7
TRAIN_XLA_SPEEDUP_TARGET = 1.3


class HfProcess:
  """bench/hf_compare.py running in the optional environment; one timed call per request."""

  def __init__(self, config, seq_len, embed_batch_size, train_batch_size):
    if not os.path.exists(_HF_PYTHON.value):
      raise FileNotFoundError(f"{_HF_PYTHON.value} does not exist: run bench/setup_hf_env.sh first")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of .venv leaks in
    self._process = subprocess.Popen([
        _HF_PYTHON.value,
        os.path.join(_ROOT, "bench", "hf_compare.py"), f"--config_json={json.dumps(config.to_dict())}",
        f"--seq_len={seq_len}", f"--embed_batch_size={embed_batch_size}",
        f"--train_batch_size={train_batch_size}", f"--projection_size={throughput_lib.PROJECTION_SIZE}"
    ],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE,
                                     text=True,
                                     bufsize=1,
                                     env=env)
    self.environment = self._read("READY")

  def _read(self, tag):
    # Libraries may print to stdout too: skip every line without a tag of the protocol.
    for line in self._process.stdout:
      head, _, body = line.partition(" ")
      if head == tag:
        return json.loads(body)
      if head == "ERROR":
        raise RuntimeError(f"bench/hf_compare.py: {body}")
    raise RuntimeError(f"bench/hf_compare.py exited with status {self._process.wait()}")

  def call(self, measure, threads):
    """The RESULT dict of one call of `measure` (embedding, train_step or matmul)."""
    self._process.stdin.write(f"{measure} {threads}\n")
    self._process.stdin.flush()
    return self._read("RESULT")

  def close(self):
    self._process.stdin.close()
    self._process.wait()


def _variant_calls(config, measure, hf):
  """{variant: no-argument call returning (wall s, CPU s)}."""
  make, batch = ((throughput_lib.embedding_call, _EMBED_BATCH.value) if measure == "embedding" else
                 (throughput_lib.train_step_call, _TRAIN_BATCH.value))
  calls = {}
  for variant, jit in ((REALM_TF, False), (REALM_TF_XLA, True)):
    call = make(config, batch, _SEQ_LEN.value, jit_compile=jit)
    calls[variant] = lambda call=call: throughput_lib.timed(call)
  for threads in _HF_THREADS.value:
    calls[_hf_variant(threads)] = lambda t=threads: (lambda r: (r["wall_s"], r["cpu_s"]))(hf.call(measure, t))
  return calls


def _hf_variant(threads):
  return f"hf_pytorch_{threads}t"


def _variants():
  return (REALM_TF, REALM_TF_XLA) + tuple(_hf_variant(t) for t in _HF_THREADS.value)


def _fastest(summaries, variants):
  return max(variants, key=lambda v: summaries[v]["items_per_second"])


def _summary(runs, first_call_s, batch, flops_per_item, peak, peak_per_cpu_s):
  walls, cpus = zip(*runs)
  wall, cpu = statistics.median(walls), statistics.median(cpus)
  flops, flops_per_cpu_s = batch * flops_per_item / wall, batch * flops_per_item / cpu
  return {
      "items_per_second": batch / wall,
      "median_wall_s": wall,
      "median_cpu_s": cpu,
      "wall_s": list(walls),
      "cpu_s": list(cpus),
      "first_call_s": first_call_s,
      "gflops": flops / 1e9,
      "fraction_of_matmul_peak": flops / peak,
      "gflops_per_cpu_s": flops_per_cpu_s / 1e9,
      "fraction_of_matmul_peak_per_cpu_s": flops_per_cpu_s / peak_per_cpu_s
  }


def _ratios(summaries):
  """Speed ratios (higher is faster for the first named) from wall and from CPU time, against the
  fastest PyTorch variant (by wall time)."""
  hf = _fastest(summaries, [_hf_variant(t) for t in _HF_THREADS.value])
  pairs = {
      "realm_tf_xla_over_hf": (REALM_TF_XLA, hf),
      "realm_tf_over_hf": (REALM_TF, hf),
      "xla_speedup": (REALM_TF_XLA, REALM_TF)
  }
  ratios = {
      name: {
          "wall": summaries[b]["median_wall_s"] / summaries[a]["median_wall_s"],
          "cpu": summaries[b]["median_cpu_s"] / summaries[a]["median_cpu_s"]
      } for name, (a, b) in pairs.items()
  }
  ratios["hf_variant"] = hf
  return ratios


def _targets(result):
  targets = {}
  embedding, train = result.get("embedding"), result.get("train_step")
  if embedding:
    best = _fastest(embedding["variants"], (REALM_TF, REALM_TF_XLA))
    hf = embedding["ratios"]["hf_variant"]
    value = embedding["variants"][best]["items_per_second"] / embedding["variants"][hf]["items_per_second"]
    targets["embedding_over_hf"] = {
        "variant": best,
        "hf_variant": hf,
        "value": value,
        "target": EMBEDDING_OVER_HF_TARGET,
        "met": value >= EMBEDDING_OVER_HF_TARGET
    }
    fraction = embedding["variants"][best]["fraction_of_matmul_peak"]
    targets["embedding_fraction_of_matmul_peak"] = {
        "variant": best,
        "value": fraction,
        "target": FRACTION_OF_PEAK_TARGET,
        "met": fraction >= FRACTION_OF_PEAK_TARGET,
        "value_per_cpu_s": embedding["variants"][best]["fraction_of_matmul_peak_per_cpu_s"]
    }
  if train:
    value = train["ratios"]["xla_speedup"]["wall"]
    targets["train_step_xla_speedup"] = {
        "value": value,
        "target": TRAIN_XLA_SPEEDUP_TARGET,
        "met": value >= TRAIN_XLA_SPEEDUP_TARGET
    }
  return targets


def _time_round(name, measure, calls, hf, r, samples, rounds):
  """One round: the matmul peaks, then one timed call of every variant in an order rotated by r."""
  peak, peak_per_cpu_s = throughput_lib.matmul_peak()
  torch_peak = {t: hf.call("matmul", t) for t in _HF_THREADS.value}
  variants = _variants()
  for variant in variants[r % len(variants):] + variants[:r % len(variants)]:
    samples[(measure, variant)].append(calls[variant]())
  rounds.append({
      "config": name,
      "measure": measure,
      "matmul_peak_gflops": peak / 1e9,
      "matmul_peak_gflops_per_cpu_s": peak_per_cpu_s / 1e9,
      "torch_matmul_peak_gflops": {
          t: p["gflops"] for t, p in torch_peak.items()
      },
      "torch_matmul_peak_gflops_per_cpu_s": {
          t: p["gflops_per_cpu_s"] for t, p in torch_peak.items()
      },
      "load_average": throughput_lib.load_average()
  })
  print(f"  {name} {measure} round {r + 1}: load average {rounds[-1]['load_average'][0]:.1f}", flush=True)


def _bench_config(name, rounds):
  """For each measure: builds and warms up every variant, then times --repeats rotating rounds. One
  measure's models are released before the next one's are built (BERT-base's would not all fit beside
  the other jobs of a shared 24 GB machine)."""
  config = throughput_lib.bench_config(name)
  hf = HfProcess(config, _SEQ_LEN.value, _EMBED_BATCH.value, _TRAIN_BATCH.value)
  samples, first = collections.defaultdict(list), {}
  try:
    for measure in _MEASURES.value:
      calls = _variant_calls(config, measure, hf)
      for variant, call in calls.items():
        first[(measure, variant)] = call()[0]
        for _ in range(_WARMUP.value - 1):
          call()
        print(f"  {name} {measure} {variant}: first call {first[(measure, variant)]:.1f} s", flush=True)
      gc.collect()  # the tracing garbage would otherwise be collected during a timed call
      for r in range(_REPEATS.value):
        _time_round(name, measure, calls, hf, r, samples, rounds)
      del calls
      tf_keras.backend.clear_session()
      gc.collect()
  finally:
    hf.close()
  own_rounds = [r for r in rounds if r["config"] == name]
  peak = statistics.median(r["matmul_peak_gflops"] for r in own_rounds) * 1e9
  peak_per_cpu_s = statistics.median(r["matmul_peak_gflops_per_cpu_s"] for r in own_rounds) * 1e9
  forward = throughput_lib.forward_flops(config, _SEQ_LEN.value)
  torch_peaks = {
      t: statistics.median(r["torch_matmul_peak_gflops"][t] for r in own_rounds) for t in _HF_THREADS.value
  }
  torch_peaks_per_cpu_s = {
      t: statistics.median(r["torch_matmul_peak_gflops_per_cpu_s"][t] for r in own_rounds)
      for t in _HF_THREADS.value
  }
  result = {
      "bert": config.to_dict(),
      "forward_gflop_per_doc": forward / 1e9,
      "matmul_peak_gflops": peak / 1e9,
      "matmul_peak_gflops_per_cpu_s": peak_per_cpu_s / 1e9,
      "torch_matmul_peak_gflops": torch_peaks,
      "torch_matmul_peak_gflops_per_cpu_s": torch_peaks_per_cpu_s,
      "hf_environment": hf.environment
  }
  for measure in _MEASURES.value:
    batch, per_item = ((_EMBED_BATCH.value, forward) if measure == "embedding" else
                       (_TRAIN_BATCH.value, forward * throughput_lib.TRAIN_FLOPS_PER_FORWARD))
    summaries = {
        v: _summary(samples[(measure, v)], first[(measure, v)], batch, per_item, peak, peak_per_cpu_s)
        for v in _variants()
    }
    result[measure] = {"batch_size": batch, "variants": summaries, "ratios": _ratios(summaries)}
  result["targets"] = _targets(result)
  return result


def _print_table(results):
  print(f"\n{'config':10s}{'measure':12s}{'variant':14s}{'items/s':>9s}{'wall s':>8s}{'CPU s':>8s}"
        f"{'GFLOP/s':>9s}{'of peak':>9s}{'per CPU s':>10s}{'1st call s':>11s}")
  for name, result in results["configs"].items():
    for measure in _MEASURES.value:
      for variant, s in result[measure]["variants"].items():
        print(f"{name:10s}{measure:12s}{variant:14s}{s['items_per_second']:9.2f}{s['median_wall_s']:8.2f}"
              f"{s['median_cpu_s']:8.2f}{s['gflops']:9.1f}{s['fraction_of_matmul_peak']:9.1%}"
              f"{s['fraction_of_matmul_peak_per_cpu_s']:10.1%}"
              f"{s['first_call_s']:11.1f}")
      ratios = result[measure]["ratios"]
      print(f"{'':22s}ratios (wall / CPU time; PyTorch: {ratios['hf_variant']}): " + ", ".join(
          f"{k} {v['wall']:.2f}x / {v['cpu']:.2f}x" for k, v in ratios.items() if k != "hf_variant"))
    for target, t in result["targets"].items():
      per_cpu_s = f" (per CPU second: {t['value_per_cpu_s']:.2f})" if "value_per_cpu_s" in t else ""
      print(f"{'':22s}target {target}: {t['value']:.2f} (>= {t['target']}) "
            f"{'met' if t['met'] else 'MISSED'}{per_cpu_s}")
  print(f"fp32 2048^3 matmul per round, GFLOP per wall s / per CPU s, TensorFlow [torch by threads]: " +
        ", ".join(f"{r['matmul_peak_gflops']:.0f}/{r['matmul_peak_gflops_per_cpu_s']:.0f} "
                  f"{[round(g) for g in r['torch_matmul_peak_gflops'].values()]}/"
                  f"{[round(g) for g in r['torch_matmul_peak_gflops_per_cpu_s'].values()]}"
                  for r in results["rounds"]))
  print(f"load average per round (1 min): " +
        ", ".join(f"{r['load_average'][0]:.1f}" for r in results["rounds"]))


def main(argv):
  del argv
  results = {
      "benchmark": "hf_compare_bench",
      "machine": throughput_lib.machine(),
      "settings": {
          "seq_len": _SEQ_LEN.value,
          "embed_batch_size": _EMBED_BATCH.value,
          "train_batch_size": _TRAIN_BATCH.value,
          "warmup": _WARMUP.value,
          "repeats": _REPEATS.value,
          "hf_threads": _HF_THREADS.value,
          "train_flops_per_forward": throughput_lib.TRAIN_FLOPS_PER_FORWARD
      },
      "rounds": [],
      "configs": {}
  }
  for name in _CONFIGS.value:
    print(f"== {name}", flush=True)
    results["configs"][name] = _bench_config(name, results["rounds"])
  results["machine"]["load_average_at_end"] = throughput_lib.load_average()
  _print_table(results)
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  io_utils.write_json_atomic(_OUTPUT.value, results)
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
