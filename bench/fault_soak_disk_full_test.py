"""The mechanics of fault_soak's disk_full fault, on a tiny Python child instead of the REALM processes
(the soak itself is fault_soak_test, minutes long): under the limit a write beyond it fails with EFBIG and
the child lives on to report it; a small write and the log still succeed; lifting the limit lets the
same write through, as an operator freeing space would. The tmpfs variant (root only): a filled small
filesystem gives a real ENOSPC, and deleting the filler frees it. And the soak's traceback count judges a chained
traceback (a documented error raised from TensorFlow's EFBIG) by its last link.
"""

import os
import shutil
import sys
import tempfile
import time
import unittest

from bench import fault_soak

# Writes a file of the size in argv[2] into argv[1] when the file named argv[1] + ".go" appears (once
# before the soak lifts the limit, once after), printing what each attempt did.
_CHILD = r"""
import errno, os, sys, time
path, size = sys.argv[1], int(sys.argv[2])
for attempt in range(2):
  while not os.path.exists(path + f".go{attempt}"):
    time.sleep(0.02)
  try:
    with open(path, "wb") as f:
      f.write(b"x" * size)
    print(f"attempt {attempt}: wrote {size}", flush=True)
  except OSError as e:
    print(f"attempt {attempt}: {errno.errorcode[e.errno]}", flush=True)
"""


