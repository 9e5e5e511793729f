"""Tests of realm_tf.process_lock: one holder at a time, released by any exit, and writer liveness."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import tensorflow as tf

from realm_tf import io_utils
from realm_tf import process_lock

# A separate process holding the lock until it is killed; prints "held" once it has it.
_HOLDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from realm_tf import process_lock
    with process_lock.exclusive(sys.argv[1], "holder test"):
      print("held", flush=True)
      time.sleep(600)
""")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ProcessLockTest(tf.test.TestCase):

  def _start_holder(self, path: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, path, _ROOT], stdout=subprocess.PIPE, text=True)
    self.addCleanup(holder.kill)
    self.assertEqual(holder.stdout.readline().strip(), "held")
    return holder

  def test_a_second_holder_is_refused_naming_the_first_and_a_kill_releases_it(self):
    path = os.path.join(self.create_tempdir().full_path, "run", process_lock.LOCK_NAME)
    holder = self._start_holder(path)
    self.assertTrue(process_lock.is_held(path))
    with self.assertRaisesRegex(process_lock.LockedError,
                                rf"held by pid {holder.pid} on host .*holder test.*--wait_for_lock"):
      with process_lock.exclusive(path, "second"):
        self.fail("entered a held lock")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    self.assertFalse(process_lock.is_held(path))  # the kernel released it; no stale file to remove
    with process_lock.exclusive(path, "second"):
      self.assertTrue(process_lock.is_held(path))
    self.assertFalse(process_lock.is_held(path))

  def test_waiting_starts_when_the_holder_exits(self):
    path = os.path.join(self.create_tempdir().full_path, process_lock.LOCK_NAME)
    holder = self._start_holder(path)
    messages = []
    killer = subprocess.Popen(["sh", "-c", f"sleep 1; kill -9 {holder.pid}"])
    self.addCleanup(killer.wait)
    start = time.time()
    with process_lock.exclusive(path, "waiter", wait=True, poll_seconds=0.05, log=messages.append):
      waited = time.time() - start
    self.assertGreater(waited, 0.5)
    self.assertLen(messages, 1)  # said once that it waits, not on every try
    self.assertIn(f"pid {holder.pid}", messages[0])

  def test_is_held_without_a_lock_file(self):
    self.assertFalse(process_lock.is_held(os.path.join(self.create_tempdir().full_path, "none")))

  def test_writer_pid_of_temporary_names(self):
    name = io_utils.temporary_path("/runs/realm/index/12")
    self.assertEqual(process_lock.writer_pid(name), os.getpid())
    self.assertEqual(process_lock.writer_pid(name + "/"), os.getpid())
    self.assertIsNone(process_lock.writer_pid("/runs/realm/index/12"))
    self.assertIsNone(process_lock.writer_pid(".tmp-mips-abc-def"))
    self.assertTrue(process_lock.is_running(os.getpid()))
    exited = subprocess.Popen(["true"])
    exited.wait()
    self.assertFalse(process_lock.is_running(exited.pid))


if __name__ == "__main__":
  tf.test.main()
