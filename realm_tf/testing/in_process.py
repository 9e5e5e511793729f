"""Test helper: runs a bin/ program's main() inside the test process, with the flags it defines parsed
from a command line as absl's app.run parses them, and its absl log lines captured.

A process start (Python, TensorFlow, the binary's imports) costs seconds of CPU; a misconfiguration that
stops a binary before any work is checked this way through the binary's own main(), flags and wiring,
while each binary still runs as a real process in the tests (a failing one, where the test has failing
cases, for the exit status and the message on stderr: app.run's part). The program's module is loaded
afresh under a private name and the flags it defined are removed again afterwards, so that programs
sharing flag names (--model_dir, --vocab_path, ...) can run one after another in one test process.
"""

import dataclasses
import gc
import importlib.util
import logging as std_logging
import os
import traceback
from typing import List, Optional

from absl import flags
from absl import logging

# bin/ beside realm_tf/ (in Bazel's runfiles, where a test's binaries are, when run there).
_BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bin")


@dataclasses.dataclass
class Result:
  """What main() raised (None if it returned) and the log lines it wrote (absl's and TensorFlow's
  Python logger's, the latter including what garbage collection logs right after main)."""
  error: Optional[BaseException]
  log_lines: List[str]
  traceback: str = ""

  @property
  def log(self) -> str:
    return "\n".join(self.log_lines)


class _Capture(std_logging.Handler):

  def __init__(self):
    super().__init__(level=std_logging.DEBUG)
    self.lines: List[str] = []

  def emit(self, record):
    self.lines.append(record.getMessage())


def load_binary(script: str):
  """bin/<script> as a fresh module (its flags defined); remove them with remove_flags(names)."""
  name = "_in_process_" + os.path.splitext(script)[0]
  spec = importlib.util.spec_from_file_location(name, os.path.join(_BIN, script))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def remove_flags(names) -> None:
  for name in names:
    if name in flags.FLAGS:
      delattr(flags.FLAGS, name)


def help_text(script: str) -> str:
  """What `bin/<script> --help` lists (absl's help of the main module's key flags), computed here."""
  before = set(flags.FLAGS)
  try:
    module = load_binary(script)
    return flags.FLAGS.module_help(module.__name__)
  finally:
    remove_flags(set(flags.FLAGS) - before)


def run_main(script: str, *args: str) -> Result:
  """Runs bin/<script>'s main with the command line args (flags and positional arguments) in this
  process; returns what it raised and logged. Exceptions of main (sys.exit's SystemExit too) are
  returned, not raised."""
  before = set(flags.FLAGS)
  capture = _Capture()
  loggers = (logging.get_absl_logger(), std_logging.getLogger("tensorflow"))
  verbosity = logging.get_verbosity()
  try:
    module = load_binary(script)
    for logger in loggers:
      logger.addHandler(capture)
    logging.set_verbosity(logging.INFO)
    try:
      argv = flags.FLAGS([os.path.join(_BIN, script), *args])
      module.main(argv)
      error, trace = None, ""
    except (Exception, SystemExit) as e:  # pylint: disable=broad-except  (the caller checks it)
      error = e
      trace = traceback.format_exc()
      cause, seen = e, set()
      while cause is not None and id(cause) not in seen:  # its frames would keep main's objects alive
        seen.add(id(cause))
        cause.__traceback__ = None
        cause = cause.__cause__ or cause.__context__
    # What a process would log at its exit: e.g. deferred checkpoint restores of a failed read warn
    # when they are collected.
    gc.collect()
  finally:
    logging.set_verbosity(verbosity)
    for logger in loggers:
      logger.removeHandler(capture)
    remove_flags(set(flags.FLAGS) - before)
  return Result(error, capture.lines, trace)
