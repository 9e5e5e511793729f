"""Tests of run_test_group: a group runs the test classes of exactly the files it lists, each once."""

import sys
import types
import unittest

from absl.testing import absltest

from realm_tf import run_test_group


class TestGroupTest(absltest.TestCase):

  def test_collect_takes_each_files_test_classes_once_under_unique_names(self):

    class Shared(unittest.TestCase):  # a base imported by two files: one run, as alone

      def test_a(self):
        pass

    class Own(unittest.TestCase):

      def test_b(self):
        pass

    first = types.ModuleType("pkg.first_test")
    first.Shared, first.Own, first.helper = Shared, Own, len
    second = types.ModuleType("pkg.second_test")
    second.Shared, second.Own = Shared, type("Own", (unittest.TestCase,), {"test_c": lambda self: None})
    namespace = {}
    self.assertEqual(run_test_group.collect([first, second], namespace), 3)
    self.assertCountEqual(namespace,
                          ["pkg_first_test__Shared", "pkg_first_test__Own", "pkg_second_test__Own"])
    self.assertIs(namespace["pkg_second_test__Own"], second.Own)

  def test_modules_are_the_listed_files(self):
    modules = run_test_group.import_test_files("realm_tf", ["run_test_group_test.py"])
    self.assertEqual([m.__name__ for m in modules], ["realm_tf.run_test_group_test"])
    with self.assertRaisesRegex(SystemExit, "'json_config.py' is not a \\*_test.py file of realm_tf"):
      run_test_group.import_test_files("realm_tf", ["json_config.py"])

  def test_usage_without_files(self):
    argv = sys.argv
    try:
      sys.argv = ["run_test_group.py", "realm_tf"]
      with self.assertRaisesRegex(SystemExit, "usage: run_test_group.py PACKAGE_DIR FILE_test.py"):
        run_test_group.main()
    finally:
      sys.argv = argv


if __name__ == "__main__":
  absltest.main()
