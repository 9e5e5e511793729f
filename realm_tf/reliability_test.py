"""Fault injection in one process: start order, full or unwritable disks, corrupt inputs, hostile queries,
and an audit of how the sources write their outputs (docs/reliability.md lists them all).

The subprocess faults (SIGKILL of bin/refresh_doc_embeds) are in reliability_processes_test.py; SIGKILL of
bin/train_realm and its resume are in bin/demo_pipeline_test.py.
"""

import ast
import gzip
import io
import json
import os
import re
import threading
import tokenize
from unittest import mock

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import io_utils
from realm_tf import tokenization
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import corpus_table
from realm_tf.data import pretraining
from realm_tf.data import qa
from realm_tf.data import text_records
from realm_tf.modeling import bert
from realm_tf.modeling import losses
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import index_format
from realm_tf.retrieval import mips_index
from realm_tf.retrieval import published_index
from realm_tf.retrieval import refresher
from realm_tf.tasks import realm_input
from realm_tf.training import loop

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TESTDATA = os.path.join(_REPO, "testdata")
_VOCAB = os.path.join(_TESTDATA, "vocab.txt")
_VOCAB_SIZE = 285
_NUM_DOCS = 12
_DIM = 32
_DEADLINE_SECONDS = 240  # only turns a hang into a failure; never a speed assertion
_ENOSPC = "No space left on device"
# The corpus embedding's XLA programs (one per length bucket) are not what this file checks
# (corpus_embedding_test and refresher_test's binary compile them): one traced shape instead.
_NO_XLA_EMBEDDING = dict(embed_jit_compile=False, embed_length_buckets=1)


def _config(**overrides) -> realm_config_lib.RealmConfig:
  small = bert.tiny_config(_VOCAB_SIZE, hidden_size=32, num_layers=1, intermediate_size=64)
  values = dict(retriever_bert=small,
                reader_bert=small,
                vocab_path=_VOCAB,
                projection_size=_DIM,
                query_seq_len=16,
                candidate_seq_len=32,
                max_masks=4,
                num_candidates=4)
  values.update(overrides)
  return realm_config_lib.RealmConfig(**values)


def _no_space(*args, **kwargs):
  del args, kwargs
  raise tf.errors.ResourceExhaustedError(None, None, _ENOSPC)


class _CheapQueryTower(tf.Module):
  """A query tower of any dimension that costs nothing to export: sum(ids * mask) * [1..dim]."""

  def __init__(self, dim: int):
    super().__init__()
    self.dim = dim
    self.scale = tf.Variable(1.0)

  def __call__(self, inputs, training=None):
    token_ids, mask, _ = inputs
    total = tf.reduce_sum(tf.cast(token_ids * mask, tf.float32), axis=-1, keepdims=True)
    return total * tf.range(1.0, self.dim + 1.0) * self.scale


def _publish_cheap(model_dir: str, step: int, dim: int = _DIM, num_docs: int = _NUM_DOCS) -> str:
  embeddings = np.random.default_rng(step).normal(size=(num_docs, dim)).astype(np.float32)
  mips = index_lib.build_index(embeddings, implementation="brute_force")
  return published_index.publish_index(model_dir,
                                       step,
                                       mips,
                                       _CheapQueryTower(dim),
                                       keep=5,
                                       log=lambda message: None)


def _leftovers(root: str):
  """Every temporary (.tmp-*) file or directory anywhere under root."""
  found = []
  for directory, dirs, files in os.walk(root):
    found += [os.path.join(directory, n) for n in dirs + files if io_utils.is_temporary(n)]
  return found


class _Fixture:
  """A small retrieval corpus and an index published from a real (tiny) retriever, shared by tests."""

  ready = False

  @classmethod
  def get(cls):
    if not cls.ready:
      cls.directory = os.path.join(tf.compat.v1.test.get_temp_dir(), "reliability_fixture")
      tf.io.gfile.makedirs(cls.directory)
      documents = []
      for doc in corpus_lib.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")):
        documents.append(doc)
        if len(documents) == _NUM_DOCS:
          break
      cls.tokenizer = tokenization.Tokenizer(_VOCAB)
      cls.corpus_prefix = os.path.join(cls.directory, "corpus", "blocks")
      corpus_lib.write_corpus(lambda: documents, cls.tokenizer, cls.corpus_prefix, num_shards=2)
      cls.config = _config()
      tf_keras.utils.set_random_seed(3)
      cls.retriever = cls.config.build_retriever()
      cls.model_dir = os.path.join(cls.directory, "published")
      # The real retriever's query tower, published beside an index of placeholder document vectors:
      # the users of the fixture read the query tower and the corpus, never the document vectors (the
      # refresher's own embed-and-publish runs in StartOrderTest).
      embeddings = np.random.default_rng(5).normal(size=(_NUM_DOCS, _DIM)).astype(np.float32)
      cls.index_path = published_index.publish_index(cls.model_dir,
                                                     5,
                                                     index_lib.build_index(embeddings,
                                                                           implementation="brute_force"),
                                                     cls.retriever.query_embedder,
                                                     keep=5,
                                                     log=lambda message: None)
      cls.loaded = published_index.load_published(cls.index_path)
      cls.ready = True
    return cls


