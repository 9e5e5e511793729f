"""Tests tools/test_times_table.py on a bazel console log and a bin/test times file."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_times_table  # pylint: disable=g-import-not-at-top


class TestTimesTableTest(unittest.TestCase):

  def test_log_and_json_runs_side_by_side(self):
    with tempfile.TemporaryDirectory() as tmp:
      log = os.path.join(tmp, "before.log")
      with open(log, "w") as f:
        f.write("INFO: Elapsed time: 1845.2s\n"
                "//bin:slow_test                PASSED in 438.0s\n"
                "//bin:sharded_test             PASSED in 5 out of 5 in 60.5s\n"
                "//realm_tf:fast_test           TIMEOUT in 60.1s\n"
                "//realm_tf:never_ran_test      NO STATUS\n")
      times = os.path.join(tmp, "test_times.json")
      with open(times, "w") as f:
        json.dump(
            {
                "//bin:slow_test": {
                    "seconds": 40.5
                },
                "//realm_tf:fast_test": {
                    "seconds": 9.0
                },
                "//bin:new_test": {
                    "seconds": 3.0
                }
            }, f)
      runs = [("before", test_times_table.read_times(log)), ("after", test_times_table.read_times(times))]
    lines = test_times_table.table(runs).splitlines()
    self.assertEqual(lines[0], "| target | before (s) | after (s) |")
    self.assertEqual(lines[2], "| `//bin:slow_test` | 438.0 | 40.5 |")
    self.assertEqual(lines[3], "| `//bin:sharded_test` | 60.5 | - |")
    self.assertEqual(lines[4], "| `//realm_tf:fast_test` | 60.1 TIMEOUT | 9.0 |")
    self.assertEqual(lines[5], "| `//bin:new_test` | - | 3.0 |")
    self.assertEqual(lines[-2], "| **sum** | **559** | **52** |")
    self.assertEqual(lines[-1], "| targets | 3 | 3 |")

  def test_cpu_seconds_column(self):
    with tempfile.TemporaryDirectory() as tmp:
      times = os.path.join(tmp, "test_times.json")
      with open(times, "w") as f:
        json.dump(
            {
                "//bin:slow_test": {
                    "seconds": 40.5,
                    "cpu_seconds": 30.2
                },
                # Ran without tools/cpu_time.sh: no CPU cell.
                "//bin:other_test": {
                    "seconds": 3.0,
                    "cpu_seconds": None
                }
            },
            f)
      runs = [("run", test_times_table.read_times(times)),
              ("run CPU", test_times_table.read_times(times, "cpu_seconds"))]
    lines = test_times_table.table(runs).splitlines()
    self.assertEqual(lines[0], "| target | run (s) | run CPU (s) |")
    self.assertEqual(lines[2], "| `//bin:slow_test` | 40.5 | 30.2 |")
    self.assertEqual(lines[3], "| `//bin:other_test` | 3.0 | - |")
    self.assertEqual(lines[-1], "| targets | 2 | 1 |")


if __name__ == "__main__":
  unittest.main()
