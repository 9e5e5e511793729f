"""Tests of realm_tf.retrieval.refresher and bin/refresh_doc_embeds beside a fake trainer.

All in this process: the refresher runs in a thread beside the fake trainer, and bin/refresh_doc_embeds's
main() through realm_tf/testing/in_process (a process start would pay for Python and TensorFlow again; the
binary runs as a process in reliability_processes_test, demo_pipeline_test and binaries_test).

The fake trainer is this process: it writes realm_config.json and checkpoints in the REALM trainer's
layout (tf.train.Checkpoint(model=<model with .retriever>) saved by a CheckpointManager, so ckpt-<step>)
with different weights per step. Each published index must hold the document embeddings of exactly the
weights of its step, which proves the refresher restored the checkpoint it names.
"""

import gc
import glob
import os
import subprocess
import threading
import time
from unittest import mock

from absl import app
import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import tokenization
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus as corpus_lib
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import published_index
from realm_tf.retrieval import refresher
from realm_tf.testing import in_process

_TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata")
_VOCAB = os.path.join(_TESTDATA, "vocab.txt")
_VOCAB_SIZE = 285
_NUM_DOCS = 20
_DEADLINE_SECONDS = 240  # only to turn a hang into a failure; never a speed assertion


def _config(**overrides) -> realm_config_lib.RealmConfig:
  small = bert.tiny_config(_VOCAB_SIZE, hidden_size=32, num_layers=1, intermediate_size=64)
  values = dict(retriever_bert=small,
                reader_bert=small,
                vocab_path=_VOCAB,
                projection_size=16,
                query_seq_len=16,
                candidate_seq_len=32,
                max_masks=4,
                num_candidates=4)
  values.update(overrides)
  return realm_config_lib.RealmConfig(**values)


def _query_inputs():
  rng = np.random.default_rng(0)
  token_ids = rng.integers(5, _VOCAB_SIZE, [2, 16]).astype(np.int32)
  return token_ids, np.ones_like(token_ids), np.zeros_like(token_ids)


class _FakeTrainer:
  """Writes what bin/train_realm writes: realm_config.json and CheckpointManager checkpoints."""

  def __init__(self, model_dir: str, config: realm_config_lib.RealmConfig, candidates):
    self.model_dir = model_dir
    self.config = config
    self.candidates = candidates
    tf_keras.utils.set_random_seed(0)
    self.retriever = config.build_retriever()
    root = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=self.retriever),
                               optimizer=tf.train.Checkpoint(iterations=tf.Variable(0, tf.int64)))
    self.manager = tf.train.CheckpointManager(root, model_dir, max_to_keep=5)
    self.doc_embeddings = {}
    self.query_embeddings = {}

  def write_config(self) -> None:
    self.config.save(self.model_dir)

  def save(self, step: int) -> str:
    """Moves the weights to new values, saves ckpt-<step> and records what they embed."""
    rng = np.random.default_rng(step)
    for variable in self.retriever.trainable_variables:
      variable.assign_add(rng.normal(scale=0.05, size=variable.shape).astype(np.float32))
    path = self.manager.save(checkpoint_number=step)
    self.doc_embeddings[step] = self.retriever.embed_documents(self.candidates, training=False).numpy()
    query_inputs = tuple(tf.constant(x) for x in _query_inputs())
    self.query_embeddings[step] = self.retriever.embed_queries(query_inputs, training=False).numpy()
    return path

  def finish(self) -> None:
    training_state.write_done_marker(self.model_dir)


class _RefresherThread(threading.Thread):
  """refresher.run in a thread; its result, exception and log lines are kept."""

  def __init__(self, options: refresher.RefresherOptions):
    super().__init__(daemon=True)
    self.options = options
    self.messages = []
    self.result = None
    self.error = None

  def run(self):
    try:
      self.result = refresher.run(self.options, log=self.messages.append)
    except Exception as e:  # pylint: disable=broad-except
      self.error = e


class RefresherTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # The imports' objects (TensorFlow's millions) out of the garbage collector's full passes, which
    # otherwise walk all of them again and again; they live as long as the process anyway.
    gc.freeze()
    directory = os.path.join(tf.compat.v1.test.get_temp_dir(), "refresher_test")
    tf.io.gfile.makedirs(directory)
    documents = []
    for doc in corpus_lib.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")):
      documents.append(doc)
      if len(documents) == _NUM_DOCS:
        break
    tokenizer = tokenization.Tokenizer(_VOCAB)
    cls.corpus_prefix = os.path.join(directory, "blocks")
    corpus_lib.write_corpus(lambda: documents, tokenizer, cls.corpus_prefix, num_shards=2)
    rows = list(corpus_lib.read_corpus(cls.corpus_prefix))
    featurizer = _config().featurizer(tokenizer)
    inputs = featurizer.candidate_inputs(tf.ragged.constant([r["title_token_ids"] for r in rows], tf.int64),
                                         tf.ragged.constant([r["body_token_ids"] for r in rows], tf.int64))
    cls.candidates = tuple(tf.cast(x, tf.int32) for x in (inputs.token_ids, inputs.mask, inputs.segment_ids))

  def _options(self, model_dir, **overrides) -> refresher.RefresherOptions:
    # Without XLA in this process, and one length bucket (each refresher traces its embedding once: the
    # shapes of the embedding are corpus_embedding_test's part); the bin/refresh_doc_embeds process of
    # test_binary_beside_a_fake_trainer embeds with XLA, its default.
    values = dict(model_dir=model_dir,
                  corpus_prefix=self.corpus_prefix,
                  index_implementation="brute_force",
                  batch_size=8,
                  poll_seconds=0.2,
                  embed_jit_compile=False,
                  embed_length_buckets=1)
    values.update(overrides)
    return refresher.RefresherOptions(**values)

  def _wait_for(self, condition, what: str, thread, seconds: float = _DEADLINE_SECONDS):
    deadline = time.time() + seconds
    while not condition():
      if not thread.is_alive():
        self.fail(f"{what} did not happen; the refresher returned {thread.result} ({thread.error}): "
                  f"{list(thread.messages)}")
      if time.time() > deadline:
        self.fail(f"{what} did not happen; deadline passed")
      time.sleep(0.1)

  def _published(self, model_dir, step):
    return lambda: step in published_index.published_steps(model_dir)

  def assertIndexOf(self, model_dir, step, trainer, atol=1e-5):
    path = os.path.join(published_index.index_root(model_dir), str(step))
    record = published_index.verify_published(path)
    self.assertEqual(record["step"], step)
    self.assertEqual(record["num_docs"], _NUM_DOCS)
    loaded = published_index.load_published(path)
    self.assertAllClose(loaded.mips.embeddings, trainer.doc_embeddings[step], atol=atol)
    self.assertAllClose(loaded.embed_queries(*_query_inputs()), trainer.query_embeddings[step], atol=atol)
    return record

  def test_beside_a_trainer_publishes_the_index_of_each_checkpoint(self):
    # The refresher as bin/refresh_doc_embeds runs it beside a trainer (here this process's thread):
    # started before the trainer wrote anything, it waits for the config, publishes the index of each
    # checkpoint, refuses a second refresher, and exits on the done marker after publishing the final
    # checkpoint's index. With XLA, the binary's default, in this case only: the compiled embedding must
    # use the weights each refresh restores in place.
    model_dir = self.get_temp_dir()
    trainer = _FakeTrainer(model_dir, _config(), self.candidates)
    waiting = threading.Event()
    thread = _RefresherThread(self._options(model_dir, embed_jit_compile=True))
    thread.messages = _Notifying(waiting, "waiting for the trainer to write")
    thread.start()
    self.assertTrue(waiting.wait(_DEADLINE_SECONDS), "the refresher did not wait for the config")
    self.assertTrue(thread.is_alive())
    self.assertEqual(published_index.published_steps(model_dir), [])
    trainer.write_config()
    first = trainer.save(10)
    self._wait_for(self._published(model_dir, 10), "publishing the index of step 10", thread)

    # bin/refresh_doc_embeds on the same model dir stops at once, naming the holder; nothing published. Its
    # main() in this process (realm_tf/testing/in_process), without a second TensorFlow start: the lock is an
    # flock of the file, refused to any other open of it while the holder lives. The binary turns the
    # LockedError into app.UsageError, which app.run prints without a traceback.
    second = in_process.run_main("refresh_doc_embeds.py", f"--model_dir={model_dir}",
                                 f"--retrieval_corpus_path={self.corpus_prefix}",
                                 "--index_implementation=brute_force", "--batch_size=8", "--poll_seconds=0.2")
    self.assertIsInstance(second.error, app.UsageError, second.traceback)
    self.assertIn(f"held by pid {os.getpid()}", str(second.error))
    self.assertIn("only one bin/refresh_doc_embeds may run per model dir", str(second.error))
    self.assertEqual(published_index.published_steps(model_dir), [10])

    last = trainer.save(20)
    trainer.finish()  # at once: the final checkpoint must still be published before exiting
    thread.join(_DEADLINE_SECONDS)
    self.assertFalse(thread.is_alive(), "the refresher did not exit on the done marker")
    self.assertIsNone(thread.error)
    self.assertEqual(thread.result, 2)
    self.assertEqual(published_index.published_steps(model_dir), [10, 20])
    # Different weights per step, so equality below identifies the step restored.
    self.assertNotAllClose(trainer.doc_embeddings[10], trainer.doc_embeddings[20], atol=1e-3)
    self.assertEqual(self.assertIndexOf(model_dir, 10, trainer, atol=1e-4)["checkpoint"], first)
    self.assertEqual(self.assertIndexOf(model_dir, 20, trainer, atol=1e-4)["checkpoint"], last)
    self.assertTrue(any(m.startswith("published index of step 20") for m in thread.messages))
    self.assertTrue(any("training is done" in m for m in thread.messages), list(thread.messages))

  def test_stops_after_max_refreshes(self):
    model_dir = self.get_temp_dir()
    trainer = _FakeTrainer(model_dir, _config(), self.candidates)
    trainer.write_config()
    trainer.save(5)
    published = []

    def training_done(directory):
      del directory
      # No done marker: only --max_refreshes ends this refresher; a look after the refresh is a failure,
      # not a wait for a marker that never comes.
      raise AssertionError(f"polled again after --max_refreshes=1 (published {published})")

    # The refresh itself is the other cases' part: here only the loop's count.
    with mock.patch.object(refresher, "build_and_publish",
                           lambda config, retriever, step, *args: published.append(step)), \
        mock.patch.object(refresher.training_state, "training_done", training_done):
      messages = []
      self.assertEqual(refresher.run(self._options(model_dir, max_refreshes=1), log=messages.append), 1)
    self.assertEqual(published, [5])
    self.assertIn("published 1 indexes (--max_refreshes); exiting", messages)

  def test_done_marker_without_config_exits_at_once(self):
    model_dir = self.get_temp_dir()
    training_state.write_done_marker(model_dir)
    messages = []
    self.assertEqual(refresher.run(self._options(model_dir), log=messages.append), 0)
    self.assertLen(messages, 1)
    self.assertIn("is marked done and has no realm_config.json", messages[0])

  def test_skips_published_early_and_unreadable_checkpoints(self):
    model_dir = self.get_temp_dir()
    trainer = _FakeTrainer(model_dir, _config(), self.candidates)
    trainer.write_config()
    trainer.save(10)
    trainer.finish()
    messages = []
    self.assertEqual(refresher.run(self._options(model_dir, start_at_step=11), log=messages.append), 0)
    self.assertEqual(published_index.published_steps(model_dir), [])
    self.assertEqual(refresher.run(self._options(model_dir), log=messages.append), 1)
    self.assertEqual(refresher.run(self._options(model_dir), log=messages.append), 0)  # already published
    # A checkpoint that holds no retriever is skipped with a warning, not a crash.
    tf.train.CheckpointManager(tf.train.Checkpoint(model=tf.train.Checkpoint(other=tf.Variable(1.0))),
                               model_dir,
                               max_to_keep=5).save(checkpoint_number=30)
    self.assertEqual(refresher.run(self._options(model_dir), log=messages.append), 0)
    self.assertTrue(any(m.startswith("WARNING: skipping") and "ckpt-30" in m for m in messages), messages)
    # No index, and a record that ckpt-30 cannot be read: a trainer waiting for index 30 under
    # --index_swap_steps does not wait for it (realm_input.RetrievalState._fixed_index).
    self.assertEqual(sorted(os.listdir(published_index.index_root(model_dir))),
                     ["10", "unreadable-ckpt-30.json"])
    self.assertEqual(
        published_index.unreadable_checkpoint(model_dir, 30)["checkpoint"],
        os.path.join(model_dir, "ckpt-30"))
    self.assertIsNone(published_index.unreadable_checkpoint(model_dir, 10))

  def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(self):
    model_dir = self.get_temp_dir() + "/damaged"
    trainer = _FakeTrainer(model_dir, _config(), self.candidates)
    trainer.write_config()
    trainer.save(10)
    newest = trainer.save(20)
    trainer.finish()
    data = glob.glob(newest + ".data-*")[0]
    with open(data, "r+b") as f:  # cut in half, as a kill or a full disk during a copy leaves it
      f.truncate(os.path.getsize(data) // 2)
    messages = []
    self.assertEqual(refresher.run(self._options(model_dir), log=messages.append), 1)
    self.assertEqual(published_index.published_steps(model_dir), [10])
    self.assertIndexOf(model_dir, 10, trainer)
    self.assertTrue(any(m.startswith(f"WARNING: skipping {newest}") for m in messages), messages)
    self.assertIn(f"embedding {trainer.manager.checkpoints[0]} instead of the unreadable ckpt-20", messages)
    self.assertIn("cannot restore the retriever",
                  published_index.unreadable_checkpoint(model_dir, 20)["reason"])
    # Nothing readable newer than the newest index: the refresher waits for the next checkpoint.
    os.remove(data)
    messages.clear()
    self.assertEqual(refresher.run(self._options(model_dir), log=messages.append), 0)
    self.assertEqual(published_index.published_steps(model_dir), [10])

  def test_a_damaged_index_of_the_checkpoint_fallen_back_to_is_published_again(self):
    """Found by bench/fault_soak's long soak (seed 44): ckpt-26 (a SIGTERM's) lost its data file and the
    index of step 20 and the bootstrap index were damaged; the trainer resumed from ckpt-20 with no usable
    index and waited for the index of step 20, and the refresher, counting the damaged index of step 20
    as published, waited for a checkpoint newer than ckpt-26. It now embeds ckpt-20 again in place of its
    damaged index, and a watcher that skipped that index takes the new one."""
    model_dir = self.get_temp_dir() + "/damaged_index"
    trainer, index_20 = self._index_20_published(model_dir)
    with open(os.path.join(index_20, published_index.PUBLISHED_NAME), "w") as f:
      f.write("{")
    watcher = published_index.IndexWatcher(model_dir, log=lambda _: None)
    self.assertIsNone(watcher.newest_step())
    self.assertTrue(watcher.is_skipped(20))
    messages = self._refresh_past_an_unreadable_ckpt_26(model_dir, trainer)
    self.assertTrue(any(m.startswith(f"WARNING: removing the damaged index {index_20}") for m in messages),
                    messages)
    self.assertIndexOf(model_dir, 20, trainer)
    self.assertFalse(watcher.is_skipped(20))
    self.assertEqual(watcher.newest_step(), 20)
    self.assertEqual(os.listdir(published_index.index_root(model_dir)).count("20"), 1)
    self.assertEmpty([n for n in os.listdir(published_index.index_root(model_dir)) if n.startswith(".tmp-")])

  def _index_20_published(self, model_dir):
    """A finished fake trainer with ckpt-10 and ckpt-20, and the refresher's run that published the index
    of step 20 only; returns the trainer and that index's directory."""
    trainer = _FakeTrainer(model_dir, _config(), self.candidates)
    trainer.write_config()
    trainer.save(10)
    trainer.save(20)
    trainer.finish()
    self.assertEqual(refresher.run(self._options(model_dir), log=lambda _: None), 1)
    self.assertEqual(published_index.published_steps(model_dir), [20])
    return trainer, os.path.join(published_index.index_root(model_dir), "20")

  def _refresh_past_an_unreadable_ckpt_26(self, model_dir, trainer):
    """A newest checkpoint (26) without its data file, then the refresher's run: it embeds ckpt-20
    instead. Returns what the refresher logged."""
    training_state.clear_done_marker(model_dir)
    newest = trainer.save(26)
    for data in glob.glob(newest + ".data-*"):
      os.remove(data)
    trainer.finish()
    messages = []
    self.assertEqual(refresher.run(self._options(model_dir), log=messages.append), 1)
    self.assertIn(f"embedding {os.path.join(model_dir, 'ckpt-20')} instead of the unreadable ckpt-26",
                  messages)
    return messages

  def test_an_index_whose_query_tower_lost_its_variables_is_published_again(self):
    """The long soak's fourth run: index 150's query tower lost its variables file, which the checksums
    (MIPS files only) do not cover; the refresher counted the index as usable and embedded no older
    checkpoint, while the trainer, resumed from ckpt-130, could load no index and waited."""
    model_dir = self.get_temp_dir() + "/damaged_tower"
    trainer, index_20 = self._index_20_published(model_dir)
    for data in glob.glob(
        os.path.join(index_20, published_index.QUERY_EMBEDDER_DIR, "variables", "variables.data-*")):
      os.remove(data)
    published_index.verify_published(index_20)  # the checksums do not see it
    self.assertIsNotNone(published_index.usable(model_dir, 20))
    self.assertIsNotNone(published_index.looks_damaged(model_dir, 20))
    self._refresh_past_an_unreadable_ckpt_26(model_dir, trainer)
    self.assertIndexOf(model_dir, 20, trainer)

  def test_an_idle_refresher_embeds_the_newest_checkpoint_again_when_its_index_is_damaged(self):
    """The index of the newest checkpoint damaged after publication, while the refresher waits for a newer
    checkpoint: a trainer resumed from that checkpoint with no other usable index would wait for the
    index for ever, and the newer checkpoint the refresher waits for never comes."""
    model_dir = self.get_temp_dir() + "/idle"
    trainer = _FakeTrainer(model_dir, _config(), self.candidates)
    trainer.write_config()
    trainer.save(10)
    index_10 = os.path.join(published_index.index_root(model_dir), "10")
    with mock.patch.object(refresher, "DAMAGE_LOOK_SECONDS", 0.5):
      thread = _RefresherThread(self._options(model_dir))
      thread.start()
      try:
        self._wait_for(self._published(model_dir, 10), "publishing the index of step 10", thread, seconds=120)
        record = published_index.verify_published(index_10)
        embeddings = os.path.join(index_10, published_index.MIPS_DIR, "embeddings.npy")
        with open(embeddings, "r+b") as f:
          f.truncate(os.path.getsize(embeddings) // 2)
        self._wait_for(lambda: published_index.usable(model_dir, 10) is None,
                       "publishing the index of step 10 again",
                       thread,
                       seconds=120)
      finally:
        trainer.finish()
        thread.join(60)
    self.assertFalse(thread.is_alive())
    self.assertIsNone(thread.error)
    self.assertEqual(thread.result, 2)
    self.assertTrue(any(m.startswith("the index of step 10 is damaged") for m in thread.messages),
                    thread.messages)
    self.assertGreater(
        published_index.verify_published(index_10)["published_unix_time"], record["published_unix_time"])
    self.assertIndexOf(model_dir, 10, trainer)

  def test_removes_temporary_directories_of_a_killed_refresher(self):
    model_dir = self.get_temp_dir()
    exited = subprocess.Popen(["true"])  # a pid whose process is gone, as a killed refresher's
    exited.wait()
    leftover = os.path.join(published_index.index_root(model_dir), f".tmp-7-{exited.pid}-0badf00d")
    os.makedirs(os.path.join(leftover, "mips"))
    # A record of an unreadable checkpoint that its writer did not rename into place: a file.
    record = os.path.join(published_index.index_root(model_dir),
                          f".tmp-unreadable-ckpt-30.json-{exited.pid}-0badf00d")
    with open(record, "w") as f:
      f.write("{")
    training_state.write_done_marker(model_dir)
    refresher.run(self._options(model_dir), log=lambda message: None)
    self.assertFalse(os.path.exists(leftover))
    self.assertFalse(os.path.exists(record))

  def test_says_it_waits_once_per_wait(self):
    model_dir = self.get_temp_dir()
    trainer = _FakeTrainer(model_dir, _config(), self.candidates)
    trainer.write_config()
    looks = []

    def training_done(directory):
      looks.append(directory)
      if len(looks) == 10:
        trainer.save(5)  # a checkpoint after 9 idle polls, then 10 more idle polls, then done
      return len(looks) >= 21

    messages = []
    published = []
    # The refresh between the waits is the other cases' part: here only what the loop says.
    with mock.patch.object(refresher.training_state, "training_done", training_done), \
        mock.patch.object(refresher, "build_and_publish",
                          lambda config, retriever, step, *args: published.append(step)):
      self.assertEqual(refresher.run(self._options(model_dir, poll_seconds=0.01), log=messages.append), 1)
    self.assertEqual(published, [5])
    waits = [m for m in messages if m.startswith("waiting")]
    self.assertEqual(waits, [
        f"waiting for the trainer's first checkpoint (ckpt-<step>) in {model_dir}",
        f"waiting for a checkpoint newer than ckpt-5 in {model_dir}"
    ])

  def test_short_poll_seconds_sleeps_between_looks(self):
    # A polling loop must sleep between looks rather than spin on the directory.
    model_dir = self.get_temp_dir()
    _config().save(model_dir)
    looks = []

    def training_done(directory):
      looks.append(directory)
      return len(looks) >= 4

    sleeps = []
    fake_time = mock.Mock(wraps=time)
    fake_time.sleep.side_effect = lambda seconds: (sleeps.append(seconds), time.sleep(seconds))
    with mock.patch.object(refresher, "time", fake_time), \
        mock.patch.object(refresher.training_state, "training_done", training_done):
      self.assertEqual(refresher.run(self._options(model_dir, poll_seconds=0.5), log=lambda message: None), 0)
    # One look per timeout (the done marker is seen twice before exiting), each after a sleep.
    self.assertLen(looks, 5)
    self.assertGreaterEqual(len([s for s in sleeps if s > 0]), 4, sleeps)

  def test_bootstrap_from_an_ict_checkpoint_publishes_step_0(self):
    model_dir = os.path.join(self.get_temp_dir(), "realm")
    ict_dir = os.path.join(self.get_temp_dir(), "ict")
    config = _config(embedder_layer_norm_epsilon=1e-3)
    tf_keras.utils.set_random_seed(7)
    ict_embedder = embedder_lib.RetrieverEmbedder(config.retriever_bert,
                                                  config.projection_size,
                                                  layer_norm_epsilon=1e-3,
                                                  name="embedder")
    ict_embedder(tuple(tf.zeros([1, 8], tf.int32) for _ in range(3)))
    ict_path = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=tf.train.Checkpoint(embedder=ict_embedder)), ict_dir,
        max_to_keep=1).save(checkpoint_number=400)
    messages = []
    path = refresher.bootstrap(config, ict_dir, self._options(model_dir), log=messages.append)
    self.assertEqual(path, os.path.join(model_dir, "index", "0"))
    self.assertEqual(published_index.published_steps(model_dir), [0])
    record = published_index.verify_published(path)
    self.assertTrue(record["bootstrap"])
    self.assertEqual(record["checkpoint"], ict_path)
    self.assertEqual(record["implementation"], "brute_force")
    loaded = published_index.load_published(path)
    self.assertAllClose(loaded.mips.embeddings, ict_embedder(self.candidates, training=False), atol=1e-5)
    query_inputs = _query_inputs()
    self.assertAllClose(loaded.embed_queries(*query_inputs),
                        ict_embedder(tuple(tf.constant(x) for x in query_inputs), training=False),
                        atol=1e-5)

  def test_binary_publishes_a_compressed_index_embedded_in_bfloat16(self):
    model_dir = os.path.join(self.get_temp_dir(), "realm_bf16")
    trainer = _FakeTrainer(model_dir, _config(), self.candidates)
    trainer.write_config()
    trainer.save(10)
    trainer.finish()
    # The binary's main() in this process (realm_tf/testing/in_process), without a second TensorFlow start:
    # its flags, parsed as a process parses them, set the precision and the index options, and it returns
    # (exit status 0) once training is done. bin/refresh_doc_embeds runs as a process in
    # reliability_processes_test, demo_pipeline_test and binaries_test.
    try:
      result = in_process.run_main("refresh_doc_embeds.py", f"--model_dir={model_dir}",
                                   f"--retrieval_corpus_path={self.corpus_prefix}", "--poll_seconds=0.01",
                                   "--index_implementation=scann", "--index_rescoring=int8",
                                   "--mixed_precision=mixed_bfloat16", "--noembed_jit_compile",
                                   "--batch_size=8", "--embed_length_buckets=1")
    finally:
      # --mixed_precision set Keras's global policy, which a process would drop at its exit: the models
      # of the next tests are float32.
      tf_keras.mixed_precision.set_global_policy("float32")
    self.assertIsNone(result.error, result.traceback)
    self.assertIn("training is done", result.log)
    self.assertIn(
        "mixed_bfloat16, without XLA (forced: --mixed_precision=mixed_bfloat16 "
        "--noembed_jit_compile)", result.log)
    path = os.path.join(published_index.index_root(model_dir), "10")
    loaded = published_index.load_published(path)
    self.assertEqual(loaded.mips.parameters["rescoring"], "int8")
    self.assertEqual(loaded.mips.manifest["dtype"], "int8")
    got, want = loaded.mips.embeddings, trainer.doc_embeddings[10]
    self.assertGreater(np.max(np.abs(got - want)), 1e-4)  # bfloat16 and int8, not float32 ...
    cosine = np.sum(got * want, -1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1))
    self.assertGreater(cosine.min(), 0.99)  # ... and close to it

  def test_int8_rescoring_needs_scann(self):
    options = self._options(self.get_temp_dir(), index_rescoring="int8")
    with self.assertRaisesRegex(ValueError, "--index_rescoring=int8 needs --index_implementation=scann"):
      refresher.index_build_options(options)
    self.assertEqual(
        refresher.index_build_options(self._options(self.get_temp_dir(), index_implementation="scann")),
        {"rescoring": "float32"})