class DiskFullTest(unittest.TestCase):

  def _child(self, tmp: str, size: int) -> fault_soak.Process:
    return fault_soak.Process(
        "child", [sys.executable, "-c", _CHILD,
                  os.path.join(tmp, "out"), str(size)], os.path.join(tmp, "child.log"))

  def _go(self, tmp: str, attempt: int, proc: fault_soak.Process, lines: int) -> str:
    open(os.path.join(tmp, f"out.go{attempt}"), "w").close()
    deadline = time.time() + 30
    while time.time() < deadline:
      with open(proc.log_path) as f:
        text = [line for line in f.read().splitlines() if line.startswith("attempt")]
      if len(text) >= lines:
        return text[-1]
      time.sleep(0.05)
    self.fail(f"the child printed no line for attempt {attempt} in 30 s; its log: {proc.log_path}")

  def test_limit_on_a_running_process_then_lifted(self):
    tmp = self._tmp()
    size = 4 * fault_soak.DISK_FULL_HEADROOM
    proc = self._child(tmp, size)
    proc.start({})
    try:
      proc.set_disk_full(True)
      self.assertTrue(proc.disk_full_seen)
      self.assertEqual(self._go(tmp, 0, proc, 1), "attempt 0: EFBIG")
      self.assertTrue(proc.alive())
      proc.set_disk_full(False)
      self.assertEqual(self._go(tmp, 1, proc, 2), f"attempt 1: wrote {size}")
      self.assertEqual(proc.popen.wait(timeout=30), 0)
    finally:
      if proc.alive():
        proc.popen.kill()
      proc.popen.wait()

  def test_a_restart_inside_the_window_starts_limited(self):
    tmp = self._tmp()
    proc = self._child(tmp, 4 * fault_soak.DISK_FULL_HEADROOM)
    proc.disk_full_until = time.time() + 60
    proc.start({})
    try:
      self.assertTrue(proc.disk_full_seen)
      self.assertEqual(self._go(tmp, 0, proc, 1), "attempt 0: EFBIG")
      proc.set_disk_full(False)
      self.assertEqual(self._go(tmp, 1, proc, 2), f"attempt 1: wrote {4 * fault_soak.DISK_FULL_HEADROOM}")
    finally:
      if proc.alive():
        proc.popen.kill()
      proc.popen.wait()

  def test_small_writes_pass_under_the_limit(self):
    tmp = self._tmp()
    proc = self._child(tmp, 1000)
    proc.disk_full_until = time.time() + 60
    proc.start({})
    try:
      self.assertEqual(self._go(tmp, 0, proc, 1), "attempt 0: wrote 1000")
    finally:
      if proc.alive():
        proc.popen.kill()
      proc.popen.wait()

  def test_a_documented_error_raised_from_a_cause_is_documented(self):
    # The trainer's EFBIG at a save: TensorFlow's OutOfRangeError, then the CheckpointWriteError raised
    # from it; the user reads the latter, so the chain is documented. A chain ending in an undocumented
    # error is not.
    tmp = self._tmp()
    chained = os.path.join(tmp, "chained.log")
    with open(chained, "w") as f:
      f.write("Traceback (most recent call last):\n  File \"loop.py\", line 196, in save\n"
              "tensorflow.python.framework.errors_impl.OutOfRangeError: ckpt-10_temp; File too large\n\n"
              "The above exception was the direct cause of the following exception:\n\n"
              "Traceback (most recent call last):\n  File \"train_realm.py\", line 37\n"
              "realm_tf.training.loop.CheckpointWriteError: cannot write checkpoint ckpt-10\n"
              "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
              "OSError: [Errno 27] File too large\n\n"
              "During handling of the above exception, another exception occurred:\n\n"
              "Traceback (most recent call last):\n  File \"x.py\", line 2\n"
              "ValueError: undocumented\n")
    found = fault_soak.tracebacks([chained])
    self.assertEqual(len(found["documented"]), 1, found)
    self.assertIn("CheckpointWriteError", found["documented"][0])
    self.assertEqual(len(found["undocumented"]), 1, found)
    self.assertIn("ValueError", found["undocumented"][0])

  def test_a_traceback_tensorflow_logs_and_handles_is_counted_apart(self):
    # The long soak's fourth run: the SavedModel loader logs the traceback of a truncated fingerprint.pb
    # and goes on loading; the process does not stop.
    log = os.path.join(self._tmp(), "handled.log")
    with open(log, "w") as f:
      f.write("E1128 13:12:43.960619 139647841728192 load.py:1088] Fingerprint was found, but there was an "
              "error when reading the proto. Saved model loading will continue.\n"
              "Traceback (most recent call last):\n  File \"load.py\", line 1080, in load_partial\n"
              "RuntimeError: SavedModel Fingerprint Error: Could not read fingerprint\n")
    found = fault_soak.tracebacks([log])
    self.assertEqual((found["documented"], found["undocumented"]), ([], []), found)
    self.assertEqual(len(found["handled_by_tensorflow"]), 1, found)

  @unittest.skipUnless(
      os.geteuid() == 0, "the tmpfs variant of disk_full mounts a filesystem, which needs "
      "root (CI and the dev machine run as root; --disk_full_mode=rlimit is the other)")
  def test_tmpfs_filled_gives_enospc_then_freed(self):
    # --disk_full_mode=tmpfs: the soak mounts a small tmpfs as the model dir and fills it with a file;
    # a running process's write fails with ENOSPC (not EFBIG) and succeeds once the filler is deleted.
    tmp = self._tmp()
    mount = os.path.join(tmp, "model_dir")
    fault_soak.mount_tmpfs(mount, 16)
    self.addCleanup(fault_soak.unmount, mount)
    self.assertTrue(os.path.ismount(mount))
    proc = fault_soak.Process(
        "child",
        [sys.executable, "-c", _CHILD,
         os.path.join(mount, "out"),
         str(4 * fault_soak.DISK_FULL_HEADROOM)],
        os.path.join(tmp, "child.log"),
        disk_full_mode="tmpfs")
    proc.start({})
    try:
      filled = fault_soak.fill_filesystem(mount)
      proc.set_disk_full(True)  # tmpfs: only recorded, no limit on the process
      self.assertTrue(proc.disk_full_seen)
      self.assertGreater(filled["filled_bytes"], 15 * 2**20, filled)
      self.assertLess(filled["free_bytes_after"], fault_soak.DISK_FULL_HEADROOM, filled)
      self.assertEqual(self._go(mount, 0, proc, 1), "attempt 0: ENOSPC")
      self.assertTrue(proc.alive())
      fault_soak.free_filesystem(mount)
      self.assertFalse(os.path.exists(filled["filler"]))
      self.assertEqual(self._go(mount, 1, proc, 2), f"attempt 1: wrote {4 * fault_soak.DISK_FULL_HEADROOM}")
      self.assertEqual(proc.popen.wait(timeout=30), 0)
    finally:
      if proc.alive():
        proc.popen.kill()
      proc.popen.wait()
    fault_soak.unmount(mount)
    self.assertFalse(os.path.ismount(mount))

  def test_tail_keeps_an_error_line_holding_a_bracket(self):
    # The tmpfs soak's IndexWriteError ("... [Errno 28] No space left on device"): its name must survive
    # the stripping of absl's prefix, or the exit is not recognised as a documented error.
    tmp = self._tmp()
    log = os.path.join(tmp, "trainer.log")
    error = ("realm_tf.retrieval.published_index.IndexWriteError: cannot write the index of step 0 into "
             "/m/index: [Errno 28] No space left on device")
    with open(log, "w") as f:
      f.write("I1128 10:16:52.819792 140475982478208 loop.py:210] saved /m/ckpt-40\n" + error + "\n")
    self.assertEqual(fault_soak.tail(log, 2), ["saved /m/ckpt-40", error])
    self.assertTrue(fault_soak._documented_error(fault_soak.tail(log, 1)[0]))  # pylint: disable=protected-access

  def test_every_checkpoint_damaged_is_started_over_as_the_error_says(self):
    # The long soak's seventh run: its only checkpoint (ckpt-1, saved by a SIGTERM) damaged, the trainer
    # stopped with this ResumeError at every restart. The soak recognises it and follows its fix.
    error = ("realm_tf.training.loop.ResumeError: no checkpoint in /m can be read (damaged: /m/ckpt-1). "
             "Delete them (and the 'checkpoint' file) to start over from the warm start, or restore them "
             "from a backup")
    self.assertTrue(fault_soak._documented_error(error))  # pylint: disable=protected-access
    self.assertIn(fault_soak.NO_READABLE_CHECKPOINT, error)
    model_dir = self._tmp()
    names = ["ckpt-1.index", "checkpoint", "train_state.json", "realm_config.json"]
    for name in names:
      with open(os.path.join(model_dir, name), "w") as f:
        f.write("x")
    os.makedirs(os.path.join(model_dir, "ckpt-10_temp"))
    os.makedirs(os.path.join(model_dir, "index", "0"))
    removed = fault_soak._start_over(model_dir)  # pylint: disable=protected-access
    self.assertEqual(removed, ["ckpt-1.index", "ckpt-10_temp", "checkpoint"])
    self.assertEqual(sorted(os.listdir(model_dir)), ["index", "realm_config.json", "train_state.json"])

  def _tmp(self) -> str:
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp, True)
    return tmp


if __name__ == "__main__":
  unittest.main()
