"""SIGKILL of the real bin/refresh_doc_embeds process beside a fake trainer, with a watcher polling.

The fake trainer is this process: it writes realm_config.json and a checkpoint in the REALM trainer's
layout (tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=...)) through a CheckpointManager). The
refresher is killed twice, first while it embeds the corpus, then while it writes the index, and then
restarted; an IndexWatcher (the trainer's view) polls MODEL_DIR/index/ all along. SIGKILL of the trainer
and its resume are tested in bin/demo_pipeline_test.py.
"""

import os
import signal
import subprocess
import threading
import time

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import demo_pipeline
from realm_tf import io_utils
from realm_tf import tokenization
from realm_tf.data import corpus as corpus_lib
from realm_tf.modeling import bert
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import published_index

_TESTDATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testdata")
_VOCAB = os.path.join(_TESTDATA, "vocab.txt")
_COPIES = 2  # the 300 testdata documents twice (titles made distinct): embedding one by one is slow
_NUM_DOCS = 300 * _COPIES
_STEP = 10
_DEADLINE_SECONDS = 300  # only turns a hang into a failure; never a speed assertion


def _config() -> realm_config_lib.RealmConfig:
  small = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=64)
  return realm_config_lib.RealmConfig(retriever_bert=small,
                                      reader_bert=small,
                                      vocab_path=_VOCAB,
                                      projection_size=32,
                                      query_seq_len=16,
                                      candidate_seq_len=64,
                                      max_masks=4,
                                      num_candidates=4)


