"""Runs several test files of one package in one process: a Bazel test group.

Importing TensorFlow takes about 3.5 s of CPU, more than many of the project's test files need for their
tests; `bazel test //...` on 2 cores spent about a fifth of its time on it. A package's quick files are
therefore also grouped into one py_test (realm_tf/test_group.bzl's py_test_group, e.g.
//realm_tf/data:medium_tests) whose main is this file, while each file stays a target of its own, tagged
manual, for a focused `bazel test //pkg:x_test`.

Usage (the py_test's args, which the macro writes): run_test_group.py PACKAGE_DIR FILE... Each file's test classes run as they do alone: tf.test.TestCase reseeds every
test, and no grouped file changes a process-wide setting it does not restore, except the logical CPU
split: a file that makes it is grouped only with files that make the same split
(//realm_tf/training:two_cpu_tests).
"""

import importlib
import sys
import unittest

from realm_tf import process_start


def import_test_files(package_dir: str, files):
  """Imports package_dir's test files (names relative to it) as modules, in the order given."""
  package = package_dir.strip("/").replace("/", ".")
  modules = []
  for name in files:
    if not name.endswith("_test.py") or "/" in name:
      raise SystemExit(f"run_test_group: {name!r} is not a *_test.py file of {package_dir}; list the "
                       "package's test files after its path")
    modules.append(importlib.import_module(f"{package}.{name[:-len('.py')]}"))
  return modules


def collect(modules, namespace: dict) -> int:
  """Puts every TestCase class each module's namespace holds (what its own main would run) into
  namespace under a name unique to its module; returns how many."""
  seen = set()
  for module in modules:
    for attr, value in vars(module).items():
      if isinstance(value, type) and issubclass(value, unittest.TestCase) and id(value) not in seen:
        seen.add(id(value))
        namespace[f"{module.__name__.replace('.', '_')}__{attr}"] = value
  return len(seen)


def main():
  args = sys.argv[1:]
  files = [a for a in args[1:] if not a.startswith("-")]
  if not args or args[0].startswith("-") or not files:
    raise SystemExit("usage: run_test_group.py PACKAGE_DIR FILE_test.py... [test runner flags]")
  sys.argv[1:] = [a for a in args[1:] if a.startswith("-")]
  # The imports (TensorFlow's objects, a million or so) with the collector paused; tf.test.main's app.run
  # freezes them and resumes it (realm_tf/process_start.py). They live as long as the process, and a full
  # collection no longer walks them: realm_tf/tasks:medium_tests alone, full collections 3.4 -> 1.6 s of
  # CPU with the freeze alone, the target 47.7 -> 45.9 s. What the tests make is still collected.
  process_start.pause_collector(__name__)
  collect(import_test_files(args[0], files), sys.modules["__main__"].__dict__)
  # Imported here: run_test_group_test imports this module without TensorFlow.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  tf.test.main()


if __name__ == "__main__":
  main()
