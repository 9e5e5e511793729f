"""Sums the JUnit XML files of Bazel test targets into one line: "N passed, N failed".

Bazel reports targets; a user wants test cases. absltest writes one XML per target (to XML_OUTPUT_FILE),
with a <testcase> per test method and <failure>/<error> children for the ones that failed.
"""

import argparse
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
  # A target that crashed before any test ran leaves a suite-level error and no test cases.
  if passed + failed + skipped == 0:
    failed = 1
  return passed, failed, skipped


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--testlogs", required=True, help="output of `bazel info bazel-testlogs`")
  parser.add_argument("--targets", required=True, help="space-separated test labels")
  args = parser.parse_args()
  totals = [0, 0, 0]
  for label in args.targets.split():
    package, _, name = label.lstrip("/").partition(":")
    xml_path = os.path.join(args.testlogs, package, name, "test.xml")
    if not os.path.exists(xml_path):
      print(f"{label}: no test.xml (the target did not run or crashed)", file=sys.stderr)
      totals[1] += 1
      continue
    try:
      counts = count_cases(xml_path)
    except ElementTree.ParseError as e:
      print(f"{xml_path}: unreadable test XML ({e})", file=sys.stderr)
      counts = (0, 1, 0)
    if counts[1]:
      print(f"{label}: {counts[1]} failed", file=sys.stderr)
    totals = [t + c for t, c in zip(totals, counts)]
  passed, failed, skipped = totals
  print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