class _RefresherThread(threading.Thread):

  def __init__(self, options: refresher.RefresherOptions, on_message):
    super().__init__(daemon=True)
    self.options = options
    self.messages = []
    self.result = None
    self.error = None
    self._on_message = on_message

  def _log(self, message):
    self.messages.append(message)
    self._on_message(message)

  def run(self):
    try:
      self.result = refresher.run(self.options, log=self._log)
    except Exception as e:  # pylint: disable=broad-except
      self.error = e


# ----------------------------------------------------------------------------------------------------
# Item 3: start order.


class StartOrderTest(tf.test.TestCase):

  def test_refresher_started_before_any_checkpoint_waits_then_publishes(self):
    fixture = _Fixture.get()
    model_dir = os.path.join(self.get_temp_dir(), "realm")
    config = fixture.config
    config.save(model_dir)  # the trainer has started, but has not checkpointed yet
    waiting = threading.Event()
    thread = _RefresherThread(
        refresher.RefresherOptions(model_dir=model_dir,
                                   corpus_prefix=fixture.corpus_prefix,
                                   index_implementation="brute_force",
                                   batch_size=4,
                                   poll_seconds=0.2,
                                   max_refreshes=1,
                                   **_NO_XLA_EMBEDDING),
        lambda message: "first checkpoint" in message and waiting.set())
    thread.start()
    self.assertTrue(waiting.wait(_DEADLINE_SECONDS), f"no waiting line: {thread.messages} "
                    f"{thread.error}")
    self.assertIn(f"waiting for the trainer's first checkpoint (ckpt-<step>) in {model_dir}", thread.messages)
    self.assertTrue(thread.is_alive())
    self.assertEqual(published_index.published_steps(model_dir), [])
    retriever = config.build_retriever()
    tf.train.CheckpointManager(tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=retriever)),
                               model_dir,
                               max_to_keep=2).save(checkpoint_number=3)
    thread.join(_DEADLINE_SECONDS)
    self.assertFalse(thread.is_alive(), "the refresher did not publish and exit")
    self.assertIsNone(thread.error)
    self.assertEqual(thread.result, 1)
    self.assertEqual(published_index.published_steps(model_dir), [3])
    published_index.verify_published(os.path.join(model_dir, "index", "3"))

  def test_trainer_without_an_index_waits_and_times_out_naming_the_model_dir(self):
    fixture = _Fixture.get()
    model_dir = os.path.join(self.get_temp_dir(), "no_index")
    messages = []
    state = realm_input.RetrievalState(published_index.IndexWatcher(model_dir, log=messages.append),
                                       corpus_table.CorpusTable.load(fixture.corpus_prefix),
                                       num_candidates=4,
                                       wait_timeout_seconds=0.2,
                                       log=messages.append,
                                       expected_dim=_DIM)
    with self.assertRaises(TimeoutError) as raised:
      state.ensure_index()
    self.assertIn(model_dir, str(raised.exception))
    self.assertLen(messages, 1, messages)  # announced once, not on every look
    self.assertIn(
        f"waiting for bin/refresh_doc_embeds to publish a first index under "
        f"{os.path.join(model_dir, 'index')}", messages[0])
    self.assertIsNone(state.index)
    # A clean timeout: once an index appears, the same state picks it up.
    _publish_cheap(model_dir, 4)
    state.ensure_index()
    self.assertEqual(state.index.step, 4)


# ----------------------------------------------------------------------------------------------------
# Item 4: a full or unwritable model dir; a publication that fails midway.


class _Regression(tf_keras.Model):
  """The smallest model loop.train accepts: y = w.x + b, a squared-error loss sum."""

  def __init__(self):
    super().__init__()
    self.dense = tf_keras.layers.Dense(1, kernel_initializer="zeros")

  def call(self, x):
    return self.dense(x)

  def compute_loss(self, features, training=None):
    error = self(features["x"]) - features["y"]
    loss_sum = tf.reduce_sum(tf.square(error))
    weight = tf.cast(tf.shape(error)[0], tf.float32)
    return losses.LossOutput(loss_sum, weight, {"mse": (loss_sum, weight)})


def _regression_batches(batches_done: int) -> tf.data.Dataset:
  x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0
  y = x.sum(axis=1, keepdims=True) + 1.0
  return tf.data.Dataset.from_tensors({"x": x, "y": y}).repeat().skip(batches_done)


def _build_regression():
  model = _Regression()
  model(tf.zeros([1, 3]))
  return model, tf_keras.optimizers.legacy.SGD(0.05)


