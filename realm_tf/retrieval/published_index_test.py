"""Tests of realm_tf.retrieval.published_index: atomic publication, keep-K, the watcher and concurrency.

Most tests publish a cheap query tower (a tf.Module of one variable) so that a publication costs a
fraction of a second; the SavedModel round trip of a real RetrieverEmbedder has a test of its own.
"""

import json
import os
import shutil
import subprocess
import threading

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import io_utils
from realm_tf import process_lock
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import index_format
from realm_tf.retrieval import published_index

_VOCAB_SIZE = 285
_D = 16


class _ScaledQueryTower(tf.Module):
  """A query tower whose output identifies its scale: sum(token_ids * mask) * [1..D] * scale."""

  def __init__(self, scale: float):
    super().__init__()
    self.scale = tf.Variable(float(scale))

  def __call__(self, inputs, training=None):
    token_ids, mask, _ = inputs
    total = tf.reduce_sum(tf.cast(token_ids * mask, tf.float32), axis=-1, keepdims=True)  # [B, 1]
    return total * tf.range(1.0, _D + 1.0) * self.scale


class _FailingQueryTower(tf.Module):

  def __call__(self, inputs, training=None):
    raise RuntimeError("the query tower cannot be traced")


def _query_inputs(batch=3, seq_len=10, seed=0):
  rng = np.random.default_rng(seed)
  token_ids = rng.integers(5, _VOCAB_SIZE, [batch, seq_len]).astype(np.int32)
  mask = np.ones([batch, seq_len], np.int32)
  mask[:, -2:] = 0
  token_ids[:, -2:] = 0
  segment_ids = np.zeros([batch, seq_len], np.int32)
  return token_ids, mask, segment_ids


def _num_docs(step: int) -> int:
  return 20 + step % 7  # indexes of different steps differ in size too


def _embeddings(step: int) -> np.ndarray:
  return np.random.default_rng(step).normal(size=(_num_docs(step), _D)).astype(np.float32)


def _publish(model_dir, step, keep=3, log=lambda message: None, query_tower=None):
  mips = index_lib.build_index(_embeddings(step), implementation="brute_force")
  return published_index.publish_index(model_dir,
                                       step,
                                       mips,
                                       query_tower or _ScaledQueryTower(step + 1),
                                       info={"source": "test"},
                                       keep=keep,
                                       log=log)


def _flip_last_byte(path: str) -> None:
  with open(path, "r+b") as f:
    f.seek(-1, os.SEEK_END)
    byte = f.read(1)
    f.seek(-1, os.SEEK_END)
    f.write(bytes([byte[0] ^ 0xFF]))


