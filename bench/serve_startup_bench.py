r"""Start-up cost of the serving path: bin/answer.py answering one question from an open_qa export, as a
fresh process, --repeats times; its wall time (process start to exit) and peak resident memory, and what
a bare `import tensorflow` costs in the same way (the floor of any TensorFlow client).

  python bench/serve_startup_bench.py --saved_model=demo_output/export/open_qa
  python bench/serve_startup_bench.py --saved_model=... --repo_root=/tmp/other_checkout   # compare code

--repo_root picks the checkout whose bin/answer.py runs (default: this one), so two versions of the
serving code can be measured on the same export and machine. Prints a table and writes JSON (with the
command, the machine and its load) to --output.
"""

import json
import os
import subprocess
import sys
import time
from typing import Dict, List

from absl import app
from absl import flags

from bench import throughput_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SAVED_MODEL = flags.DEFINE_string("saved_model",
                                   None, "An open_qa export (bin/export_saved_model's "
                                   "OUTPUT_DIR/open_qa).",
                                   required=True)
_REPO_ROOT = flags.DEFINE_string("repo_root", _REPO, "The checkout whose bin/answer.py runs.")
_QUESTION = flags.DEFINE_string("question", "Who built the lighthouse?", "The question answered.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Processes per command; the table gives their median.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "serve_startup.json"),
                              "Where to write the JSON results.")


def _run(command: List[str], env: Dict[str, str]) -> Dict[str, float]:
  """Wall seconds and peak RSS (MiB, as the process printed it) of one child process; a failure is an
  error naming the command."""
  start = time.perf_counter()
  done = subprocess.run(command, env=env, cwd=env["PYTHONPATH"], capture_output=True, text=True, check=False)
  seconds = time.perf_counter() - start
  if done.returncode or "PEAK_RSS_KIB=" not in done.stdout:
    raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
  peak_kib = float(done.stdout.rsplit("PEAK_RSS_KIB=", 1)[1].split()[0])
  return {"seconds": seconds, "peak_rss_mib": peak_kib / 1024}


# Runs a script through runpy, then prints the process's own peak RSS (ru_maxrss of RUSAGE_CHILDREN
# would be the largest child so far, not this one).
_PRINT_PEAK_RSS = "print('PEAK_RSS_KIB=%d' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
_WRAPPER = ("import resource, runpy, sys\n"
            "sys.argv = sys.argv[1:]\n"
            "try:\n"
            "  runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit as e:\n"
            "  if e.code not in (0, None): raise\n" + _PRINT_PEAK_RSS)


def _median(values: List[float]) -> float:
  values = sorted(values)
  return values[len(values) // 2]


def main(argv):
  del argv
  repo = os.path.abspath(_REPO_ROOT.value)
  answer = os.path.join(repo, "bin", "answer.py")
  if not os.path.exists(answer):
    raise app.UsageError(f"--repo_root={repo} has no bin/answer.py")
  env = dict(os.environ, PYTHONPATH=repo, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
  commands = {
      "import tensorflow": [sys.executable, "-c", "import resource, tensorflow\n" + _PRINT_PEAK_RSS],
      "bin/answer.py": [
          sys.executable, "-c", _WRAPPER, answer, _QUESTION.value,
          f"--saved_model={os.path.abspath(_SAVED_MODEL.value)}"
      ],
  }
  results = {
      "command": " ".join(sys.argv),
      "repo_root": repo,
      "saved_model": _SAVED_MODEL.value,
      "machine": dict(throughput_lib.machine(), load_average_at_start=throughput_lib.load_average()),
      "runs": {}
  }
  print(f"{'command':20s} {'median s':>9s} {'median peak RSS MiB':>20s}")
  for name, command in commands.items():
    runs = [_run(command, env) for _ in range(_REPEATS.value)]
    summary = {
        "seconds": _median([r["seconds"] for r in runs]),
        "peak_rss_mib": _median([r["peak_rss_mib"] for r in runs]),
        "each": runs
    }
    results["runs"][name] = summary
    print(f"{name:20s} {summary['seconds']:9.2f} {summary['peak_rss_mib']:20.0f}", flush=True)
  results["machine"]["load_average_at_end"] = throughput_lib.load_average()
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  tmp = _OUTPUT.value + ".tmp"
  with open(tmp, "w") as f:
    json.dump(results, f, indent=2)
  os.replace(tmp, _OUTPUT.value)
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