class CheckpointFaultTest(tf.test.TestCase):

  def _options(self, model_dir, steps):
    return loop.LoopOptions(model_dir=model_dir,
                            num_train_steps=steps,
                            save_checkpoints_steps=2,
                            keep_checkpoint_max=5,
                            log_every_steps=100,
                            jit_compile=False)

  def test_disk_full_after_a_first_checkpoint(self):
    model_dir = os.path.join(self.get_temp_dir(), "full")
    index_path = _publish_cheap(model_dir, 0)  # the refresher's bootstrap index shares the model dir
    model, optimizer = _build_regression()
    weights_at = {}

    def after_step(step, metrics):
      weights_at[step] = [v.numpy().copy() for v in model.weights]
      return {}

    real_save = tf.train.CheckpointManager.save
    saves = []

    def save_until_full(manager, *args, **kwargs):
      saves.append(kwargs.get("checkpoint_number"))
      if len(saves) > 1:  # the disk fills up after the first checkpoint
        raise tf.errors.ResourceExhaustedError(None, None,
                                               f"{manager.directory}/ckpt-{saves[-1]}_temp; {_ENOSPC}")
      return real_save(manager, *args, **kwargs)

    messages = []
    with mock.patch.object(tf.train.CheckpointManager, "save", save_until_full):
      with self.assertRaises(loop.CheckpointWriteError) as raised:
        loop.train(model,
                   optimizer,
                   tf.distribute.get_strategy(),
                   _regression_batches,
                   self._options(model_dir, 6),
                   after_step=after_step,
                   log=messages.append)
    message = str(raised.exception)
    self.assertIn(f"cannot write checkpoint ckpt-4 into {model_dir}", message)
    self.assertIn(_ENOSPC, message)
    self.assertIn("Earlier checkpoints are untouched", message)
    self.assertEqual(saves, [2, 4])

    # The earlier checkpoint is intact and holds exactly the weights of its step.
    self.assertEqual(tf.train.latest_checkpoint(model_dir), os.path.join(model_dir, "ckpt-2"))
    fresh, fresh_optimizer = _build_regression()
    tf.train.Checkpoint(model=fresh, optimizer=fresh_optimizer).restore(os.path.join(
        model_dir, "ckpt-2")).assert_existing_objects_matched()
    for restored, saved in zip(fresh.weights, weights_at[2]):
      self.assertAllEqual(restored.numpy(), saved)
    self.assertNotAllClose(weights_at[2][0], weights_at[4][0])  # so equality identifies step 2
    # The published index beside it is intact and loadable.
    published_index.verify_published(index_path)
    self.assertEqual(published_index.IndexWatcher(model_dir).load_newer(None).step, 0)

    # Space freed: a restart resumes from the surviving checkpoint and finishes.
    messages = []
    model, optimizer = _build_regression()
    loop.train(model,
               optimizer,
               tf.distribute.get_strategy(),
               _regression_batches,
               self._options(model_dir, 6),
               log=messages.append)
    self.assertIn(f"resumed from {os.path.join(model_dir, 'ckpt-2')} at step 2", messages)
    self.assertEqual(tf.train.latest_checkpoint(model_dir), os.path.join(model_dir, "ckpt-6"))

  def test_model_dir_under_a_file(self):
    blocker = os.path.join(self.get_temp_dir(), "a_file")
    with open(blocker, "w") as f:
      f.write("not a directory\n")
    model_dir = os.path.join(blocker, "model")
    model, optimizer = _build_regression()
    with self.assertRaisesRegex(
        loop.CheckpointWriteError, f"cannot create the model dir {re.escape(model_dir)}: .*not a "
        "directory.*writable --model_dir"):
      loop.train(model,
                 optimizer,
                 tf.distribute.get_strategy(),
                 _regression_batches,
                 self._options(model_dir, 2),
                 log=lambda message: None)
    with open(blocker) as f:
      self.assertEqual(f.read(), "not a directory\n")


class PublishFaultTest(tf.test.TestCase):

  def test_publication_failing_midway_leaves_nothing_and_keeps_the_previous_index(self):
    real_write_npy = index_format.write_npy
    real_saved_model_save = tf.saved_model.save

    def npy_full_at_embeddings(path, *args, **kwargs):
      if path.endswith(index_format.EMBEDDINGS_NAME):
        with open(path, "wb") as f:
          f.write(b"\x93NUMPY partial")
        raise OSError(28, _ENOSPC, path)
      return real_write_npy(path, *args, **kwargs)

    def saved_model_then_full(obj, export_dir, *args, **kwargs):
      real_saved_model_save(obj, export_dir, *args, **kwargs)
      raise tf.errors.ResourceExhaustedError(None, None, f"{export_dir}: {_ENOSPC}")

    real_write_json_atomic = io_utils.write_json_atomic

    def json_full_at_published(path, value):
      if os.path.basename(path) == published_index.PUBLISHED_NAME:
        _no_space()
      real_write_json_atomic(path, value)

    faults = {
        "MipsIndex.save": (mock.patch.object(mips_index.MipsIndex, "save",
                                             _no_space), tf.errors.ResourceExhaustedError),
        "embeddings.npy half written": (mock.patch.object(index_format, "write_npy",
                                                          npy_full_at_embeddings), OSError),
        "tf.saved_model.save": (mock.patch.object(tf.saved_model, "save",
                                                  _no_space), tf.errors.ResourceExhaustedError),
        "after the SavedModel": (mock.patch.object(tf.saved_model, "save",
                                                   saved_model_then_full), tf.errors.ResourceExhaustedError),
        "published.json": (mock.patch.object(published_index.io_utils, "write_json_atomic",
                                             json_full_at_published), tf.errors.ResourceExhaustedError),
    }
    for name, (patch, error) in faults.items():
      with self.subTest(fault=name):
        model_dir = os.path.join(self.get_temp_dir(), re.sub(r"\W", "_", name))
        _publish_cheap(model_dir, 1)
        root = published_index.index_root(model_dir)
        with patch, self.assertRaisesRegex(
            published_index.IndexWriteError, f"index of step 2 into {re.escape(root)}: .*{_ENOSPC}.*"
            "untouched; free space") as raised:
          _publish_cheap(model_dir, 2)
        self.assertIsInstance(raised.exception.__cause__, error)
        self.assertEqual(os.listdir(root), ["1"])  # nothing under the final name, no .tmp leftovers
        self.assertEqual(_leftovers(root), [])
        published_index.verify_published(os.path.join(root, "1"))
        self.assertEqual(published_index.IndexWatcher(model_dir).load_newer(None).step, 1)
        # The fault gone, the same step publishes normally.
        _publish_cheap(model_dir, 2)
        self.assertEqual(published_index.published_steps(model_dir), [1, 2])


