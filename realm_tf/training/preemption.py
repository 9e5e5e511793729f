"""SIGTERM as a request to stop at the next step boundary, save, and exit: how a preempted TPU VM (or a
Kubernetes pod, or `kill`) ends a trainer without losing the steps since its last periodic checkpoint.

Cloud TPU VMs and most schedulers send SIGTERM and wait some seconds before SIGKILL. Python's default
is to die at once; the handler here only records the request, so the step in flight finishes, the loop
saves a checkpoint of that exact step and raises Preempted, which exits the process with status 143
(128 + SIGTERM, what a supervisor expects of a terminated process) without writing the done marker.
"""

import contextlib
import signal
import threading
from typing import Iterator

# 128 + SIGTERM: the shell's status for a process ended by SIGTERM, kept for one that saved first.
EXIT_STATUS = 128 + signal.SIGTERM


class Preempted(SystemExit):
  """Raised by the training loop after it saved the checkpoint of the step it stopped at. A SystemExit,
  so the absl binaries exit with EXIT_STATUS and no traceback, and nothing after the loop (the done
  marker, a final evaluation) runs."""

  def __init__(self, message: str):
    super().__init__(EXIT_STATUS)
    self.message = message

  def __str__(self) -> str:
    return self.message


class Request:
  """Whether SIGTERM arrived since the handler was installed."""

  def __init__(self):
    self._event = threading.Event()

  @property
  def requested(self) -> bool:
    return self._event.is_set()

  def set(self) -> None:
    self._event.set()


@contextlib.contextmanager
def sigterm_requests_stop() -> Iterator[Request]:
  """While inside, SIGTERM sets the yielded Request instead of killing the process; the previous handler
  is restored on exit. Signal handlers can only be installed from the main thread: elsewhere (a trainer
  run in a thread by a test or a notebook) the Request is never set and SIGTERM keeps its behaviour."""
  request = Request()
  if threading.current_thread() is not threading.main_thread():
    yield request
    return
  previous = signal.signal(signal.SIGTERM, lambda signum, frame: request.set())
  try:
    yield request
  finally:
    signal.signal(signal.SIGTERM, previous)
