"""bin/serve.py as a child process on a port the OS chooses: what bin/serve_test and bench/serve_bench run.

  with process.ServeProcess(saved_model, "--request_timeout_s=3") as served:
    requests go to served.url (http://127.0.0.1:PORT)

Ready means the server printed its "serving ... at http://HOST:PORT/" line (it prints it after loading
the model and answering a warm-up question, so the first request is not slow).
"""

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from typing import List, Optional

from realm_tf.testing import test_paths

_READY = re.compile(r"^serving \S+ \(.*\) at (http://[^/\s]+)/$")


class ServeProcess:
  """Starts bin/serve.py --saved_model=saved_model --port=0 --host=127.0.0.1 *flags and waits until it
  serves (at most start_timeout_s; RuntimeError with its stderr if it exits or does not get there)."""

  def __init__(self, saved_model: str, *flags: str, start_timeout_s: float = 300.0):
    repo = test_paths.repo_root()
    self._stderr: List[str] = []
    self.process = subprocess.Popen([
        sys.executable,
        os.path.join(repo, "bin", "serve.py"), f"--saved_model={saved_model}", "--port=0", "--host=127.0.0.1",
        *flags
    ],
                                    stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE,
                                    text=True,
                                    env=dict(os.environ, PYTHONPATH=repo, TF_CPP_MIN_LOG_LEVEL="3"))
    lines: "queue.Queue[str]" = queue.Queue()
    # Both pipes are drained for the child's whole life: a full pipe would block the server.
    threading.Thread(target=lambda: [lines.put(line) for line in self.process.stdout], daemon=True).start()
    threading.Thread(target=lambda: self._stderr.extend(self.process.stderr), daemon=True).start()
    self.url: Optional[str] = None
    deadline = time.monotonic() + start_timeout_s
    while self.url is None and time.monotonic() < deadline:
      try:
        match = _READY.match(lines.get(timeout=1).rstrip("\n"))
        self.url = match and match.group(1)
      except queue.Empty:
        if self.process.poll() is not None:
          break
    if self.url is None:
      self.process.kill()
      self.process.wait()
      raise RuntimeError(f"bin/serve.py did not start serving within {start_timeout_s:g} s "
                         f"(exit code {self.process.returncode}):\n{self.stderr()[-3000:]}")
    self.port = int(self.url.rsplit(":", 1)[1])

  def stderr(self) -> str:
    """What the server wrote to stderr so far."""
    return "".join(self._stderr)

  def stop(self, timeout_s: float = 60.0) -> int:
    """SIGTERM (the server closes its socket and exits 0), SIGKILL after timeout_s; the exit code."""
    if self.process.poll() is None:
      self.process.send_signal(signal.SIGTERM)
      try:
        self.process.wait(timeout=timeout_s)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()
    return self.process.returncode

  def __enter__(self) -> "ServeProcess":
    return self

  def __exit__(self, *exc):
    self.stop()