# ----------------------------------------------------------------------------------------------------
# Item 5: corrupt inputs.


def _write(path: str, data: bytes) -> str:
  with open(path, "wb") as f:
    f.write(data)
  return path


def _truncate_to_half(path: str) -> None:
  with open(path, "rb") as f:
    data = f.read()
  _write(path, data[:len(data) // 2])


class CorruptInputTest(tf.test.TestCase):

  def test_truncated_retrieval_corpus_shard_names_the_shard_and_record(self):
    fixture = _Fixture.get()
    prefix = os.path.join(self.get_temp_dir(), "blocks")
    documents = list(corpus_lib.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")))[:40]
    corpus_lib.write_corpus(lambda: documents, fixture.tokenizer, prefix, num_shards=2)
    shards = corpus_lib.corpus_shards(prefix)
    _truncate_to_half(shards[1])
    read = []
    with self.assertRaisesRegex(
        text_records.InputError, rf"^{re.escape(shards[1])}: record (\d+) \(0-based\) cannot be read: "
        r"the shard is truncated or corrupt \(.*truncated.*\); regenerate the "
        "corpus with bin/generate_retrieval_corpus$") as raised:
      for document in corpus_lib.read_corpus(prefix):
        read.append(document)
    record = int(re.search(r"record (\d+)", str(raised.exception)).group(1))
    self.assertEqual(len(read), 20 + record)  # every document before the damage was read
    self.assertEqual([d["title"] for d in read], [d.title for d in documents[:len(read)]])

  def test_truncated_pretraining_shard_names_the_shard_and_record(self):
    prefix = os.path.join(self.get_temp_dir(), "sentences")
    documents = list(pretraining.read_raw_documents(os.path.join(_TESTDATA, "pretraining.jsonl")))[:40]
    pretraining.write_pretraining_corpus(lambda: documents, prefix, num_shards=2)
    shards = pretraining.pretraining_shards(prefix)
    _truncate_to_half(shards[0])
    read = []
    with self.assertRaisesRegex(
        text_records.InputError, rf"^{re.escape(shards[0])}: record (\d+) \(0-based\) cannot be read: "
        r"the shard is truncated or corrupt .*bin/generate_pretraining_corpus") as raised:
      for document in pretraining.read_pretraining_corpus(prefix):
        read.append(document)
    record = int(re.search(r"record (\d+)", str(raised.exception)).group(1))
    self.assertLen(read, record)
    self.assertGreater(record, 0)

  def test_shard_that_ends_cleanly_but_early_is_reported_against_its_manifest(self):
    # A shard rewritten with fewer records is a valid GZIP file: only the manifest's count shows it.
    prefix = os.path.join(self.get_temp_dir(), "short")
    documents = list(pretraining.read_raw_documents(os.path.join(_TESTDATA, "pretraining.jsonl")))[:6]
    pretraining.write_pretraining_corpus(lambda: documents, prefix, num_shards=2)
    shard = pretraining.pretraining_shards(prefix)[1]
    records = list(tf.data.TFRecordDataset(shard, compression_type="GZIP").as_numpy_iterator())
    with tf.io.TFRecordWriter(shard, options="GZIP") as writer:
      writer.write(records[0])
    with self.assertRaisesRegex(
        text_records.InputError, rf"^{re.escape(shard)}: record 1 \(0-based\) cannot be read: the shard "
        r"is truncated or corrupt \(it ends after 1 of the 3 records"):
      list(pretraining.read_pretraining_corpus(prefix))

  def test_garbage_shard_is_named_too(self):
    # Not GZIP at all (e.g. a shard overwritten by another tool).
    prefix = os.path.join(self.get_temp_dir(), "blocks")
    documents = list(corpus_lib.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")))[:4]
    corpus_lib.write_corpus(lambda: documents, _Fixture.get().tokenizer, prefix, num_shards=1)
    shard = corpus_lib.corpus_shards(prefix)[0]
    _write(shard, gzip.compress(b"\x00" * 64))
    with self.assertRaisesRegex(text_records.InputError, rf"^{re.escape(shard)}: record 0 "):
      list(corpus_lib.read_corpus(prefix))

  def _bad_jsonl(self, field: str) -> str:
    lines = [
        json.dumps({
            "title": "Good one",
            field: "Ann Bell lives in Oakford."
        }).encode(),
        b'{"title": "Broken", ' + field.encode() + b': ',  # 2 malformed JSON
        json.dumps({
            "title": " ",
            field: "  "
        }).encode(),  # 3 empty document
        b'{"title": "Bad \xff\xfe bytes", "' + field.encode() + b'": "x"}',  # 4 invalid UTF-8
        b"[1, 2, 3]",  # 5 not an object
        b"[" * 50000 + b"]" * 50000,  # 6 nested too deeply
        json.dumps({
            "title": 7,
            field: "not a string title"
        }).encode(),  # 7 wrong type
        json.dumps({
            "title": "Good two",
            field: "Cara Dunn was born in 1901."
        }).encode(),
    ]
    return _write(os.path.join(self.get_temp_dir(), f"docs_{field}.jsonl"), b"\n".join(lines) + b"\n")

  def test_malformed_jsonl_documents_name_file_and_line_or_are_skipped_and_counted(self):
    readers = {
        "retrieval corpus": (lambda path, skipped: corpus_lib.read_documents(path, skipped), "body"),
        "pre-training corpus": (lambda path, skipped: pretraining.read_raw_documents(path, skipped), "text"),
    }
    expected = {
        2: "not a JSON object",
        3: "empty title and",
        4: "not valid UTF-8",
        5: "expected a JSON object, got list",
        6: "nested too deeply",
        7: "must be strings"
    }
    for name, (read, field) in readers.items():
      with self.subTest(reader=name):
        path = self._bad_jsonl(field)
        lines = open(path, "rb").read().split(b"\n")
        for line_number, what in expected.items():
          single = _write(os.path.join(self.get_temp_dir(), "single.jsonl"),
                          lines[0] + b"\n" + lines[line_number - 1] + b"\n")
          with self.assertRaisesRegex(text_records.InputError,
                                      rf"^{re.escape(single)}:2: .*{what}.*--skip_invalid"):
            list(read(single, None))
        skipped = text_records.SkipCounter()
        documents = list(read(path, skipped))
        self.assertEqual([d.title for d in documents], ["Good one", "Good two"])
        self.assertEqual(skipped.count, len(expected))
        self.assertStartsWith(skipped.summary("documents"), "6 invalid documents skipped, e.g.: "
                              f"{path}:2: ")

  def test_malformed_tsv_documents_name_file_and_line_or_are_skipped_and_counted(self):
    path = _write(
        os.path.join(self.get_temp_dir(), "docs.tsv"),
        b"id\ttext\ttitle\n"
        b"1\tAnn Bell lives in Oakford.\tGood one\n"
        b"2\tonly two columns\n"  # 3 wrong column count
        b"3\t\xff\xfe bad bytes\tBad\n"  # 4 invalid UTF-8
        b"4\t \t \n"  # 5 empty document
        b'5\t"unterminated\tQuote\n'  # 6 malformed quoting, runs to the end
    )
    skipped = text_records.SkipCounter()
    self.assertEqual([d.title for d in corpus_lib.read_documents(path, skipped)], ["Good one"])
    self.assertEqual(skipped.count, 4, skipped.examples)
    self.assertEqual([e.split(": ")[0] for e in skipped.examples], [f"{path}:{n}" for n in (3, 4, 5, 6)])
    with self.assertRaisesRegex(text_records.InputError, rf"^{re.escape(path)}:3: 2 tab-separated"):
      list(corpus_lib.read_documents(path))

  def test_questions_without_answers(self):
    directory = self.get_temp_dir()
    jsonl = _write(
        os.path.join(directory, "qa.jsonl"), b"\n".join([
            b'{"question": "who?", "answer": ["Ann"]}',
            b'{"question": "no field?"}',
            b'{"question": "empty list?", "answer": []}',
            b'{"question": "empty string?", "answer": [""]}',
            b'{"question": "", "answer": ["x"]}',
        ]) + b"\n")
    skipped = qa.SkipCounter()
    self.assertEqual([e.question for e in qa.load_jsonl(jsonl, skipped=skipped)], ["who?"])
    self.assertEqual([e.split(": ")[0] for e in skipped.examples], [f"{jsonl}:{n}" for n in (2, 3, 4, 5)])
    with self.assertRaisesRegex(qa.InputError, rf"^{re.escape(jsonl)}:2: no \"answer\" field"):
      qa.load_jsonl(jsonl)
    # A prediction-only file may lack answers, when asked for explicitly.
    self.assertLen(qa.load_jsonl(jsonl, require_answers=False, skipped=qa.SkipCounter()), 3)

    webquestions = _write(
        os.path.join(directory, "wq.json"),
        b'[{"utterance": "where?", "targetValue": "(list (description Oakford))"},\n'
        b' {"utterance": "none?", "url": "u"},\n'
        b' {"qText": "empty?", "answers": []}]\n')
    skipped = qa.SkipCounter()
    self.assertLen(qa.load_qa(webquestions, skipped=skipped), 1)
    self.assertEqual([e.split(": ")[0] for e in skipped.examples], [f"{webquestions}:{n}" for n in (2, 3)])

    squad = _write(
        os.path.join(directory, "squad.json"),
        json.dumps({
            "data": [{
                "title":
                    "T",
                "paragraphs": [{
                    "context":
                        "c",
                    "qas": [{
                        "id": "q1",
                        "question": "what?",
                        "answers": [{
                            "text": "c",
                            "answer_start": 0
                        }]
                    }, {
                        "id": "q2",
                        "question": "unanswerable?",
                        "answers": []
                    }]
                }]
            }]
        }).encode())
    with self.assertRaisesRegex(
        qa.InputError, r"data\[0\]\.paragraphs\[0\]\.qas\[1\] \(id 'q2'\): "
        "the question 'unanswerable\\?' has no answers"):
      qa.load_qa(squad)

    trec = _write(
        os.path.join(directory, "trec.tsv"),
        b"what?\tOak(ford)?\nempty?\t\nhuge?\ta{4294967296}\ndeep?\t" + b"(" * 2000 + b")" * 2000 + b"\n")
    skipped = qa.SkipCounter()
    self.assertLen(qa.load_qa(trec, skipped=skipped), 1)
    self.assertEqual(skipped.count, 3, skipped.examples)
    self.assertIn(f"{trec}:3: the answer pattern 'a{{4294967296}}' is not a valid regular expression",
                  skipped.examples[1])

  def test_vocab_that_does_not_match_the_checkpoint(self):
    # The config's BERT says 300 wordpieces, the vocab file has 285.
    config = _config(retriever_bert=bert.tiny_config(300, hidden_size=32, num_layers=1, intermediate_size=64))
    with self.assertRaisesRegex(
        ValueError, rf"vocab {re.escape(_VOCAB)} has 285 tokens but the "
        "retriever BERT has vocab_size 300"):
      config.tokenizer()
    # A checkpoint written with the 285-word vocab restored into a retriever built for 300.
    fixture = _Fixture.get()
    model_dir = os.path.join(self.get_temp_dir(), "vocab285")
    path = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=fixture.retriever)), model_dir,
        max_to_keep=1).save(checkpoint_number=8)
    with self.assertRaisesRegex(
        ValueError, rf"^{re.escape(path)}: cannot restore the retriever .*"
        r"\(285, 32\).*\(300, 32\).*word_embeddings"):
      training_state.restore_retriever(config.build_retriever(), path)

  def test_index_of_another_dimension_than_the_model(self):
    fixture = _Fixture.get()
    model_dir = os.path.join(self.get_temp_dir(), "dim16")
    path = _publish_cheap(model_dir, 6, dim=16)
    corpus = corpus_table.CorpusTable.load(fixture.corpus_prefix)

    def state(expected_dim):
      return realm_input.RetrievalState(published_index.IndexWatcher(model_dir),
                                        corpus,
                                        4,
                                        wait_timeout_seconds=0.1,
                                        log=lambda message: None,
                                        expected_dim=expected_dim)

    mismatched = state(_DIM)
    with self.assertRaisesRegex(
        ValueError, rf"index {re.escape(path)} has dimension 16 but the "
        "model's retriever projects to 32"):
      mismatched.ensure_index()
    self.assertIsNone(mismatched.index)
    matched = state(16)
    matched.ensure_index()
    self.assertEqual(matched.index.step, 6)


# ----------------------------------------------------------------------------------------------------
# Item 6: the exported query tower of a published index under hostile queries.


class QueryEmbedderStressTest(tf.test.TestCase):

  def _embed(self, inputs):
    fixture = _Fixture.get()
    arrays = [np.asarray(x) for x in inputs]
    out = fixture.loaded.embed_queries(*arrays)
    self.assertEqual(out.shape, (arrays[0].shape[0], _DIM))
    self.assertEqual(out.dtype, np.float32)
    self.assertTrue(np.isfinite(out).all())
    return out

  def _live(self, inputs):
    retriever = _Fixture.get().retriever
    return retriever.embed_queries(tuple(tf.constant(np.asarray(x)) for x in inputs), training=False).numpy()

  def test_empty_token_sequences(self):
    featurizer = _Fixture.get().config.featurizer()
    empty = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int64), tf.zeros([3], tf.int64))
    inputs = featurizer.query_inputs(empty)
    self.assertAllEqual(inputs.mask.numpy().sum(axis=1), [2, 2, 2])  # [CLS] [SEP] only
    out = self._embed(inputs)
    self.assertAllClose(out, self._live(inputs), atol=1e-4)
    self.assertAllClose(out[0], out[2])

  def test_a_batch_of_1000_queries(self):
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 15, 1000)
    featurizer = _Fixture.get().config.featurizer()
    inputs = featurizer.query_inputs(
        tf.ragged.constant([rng.integers(5, _VOCAB_SIZE, n).tolist() for n in lengths], tf.int64))
    out = self._embed(inputs)
    for row in (0, 1, 499, 999):  # the same as each query alone: no mixing across the batch
      alone = self._embed([x[row:row + 1] for x in inputs])
      self.assertAllClose(out[row:row + 1], alone, atol=1e-4)
    self.assertGreater(len(np.unique(out.round(4), axis=0)), 500)  # distinct queries, distinct rows

  def test_long_and_mixed_script_texts(self):
    fixture = _Fixture.get()
    pieces = [
        "Ann Bell lives in Oakford. ",  # English
        "村",  # CJK
        "ولدت آن بيل في أوكفورد ",  # Arabic (right to left)
        "🙂👩\u200d👩\u200d👧🏳\ufe0f\u200d🌈",  # emoji with ZWJ sequences, cut at the end
        "Ann 村 بيل 🙂 e\u0301 \u200b\u200f x ",  # mixed scripts, combining and zero-width marks
        "🙂 👩\u200d👩\u200d👧 ",  # emoji as separate words
    ]
    texts = [(piece * 10000)[:10000] for piece in pieces] + ["", "\x00\x01\ufffd"]
    ids = fixture.tokenizer.tokenize(tf.constant([t.encode("utf-8") for t in texts]))
    inputs = fixture.config.featurizer(fixture.tokenizer).query_inputs(ids)
    q = fixture.config.query_seq_len
    # Truncated to Q; the emoji run without spaces is one 10,000-character word, hence one [UNK] (its
    # joiners are deleted, as BERT does); NUL, \x01 and U+FFFD are deleted too.
    self.assertAllEqual(inputs.mask.numpy().sum(axis=1), [q, q, q, 3, q, q, 2, 2])
    self.assertAllEqual(
        inputs.token_ids.numpy()[3, :3],
        [fixture.tokenizer.cls_id,
         fixture.tokenizer.token_to_id("[UNK]"), fixture.tokenizer.sep_id])
    out = self._embed(inputs)
    self.assertAllClose(out, self._live(inputs), atol=1e-4)


