"""bench/suite_time_bench.py on a stand-in repository whose bin/test and bin/demo print what the real ones
print: it measures a clone of the committed HEAD, starts each command in a session of its own (the demo
first), reads their output and per-target times, and removes the clones and their Bazel output bases."""

import json
import os
import stat
import subprocess
import textwrap
from unittest import mock

from absl.testing import absltest

from bench import suite_time_bench
from bench import throughput_lib

# The stand-in commands record where and when they ran: their session, their start time, what the bench
# passed them, and the committed file a clone holds.
_FAKE_TEST = """#!/bin/bash
echo "sid=$(awk '{print $6}' /proc/$$/stat) start=$(date +%s.%N) shared=$REALM_TF_SHARED_DATA version=$(cat version.txt)" > "$RECORD_DIR/test"
echo "[realm_tf setup] set-up (venv, Debian packages): 3 s"
echo "INFO: Elapsed time: 12.500s, Critical Path: 4.00s"
mkdir -p bazel-testlogs
echo '{"//a:slow_test": {"seconds": 9.0, "cpu_seconds": 7.5}, "//a:fast_test": {"seconds": 2.0, "cpu_seconds": null}}' > bazel-testlogs/test_times.json
echo "12 passed, 0 failed, 1 skipped"
"""

_FAKE_DEMO = """#!/bin/bash
echo "sid=$(awk '{print $6}' /proc/$$/stat) start=$(date +%s.%N)" > "$RECORD_DIR/demo"
cat <<'END'
== summary
  REALM loss: 5.313 at the first step -> 3.280 at step 300
  indexes trained on (steps): [0, 50] (refresher exit code 0)
  retriever recall@5 on 200 testdata questions (gold document): 19.5% (ICT warm start) -> 21.0% (after REALM)
  seconds by stage: corpora 7 s, REALM 308 s
  total 436 s; logs and checkpoints under /x/demo_output/pipeline
demo done.
END
"""

# Stands in for the Bazel that bin/test set up: the bench expunges each clone's output base with it.
_FAKE_BAZEL = """#!/bin/bash
echo "$PWD $*" >> "$RECORD_DIR/bazel"
"""


def _executable(path, text):
  with open(path, "w") as f:
    f.write(text)
  os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


def _record(path):
  with open(path) as f:
    return dict(item.split("=", 1) for item in f.read().split())


class SuiteTimeBenchTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    root = self.create_tempdir().full_path
    self.repo = os.path.join(root, "repo")
    os.makedirs(os.path.join(self.repo, "bin"))
    _executable(os.path.join(self.repo, "bin", "test"), _FAKE_TEST)
    _executable(os.path.join(self.repo, "bin", "demo"), _FAKE_DEMO)
    with open(os.path.join(self.repo, "version.txt"), "w") as f:
      f.write("committed\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "c"]):
      subprocess.run(git + args, cwd=self.repo, check=True)
    self.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                 cwd=self.repo,
                                 check=True,
                                 capture_output=True,
                                 text=True).stdout.strip()
    self.records = os.path.join(root, "records")
    tools = os.path.join(root, "tools")
    os.makedirs(self.records)
    os.makedirs(tools)
    _executable(os.path.join(tools, "bazel"), _FAKE_BAZEL)
    self.work_dir = os.path.join(root, "work")
    self.results = os.path.join(root, "results")
    env = {"RECORD_DIR": self.records, "PATH": tools + os.pathsep + os.environ["PATH"]}
    patcher = mock.patch.dict(os.environ, env)
    patcher.start()
    self.addCleanup(patcher.stop)
    os.environ.pop("REALM_TF_SHARED_DATA", None)

  def _run(self, beside_demo, keep=False):
    # A head start of 2 s: a loaded machine may start either script's shell late, but not by that much.
    output = os.path.join(self.results, "suite.json")
    # The speed probe: a cheap one here (the bench's own imports TensorFlow, 3-4 s of CPU each time).
    return suite_time_bench.run(self.repo, self.work_dir, beside_demo, 2.0, output, keep, probe="pass")

  def test_a_quiet_run_records_the_suite_and_removes_its_clone(self):
    # An uncommitted edit is not what a fresh clone gets: the bench measures HEAD and says so.
    with open(os.path.join(self.repo, "version.txt"), "w") as f:
      f.write("edited\n")
    result = self._run(beside_demo=False)
    test = result["test"]
    self.assertEqual((test["exit_status"], test["setup_seconds"], test["bazel_elapsed_seconds"]),
                     (0, 3.0, 12.5))
    self.assertEqual((test["passed"], test["failed"], test["skipped"]), (12, 0, 1))
    self.assertEqual(
        (test["targets"], test["targets_seconds"], test["targets_cpu_seconds"], test["targets_with_cpu"]),
        (2, 11.0, 7.5, 1))
    self.assertEqual((test["slowest_target"], test["slowest_target_seconds"]), ("//a:slow_test", 9.0))
    self.assertEqual((result["commit"], result["run"]), (self.commit, "quiet"))
    # The machine's cores over the run, split by kind: the shares of the whole.
    self.assertEqual(set(result["machine_cpu"]["shares"]), {"busy", "niced", "idle", "stolen"})
    self.assertAlmostEqual(sum(result["machine_cpu"]["shares"].values()), 1.0, delta=0.005)
    self.assertTrue(result["uncommitted_changes_not_measured"])
    self.assertNotIn("demo", result)
    # The machine's speed that hour: the probe's CPU seconds, twice before the run and twice after.
    speed = result["speed_probe"]
    self.assertEqual(speed["code"], "pass")
    self.assertLen(speed["cpu_seconds_before"], 2)
    self.assertLen(speed["cpu_seconds_after"], 2)
    with open(os.path.join(self.results, "suite.json")) as f:
      self.assertEqual(json.load(f)["test"], test)
    with open(os.path.join(self.results, f"test_times_quiet_{self.commit}.json")) as f:
      self.assertEqual(set(json.load(f)), {"//a:slow_test", "//a:fast_test"})
    ran = _record(os.path.join(self.records, "test"))
    self.assertEqual(ran["version"], "committed")
    self.assertNotEqual(int(ran["sid"]), os.getsid(0))
    # bin/test's own default for the shared data, for the measured checkout rather than the clone.
    self.assertEqual(ran["shared"], os.path.join(os.path.dirname(self.repo), "shared", "data"))
    clone = os.path.join(self.work_dir, f"quiet_{self.commit}", "test")
    self.assertFalse(os.path.exists(clone))
    with open(os.path.join(self.records, "bazel")) as f:
      self.assertEqual(f.read().split(), [clone, "clean", "--expunge"])

  def test_beside_the_demo_each_runs_in_its_own_session_the_demo_first(self):
    result = self._run(beside_demo=True, keep=True)
    demo, test = _record(os.path.join(self.records, "demo")), _record(os.path.join(self.records, "test"))
    self.assertLen({int(demo["sid"]), int(test["sid"]), os.getsid(0)}, 3)
    self.assertLess(float(demo["start"]), float(test["start"]))
    self.assertGreaterEqual(result["demo_started_seconds_before_test"], 2.0)
    self.assertEqual(result["demo"]["exit_status"], 0)
    self.assertEqual(result["demo"]["total_seconds"], 436.0)
    self.assertEqual(result["demo"]["stage_seconds"], {"corpora": 7.0, "REALM": 308.0})
    self.assertEqual(result["test"]["passed"], 12)
    self.assertEqual(result["run"], "beside_demo")
    # --keep: both clones stay, with their output bases.
    for name in ("test", "demo"):
      self.assertTrue(os.path.isdir(os.path.join(self.work_dir, f"beside_demo_{self.commit}", name)))
    self.assertFalse(os.path.exists(os.path.join(self.records, "bazel")))

  def test_a_suite_that_did_not_finish_is_recorded_as_such(self):
    # No summary line and a failing status: the JSON says so instead of inventing a count.
    test_script = os.path.join(self.repo, "bin", "test")
    _executable(test_script, "#!/bin/bash\necho 'ERROR: build failed'\nexit 3\n")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-am", "b"],
                   cwd=self.repo,
                   check=True)
    result = self._run(beside_demo=False)
    self.assertEqual(result["test"]["exit_status"], 3)
    self.assertIn("bin/test did not finish", result["test"]["error"])
    self.assertIn("ERROR: build failed", result["test"]["error"])
    self.assertNotIn("passed", result["test"])

  def test_a_repo_that_is_not_a_git_checkout_is_refused_by_its_flag(self):
    plain = self.create_tempdir().full_path
    with self.assertRaisesRegex(ValueError, f"--repo={plain} has no commit to clone .*pass a git checkout"):
      suite_time_bench.run(plain, self.work_dir, False, 2.0, None, False)
    self.assertFalse(os.path.exists(self.work_dir))

  def test_the_speed_probe_counts_the_cpu_of_its_process(self):
    # About 0.5-1 s of CPU against an empty program's few hundredths: the probe times the code's own
    # work, not its wall time.
    busy = suite_time_bench.speed_probe("sum(i * i for i in range(10_000_000))", times=1)
    idle = suite_time_bench.speed_probe("import time; time.sleep(0.3)", times=1)
    self.assertLen(busy, 1)
    self.assertGreater(busy[0], 0.15)
    self.assertLess(idle[0], busy[0])
    self.assertLess(idle[0], 0.15)

  def test_parse_reads_the_last_summary_line(self):
    text = textwrap.dedent("""\
        [realm_tf setup] set-up (venv, Debian packages): 65 s
        [realm_tf setup] the tests' allocator: /usr/lib/x86_64-linux-gnu/libjemalloc.so.2
        INFO: Elapsed time: 554.741s, Critical Path: 105.39s
        959 passed, 0 failed, 1 skipped
        """)
    self.assertEqual(
        suite_time_bench.parse_test_log(text), {
            "setup_seconds": 65.0,
            "allocator": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
            "bazel_elapsed_seconds": 554.741,
            "passed": 959,
            "failed": 0,
            "skipped": 1
        })
    self.assertEqual(suite_time_bench.parse_test_log("3 passed, 2 failed\n")["failed"], 2)
    # A log from before bin/test printed its allocator: none recorded.
    self.assertIsNone(suite_time_bench.parse_test_log("3 passed, 2 failed\n")["allocator"])

  def test_cpu_use_splits_the_cores_time_between_two_readings(self):
    stat_path = os.path.join(self.create_tempdir().full_path, "stat")
    ticks = os.sysconf("SC_CLK_TCK")

    def reading(user, nice, system, idle, iowait, irq, softirq, steal):
      with open(stat_path, "w") as f:
        # Ticks, then the per-core lines, which cpu_times reads no further than the first line.
        values = [int(v * ticks) for v in (user, nice, system, idle, iowait, irq, softirq, steal)]
        f.write("cpu  " + " ".join(map(str, values)) + " 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
      return throughput_lib.cpu_times(stat_path)

    before = reading(100, 50, 20, 1000, 5, 1, 2, 0)
    # 60 s of user, 10 of system, 2 of interrupts at nice <= 0; 30 niced; 16 idle + 2 I/O wait.
    after = reading(160, 80, 30, 1016, 7, 2, 3, 0)
    use = throughput_lib.cpu_use(before, after)
    self.assertEqual(use["seconds"], {"busy": 72.0, "niced": 30.0, "idle": 18.0, "stolen": 0.0})
    self.assertEqual(use["shares"], {"busy": 0.6, "niced": 0.25, "idle": 0.15, "stolen": 0.0})
    self.assertEqual(throughput_lib.cpu_use({}, after), {})
    self.assertEqual(throughput_lib.cpu_times(stat_path + ".missing"), {})

  def test_paths_in_the_repository_are_recorded_relative_to_it(self):
    self.assertEqual(suite_time_bench._shown("/r/bench/results/x.json", "/r"), "bench/results/x.json")
    self.assertEqual(suite_time_bench._shown("/elsewhere/x.json", "/r"), "/elsewhere/x.json")


if __name__ == "__main__":
  absltest.main()
