r"""`bin/test` on a fresh clone, timed as issue 38 measures it: quiet, or beside a fresh clone's `bin/demo`.

  .venv/bin/python bench/suite_time_bench.py                 # quiet: run nothing else meanwhile
  .venv/bin/python bench/suite_time_bench.py --beside_demo   # a second clone's bin/demo, started first

Clones this checkout's HEAD (`git clone`: uncommitted changes are not measured, and nothing comes from
Bazel's cache, whose output base is keyed by the clone's new path) under --work_dir, and runs `bin/test`
there as README says, its set-up (the clone's own venv) included. With --beside_demo a second clone
runs `bin/demo`, started --demo_head_start_seconds earlier. Each command runs in a session of its own
(setsid), as from two terminals: Linux's autogroup scheduling then shares the cores between the two as
between two users' jobs, where two children of one session would share that session's share
(docs/testing.md).

Writes --output (default bench/results/suite_time_<quiet|beside_demo>_<commit>.json): the command, the
machine and its load, the commit, bin/test's set-up seconds, Bazel's elapsed time, its summary line,
the targets' wall and CPU sums, how the machine's cores spent the run (busy, niced background, idle:
whether it was CPU-bound), the machine's speed that hour (--speed_probe's CPU seconds before and after
the run), and the demo's numbers, stage seconds, total and exit status. Beside it,
test_times_<quiet|beside_demo>_<commit>.json: the clone's per-target times (its
bazel-testlogs/test_times.json), which tools/test_times_table.py turns into docs/testing.md's tables.
Each clone's Bazel output base is removed (`bazel clean --expunge`) and the clones deleted, unless
--keep. Exits 1 when bin/test or bin/demo failed, after writing both files.
"""

import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

from absl import app
from absl import flags

from bench import demo_transcript
from bench import throughput_lib
from realm_tf import io_utils

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_BESIDE_DEMO = flags.DEFINE_bool("beside_demo", False,
                                 "Run a fresh clone's bin/demo beside bin/test (issue 38's loaded run).")
_HEAD_START = flags.DEFINE_float("demo_head_start_seconds", 20.0,
                                 "With --beside_demo: how long bin/demo runs before bin/test starts.")
_REPO_FLAG = flags.DEFINE_string("repo", _REPO, "The git repository whose HEAD is cloned.")
_WORK_DIR = flags.DEFINE_string("work_dir", os.path.join(_REPO, ".bench_cache", "suite_time"),
                                "Where the clones and their logs go.")
_OUTPUT = flags.DEFINE_string(
    "output", None, "The JSON summary (default bench/results/suite_time_<quiet|beside_demo>_<commit>.json); "
    "the per-target times go beside it as test_times_<quiet|beside_demo>_<commit>.json.")
_KEEP = flags.DEFINE_bool("keep", False, "Keep the clones and their Bazel output bases.")
# The same code has taken 1,879 and 2,107 s of CPU on this machine hours apart (docs/testing.md): a
# fixed piece of work timed before and after each run says how fast the machine was that hour, so runs
# of different hours compare. TensorFlow's import is that piece: 3-4 s of CPU, the suite's commonest.
SPEED_PROBE = "import tensorflow"
_SPEED_PROBE = flags.DEFINE_string(
    "speed_probe", SPEED_PROBE,
    "Python code whose CPU seconds (in a new process of this venv, twice before the run and twice after) "
    "the summary records as the machine's speed that hour; empty: none.")

_SETUP = re.compile(r"\[realm_tf setup\] set-up \(venv, Debian packages\): (\d+) s")
_ALLOCATOR = re.compile(r"\[realm_tf setup\] the tests' allocator: (.+)")
_ELAPSED = re.compile(r"INFO: Elapsed time: ([\d.]+)s")
_SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed(?:, (\d+) skipped)?$", re.MULTILINE)