# ----------------------------------------------------------------------------------------------------
# Item 8: how the sources write and read their files.

_SOURCE_DIRS = ("realm_tf", "bin")
# The source tree itself, not Bazel's runfiles (which hold only this test's dependencies), as
# tools/build_coverage_test.py finds it.
_SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# Writes that deliberately do not go through io_utils, with the reason (docs/reliability.md).
# A write into a path derived from io_utils.temporary_path in the same function (atomic_write,
# write_corpus's shards, publish_index's SavedModel) is recognized as atomic by the audit itself.
_ALLOWED_WRITES = {
    ("realm_tf/retrieval/index_format.py", "write_npy"):
        "arrays inside the .tmp- directory of MipsIndex.save, renamed as a whole",
    ("realm_tf/checkpoints/training_state.py", "write_done_marker"):
        "TRAINING_DONE: only its existence is read, and it is written after the final checkpoint",
    ("realm_tf/demo_pipeline.py", "_open_log"):
        "run_binary's and run_realm_processes' subprocess logs, appended as they run, a header per run",
    ("realm_tf/demo_pipeline.py", "run_orqa"):
        "bin/answer's stderr log, appended as it runs",
    ("bin/run_demo.py", "_stderr_to"):
        "the demo's own stderr log (demo_stderr.log), appended as it runs",
}
_PICKLE_MODULES = {"pickle", "cPickle", "_pickle", "cloudpickle", "dill", "joblib", "shelve", "marshal"}


