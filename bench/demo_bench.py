r"""bin/demo's time and its numbers, run --runs times on this machine: total and per-stage seconds, the
retriever's recall table, ORQA's exact match; and whether every run printed the same numbers (the
demo's index swaps are at fixed steps, so they must).

  python bench/demo_bench.py                     # two runs of bin/run_demo.py, as bin/demo runs it
  python bench/demo_bench.py --logs=a.log,b.log  # the same summary of transcripts already printed

Each run writes under --work_dir/run<i> (removed unless --keep). Prints a table and writes JSON (the
command, the machine, its load at start and end) to --output.
"""

import json
import os
import subprocess
import sys
import time
from typing import Dict

from absl import app
from absl import flags

from bench import demo_transcript
from bench import throughput_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_RUNS = flags.DEFINE_integer("runs", 2, "bin/run_demo.py runs, one after the other.")
_LOGS = flags.DEFINE_list("logs", [], "Summarize these bin/demo transcripts instead of running.")
_WORK_DIR = flags.DEFINE_string("work_dir", os.path.join(_REPO, ".bench_cache", "demo_bench"),
                                "Where the runs write.")
_KEEP = flags.DEFINE_bool("keep", False, "Keep each run's output directory.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "demo_bench.json"),
                              "Where to write the JSON results.")


def _run_demo(output_dir: str) -> Dict:
  command = [sys.executable, os.path.join(_REPO, "bin", "run_demo.py"), f"--output_dir={output_dir}"]
  env = dict(os.environ, PYTHONPATH=_REPO, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
  start = time.time()
  done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
  if done.returncode:
    raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout[-2000:]}")
  return dict(demo_transcript.parse(done.stdout), wall_seconds=time.time() - start)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  results = {"command": " ".join(sys.argv), "machine": throughput_lib.machine(), "runs": []}
  if _LOGS.value:
    for path in _LOGS.value:
      with open(path, errors="replace") as f:
        results["runs"].append(dict(demo_transcript.parse(f.read()), log=path))
  else:
    import shutil  # pylint: disable=g-import-not-at-top
    for i in range(_RUNS.value):
      output_dir = os.path.join(_WORK_DIR.value, f"run{i}")
      shutil.rmtree(output_dir, ignore_errors=True)
      results["runs"].append(_run_demo(output_dir))
      print(f"run {i}: total {results['runs'][-1]['total_seconds']:.0f} s", flush=True)
      if not _KEEP.value:
        shutil.rmtree(output_dir, ignore_errors=True)
  results["machine"]["load_average_at_end"] = throughput_lib.load_average()
  numbers = [{
      k: v for k, v in run.items() if k not in ("stage_seconds", "total_seconds", "wall_seconds", "log")
  } for run in results["runs"]]
  results["same_numbers_every_run"] = all(n == numbers[0] for n in numbers)
  print("| run | total s | " + " | ".join(f"recall{k}" for k in numbers[0]["recall"]) +
        " | ORQA EM |\n|---|---|" + "---|" * (len(numbers[0]["recall"]) + 1))
  for i, run in enumerate(results["runs"]):
    recall = " | ".join(f"{a} -> {b}" for a, b in run["recall"].values())
    print(f"| {i} | {run['total_seconds']:.0f} | {recall} | {run.get('orqa', {}).get('exact_match')} |")
  print(f"same numbers every run: {results['same_numbers_every_run']}")
  os.makedirs(os.path.dirname(_OUTPUT.value), exist_ok=True)
  with open(_OUTPUT.value, "w") as f:
    json.dump(results, f, indent=2)
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