class CorpusBindingTest(tf.test.TestCase):
  """An index records its corpus; a trainer's IndexWatcher skips an index of another corpus."""

  def test_trainer_skips_an_index_of_another_corpus_with_one_warning(self):
    directory = self.create_tempdir().full_path
    documents = []
    for doc in corpus_lib.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")):
      documents.append(doc)
      if len(documents) == _NUM_DOCS:
        break
    tokenizer = tokenization.Tokenizer(_VOCAB)
    ours, shuffled = os.path.join(directory, "ours"), os.path.join(directory, "shuffled")
    corpus_lib.write_corpus(lambda: documents, tokenizer, ours, num_shards=1)
    # The same count, other rows: the case a document count cannot catch.
    corpus_lib.write_corpus(lambda: documents[::-1], tokenizer, shuffled, num_shards=1)
    model_dir = os.path.join(directory, "realm")
    trainer = _FakeTrainer(model_dir, _config(), None)
    trainer.write_config()
    retriever = trainer.retriever

    def options(corpus_prefix):
      return refresher.RefresherOptions(model_dir=model_dir,
                                        corpus_prefix=corpus_prefix,
                                        index_implementation="brute_force",
                                        batch_size=8,
                                        embed_jit_compile=False)

    # The rows embedded eagerly: what is checked is the corpus each index records, not its rows (the
    # refresher's embedding is RefresherTest's part).
    featurizer = trainer.config.featurizer(tokenizer)

    def embedder(corpus_prefix, **unused):
      rows = list(corpus_lib.read_corpus(corpus_prefix))
      inputs = featurizer.candidate_inputs(tf.ragged.constant([r["title_token_ids"] for r in rows], tf.int64),
                                           tf.ragged.constant([r["body_token_ids"] for r in rows], tf.int64))
      return retriever.embed_documents(tuple(inputs), training=False).numpy()

    for step, corpus_prefix in ((10, ours), (20, shuffled)):
      refresher.build_and_publish(trainer.config,
                                  retriever,
                                  step,
                                  options(corpus_prefix),
                                  log=lambda m: None,
                                  embedder=embedder)
    record = published_index.verify_published(os.path.join(published_index.index_root(model_dir), "20"))
    self.assertEqual(record["corpus_fingerprint"], corpus_lib.fingerprint(shuffled))
    self.assertNotEqual(corpus_lib.fingerprint(ours), corpus_lib.fingerprint(shuffled))
    warnings = []
    watcher = published_index.IndexWatcher(model_dir, warnings.append, corpus_prefix=ours)
    self.assertEqual(watcher.load_newer(None).step, 10)
    self.assertIsNone(watcher.load_newer(10))  # asked again: still skipped, not warned again
    self.assertLen(warnings, 1)
    for part in ("index/20", shuffled, ours, "--retrieval_corpus_path=" + ours, "delete"):
      self.assertIn(part, warnings[0])
    # Without a corpus to compare with (tools that read any index), the newest is taken.
    self.assertEqual(published_index.IndexWatcher(model_dir, self.fail).newest_step(), 20)


class _Notifying(list):
  """A log list that sets an event when a line containing `text` is appended."""

  def __init__(self, event: threading.Event, text: str):
    super().__init__()
    self._event = event
    self._text = text

  def append(self, message):
    super().append(message)
    if self._text in message:
      self._event.set()


if __name__ == "__main__":
  tf.test.main()
