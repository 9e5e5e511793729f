"""Tests for realm_tf.process_start: the collector paused through a program's imports, frozen and resumed
by app.run, and never paused by a module loaded under another name."""

import gc
import json
import os
import subprocess
import sys
import textwrap

from absl.testing import absltest

from realm_tf import process_start

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A program as bin/'s are written: the pause first, imports, app.run(main). It prints the collector's
# state after its imports and in main. json and decimal stand in for TensorFlow (no need to wait for it).
_PROGRAM = textwrap.dedent("""\
    from realm_tf import process_start

    paused = process_start.pause_collector(__name__)

    import gc
    import decimal
    import json

    from absl import app

    after_imports = (gc.isenabled(), gc.get_freeze_count())


    def main(argv):
      del argv
      print(json.dumps(dict(paused=paused, enabled_after_imports=after_imports[0],
                            frozen_after_imports=after_imports[1], enabled_in_main=gc.isenabled(),
                            frozen_in_main=gc.get_freeze_count())))


    if __name__ == "__main__":
      app.run(main)
    """)


class ProcessStartTest(absltest.TestCase):

  def test_a_program_imports_paused_and_runs_main_with_its_imports_frozen(self):
    path = os.path.join(self.create_tempdir().full_path, "program.py")
    with open(path, "w") as f:
      f.write(_PROGRAM)
    env = dict(os.environ, PYTHONPATH=_REPO)
    result = subprocess.run([sys.executable, path], capture_output=True, text=True, env=env, check=False)
    self.assertEqual(result.returncode, 0, result.stderr)
    state = json.loads(result.stdout.strip().splitlines()[-1])
    self.assertTrue(state["paused"], state)
    self.assertFalse(state["enabled_after_imports"], state)
    self.assertEqual(state["frozen_after_imports"], 0, state)
    self.assertTrue(state["enabled_in_main"], state)
    # absl and the interpreter's own modules: thousands of objects, all frozen before main.
    self.assertGreater(state["frozen_in_main"], 1000, state)

  def test_a_module_loaded_under_another_name_pauses_nothing(self):
    self.assertTrue(gc.isenabled())
    self.assertFalse(process_start.pause_collector("_in_process_train_realm"))
    self.assertTrue(gc.isenabled())


if __name__ == "__main__":
  absltest.main()