def parse_test_log(text: str) -> Dict:
  """bin/test's console output: its set-up seconds, the tests' allocator (jemalloc's library, or glibc's
  malloc where it is missing: about a sixth more CPU), Bazel's elapsed time and the summary line (the last
  one printed); a log without the summary is a run that did not finish, and an error."""
  summaries = _SUMMARY.findall(text)
  if not summaries:
    raise ValueError("no 'N passed, N failed' line: bin/test did not finish; its end:\n" + text[-1500:])
  passed, failed, skipped = summaries[-1]
  setup = _SETUP.findall(text)
  elapsed = _ELAPSED.findall(text)
  allocator = _ALLOCATOR.findall(text)
  return {
      "setup_seconds": float(setup[-1]) if setup else None,
      "allocator": allocator[-1].strip() if allocator else None,
      "bazel_elapsed_seconds": float(elapsed[-1]) if elapsed else None,
      "passed": int(passed),
      "failed": int(failed),
      "skipped": int(skipped or 0),
  }


def _test_summary():
  """tools/test_summary.py, whose sums bin/test prints: tools/ holds scripts, not an installed package,
  so it is loaded from its file."""
  spec = importlib.util.spec_from_file_location("realm_tf_tools_test_summary",
                                                os.path.join(_REPO, "tools", "test_summary.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _git(*args: str, cwd: str) -> str:
  done = subprocess.run(["git", *args], cwd=cwd, check=False, capture_output=True, text=True)
  if done.returncode:
    raise RuntimeError(f"git {' '.join(args)} in {cwd} failed: {done.stderr.strip()}")
  return done.stdout.strip()


def _start(command: str, clone: str, log_path: str, env: Dict[str, str]) -> subprocess.Popen:
  with open(log_path, "w") as log:
    # A session of its own (start_new_session: setsid), as a second terminal's command.
    return subprocess.Popen([os.path.join(clone, command)],
                            cwd=clone,
                            env=env,
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            start_new_session=True)


def _remove_clone(clone: str, env: Dict[str, str]) -> None:
  if os.path.exists(os.path.join(clone, "bazel-testlogs")):
    # The output base is keyed by the clone's path: no later run can reuse it.
    subprocess.run(["bazel", "clean", "--expunge"], cwd=clone, env=env, check=False, capture_output=True)
  shutil.rmtree(clone, ignore_errors=True)


def speed_probe(code: str, times: int = 2) -> List[float]:
  """CPU seconds (user + system) of `code` run by a new process of this Python, `times` times, one after
  the other."""
  seconds = []
  for _ in range(times):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code],
                   check=True,
                   stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds.append(round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2))
  return seconds


def _shown(path: str, repo: str) -> str:
  """A path as the JSON records it: relative to the repository when inside it, so that a committed
  result names its files as a clone sees them."""
  relative = os.path.relpath(os.path.abspath(path), os.path.abspath(repo))
  return path if relative.startswith(os.pardir) else relative


