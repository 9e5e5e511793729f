r"""Load benchmark of bin/serve: N concurrent clients on localhost for a bounded time, with the brute-force
and the ScaNN open-QA export of one model; queries/s and latency percentiles.

  python bench/serve_bench.py --model_dir=demo_output/pipeline/orqa    # the demo's fine-tuned model
  python bench/serve_bench.py                                          # random weights, 300 documents

Each index is exported once into --work_dir (reused when there), served by a real bin/serve.py process
(--noaccess_log), and then, for each client count, every client thread keeps one keep-alive HTTP
connection and posts one testdata test question at a time ({"instances": [question]}, TF Serving's row
format) for --seconds after --warmup_seconds. Latency is from sending the request to having read the
whole response. Before serving, the signature is also called in this process (one question a call) for
--in_process_seconds: the model's own share of the latency. The clients run in this process, on the same cores as the server: on a small machine
they take CPU from it. Prints a table and writes JSON (with a machine description) to --output.
"""

import http.client
import json
import os
import tempfile
import threading
import time
from typing import Dict, List

from absl import app
from absl import flags

import numpy as np

from bench import throughput_lib
from realm_tf import io_utils
from realm_tf.export import loader
from realm_tf.export import saved_models
from realm_tf.retrieval import scann_index
from realm_tf.runs import orqa_model
from realm_tf.testing import random_orqa
from realm_tf.testing import serve_process as process
from realm_tf.testing import test_paths

_MODEL_DIR = flags.DEFINE_string(
    "model_dir", None, "A bin/train_orqa model dir to export (its best "
    "checkpoint); default: random weights over the 300 testdata documents.")
_WORK_DIR = flags.DEFINE_string("work_dir", os.path.join(tempfile.gettempdir(), "realm_tf_serve_bench"),
                                "Where the exports are written (and reused by a later run).")
_INDEXES = flags.DEFINE_list("indexes", list(saved_models.INDEX_CHOICES), "Exports served in turn.")
_CLIENTS = flags.DEFINE_list("clients", ["1", "4"], "Concurrent client counts.")
_SECONDS = flags.DEFINE_float("seconds", 30.0, "Measured time per (index, clients).")
_WARMUP = flags.DEFINE_float("warmup_seconds", 3.0, "Unmeasured load first, per (index, clients).")
_IN_PROCESS = flags.DEFINE_float(
    "in_process_seconds", 10.0, "Per index, the signature called directly "
    "(one question a call, no HTTP) for this long first: the model's share "
    "of a request's latency. 0 skips it.")
_SCANN_TREE_MIN_DOCS = flags.DEFINE_integer(
    "scann_tree_min_docs", 100, "ScannOptions.tree_min_docs of the ScaNN export: lower than the default "
    "(5000) so that a small corpus gets ScaNN's tree and AH scoring rather than its brute force.")
_OUTPUT = flags.DEFINE_string(
    "output", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "serve_bench.json"),
    "Where to write the JSON results.")


def _questions() -> List[str]:
  with open(os.path.join(test_paths.repo_root(), "testdata", "qa.test.jsonl"), encoding="utf-8") as f:
    return [json.loads(line)["question"] for line in f]


def _exports(work_dir: str) -> Dict[str, str]:
  """{index: open_qa export path} for each --indexes, exported once into work_dir."""
  model_dir = _MODEL_DIR.value
  if model_dir is None:
    model_dir = os.path.join(work_dir, "random", "orqa")
    if not os.path.exists(os.path.join(model_dir, "checkpoint")):
      model_dir = random_orqa.write_model_dir(os.path.join(work_dir, "random"),
                                              num_docs=random_orqa.MAX_DOCS).model_dir
  paths, trained = {}, None
  for index in _INDEXES.value:
    path = os.path.join(work_dir, "exports", os.path.basename(os.path.normpath(model_dir)),
                        f"open_qa_{index}")
    if not os.path.exists(path):
      trained = trained or orqa_model.load_trained(model_dir)
      print(f"exporting {model_dir} with index={index} to {path}", flush=True)
      saved_models.export_open_qa(trained, path, index,
                                  scann_index.ScannOptions(tree_min_docs=_SCANN_TREE_MIN_DOCS.value))
    paths[index] = path
  return paths


def _summary(latencies: np.ndarray, seconds: float) -> Dict:
  ms = latencies * 1000
  return {
      "requests": int(ms.size),
      "queries_per_second": ms.size / seconds,
      "latency_ms": {
          "mean": float(ms.mean()),
          "p50": float(np.percentile(ms, 50)),
          "p90": float(np.percentile(ms, 90)),
          "p99": float(np.percentile(ms, 99)),
          "max": float(ms.max())
      } if ms.size else None
  }


