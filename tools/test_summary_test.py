"""Tests tools/test_summary.py on JUnit XML trees laid out as Bazel writes them."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_summary.py")
_CPU_TIME = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_time.sh")

_PASS = '<testcase name="test_a"/>'
_FAIL = '<testcase name="test_b"><failure message="boom"/></testcase>'
_SKIP = '<testcase name="test_c"><skipped/></testcase>'


def _write(path, cases):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(f'<testsuites><testsuite name="s">{"".join(cases)}</testsuite></testsuites>')


class TestSummaryTest(unittest.TestCase):

  def _run(self, testlogs, targets, *extra):
    result = subprocess.run(
        [sys.executable, _SCRIPT, f"--testlogs={testlogs}", f"--targets={targets}", *extra],
        capture_output=True,
        text=True,
        check=False)
    return result.returncode, result.stdout.strip(), result.stderr

  def _run_with_times(self, logs, results):
    """Runs the summary over //pkg:a_test and //pkg:b_test with build events holding one testResult per
    (label, shard, milliseconds[, start epoch milliseconds]) of results; returns its exit code, stdout,
    stderr and times JSON."""
    events = os.path.join(logs, "events.json")
    with open(events, "w") as f:
      for label, shard, millis, *start in results:
        attempt = {"status": "PASSED", "testAttemptDurationMillis": str(millis)}
        if start:  # epoch milliseconds of the attempt's start
          attempt["testAttemptStartMillisEpoch"] = str(start[0])
        f.write(
            json.dumps({
                "id": {
                    "testResult": {
                        "label": label,
                        "shard": shard,
                        "run": 1,
                        "attempt": 1
                    }
                },
                "testResult": attempt
            }) + "\n")
      f.write(json.dumps({"id": {"progress": {}}, "progress": {}}) + "\n")
    times_path = os.path.join(logs, "times.json")
    rc, out, err = self._run(logs, "//pkg:a_test //pkg:b_test", f"--build_events={events}",
                             f"--times_output={times_path}")
    with open(times_path) as f:
      return rc, out, err, json.load(f)

  def test_tf_test_sessions_are_not_counted_as_skipped(self):
    with tempfile.TemporaryDirectory() as logs:
      session = '<testcase name="test_session"><skipped message="Not a test."/></testcase>'
      _write(os.path.join(logs, "pkg", "tf_test", "test.xml"), [_PASS, session, _SKIP])
      rc, out, err = self._run(logs, "//pkg:tf_test")
    self.assertEqual((rc, out), (0, "1 passed, 0 failed, 1 skipped"), err)

  def test_target_times_from_build_events(self):
    with tempfile.TemporaryDirectory() as logs:
      _write(os.path.join(logs, "pkg", "a_test", "test.xml"), [_PASS])
      for shard in (1, 2):
        _write(os.path.join(logs, "pkg", "b_test", f"shard_{shard}_of_2", "test.xml"), [_PASS])
      # a_test starts first, b_test's first shard 1.5 s later, its second after that: the earlier counts.
      rc, out, err, times = self._run_with_times(logs, (("//pkg:a_test", 1, 2500, 1795950000000),
                                                        ("//pkg:b_test", 1, 4000, 1795950001500),
                                                        ("//pkg:b_test", 2, 6000, 1795950004000)))
    self.assertEqual(rc, 0, err)
    lines = out.splitlines()
    self.assertEqual(lines[-1], "3 passed, 0 failed")
    self.assertIn("add up to 12 s; the slowest: //pkg:b_test 10 s, //pkg:a_test 2 s", lines[0])
    self.assertEqual(list(times), ["//pkg:b_test", "//pkg:a_test"])
    self.assertEqual(
        times["//pkg:b_test"], {
            "seconds": 10.0,
            "slowest_shard": 6.0,
            "shards": 2,
            "cached": False,
            "started_seconds": 1.5,
            "cpu_seconds": None
        })
    self.assertEqual(times["//pkg:a_test"]["started_seconds"], 0.0)

  def test_cpu_seconds_from_the_logs_of_tools_cpu_time(self):
    with tempfile.TemporaryDirectory() as logs:
      _write(os.path.join(logs, "pkg", "a_test", "test.xml"), [_PASS])
      for shard in (1, 2):
        _write(os.path.join(logs, "pkg", "b_test", f"shard_{shard}_of_2", "test.xml"), [_PASS])
      # Written by tools/cpu_time.sh itself, around a command that reports its own CPU seconds: the line
      # the wrapper writes is the line test_summary reads, and it counts the command's CPU (a `times`
      # run in a subshell would count none).
      log_a = os.path.join(logs, "pkg", "a_test", "test.log")
      with open(log_a, "w") as f:
        subprocess.run([
            _CPU_TIME, sys.executable, "-c", "import resource; sum(range(10000000)); "
            "r = resource.getrusage(resource.RUSAGE_SELF); print(f'own {r.ru_utime + r.ru_stime:.3f}')"
        ],
                       stdout=f,
                       check=True)
      with open(log_a) as f:
        own = float(next(line for line in f if line.startswith("own ")).split()[1])
      for shard, cpu in ((1, "1.25"), (2, "2.50")):
        with open(os.path.join(logs, "pkg", "b_test", f"shard_{shard}_of_2", "test.log"), "w") as f:
          # An earlier attempt's line above the last one: the last counts.
          f.write(f"realm_tf cpu_seconds: 99\nlog\nrealm_tf cpu_seconds: {cpu}\n")
      rc, out, err, times = self._run_with_times(logs, (("//pkg:a_test", 1, 5000), ("//pkg:b_test", 1, 5000),
                                                        ("//pkg:b_test", 2, 5000)))
    self.assertEqual(rc, 0, err)
    self.assertEqual(times["//pkg:b_test"]["cpu_seconds"], 3.8)  # 1.25 + 2.50, rounded to 0.1
    # Rounded to 0.01 by the wrapper and 0.1 by the summary.
    self.assertGreaterEqual(times["//pkg:a_test"]["cpu_seconds"], own - 0.06)
    self.assertIn("of CPU in the 2 that report it", out.splitlines()[0])

  def test_bazel_phases_from_build_events(self):
    with tempfile.TemporaryDirectory() as logs:
      _write(os.path.join(logs, "pkg", "a_test", "test.xml"), [_PASS])
      events = os.path.join(logs, "events.json")
      with open(events, "w") as f:
        f.write(json.dumps({"id": {"started": {}}, "started": {"startTimeMillis": "1000000"}}) + "\n")
        # A cached result's attempt started in an earlier run: it does not move the first test.
        for start, cached in ((1030000, False), (900000, True), (1045000, False)):
          f.write(
              json.dumps({
                  "id": {
                      "testResult": {
                          "label": "//pkg:a_test",
                          "shard": 1
                      }
                  },
                  "testResult": {
                      "testAttemptStartMillisEpoch": str(start),
                      "testAttemptDurationMillis": "1000",
                      "cachedLocally": cached
                  }
              }) + "\n")
        f.write(json.dumps({"id": {"buildFinished": {}}, "finished": {"finishTimeMillis": "1100000"}}) + "\n")
      rc, out, err = self._run(logs, "//pkg:a_test", f"--build_events={events}")
    self.assertEqual(rc, 0, err)
    self.assertIn("Bazel: 30 s before the first test (start, analysis, build), 70 s from there to the end",
                  out.splitlines())

  def test_single_and_sharded_targets_are_summed(self):
    with tempfile.TemporaryDirectory() as logs:
      _write(os.path.join(logs, "pkg", "plain_test", "test.xml"), [_PASS, _SKIP])
      _write(os.path.join(logs, "pkg", "sharded_test", "shard_1_of_3", "test.xml"), [_PASS])
      _write(os.path.join(logs, "pkg", "sharded_test", "shard_2_of_3", "test.xml"), [_PASS, _PASS])
      # absltest may hand a shard no cases at all: not a crash while the target ran some.
      _write(os.path.join(logs, "pkg", "sharded_test", "shard_3_of_3", "test.xml"), [])
      rc, out, err = self._run(logs, "//pkg:plain_test //pkg:sharded_test")
    self.assertEqual(rc, 0, err)
    self.assertEqual(out, "4 passed, 0 failed, 1 skipped")

  def test_the_newer_of_a_stale_test_xml_and_shard_xmls_counts(self):
    with tempfile.TemporaryDirectory() as logs:
      target = os.path.join(logs, "pkg", "resharded_test")
      # An earlier unsharded run that timed out left an empty test.xml; this run's shards passed.
      os.makedirs(target)
      with open(os.path.join(target, "test.xml"), "w"):
        pass
      os.utime(os.path.join(target, "test.xml"), (1000, 1000))
      _write(os.path.join(target, "shard_1_of_2", "test.xml"), [_PASS])
      _write(os.path.join(target, "shard_2_of_2", "test.xml"), [_PASS])
      rc, out, err = self._run(logs, "//pkg:resharded_test")
      self.assertEqual((rc, out), (0, "2 passed, 0 failed"), err)
      # And the other way round: sharding removed since, the old shards' XML is older.
      _write(os.path.join(target, "test.xml"), [_FAIL])
      for shard in ("shard_1_of_2", "shard_2_of_2"):
        os.utime(os.path.join(target, shard, "test.xml"), (1000, 1000))
      rc, out, _ = self._run(logs, "//pkg:resharded_test")
      self.assertEqual((rc, out), (1, "0 passed, 1 failed"))

  def test_a_failing_shard_fails_the_run(self):
    with tempfile.TemporaryDirectory() as logs:
      _write(os.path.join(logs, "pkg", "sharded_test", "shard_1_of_2", "test.xml"), [_PASS])
      _write(os.path.join(logs, "pkg", "sharded_test", "shard_2_of_2", "test.xml"), [_FAIL])
      rc, out, err = self._run(logs, "//pkg:sharded_test")
    self.assertEqual(rc, 1)
    self.assertEqual(out, "1 passed, 1 failed")
    self.assertIn("//pkg:sharded_test: 1 failed", err)

  def test_missing_or_empty_xml_counts_as_a_failure(self):
    with tempfile.TemporaryDirectory() as logs:
      _write(os.path.join(logs, "pkg", "empty_test", "test.xml"), [])
      rc, out, err = self._run(logs, "//pkg:empty_test //pkg:absent_test")
    self.assertEqual(rc, 1)
    self.assertEqual(out, "0 passed, 2 failed")
    self.assertIn("//pkg:absent_test: no test.xml", err)


if __name__ == "__main__":
  unittest.main()