def run(repo: str,
        work_dir: str,
        beside_demo: bool,
        head_start_seconds: float,
        output: Optional[str],
        keep: bool,
        probe: str = SPEED_PROBE) -> Dict:
  """Clones, runs, records; returns the summary it wrote to `output`."""
  if not os.path.isdir(repo):
    raise ValueError(f"--repo={repo} is not a directory: pass a git checkout of realm_tf")
  try:
    commit = _git("rev-parse", "--short", "HEAD", cwd=repo)
  except RuntimeError as e:
    raise ValueError(f"--repo={repo} has no commit to clone ({e}): pass a git checkout of realm_tf") from None
  label = "beside_demo" if beside_demo else "quiet"
  output = output or os.path.join(repo, "bench", "results", f"suite_time_{label}_{commit}.json")
  times_output = os.path.join(os.path.dirname(output), f"test_times_{label}_{commit}.json")
  os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
  run_dir = os.path.join(work_dir, f"{label}_{commit}")
  shutil.rmtree(run_dir, ignore_errors=True)
  os.makedirs(run_dir)
  env = dict(os.environ)
  # bin/test's own default, computed for this checkout instead of the clone (nothing lies beside it).
  env.setdefault("REALM_TF_SHARED_DATA", os.path.join(os.path.dirname(os.path.abspath(repo)), "shared",
                                                      "data"))
  dirty = bool(_git("status", "--porcelain", "--untracked-files=no", cwd=repo))
  result = {
      "command": " ".join(sys.argv),
      "machine": throughput_lib.machine(),
      "commit": commit,
      "uncommitted_changes_not_measured": dirty,
      "run": label,
      "shared_data": env["REALM_TF_SHARED_DATA"],
      "output": _shown(output, repo),
  }
  clones = {"test": os.path.join(run_dir, "test")}
  if beside_demo:
    clones["demo"] = os.path.join(run_dir, "demo")
  for clone in clones.values():
    _git("clone", "-q", os.path.abspath(repo), clone, cwd=run_dir)
  speed = {"code": probe, "cpu_seconds_before": speed_probe(probe)} if probe else None
  processes = {}
  started = {}
  cpu_before = throughput_lib.cpu_times()
  try:
    if beside_demo:
      started["demo"] = time.time()
      processes["demo"] = _start("bin/demo", clones["demo"], os.path.join(run_dir, "demo.log"), env)
      time.sleep(head_start_seconds)
    started["test"] = time.time()
    if beside_demo:
      result["demo_started_seconds_before_test"] = round(started["test"] - started["demo"], 1)
    processes["test"] = _start("bin/test", clones["test"], os.path.join(run_dir, "test.log"), env)
    waited = {}
    while len(waited) < len(processes):
      for name, process in processes.items():
        if name not in waited and process.poll() is not None:
          waited[name] = time.time() - started[name]
      time.sleep(1)
  except BaseException:
    for process in processes.values():  # their sessions would outlive this one
      if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    raise
  result["load_average_at_end"] = throughput_lib.load_average()
  result["machine_cpu"] = throughput_lib.cpu_use(cpu_before, throughput_lib.cpu_times())
  if speed:
    speed["cpu_seconds_after"] = speed_probe(probe)
    result["speed_probe"] = speed

  with open(os.path.join(run_dir, "test.log"), errors="replace") as f:
    test_log = f.read()
  test = {"exit_status": processes["test"].returncode, "wall_seconds": round(waited["test"], 1)}
  try:
    test.update(parse_test_log(test_log))
  except ValueError as e:
    test["error"] = str(e)
  times_path = os.path.join(clones["test"], "bazel-testlogs", "test_times.json")
  if os.path.exists(times_path):
    with open(times_path) as f:
      times = json.load(f)
    test.update(_test_summary().time_sums(times))
    io_utils.write_json_atomic(times_output, times)
    test["times"] = _shown(times_output, repo)
  result["test"] = test
  if beside_demo:
    with open(os.path.join(run_dir, "demo.log"), errors="replace") as f:
      demo_log = f.read()
    demo = {"exit_status": processes["demo"].returncode, "wall_seconds": round(waited["demo"], 1)}
    try:
      demo.update(demo_transcript.parse(demo_log))
    except ValueError as e:
      demo["error"] = str(e)
    result["demo"] = demo
  io_utils.write_json_atomic(output, result)
  if not keep:
    for clone in clones.values():
      _remove_clone(clone, env)
  return result


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  result = run(_REPO_FLAG.value, _WORK_DIR.value, _BESIDE_DEMO.value, _HEAD_START.value, _OUTPUT.value,
               _KEEP.value, _SPEED_PROBE.value)
  test = result["test"]
  print(f"{result['run']} bin/test at {result['commit']} on {result['machine']['processor']}: set-up "
        f"{test.get('setup_seconds')} s, Bazel {test.get('bazel_elapsed_seconds')} s, "
        f"{test.get('passed')} passed, {test.get('failed')} failed; the targets' CPU "
        f"{test.get('targets_cpu_seconds')} s; the tests' allocator: {test.get('allocator')}")
  shares = result["machine_cpu"].get("shares")
  if shares:
    print("the cores from the first start to the last exit: " +
          ", ".join(f"{kind} {100 * share:.1f}%" for kind, share in shares.items()))
  if "speed_probe" in result:
    speed = result["speed_probe"]
    print(f"the machine's speed: `{speed['code']}` took {speed['cpu_seconds_before']} s of CPU before the "
          f"run, {speed['cpu_seconds_after']} s after")
  if "demo" in result:
    demo = result["demo"]
    print(f"bin/demo beside it: exit status {demo['exit_status']}, total {demo.get('total_seconds')} s")
  print(f"wrote {result['output']}" + (f" and {test['times']}" if "times" in test else ""))
  failures = [
      f"{name}: {part.get('error') or 'exit status ' + str(part['exit_status'])}"
      for name, part in (("bin/test", test), ("bin/demo", result.get("demo")))
      if part and (part["exit_status"] != 0 or "error" in part)
  ]
  if failures:
    print("FAILED: " + "; ".join(failures), file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