class PublishIndexTest(tf.test.TestCase):

  def test_round_trip_of_a_keras_query_tower(self):
    model_dir = self.get_temp_dir()
    tf_keras.utils.set_random_seed(0)
    config = bert.tiny_config(_VOCAB_SIZE, hidden_size=32, num_layers=1, intermediate_size=64)
    retriever = embedder_lib.build_retriever(config, _D)
    mips = index_lib.build_index(_embeddings(7), implementation="brute_force")
    path = published_index.publish_index(model_dir,
                                         7,
                                         mips,
                                         retriever.query_embedder,
                                         info={"checkpoint": "ckpt-7"},
                                         log=lambda message: None)
    self.assertEqual(path, os.path.join(model_dir, "index", "7"))
    self.assertCountEqual(os.listdir(path), ["mips", "query_embedder", "published.json"])
    self.assertEqual(os.listdir(os.path.join(model_dir, "index")), ["7"])  # no temporary left
    with open(os.path.join(path, "published.json")) as f:
      record = json.load(f)
    self.assertEqual((record["step"], record["num_docs"], record["dim"], record["checkpoint"]),
                     (7, _num_docs(7), _D, "ckpt-7"))

    watcher = published_index.IndexWatcher(model_dir, log=self.fail)  # no warning expected
    self.assertEqual(watcher.newest_step(), 7)
    loaded = watcher.load_newer(None)
    self.assertIsInstance(loaded, published_index.LoadedIndex)
    self.assertEqual((loaded.step, loaded.path, loaded.mips.num_docs), (7, path, _num_docs(7)))
    self.assertEqual(loaded.mips.step, 7)
    self.assertAllEqual(loaded.mips.embeddings, _embeddings(7))
    for batch, seq_len in ((3, 10), (1, 24)):  # the signature takes any [B, L]
      inputs = _query_inputs(batch, seq_len, seed=seq_len)
      want = retriever.query_embedder(tuple(tf.constant(x) for x in inputs), training=False)
      self.assertAllClose(loaded.embed_queries(*inputs), want, atol=1e-5)
    self.assertIsNone(watcher.load_newer(7))
    self.assertEqual(watcher.load_newer(6).step, 7)

  def test_keeps_the_newest_k(self):
    model_dir = self.get_temp_dir()
    messages = []
    for step in (0, 10, 20, 30):
      _publish(model_dir, step, keep=2, log=messages.append)
    self.assertEqual(published_index.published_steps(model_dir), [20, 30])
    self.assertCountEqual(os.listdir(published_index.index_root(model_dir)), ["20", "30"])
    removed = [m for m in messages if m.startswith("removing old index")]
    self.assertLen(removed, 2)
    self.assertIn(os.path.join(model_dir, "index", "0"), removed[0])
    self.assertIn(os.path.join(model_dir, "index", "10"), removed[1])
    self.assertEqual(published_index.IndexWatcher(model_dir).newest_step(), 30)

  def test_an_index_below_the_newest_k_is_kept_when_just_published(self):
    """Found by bench/fault_soak (the long soak's sixth run): the trainer fell back from damaged ckpt-340
    and ckpt-350 to ckpt-330, the refresher published the index of step 330 that step 331 waits for,
    and keep-3 removed it at once because indexes 350-352 (of the checkpoints lost) sorted above it: the
    trainer waited for it forever."""
    model_dir = self.create_tempdir().full_path
    messages = []
    for step in (50, 51, 52, 30):
      _publish(model_dir, step, keep=3, log=messages.append)
    self.assertEqual(published_index.published_steps(model_dir), [30, 50, 51, 52])
    self.assertEqual(published_index.verify_published(os.path.join(model_dir, "index", "30"))["step"], 30)
    self.assertFalse([m for m in messages if m.startswith("removing old index")], messages)
    # The next publication counts it among the old ones again.
    _publish(model_dir, 53, keep=3, log=messages.append)
    self.assertEqual(published_index.published_steps(model_dir), [51, 52, 53])

  def test_failed_publication_leaves_nothing_behind(self):
    model_dir = self.get_temp_dir()
    _publish(model_dir, 1)
    with self.assertRaisesRegex(RuntimeError, "cannot be traced"):
      _publish(model_dir, 2, query_tower=_FailingQueryTower())
    self.assertEqual(os.listdir(published_index.index_root(model_dir)), ["1"])

  def test_temporary_and_incomplete_directories_are_ignored(self):
    model_dir = self.get_temp_dir()
    complete = _publish(model_dir, 30)
    root = published_index.index_root(model_dir)
    shutil.copytree(complete, os.path.join(root, ".tmp-40-123-abcdef12"))
    incomplete = os.path.join(root, "50")
    shutil.copytree(complete, incomplete)
    os.remove(os.path.join(incomplete, "published.json"))
    self.assertEqual(published_index.published_steps(model_dir), [30, 50])
    with self.assertRaisesRegex(index_format.CorruptIndexError, "no published.json"):
      published_index.verify_published(incomplete)

    warnings = []
    watcher = published_index.IndexWatcher(model_dir, log=warnings.append)
    for _ in range(3):
      self.assertEqual(watcher.newest_step(), 30)
    self.assertEqual(watcher.load_newer(None).step, 30)
    self.assertLen(warnings, 1)  # once, not on every poll
    self.assertIn(incomplete, warnings[0])
    self.assertNotIn(".tmp", " ".join(warnings))

  def test_corrupt_newest_index_is_skipped_with_one_warning(self):
    model_dir = self.get_temp_dir()
    _publish(model_dir, 10)
    newest = _publish(model_dir, 20)
    _flip_last_byte(os.path.join(newest, "mips", "embeddings.npy"))
    warnings = []
    watcher = published_index.IndexWatcher(model_dir, log=warnings.append)
    self.assertEqual(watcher.newest_step(), 10)
    loaded = watcher.load_newer(None)
    self.assertEqual(loaded.step, 10)
    self.assertAllEqual(loaded.mips.embeddings, _embeddings(10))
    for _ in range(5):  # the trainer polls
      self.assertIsNone(watcher.load_newer(10))
      self.assertEqual(watcher.newest_step(), 10)
    self.assertLen(warnings, 1)
    self.assertIn("WARNING: skipping index", warnings[0])
    self.assertIn(os.path.join(newest, "mips", "embeddings.npy"), warnings[0])
    # A later, intact index is picked up.
    _publish(model_dir, 30)
    self.assertEqual(watcher.load_newer(10).step, 30)
    self.assertLen(warnings, 1)

  def test_index_with_a_missing_query_tower_is_skipped(self):
    model_dir = self.get_temp_dir()
    _publish(model_dir, 1)
    newest = _publish(model_dir, 2)
    os.remove(os.path.join(newest, "query_embedder", "saved_model.pb"))
    warnings = []
    watcher = published_index.IndexWatcher(model_dir, log=warnings.append)
    self.assertEqual(watcher.load_newer(None).step, 1)
    self.assertLen(warnings, 1)
    self.assertIn("saved_model.pb", warnings[0])

  def test_clean_temporary_removes_only_temporary_directories_of_exited_writers(self):
    model_dir = self.get_temp_dir()
    self.assertEqual(published_index.clean_temporary(model_dir, log=self.fail), 0)  # no index dir
    complete = _publish(model_dir, 3)
    root = published_index.index_root(model_dir)
    exited = subprocess.Popen(["true"])
    exited.wait()
    leftovers = [
        os.path.join(root, f".tmp-5-{exited.pid}-0123abcd"),
        os.path.join(root, f".tmp-6-{exited.pid}-4567cdef")
    ]
    shutil.copytree(complete, leftovers[0])
    os.makedirs(os.path.join(leftovers[1], "mips"))
    # A live writer's (this process's) directory, e.g. the trainer publishing its bootstrap index.
    live = io_utils.temporary_path(os.path.join(root, "7"))
    os.makedirs(os.path.join(live, "mips"))
    # Worker rows of a multi-host refresh: a trainer (worker_rows=False) leaves them to the refresher.
    rows = os.path.join(root, ".embeddings-8")
    os.makedirs(rows)
    messages = []
    self.assertEqual(published_index.clean_temporary(model_dir, log=messages.append, worker_rows=False), 2)
    self.assertCountEqual(os.listdir(root), ["3", os.path.basename(live), ".embeddings-8"])
    self.assertEqual(published_index.clean_temporary(model_dir, log=messages.append), 1)
    self.assertCountEqual(os.listdir(root), ["3", os.path.basename(live)])
    self.assertLen(messages, 5)
    self.assertEqual(sum("removing worker rows" in m for m in messages), 1, messages)
    self.assertEqual(sum("removing unfinished index" in m for m in messages), 2, messages)
    self.assertTrue(any(f"its writer (pid {os.getpid()}) is still running" in m for m in messages), messages)
    published_index.verify_published(complete)

  def test_a_published_step_is_never_replaced(self):
    model_dir = self.get_temp_dir()
    first = _publish(model_dir, 4)
    before = os.stat(os.path.join(first, "published.json")).st_ino
    messages = []
    self.assertEqual(_publish(model_dir, 4, log=messages.append, query_tower=_ScaledQueryTower(-1.0)), first)
    self.assertEqual(os.stat(os.path.join(first, "published.json")).st_ino, before)
    loaded = published_index.IndexWatcher(model_dir).load_newer(None)  # still the first copy's tower
    inputs = _query_inputs()
    self.assertAllClose(loaded.embed_queries(*inputs),
                        _ScaledQueryTower(5)(tuple(tf.constant(x) for x in inputs)))
    self.assertTrue(any("already published" in m for m in messages), messages)
    root = published_index.index_root(model_dir)
    self.assertEqual(os.listdir(root), ["4"])  # the second copy's temporary directory is gone too

  def test_waiting_without_a_refresher_stops_after_the_grace_time(self):
    model_dir = self.get_temp_dir()
    watcher = published_index.IndexWatcher(model_dir, log=lambda message: None)
    with self.assertRaisesRegex(published_index.NoRefresherError,
                                f"no bin/refresh_doc_embeds is running on {model_dir} .*start one"):
      watcher.wait_for_newer(None, poll_seconds=0.05, timeout_seconds=30, refresher_grace_seconds=0.3)
    # With a refresher holding the lock, it waits (here until its timeout) instead.
    with process_lock.exclusive(os.path.join(model_dir, process_lock.LOCK_NAME), "refresher"):
      self.assertIsNone(
          watcher.wait_for_newer(None, poll_seconds=0.05, timeout_seconds=0.6, refresher_grace_seconds=0.3))

  def test_a_set_stop_event_ends_the_wait(self):
    """A finished trainer sets the event; a pipeline thread still waiting must end, not wait on (with a
    refresher holding the lock and no timeout it would wait forever)."""
    model_dir = self.get_temp_dir()
    watcher = published_index.IndexWatcher(model_dir, log=lambda message: None)
    stop = threading.Event()
    outcome = []

    def waiter():
      try:
        watcher.wait_for_newer(None, poll_seconds=3600, stop=stop)
        outcome.append("returned")
      except published_index.WaitCancelled as e:
        outcome.append(str(e))

    with process_lock.exclusive(os.path.join(model_dir, process_lock.LOCK_NAME), "refresher"):
      thread = threading.Thread(target=waiter, daemon=True)
      thread.start()
      thread.join(0.3)
      self.assertTrue(thread.is_alive())  # waiting: a refresher runs, nothing is published
      stop.set()
      thread.join(120)  # a hang guard only: the poll interval is an hour
    self.assertFalse(thread.is_alive())
    self.assertLen(outcome, 1)
    self.assertIn("training finished", outcome[0])
    # Set before the wait begins: it ends at once, without publishing anything.
    with self.assertRaises(published_index.WaitCancelled):
      watcher.wait_for_newer(None, poll_seconds=3600, stop=stop)

  def test_wait_for_newer_times_out_when_nothing_is_published(self):
    model_dir = self.get_temp_dir()
    messages = []
    watcher = published_index.IndexWatcher(model_dir, log=messages.append)
    self.assertIsNone(
        watcher.wait_for_newer(None, poll_seconds=0.05, timeout_seconds=0.3, reason="staleness 120 > 100"))
    self.assertLen(messages, 1)  # announced once, not on every poll
    self.assertIn("waiting for bin/refresh_doc_embeds", messages[0])
    self.assertIn("staleness 120 > 100", messages[0])
    # An index no newer than the current one does not end the wait either.
    _publish(model_dir, 5)
    self.assertIsNone(watcher.wait_for_newer(5, poll_seconds=0.05, timeout_seconds=0.2))

  def test_wait_for_newer_returns_an_index_published_during_the_wait(self):
    model_dir = self.get_temp_dir()
    started = threading.Event()
    errors = []

    def publisher():
      started.wait()
      try:
        _publish(model_dir, 3)
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)

    thread = threading.Thread(target=publisher)
    thread.start()
    messages = []

    def log(message):
      messages.append(message)
      started.set()  # publish only once the watcher has looked and started waiting

    watcher = published_index.IndexWatcher(model_dir, log=log)
    try:
      loaded = watcher.wait_for_newer(None, poll_seconds=0.05, timeout_seconds=120)
    finally:
      started.set()
      thread.join()
    self.assertEmpty(errors)
    self.assertIsNotNone(loaded, "the index published during the wait was not returned")
    self.assertEqual(loaded.step, 3)
    self.assertAllEqual(loaded.mips.embeddings, _embeddings(3))
    self.assertLen(messages, 1)


