"""Turns the per-target times of `bin/test` runs into one Markdown table (docs/testing.md's).

Each run is given as NAME=PATH, where PATH is either the test_times.json that bin/test writes into
bazel-testlogs, or the console log of a `bazel test` run (its summary lines, "//pkg:t  PASSED in 12.3s",
for runs made before bin/test wrote times). Targets are sorted by the first run's time, slowest first.
With --cpu, each test_times.json run that has them adds a column of its targets' CPU seconds (the test
and the processes it started; tools/cpu_time.sh) beside its wall times.

  tools/test_times_table.py before=/tmp/before.log after=/tmp/after/test_times.json
  tools/test_times_table.py --cpu quiet=bench/results/test_times_quiet_X.json
"""

import argparse
import json
import re
import sys

_SUMMARY_LINE = re.compile(r"^(//\S+)\s+(PASSED|FAILED|TIMEOUT|FLAKY)(?: in (?:\d+ out of \d+ in )?"
                           r"([\d.]+)s)?")


def read_times(path, field="seconds"):
  """{label: (seconds, status)} from a test_times.json (its wall "seconds" or its "cpu_seconds", where
  a target has them) or a bazel console log (wall seconds only)."""
  with open(path) as f:
    text = f.read()
  if path.endswith(".json"):
    return {label: (t[field], "PASSED") for label, t in json.loads(text).items() if t.get(field) is not None}
  if field != "seconds":
    return {}
  times = {}
  for line in text.splitlines():
    match = _SUMMARY_LINE.match(line.strip())
    if match and match.group(3):
      times[match.group(1)] = (float(match.group(3)), match.group(2))
  return times


def table(runs):
  names = [name for name, _ in runs]
  order = sorted({label for _, times in runs for label in times},
                 key=lambda label: -runs[0][1].get(label, (0, ""))[0])
  lines = ["| target | " + " | ".join(f"{n} (s)" for n in names) + " |", "|---|" + "---:|" * len(names)]
  for label in order:
    cells = []
    for _, times in runs:
      seconds, status = times.get(label, (None, ""))
      cell = "-" if seconds is None else f"{seconds:.1f}"
      cells.append(cell if status in ("PASSED", "") else f"{cell} {status}")
    lines.append(f"| `{label}` | " + " | ".join(cells) + " |")
  lines.append("| **sum** | " +
               " | ".join(f"**{sum(s for s, _ in times.values()):.0f}**" for _, times in runs) + " |")
  lines.append("| targets | " + " | ".join(str(len(times)) for _, times in runs) + " |")
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("runs", nargs="+", help="NAME=PATH")
  parser.add_argument("--cpu", action="store_true", help="a CPU seconds column beside each run that has them")
  args = parser.parse_args()
  runs = []
  for run in args.runs:
    name, sep, path = run.partition("=")
    if not sep:
      parser.error(f"{run!r}: expected NAME=PATH")
    runs.append((name, read_times(path)))
    cpu = read_times(path, "cpu_seconds") if args.cpu else {}
    if cpu:
      runs.append((f"{name} CPU", cpu))
  print(table(runs))
  return 0


if __name__ == "__main__":
  sys.exit(main())