def _in_process(path: str, questions: List[str], seconds: float) -> Dict:
  """The open_qa signature called in this process, one question at a time, for seconds."""
  model = loader.load_open_qa(path)
  for question in questions[:3]:  # the first calls build kernels
    loader.answer_questions(model, [question])
  latencies, n = [], 0
  end = time.monotonic() + seconds
  while time.monotonic() < end:
    sent = time.monotonic()
    loader.answer_questions(model, [questions[n % len(questions)]])
    latencies.append(time.monotonic() - sent)
    n += 1
  return dict(_summary(np.array(latencies), seconds), clients=1, mode="in_process")


def _load(port: int, clients: int, questions: List[str], warmup_s: float, seconds: float) -> Dict:
  """clients threads posting one question at a time; latencies of the requests sent in the window."""
  start = time.monotonic() + warmup_s
  end = start + seconds
  latencies: List[List[float]] = [[] for _ in range(clients)]
  failures: List[str] = []

  def client(i: int):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    n = i
    try:
      while True:
        sent = time.monotonic()
        if sent >= end:
          return
        body = json.dumps({"instances": [questions[n % len(questions)]]}).encode("utf-8")
        n += clients
        connection.request("POST",
                           "/v1/models/open_qa:predict",
                           body=body,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        done = time.monotonic()
        if response.status != 200:
          failures.append(f"{response.status}: {data[:200]!r}")
        elif sent >= start and done <= end:
          latencies[i].append(done - sent)
    except Exception as e:  # pylint: disable=broad-except  (counted, and the run reported as failed)
      failures.append(f"{type(e).__name__}: {e}")
    finally:
      connection.close()

  threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  flat = np.array([x for per_client in latencies for x in per_client])
  return dict(_summary(flat, seconds),
              clients=clients,
              seconds=seconds,
              mode="http",
              failures=len(failures),
              first_failures=failures[:5])


def main(argv):
  del argv
  clients = [int(c) for c in _CLIENTS.value]
  questions = _questions()
  paths = _exports(_WORK_DIR.value)
  results = {
      "machine": dict(throughput_lib.machine(), load_average_at_start=throughput_lib.load_average()),
      "model_dir": _MODEL_DIR.value or "random weights",
      "questions": "testdata/qa.test.jsonl",
      "warmup_seconds": _WARMUP.value,
      "runs": []
  }
  for index, path in paths.items():
    info = loader.export_info(path)
    details = dict(index=index,
                   num_blocks=info["num_blocks"],
                   reader_beam=info["reader_beam"],
                   scann_parameters=info.get("scann_parameters"))
    if _IN_PROCESS.value > 0:
      run = dict(_in_process(path, questions, _IN_PROCESS.value), failures=0, **details)
      results["runs"].append(run)
      print(
          f"{index:12s} in process: {run['queries_per_second']:7.1f} calls/s, latency p50 "
          f"{run['latency_ms']['p50']:7.1f} ms",
          flush=True)
    with process.ServeProcess(path, "--noaccess_log") as served:
      for n in clients:
        run = _load(served.port, n, questions, _WARMUP.value, _SECONDS.value)
        run.update(details)
        results["runs"].append(run)
        latency = run["latency_ms"] or {}
        print(
            f"{index:12s} clients {n:3d}: {run['queries_per_second']:7.1f} queries/s, latency p50 "
            f"{latency.get('p50', float('nan')):7.1f} ms, p99 {latency.get('p99', float('nan')):7.1f} ms, "
            f"{run['failures']} failed",
            flush=True)
  results["machine"]["load_average_at_end"] = throughput_lib.load_average()
  print(
      "\n| index | clients | queries/s | p50 ms | p90 ms | p99 ms | failed |\n|---|---|---|---|---|---|---|")
  for run in results["runs"]:
    latency = run["latency_ms"] or {}
    who = "in process, no HTTP" if run["mode"] == "in_process" else run["clients"]
    print(f"| {run['index']} | {who} | {run['queries_per_second']:.1f} | "
          f"{latency.get('p50', float('nan')):.1f} | {latency.get('p90', float('nan')):.1f} | "
          f"{latency.get('p99', float('nan')):.1f} | {run['failures']} |")
  os.makedirs(os.path.dirname(_OUTPUT.value), exist_ok=True)
  io_utils.write_json_atomic(_OUTPUT.value, results)
  print(f"wrote {_OUTPUT.value}")
  if any(run["failures"] for run in results["runs"]):
    raise SystemExit("some requests failed (first_failures in the JSON)")


if __name__ == "__main__":
  app.run(main)
