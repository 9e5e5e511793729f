"""Checks that every Python file of the project is a Bazel target, so `bazel test //...` misses nothing.

Each BUILD file is evaluated as Python (Starlark's BUILD subset is valid Python) with the rule functions
recording their arguments. Then: every *_test.py is the source of a py_test, every bin/*.py the source of
a py_binary (or of a py_library beside them), and every other .py file
under realm_tf/, bin/, tools/ and bench/ is in some target's srcs.
"""

import collections
import glob as globlib
import os

from absl.testing import absltest

_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_PY_DIRS = ("realm_tf", "bin", "tools", "bench")


def _targets_of(build_path):
  """Returns {rule_kind: [srcs of each rule]} for one BUILD file."""
  package_dir = os.path.dirname(build_path)
  rules = collections.defaultdict(list)

  def rule(kind):

    def record(**kwargs):
      rules[kind].append(list(kwargs.get("srcs", [])))

    return record

  def glob(patterns, exclude=()):
    found = set()
    for pattern in patterns:
      found |= {os.path.relpath(p, package_dir) for p in globlib.glob(os.path.join(package_dir, pattern))}
    return sorted(found - set(exclude))

  namespace = {
      kind: rule(kind) for kind in ("py_library", "py_binary", "py_test", "filegroup", "sh_binary", "sh_test")
  }

  def py_test_group(**kwargs):  # realm_tf/test_group.bzl's macro: a py_test of the listed files
    rules["py_test"].append(list(kwargs.get("tests", [])))

  namespace.update(glob=glob,
                   package=lambda **_: None,
                   exports_files=lambda *_, **__: None,
                   load=lambda *_, **__: None,
                   py_test_group=py_test_group)
  with open(build_path) as f:
    exec(compile(f.read(), build_path, "exec"), namespace)  # pylint: disable=exec-used
  return rules


class BuildCoverageTest(absltest.TestCase):

  def test_every_python_file_is_a_target(self):
    problems = []
    checked = 0
    for top in _PY_DIRS:
      for directory, _, files in os.walk(os.path.join(_ROOT, top)):
        py_files = sorted(f for f in files if f.endswith(".py") and f != "__init__.py")
        if not py_files:
          continue
        build = os.path.join(directory, "BUILD")
        rel_dir = os.path.relpath(directory, _ROOT)
        if not os.path.exists(build):
          problems.append(f"{rel_dir}/ has Python files but no BUILD file")
          continue
        rules = _targets_of(build)
        srcs = {kind: {s for srcs in lists for s in srcs} for kind, lists in rules.items()}
        all_srcs = set().union(*srcs.values()) if srcs else set()
        for name in py_files:
          checked += 1
          if name.endswith("_test.py"):
            if name not in srcs.get("py_test", set()):
              problems.append(f"{rel_dir}/{name} is not the source of a py_test")
          elif top == "bin" and directory == os.path.join(_ROOT, "bin"):
            # A binary, or a library beside the binaries.
            if name not in srcs.get("py_binary", set()) | srcs.get("py_library", set()):
              problems.append(f"{rel_dir}/{name} is not the source of a py_binary (or py_library)")
          elif name not in all_srcs:
            problems.append(f"{rel_dir}/{name} is in no BUILD target")
    self.assertGreater(checked, 5, "found too few Python files; is the repo root right?")
    self.assertEqual(problems, [], "\n".join(problems))

  def test_rule_sources_exist(self):
    missing = []
    builds = [os.path.join(_ROOT, "BUILD")]
    for top in _PY_DIRS + ("testdata",):
      builds += [
          os.path.join(d, "BUILD") for d, _, files in os.walk(os.path.join(_ROOT, top)) if "BUILD" in files
      ]
    for build in builds:
      for kind, lists in _targets_of(build).items():
        for src in (s for srcs in lists for s in srcs if not s.startswith(("//", ":"))):
          if not os.path.exists(os.path.join(os.path.dirname(build), src)):
            missing.append(f"{os.path.relpath(build, _ROOT)}: {kind} source {src} does not exist")
    self.assertEqual(missing, [], "\n".join(missing))


if __name__ == "__main__":
  absltest.main()
