"""Sums the JUnit XML files of Bazel test targets into one line: "N passed, N failed".

Bazel reports targets; a user wants test cases. absltest writes one XML per target (to XML_OUTPUT_FILE),
with a <testcase> per test method and <failure>/<error> children for the ones that failed. A target with
shard_count = N writes one XML per shard instead, under shard_K_of_N/test.xml.

With --build_events (Bazel's --build_event_json_file), it also reports each target's time as Bazel
measured it (the test process's whole life, TensorFlow's import included): the slowest few on stdout,
and every target in --times_output (JSON), which is how docs/testing.md's table is made. Where the test
ran under tools/cpu_time.sh (bin/test's --run_under), each target's CPU seconds come from its log too.
"""

import argparse
import collections
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ElementTree

# tf.test.TestCase inherits a deprecated `test_session` context manager that unittest collects as a
# test and skips ("Not a test."): one per TestCase class. It checks nothing of ours, so it is not
# counted as a skipped test.
_NOT_A_TEST = "test_session"

# The last line tools/cpu_time.sh writes into a test's log.
_CPU_LINE = re.compile(r"^realm_tf cpu_seconds: ([0-9.]+)$", re.MULTILINE)


def count_cases(xml_path):
  """Returns (passed, failed, skipped) for one JUnit XML file."""
  passed = failed = skipped = 0
  root = ElementTree.parse(xml_path).getroot()
  for case in root.iter("testcase"):
    if case.find("failure") is not None or case.find("error") is not None:
      failed += 1
    elif case.find("skipped") is not None or case.get("result") == "suppressed":
      if case.get("name") != _NOT_A_TEST:
        skipped += 1
    else:
      passed += 1
  return passed, failed, skipped


def target_files(testlogs, label, file_name="test.xml"):
  """The files of a name (test.xml, test.log) a test target wrote: its own, or one per shard when it is
  sharded.

  Bazel never deletes the other kind: a target sharded since an earlier run (in the same output base)
  still has that run's test.xml beside its shard directories, and one unsharded since still has shard
  directories. The newer of the two is this run's.
  """
  package, _, name = label.lstrip("/").partition(":")
  target_dir = os.path.join(testlogs, package, name)
  single = [p for p in [os.path.join(target_dir, file_name)] if os.path.exists(p)]
  shards = sorted(glob.glob(os.path.join(target_dir, "shard_*_of_*", file_name)))
  if single and shards:
    newest = lambda paths: max(os.path.getmtime(p) for p in paths)
    return shards if newest(shards) > newest(single) else single
  return single or shards


def count_target(testlogs, label):
  """Returns (passed, failed, skipped) over all of a target's XML files, printing why it failed."""
  paths = target_files(testlogs, label)
  if not paths:
    print(f"{label}: no test.xml (the target did not run or crashed)", file=sys.stderr)
    return 0, 1, 0
  totals = [0, 0, 0]
  for xml_path in paths:
    try:
      counts = count_cases(xml_path)
    except ElementTree.ParseError as e:
      print(f"{xml_path}: unreadable test XML ({e})", file=sys.stderr)
      counts = (0, 1, 0)
    totals = [t + c for t, c in zip(totals, counts)]
  # A target that crashed before any test ran leaves a suite-level error and no test cases. (One shard
  # of a sharded target may legitimately hold no cases, so the check is over the whole target.)
  if sum(totals) == 0:
    totals[1] = 1
  if totals[1]:
    print(f"{label}: {totals[1]} failed", file=sys.stderr)
  return tuple(totals)


def target_cpu_seconds(testlogs, label):
  """The CPU seconds tools/cpu_time.sh wrote into the target's logs, summed over its shards; None when a
  log has none (the test ran without it, or was killed before it could write)."""
  total = 0.0
  paths = target_files(testlogs, label, "test.log")
  for path in paths:
    with open(path, errors="replace") as f:
      found = _CPU_LINE.findall(f.read())
    if not found:
      return None
    total += float(found[-1])
  return round(total, 1) if paths else None