def _source_files():
  for top in _SOURCE_DIRS:
    for directory, _, names in os.walk(os.path.join(_SOURCE_ROOT, top)):
      if os.path.relpath(directory, _SOURCE_ROOT).replace(os.sep, "/").startswith("realm_tf/testing"):
        continue  # test scaffolding: writes a test's own fixtures, read by nothing a user runs
      for name in sorted(names):
        if name.endswith(".py") and not name.endswith("_test.py"):
          path = os.path.join(directory, name)
          yield os.path.relpath(path, _SOURCE_ROOT).replace(os.sep, "/"), path


def _mode_of(call: ast.Call, position: int):
  if len(call.args) > position and isinstance(call.args[position], ast.Constant):
    return call.args[position].value
  for keyword in call.keywords:
    if keyword.arg == "mode" and isinstance(keyword.value, ast.Constant):
      return keyword.value.value
  return "r" if len(call.args) <= position and not any(k.arg == "mode" for k in call.keywords) \
      else "?"


def _dotted(node) -> str:
  if isinstance(node, ast.Name):
    return node.id
  if isinstance(node, ast.Attribute):
    return _dotted(node.value) + "." + node.attr
  return ""


# Calls that write a file or directory -> the position of their destination argument. The dotted ones
# match as suffixes (tf.io.gfile.GFile, tf.compat.v1.gfile.GFile); open, np.* and shutil.* exactly.
_WRITE_DESTINATION = {
    "open": 0,
    "io.open": 0,
    "np.savetxt": 0,
    "shutil.copy": 1,
    "shutil.copyfile": 1,
    "gfile.GFile": 0,
    "gfile.Open": 0,
    "TFRecordWriter": 0,
    "gfile.copy": 1,
    "saved_model.save": 1
}
_EXACT = ("open", "io.open", "np.savetxt", "shutil.copy", "shutil.copyfile")