def _cpu_seconds(pid: int) -> float:
  """User + system CPU time of a process (Linux /proc): a clock that load on the machine does not
  speed up, unlike wall time."""
  with open(f"/proc/{pid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _leftovers(root: str):
  found = []
  for directory, dirs, files in os.walk(root):
    found += [os.path.join(directory, n) for n in dirs + files if io_utils.is_temporary(n)]
  return found


class _PollingWatcher(threading.Thread):
  """The trainer's view of MODEL_DIR/index/, polled continuously; checks every index it is handed."""

  def __init__(self, model_dir: str):
    super().__init__(daemon=True)
    self.model_dir = model_dir
    self.watcher = published_index.IndexWatcher(model_dir, log=self._warn)
    self.stop = threading.Event()
    self.polls = 0
    self.polls_with_leftovers = 0
    self.returned = []  # steps of the indexes the watcher handed out
    self.problems = []  # anything wrong with them, or a crash of the watcher
    self.warnings = []
    self._current = None

  def _warn(self, message):
    self.warnings.append(message)

  def run(self):
    root = published_index.index_root(self.model_dir)
    try:
      while not self.stop.is_set():
        leftovers = os.path.isdir(root) and any(io_utils.is_temporary(n) for n in os.listdir(root))
        loaded = self.watcher.load_newer(self._current)
        if loaded is not None:
          self._check(loaded)
          self._current = loaded.step
        self.polls += 1
        self.polls_with_leftovers += bool(leftovers)
        time.sleep(0.02)
    except Exception as e:  # pylint: disable=broad-except
      self.problems.append(f"the watcher crashed: {e!r}")

  def _check(self, loaded):
    self.returned.append(loaded.step)
    try:
      record = published_index.verify_published(loaded.path)
      if (loaded.mips.num_docs, record["num_docs"], record["step"]) != (_NUM_DOCS, _NUM_DOCS, loaded.step):
        self.problems.append(f"{loaded.path}: {loaded.mips.num_docs} rows, record {record}")
      if io_utils.is_temporary(loaded.path):
        self.problems.append(f"handed out a temporary directory {loaded.path}")
      token_ids = np.full([2, 16], 7, np.int32)
      queries = loaded.embed_queries(token_ids, np.ones_like(token_ids), np.zeros_like(token_ids))
      loaded.mips.search(queries, 3)
    except Exception as e:  # pylint: disable=broad-except
      self.problems.append(f"{loaded.path}: {e!r}")

  def wait_for_polls(self, count: int) -> None:
    target = self.polls + count
    deadline = time.time() + _DEADLINE_SECONDS
    while self.polls < target and self.is_alive() and time.time() < deadline:
      time.sleep(0.02)


class RefresherKillTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    directory = os.path.join(tf.compat.v1.test.get_temp_dir(), "reliability_processes")
    tf.io.gfile.makedirs(directory)
    documents = list(corpus_lib.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")))
    documents = [
        corpus_lib.Document(f"{d.title} {copy}", d.body, f"{d.doc_id}-{copy}")
        for copy in range(_COPIES)
        for d in documents
    ]
    cls.corpus_prefix = os.path.join(directory, "blocks")
    corpus_lib.write_corpus(lambda: documents,
                            tokenization.Tokenizer(_VOCAB),
                            cls.corpus_prefix,
                            num_shards=2)

  def _start(self, model_dir: str, log_path: str, batch_size: int, xla: bool) -> subprocess.Popen:
    # xla False: the document tower uncompiled, every document padded to one length (one trace, no
    # compile: the refresher's XLA embedding runs in refresher_test's bin/refresh_doc_embeds process).
    # float32 forced: the published rows are compared with this process's float32 tower, and the
    # refresher would pick bfloat16 on a CPU with bfloat16 instructions.
    with open(log_path, "w") as log_file:
      return subprocess.Popen(demo_pipeline.binary_command("refresh_doc_embeds",
                                                           model_dir=model_dir,
                                                           retrieval_corpus_path=self.corpus_prefix,
                                                           index_implementation="brute_force",
                                                           batch_size=batch_size,
                                                           poll_seconds=0.5,
                                                           max_refreshes=1,
                                                           embed_jit_compile=xla,
                                                           embed_length_buckets=None if xla else 1,
                                                           mixed_precision="float32"),
                              stdout=log_file,
                              stderr=subprocess.STDOUT,
                              env=demo_pipeline.binary_env())

  def _wait_until(self, condition, what: str, process: subprocess.Popen, log_path: str) -> None:
    deadline = time.time() + _DEADLINE_SECONDS
    while not condition():
      if process.poll() is not None:
        self.fail(f"the refresher exited ({process.returncode}) before {what}:\n"
                  f"{self._read(log_path)[-4000:]}")
      if time.time() > deadline:
        process.kill()
        self.fail(f"{what} did not happen in time:\n{self._read(log_path)[-4000:]}")
      time.sleep(0.005)

  @staticmethod
  def _read(path: str) -> str:
    with open(path, errors="replace") as f:
      return f.read()

  def _kill(self, process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    self.assertEqual(process.wait(timeout=_DEADLINE_SECONDS), -signal.SIGKILL)

  def test_sigkill_while_embedding_and_while_publishing_then_restart(self):
    out = self.create_tempdir().full_path
    model_dir = os.path.join(out, "realm")
    root = published_index.index_root(model_dir)
    config = _config()
    config.save(model_dir)
    tf_keras.utils.set_random_seed(11)
    retriever = config.build_retriever()
    checkpoint_path = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=retriever)), model_dir,
        max_to_keep=3).save(checkpoint_number=_STEP)
    watcher = _PollingWatcher(model_dir)
    watcher.start()
    processes = []
    try:
      # 1. Killed while embedding: one document per batch, compiled per length bucket with XLA, keeps it
      #    there for seconds; kill after it found the checkpoint and spent one more CPU second
      #    (restoring takes a fraction of that).
      log1 = os.path.join(out, "first.log")
      first = self._start(model_dir, log1, batch_size=1, xla=True)
      processes.append(first)
      self._wait_until(lambda: "found new checkpoint" in self._read(log1), "finding the checkpoint", first,
                       log1)
      found_at = _cpu_seconds(first.pid)
      self._wait_until(lambda: _cpu_seconds(first.pid) >= found_at + 1.0, "embedding", first, log1)
      self._kill(first)
      log = self._read(log1)
      self.assertNotIn(f"embedded {_NUM_DOCS}/{_NUM_DOCS}", log)  # it was killed mid-embedding
      self.assertEqual(published_index.published_steps(model_dir), [])
      watcher.wait_for_polls(3)

      # 2. Killed while writing the index: right after its temporary directory appears.
      log2 = os.path.join(out, "second.log")
      second = self._start(model_dir, log2, batch_size=64, xla=False)
      processes.append(second)
      self._wait_until(
          lambda: os.path.isdir(root) and any(io_utils.is_temporary(n) for n in os.listdir(root)),
          "a temporary index directory", second, log2)
      self._kill(second)
      leftover = [os.path.join(root, n) for n in os.listdir(root) if io_utils.is_temporary(n)]
      self.assertLen(leftover, 1)
      self.assertStartsWith(os.path.basename(leftover[0]), f".tmp-{_STEP}-")
      self.assertEqual(published_index.published_steps(model_dir), [])  # killed before the rename
      watcher.wait_for_polls(3)  # the watcher looks at the leftover and must not take it
      self.assertGreater(watcher.polls_with_leftovers, 0)
      self.assertEqual(watcher.returned, [])

      # 3. Restarted: removes the leftover and publishes the index of the same checkpoint.
      log3 = os.path.join(out, "third.log")
      third = self._start(model_dir, log3, batch_size=64, xla=False)
      processes.append(third)
      returncode = third.wait(timeout=_DEADLINE_SECONDS)
      log = self._read(log3)
      self.assertEqual(returncode, 0, log[-4000:])
      self.assertIn(f"removing unfinished index {leftover[0]}", log)
      self.assertEqual(published_index.published_steps(model_dir), [_STEP])
      self.assertEqual(_leftovers(root), [])
      path = os.path.join(root, str(_STEP))
      record = published_index.verify_published(path)
      self.assertEqual(record["checkpoint"], checkpoint_path)
      loaded = published_index.load_published(path)
      rows = [row for _, row in zip(range(8), corpus_lib.read_corpus(self.corpus_prefix))]
      candidates = config.featurizer().candidate_inputs(
          tf.ragged.constant([r["title_token_ids"] for r in rows], tf.int64),
          tf.ragged.constant([r["body_token_ids"] for r in rows], tf.int64))
      self.assertAllClose(loaded.mips.embeddings[:8],
                          retriever.embed_documents(tuple(candidates), training=False),
                          atol=1e-4)

      deadline = time.time() + _DEADLINE_SECONDS
      while not watcher.returned and watcher.is_alive() and time.time() < deadline:
        time.sleep(0.05)
    finally:
      watcher.stop.set()
      watcher.join(_DEADLINE_SECONDS)
      for process in processes:
        if process.poll() is None:
          process.kill()
          process.wait()
    self.assertEqual(watcher.problems, [])
    self.assertEqual(watcher.returned, [_STEP])  # only ever the complete index
    self.assertEqual(watcher.warnings, [])  # never even looked at a partial one as a candidate


if __name__ == "__main__":
  tf.test.main()