class ConcurrencyTest(tf.test.TestCase):
  """A reader polling while a refresher publishes: it sees complete indexes or none, never a part."""

  def _run(self, keep: int, steps):
    model_dir = self.get_temp_dir()
    stop = threading.Event()
    seen, problems, warnings = [], [], []
    inputs = _query_inputs()

    def check(loaded):
      step = loaded.step
      if loaded.mips.num_docs != _num_docs(step) or loaded.record["num_docs"] != _num_docs(step):
        problems.append(f"step {step}: {loaded.mips.num_docs} documents, published {_num_docs(step)}")
      elif not np.array_equal(loaded.mips.embeddings, _embeddings(step)):
        problems.append(f"step {step}: embeddings differ from the published ones")
      want = _ScaledQueryTower(step + 1)(tuple(tf.constant(x) for x in inputs)).numpy()
      if not np.allclose(loaded.embed_queries(*inputs), want):
        problems.append(f"step {step}: the query tower is not the one published with it")
      if keep == 0:  # nothing is deleted: the directory must verify completely
        published_index.verify_published(loaded.path)

    def reader():
      watcher = published_index.IndexWatcher(model_dir, log=warnings.append)
      current = None
      try:
        while True:
          last_look = stop.is_set()
          loaded = watcher.load_newer(current)
          if loaded is not None:
            check(loaded)
            if current is not None and loaded.step <= current:
              problems.append(f"went back from {current} to {loaded.step}")
            current = loaded.step
            seen.append(current)
          if last_look:
            return
      except Exception as e:  # pylint: disable=broad-except
        problems.append(f"{type(e).__name__}: {e}")

    thread = threading.Thread(target=reader)
    thread.start()
    try:
      for step in steps:
        _publish(model_dir, step, keep=keep)
    finally:
      stop.set()
      thread.join()
    self.assertEmpty(problems)
    self.assertNotEmpty(seen)
    self.assertEqual(seen[-1], steps[-1])  # the look after the last publication found it
    self.assertEqual(seen, sorted(set(seen)))
    return model_dir, warnings

  def test_reader_never_sees_a_partial_index(self):
    steps = [1, 2, 3, 4, 5, 6]
    model_dir, warnings = self._run(keep=0, steps=steps)
    self.assertEmpty(warnings)  # a complete index is never mistaken for a corrupt one
    self.assertEqual(published_index.published_steps(model_dir), steps)

  def test_reader_survives_keep_k_cleanup(self):
    steps = [1, 2, 3, 4, 5, 6, 7, 8]
    model_dir, warnings = self._run(keep=2, steps=steps)
    self.assertEqual(published_index.published_steps(model_dir), [7, 8])
    # Only an index deleted while the reader looked at it may have been reported.
    for warning in warnings:
      self.assertNotIn(os.path.join(model_dir, "index", "8"), warning)


if __name__ == "__main__":
  tf.test.main()