def _write_destination(name: str, call: ast.Call):
  """The destination expression of a call that writes, or None for calls that do not write."""
  for suffix, position in _WRITE_DESTINATION.items():
    if name == suffix or (suffix not in _EXACT and name.endswith("." + suffix)):
      if suffix in ("open", "io.open", "gfile.GFile", "gfile.Open"):
        mode = _mode_of(call, 1)
        if mode != "?" and not any(c in mode for c in "wax+"):
          return None
      if len(call.args) > position:
        return call.args[position]
      return ast.Constant(None)
  return None


def _temporary_names(scope) -> set:
  """Names in scope bound (directly, or by a loop over them) to io_utils.temporary_path results."""
  names = set()

  def temporary(expression) -> bool:
    return any((isinstance(n, ast.Call) and _dotted(n.func).split(".")[-1] == "temporary_path") or
               (isinstance(n, ast.Name) and n.id in names) for n in ast.walk(expression))

  changed = True
  while changed:
    changed = False
    for node in ast.walk(scope):
      if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
      elif isinstance(node, (ast.For, ast.comprehension)):
        targets, value = [node.target], node.iter
      else:
        continue
      if temporary(value):
        for target in targets:
          for n in ast.walk(target):
            if isinstance(n, ast.Name) and n.id not in names:
              names.add(n.id)
              changed = True
  return names


