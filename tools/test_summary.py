"""Sums the JUnit XML files of Bazel test targets into one line: "N passed, N failed".

Bazel reports targets; a user wants test cases. absltest writes one XML per target (to XML_OUTPUT_FILE),
with a <testcase> per test method and <failure>/<error> children for the ones that failed. A target with
shard_count = N writes one XML per shard instead, under shard_K_of_N/test.xml.
"""

import argparse
import glob
import os
import sys
import xml.etree.ElementTree as ElementTree


def count_cases(xml_path):
  """Returns (passed, failed, skipped) for one JUnit XML file."""
  passed = failed = skipped = 0
  root = ElementTree.parse(xml_path).getroot()
  for case in root.iter("testcase"):
    if case.find("failure") is not None or case.find("error") is not None:
      failed += 1
    elif case.find("skipped") is not None or case.get("result") == "suppressed":
      skipped += 1
    else:
      passed += 1
  return passed, failed, skipped


def target_xml_paths(testlogs, label):
  """The XML files a test target wrote: its test.xml, or one per shard when it is sharded.

  Bazel never deletes the other kind: a target sharded since an earlier run (in the same output base)
  still has that run's test.xml beside its shard directories, and one unsharded since still has shard
  directories. The newer of the two is this run's.
  """
  package, _, name = label.lstrip("/").partition(":")
  target_dir = os.path.join(testlogs, package, name)
  single = [p for p in [os.path.join(target_dir, "test.xml")] if os.path.exists(p)]
  shards = sorted(glob.glob(os.path.join(target_dir, "shard_*_of_*", "test.xml")))
  if single and shards:
    newest = lambda paths: max(os.path.getmtime(p) for p in paths)
    return shards if newest(shards) > newest(single) else single
  return single or shards


def count_target(testlogs, label):
  """Returns (passed, failed, skipped) over all of a target's XML files, printing why it failed."""
  paths = target_xml_paths(testlogs, label)
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


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--testlogs", required=True, help="output of `bazel info bazel-testlogs`")
  parser.add_argument("--targets", required=True, help="space-separated test labels")
  args = parser.parse_args()
  totals = [0, 0, 0]
  for label in args.targets.split():
    counts = count_target(args.testlogs, label)
    totals = [t + c for t, c in zip(totals, counts)]
  passed, failed, skipped = totals
  print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
