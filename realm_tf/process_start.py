"""A program's start with Python's garbage collector paused while it imports TensorFlow.

Importing TensorFlow makes about a million objects and no garbage worth collecting, yet the collector
walks them again and again as they pile up: `import tensorflow` cost 3.1-3.4 s of CPU with it on and
2.4-2.7 s with it off (AMD EPYC, three runs each), a fifth of every bin/ program's start. Those objects
live as long as the process, so at the end of the imports they are frozen (gc.freeze): later full
collections skip them and see only what the program itself makes.

Each bin/ program calls pause_collector(__name__) before its other imports; absl's app.run resumes the
collector once it has parsed the flags, before main (app.call_after_init). A module loaded under another
name (a test importing a program, realm_tf.testing.in_process) pauses nothing, so no process is left with
the collector off. realm_tf/run_test_group.py pauses and resumes around the test files it imports.
"""

import gc

from absl import app


def resume_collector() -> None:
  """Freezes what exists now (the imports' objects) and turns the collector back on."""
  gc.freeze()
  gc.enable()


def pause_collector(module_name: str) -> bool:
  """Pauses the collector until app.run has parsed the flags, when module_name is "__main__" (the calling
  program runs as the process's main); returns whether it paused."""
  if module_name != "__main__" or not gc.isenabled():
    return False
  gc.disable()
  app.call_after_init(resume_collector)
  return True
