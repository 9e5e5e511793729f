"""Who is writing: an exclusive per-directory lock for a process's lifetime, and liveness of a writer.

The refresher holds MODEL_DIR/index/.refresher.lock while it runs, so a second refresher on the same model
dir cannot publish the same steps beside it. The lock is an flock(2) on the file: the kernel releases it
when the holder exits, however it exits (a SIGKILL or an out-of-memory kill included), so a stale lock
never has to be removed by hand. The file also names its holder (host, pid, start time) for the error a
second process prints.

A temporary directory's writer is recognized by the pid in its name (realm_tf.io_utils.temporary_path):
start-up cleanup removes only those whose writer has exited, never one another live process (the
trainer's bootstrap publication, a concurrent refresher) is still writing.
"""

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from typing import Callable, Dict, Iterator, Optional

LOCK_NAME = ".refresher.lock"


class LockedError(RuntimeError):
  """Another live process holds the lock."""


def _holder(path: str) -> Dict:
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError):
    return {}


def describe_holder(holder: Dict) -> str:
  if not holder:
    return "another process (its details are not readable)"
  started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started_unix_time", 0)))
  return (f"pid {holder.get('pid')} on host {holder.get('host')} ({holder.get('command', '?')}, "
          f"started {started})")


@contextlib.contextmanager
def exclusive(path: str,
              command: str,
              wait: bool = False,
              poll_seconds: float = 5.0,
              log: Callable[[str], None] = print) -> Iterator[None]:
  """Holds an exclusive lock on `path` for the duration of the block.

  Args:
    path: the lock file (created if absent; never deleted, so no two processes lock different inodes).
    command: what the holder is, for the message a second process prints.
    wait: wait for the holder to exit instead of raising LockedError.
    poll_seconds: seconds between tries when waiting.
  """
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    announced = False
    while True:
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        break
      except OSError as e:
        if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
          raise
        holder = describe_holder(_holder(path))
        if not wait:
          raise LockedError(
              f"{path} is held by {holder}: only one {command} may run per model dir. Stop that "
              "process first, or pass --wait_for_lock to start when it exits") from None
        if not announced:
          log(f"waiting for {holder} to release {path}")
          announced = True
        time.sleep(poll_seconds)
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command,
        "started_unix_time": time.time()
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode("utf-8"), 0)
    yield
  finally:
    os.close(fd)  # releases the flock


def is_held(path: str) -> bool:
  """Whether a live process holds the exclusive lock on path (a shared lock cannot be had)."""
  try:
    fd = os.open(path, os.O_RDONLY)
  except FileNotFoundError:
    return False
  try:
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False
  except OSError as e:
    if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
      return True
    raise
  finally:
    os.close(fd)


def writer_pid(temporary_name: str) -> Optional[int]:
  """The pid io_utils.temporary_path put in a temporary name (.tmp-<base>-<pid>-<hex8>), or None."""
  parts = os.path.basename(temporary_name.rstrip("/")).rsplit("-", 2)
  if len(parts) != 3 or not parts[1].isdigit():
    return None
  return int(parts[1])


def is_running(pid: int) -> bool:
  """Whether a process with this pid exists on this host."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # exists, owned by someone else
    return True
  return True
