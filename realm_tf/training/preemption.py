"""SIGTERM as a request to stop at the next step boundary, save, and exit: how a preempted TPU VM (or a
Kubernetes pod, or `kill`) ends a trainer without losing the steps since its last periodic checkpoint.

Cloud TPU VMs and most schedulers send SIGTERM and wait some seconds before SIGKILL. Python's default
is to die at once; the handler here only records the request, so the step in flight finishes, the loop
saves a checkpoint of that exact step and raises Preempted, which exits the process with status 143
(128 + SIGTERM, what a supervisor expects of a terminated process) without writing the done marker.

A step whose input waits (REALM's pipeline waiting for an index) would never reach that boundary, and
its main thread, blocked inside TensorFlow, never runs a Python signal handler: a thread watching the
signal module's wakeup fd sets the request instead and ends the input's waits (on_request, the task's
stop_input); the loop then saves the steps it finished and raises Preempted the same way.
"""

import contextlib
import os
import signal
import threading
from typing import Callable, Iterator, Optional

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
  """Whether SIGTERM arrived since the handler was installed; on_set (once, from whichever thread saw
  the signal first) ends the input's waits."""

  def __init__(self, on_set: Optional[Callable[[], None]] = None):
    self._event = threading.Event()
    self._lock = threading.Lock()
    self._on_set = on_set

  @property
  def requested(self) -> bool:
    return self._event.is_set()

  def set(self) -> None:
    with self._lock:
      if self._event.is_set():
        return
      self._event.set()
    if self._on_set is not None:
      self._on_set()


def _watch_wakeup_fd(read_fd: int, request: Request, forward_fd: int) -> None:
  """Sets `request` when the signal module's wakeup fd reports SIGTERM, until the pipe closes.

  Why a thread: Python runs a signal handler only in the main thread, between two bytecodes. A trainer
  whose main thread waits inside TensorFlow (the next batch, while the input pipeline waits for an index)
  never runs it, so SIGTERM did nothing until a supervisor's SIGKILL (found by bench/fault_soak). The
  interpreter's C-level handler still writes the signal's number to the wakeup fd at once; this thread
  reads it and sets the request, whose on_set ends the input's wait, which ends the main thread's."""
  while True:
    try:
      data = os.read(read_fd, 512)
    except OSError:
      return
    if not data:
      return
    if forward_fd >= 0:  # a wakeup fd installed before (an event loop's): it still gets its bytes
      try:
        os.write(forward_fd, data)
      except OSError:
        pass
    if signal.SIGTERM in data:
      request.set()


@contextlib.contextmanager
def sigterm_requests_stop(on_request: Optional[Callable[[], None]] = None) -> Iterator[Request]:
  """While inside, SIGTERM sets the yielded Request instead of killing the process, and calls on_request
  once (from a helper thread: it must only signal, e.g. set an event); the previous handler is restored
  on exit. Signal handlers can only be installed from the main thread: elsewhere (a trainer run in a
  thread by a test or a notebook) the Request is never set and SIGTERM keeps its behaviour."""
  request = Request(on_request)
  if threading.current_thread() is not threading.main_thread():
    yield request
    return
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)  # the signal module writes to it from its C handler
  previous = signal.signal(signal.SIGTERM, lambda signum, frame: request.set())
  previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
  watcher = threading.Thread(target=_watch_wakeup_fd,
                             args=(read_fd, request, previous_fd),
                             name="sigterm-watcher",
                             daemon=True)
  watcher.start()
  try:
    yield request
  finally:
    signal.set_wakeup_fd(previous_fd)
    signal.signal(signal.SIGTERM, previous)
    os.close(write_fd)  # the watcher reads the end of the pipe and returns
    watcher.join(5.0)
    os.close(read_fd)