def target_times(build_events_path):
  """{label: {"seconds": sum over shards, "slowest_shard": seconds, "shards": n, "cached": bool,
  "started_seconds": when its first shard started, seconds after the run's first test started}}.

  Read from the testResult events of Bazel's build event protocol (one JSON object a line). A cached
  result carries the time of the run that produced it, so it is flagged, and has no start in this run.
  The starts show which targets ran last, and how few ran at once then.
  """
  shards = collections.defaultdict(dict)
  cached = collections.defaultdict(bool)
  starts = {}
  with open(build_events_path) as f:
    for line in f:
      event = json.loads(line)
      test_id = event.get("id", {}).get("testResult")
      result = event.get("testResult")
      if not test_id or not result:
        continue
      label = test_id["label"]
      seconds = int(result.get("testAttemptDurationMillis", 0)) / 1000
      # The last attempt of a shard counts (a flaky retry replaces the first).
      shards[label][test_id.get("shard", 1)] = seconds
      cached[label] |= bool(result.get("cachedLocally")) or bool(
          result.get("executionInfo", {}).get("cachedRemotely"))
      if "testAttemptStartMillisEpoch" in result:
        start = int(result["testAttemptStartMillisEpoch"]) / 1000
        starts[label] = min(start, starts.get(label, start))
  first = min((start for label, start in starts.items() if not cached[label]), default=None)

  def started(label):
    # A cached result ran in an earlier run; any other start counts in `first`, so `first` is set here.
    return round(starts[label] - first, 1) if label in starts and not cached[label] else None

  return {
      label: {
          "seconds": round(sum(times.values()), 1),
          "slowest_shard": round(max(times.values()), 1),
          "shards": len(times),
          "cached": cached[label],
          "started_seconds": started(label)
      } for label, times in shards.items()
  }


def bazel_phases(build_events_path):
  """(seconds from Bazel's start to its first test, seconds from there to the end), or None.

  The first part is what a fresh clone pays before testing (server start, loading and analysis of the
  workspace and its external repositories, building); from the started, testResult and finished events.
  """
  start = finish = None
  first_test = None
  with open(build_events_path) as f:
    for line in f:
      event = json.loads(line)
      if "started" in event:
        start = int(event["started"].get("startTimeMillis", 0)) or None
      elif "finished" in event:
        finish = int(event["finished"].get("finishTimeMillis", 0)) or None
      elif "testResult" in event and not event["testResult"].get("cachedLocally"):
        attempt = int(event["testResult"].get("testAttemptStartMillisEpoch", 0))
        if attempt:
          first_test = attempt if first_test is None else min(first_test, attempt)
  if start is None or finish is None or first_test is None:
    return None
  return (first_test - start) / 1000, (finish - first_test) / 1000


def time_sums(times):
  """Sums over every target's time (target_times, with cpu_seconds where the log has them): what the
  summary prints and bench/suite_time_bench.py records."""
  cpu = [t["cpu_seconds"] for t in times.values() if t.get("cpu_seconds") is not None]
  slowest = max(times, key=lambda label: times[label]["seconds"]) if times else None
  return {
      "targets": len(times),
      "targets_seconds": round(sum(t["seconds"] for t in times.values()), 1),
      "targets_cpu_seconds": round(sum(cpu), 1),
      "targets_with_cpu": len(cpu),
      "slowest_target": slowest,
      "slowest_target_seconds": times[slowest]["seconds"] if slowest else None,
  }


def report_times(times, output_path, slowest=5):
  if output_path:
    # A build that failed before any test ran leaves no testlogs directory.
    os.makedirs(os.path.dirname(output_path) or ".", exist_ok=True)
    with open(output_path + ".tmp", "w") as f:
      json.dump(dict(sorted(times.items(), key=lambda item: -item[1]["seconds"])), f, indent=1)
    os.replace(output_path + ".tmp", output_path)
  ranked = sorted(times.items(), key=lambda item: -item[1]["seconds"])[:slowest]
  sums = time_sums(times)
  cpu_note = (
      f" ({sums['targets_cpu_seconds']:.0f} s of CPU in the {sums['targets_with_cpu']} that report it)"
      if sums["targets_with_cpu"] else "")
  print(f"targets' own times add up to {sums['targets_seconds']:.0f} s{cpu_note}; the slowest: " +
        ", ".join(f"{label} {t['seconds']:.0f} s" for label, t in ranked))


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--testlogs", required=True, help="output of `bazel info bazel-testlogs`")
  parser.add_argument("--targets", required=True, help="space-separated test labels")
  parser.add_argument("--build_events", help="Bazel's --build_event_json_file of the run")
  parser.add_argument("--times_output", help="where to write every target's time (JSON)")
  args = parser.parse_args()
  totals = [0, 0, 0]
  for label in args.targets.split():
    counts = count_target(args.testlogs, label)
    totals = [t + c for t, c in zip(totals, counts)]
  if args.build_events and os.path.exists(args.build_events):
    times = target_times(args.build_events)
    for label, entry in times.items():
      entry["cpu_seconds"] = target_cpu_seconds(args.testlogs, label)
    report_times(times, args.times_output)
    phases = bazel_phases(args.build_events)
    if phases:
      print(f"Bazel: {phases[0]:.0f} s before the first test (start, analysis, build), "
            f"{phases[1]:.0f} s from there to the end")
  passed, failed, skipped = totals
  print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