def _audit(relpath: str, source: str):
  """(pickle uses, np.load/np.save calls without allow_pickle=False, writes: [(function, line, call)]
  that do not go to a temporary path)."""
  pickles, unsafe_numpy, writes = [], [], []
  # Names only: comments and strings that say "no pickle" are fine. load_searcher is ScaNN's loader
  # that unpickles scann_docids.pkl.
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type == tokenize.NAME and (token.string in _PICKLE_MODULES or token.string == "load_searcher"):
      pickles.append((token.start[0], token.string, token.line.strip()))
  tree = ast.parse(source, relpath)
  functions = {}
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      for child in ast.walk(node):
        functions.setdefault(id(child), node)  # outermost first: ast.walk is breadth-first
  temporary = {}
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call):
      continue
    name = _dotted(node.func)
    scope = functions.get(id(node), tree)
    function = getattr(scope, "name", "<module>")
    if name in ("np.load", "numpy.load", "np.save", "numpy.save"):
      flags = [k for k in node.keywords if k.arg == "allow_pickle"]
      if not (flags and isinstance(flags[0].value, ast.Constant) and flags[0].value.value is False):
        unsafe_numpy.append((node.lineno, name))
    # tf.summary.create_file_writer is not a write here: TensorBoard event files are appended, their
    # reader skips a torn last record, and no realm_tf process reads them.
    destination = _write_destination(name, node)
    if destination is None:
      continue
    if id(scope) not in temporary:
      temporary[id(scope)] = _temporary_names(scope)
    names = temporary[id(scope)]
    if not any((isinstance(n, ast.Call) and _dotted(n.func).split(".")[-1] == "temporary_path") or
               (isinstance(n, ast.Name) and n.id in names) for n in ast.walk(destination)):
      writes.append((function, node.lineno, name))
  return pickles, unsafe_numpy, writes


class SourceAuditTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.results = {}
    for relpath, path in _source_files():
      with open(path, encoding="utf-8") as f:
        cls.results[relpath] = _audit(relpath, f.read())

  def test_scans_the_sources(self):
    self.assertIn("realm_tf/retrieval/mips_index.py", self.results)
    self.assertIn("bin/refresh_doc_embeds.py", self.results)
    self.assertNotIn("realm_tf/reliability_test.py", self.results)
    # The scanner finds what it is meant to find (so the assertions below can fail).
    pickles, unsafe, writes = _audit(
        "x.py", "import pickle\nimport numpy as np\n"
        "def f(p):\n  np.load(p)\n  open(p, 'w')\n"
        "  np.load(p, allow_pickle=True)\n  open(p)\n")
    self.assertEqual([p[1] for p in pickles], ["pickle"])
    self.assertEqual(unsafe, [(4, "np.load"), (6, "np.load")])
    self.assertEqual(writes, [("f", 5, "open")])
    # Writes to temporary names are the atomic pattern; writes next to them are still found.
    _, _, writes = _audit(
        "y.py", "def g(finals, d):\n"
        "  temps = [io_utils.temporary_path(p) for p in finals]\n"
        "  writers = [tf.io.TFRecordWriter(t) for t in temps]\n"
        "  tmp = io_utils.temporary_path(d)\n"
        "  tf.saved_model.save(m, os.path.join(tmp, 'x'))\n"
        "  tf.io.gfile.copy(d, tmp)\n"
        "  tf.io.gfile.copy(tmp, d)\n"
        "  tf.io.gfile.GFile(finals[0], 'wb')\n")
    self.assertEqual(writes, [("g", 7, "tf.io.gfile.copy"), ("g", 8, "tf.io.gfile.GFile")])

  def test_no_pickle(self):
    found = {path: pickles for path, (pickles, _, _) in self.results.items() if pickles}
    self.assertEqual(found, {})

  def test_np_load_and_save_pass_allow_pickle_false(self):
    found = {path: unsafe for path, (_, unsafe, _) in self.results.items() if unsafe}
    self.assertEqual(found, {})
    calls = sum(1 for source in (open(os.path.join(_SOURCE_ROOT, p), encoding="utf-8").read()
                                 for p in self.results) for _ in re.finditer(r"\bnp\.load\(", source))
    self.assertGreaterEqual(calls, 3)  # mips_index.py, scann_index.py and corpus_embedding.py are checked

  def test_outputs_are_written_through_io_utils(self):
    unexpected = sorted((path, function, line, call)
                        for path, (_, _, writes) in self.results.items()
                        for function, line, call in writes
                        if (path, function) not in _ALLOWED_WRITES)
    self.assertEqual(
        unexpected, [], "write outputs with realm_tf.io_utils (atomic) or add them, with "
        "the reason, to _ALLOWED_WRITES and docs/reliability.md")
    found = {(path, function) for path, (_, _, writes) in self.results.items() for function, _, _ in writes}
    self.assertEqual(found, set(_ALLOWED_WRITES))  # no stale exception either

  def test_docs_list_the_outputs(self):
    with open(os.path.join(_SOURCE_ROOT, "docs", "reliability.md"), encoding="utf-8") as f:
      doc = f.read()
    for name in ("realm_config.json", "train_summary.json", "TRAINING_DONE", "published.json",
                 "manifest.json", ".manifest.json", "embeddings.npy", "query_embedder/", "ckpt-N",
                 "conversion.json", "vocab.txt", "blocks.jsonl", "predictions"):
      self.assertIn(name, doc)
    for path, function in _ALLOWED_WRITES:
      self.assertIn(f"{function}", doc)


if __name__ == "__main__":
  tf.test.main()
