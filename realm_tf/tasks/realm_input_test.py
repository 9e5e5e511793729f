"""The REALM input pipeline on testdata: features as the trainer expects them, and a deterministic stream.

Determinism is what lets a killed trainer continue its loss curve: a resumed run asks for the stream with
the consumed batches skipped and must get exactly the batches the uninterrupted run would have seen next
(for the same seed and index).
"""

import dataclasses
import functools
import json
import os
import shutil
import threading
import time

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import process_lock
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus
from realm_tf.data import corpus_table
from realm_tf.data import pretraining
from realm_tf.modeling import bert
from realm_tf.modeling import realm as realm_model
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import index_format
from realm_tf.retrieval import index_update
from realm_tf.retrieval import published_index
from realm_tf.retrieval import refresher
from realm_tf.tasks import realm_input
from realm_tf.testing import tiny_inputs

_TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata")


class RealmInputTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    root = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), f"realm_input_test_{os.getpid()}")
    cls.config = tiny_inputs.small_realm_config()
    cls.model_dir = os.path.join(root, "model")
    cls.config.save(cls.model_dir)
    cls.tokenizer = cls.config.tokenizer()
    # One featurizer for every pipeline here, as a trainer has one: realm_input traces its featurizing
    # functions once per tokenizer and featurizer.
    cls.featurizer = cls.config.featurizer(cls.tokenizer)
    cls.corpus_prefix = os.path.join(root, "corpus", "blocks")
    corpus.write_corpus(lambda: corpus.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")), cls.tokenizer,
                        cls.corpus_prefix, 2)
    cls.pretraining_prefix = os.path.join(root, "pretraining", "sentences")
    pretraining.write_pretraining_corpus(
        lambda: pretraining.read_raw_documents(os.path.join(_TESTDATA, "pretraining.jsonl")),
        cls.pretraining_prefix, 2)
    refresher.bootstrap(cls.config,
                        None,
                        refresher.RefresherOptions(model_dir=cls.model_dir,
                                                   corpus_prefix=cls.corpus_prefix,
                                                   index_implementation="brute_force"),
                        log=lambda _: None)
    cls.table = corpus_table.CorpusTable.load(cls.corpus_prefix)
    cls._uninterrupted_batches = None

  def _dataset(self, skip: int, seed: int, **state_options):
    """A pipeline of batches of 3 (each one traces the tokenizer and featurizer into tf.data: seconds),
    and its RetrievalState."""
    state = realm_input.RetrievalState(published_index.IndexWatcher(self.model_dir, log=lambda _: None),
                                       self.table,
                                       self.config.num_candidates,
                                       log=lambda _: None,
                                       expected_dim=self.config.projection_size,
                                       **state_options)
    dataset = realm_input.realm_dataset(pretraining.pretraining_dataset(self.pretraining_prefix),
                                        self.tokenizer,
                                        self.featurizer,
                                        state,
                                        batch_size=3,
                                        seed=seed,
                                        skip_batches=skip)
    return dataset, state

  @staticmethod
  def _numpy(batch):
    return {k: v.numpy() for k, v in batch.items()}

  def _batches(self, count: int, skip: int, seed: int = 5):
    dataset, _ = self._dataset(skip, seed)
    return [self._numpy(batch) for batch in dataset.take(count)]

  def _uninterrupted(self):
    """The first 4 batches of seed 5's stream, made once for the tests that read them."""
    if RealmInputTest._uninterrupted_batches is None:
      RealmInputTest._uninterrupted_batches = self._batches(4, 0)
    return RealmInputTest._uninterrupted_batches

  def test_features_have_static_shapes_and_the_null_document_first(self):
    batch = self._uninterrupted()[0]
    n, q, c = self.config.num_candidates, self.config.query_seq_len, self.config.candidate_seq_len
    self.assertEqual(batch[realm_model.QUERY + "_token_ids"].shape, (3, q))
    self.assertEqual(batch[realm_model.CANDIDATE + "_token_ids"].shape, (3, n, c))
    self.assertEqual(batch[realm_model.JOINT + "_token_ids"].shape, (3, n, q + c))
    null = batch[realm_model.CANDIDATE + "_token_ids"][:, 0, :3]
    self.assertAllEqual(null, [[self.tokenizer.cls_id, self.tokenizer.sep_id, self.tokenizer.sep_id]] * 3)
    # Every example predicts at least one real [MASK] position, and those positions hold [MASK].
    mask = batch[realm_model.MLM_MASK]
    self.assertTrue(np.all(mask[:, 0] == 1.0))
    positions = batch[realm_model.MLM_POSITIONS]
    query_ids = batch[realm_model.QUERY + "_token_ids"]
    for b in range(3):
      for p, m in zip(positions[b], mask[b]):
        if m:
          self.assertEqual(query_ids[b, p], self.tokenizer.mask_id)

  def test_resumed_stream_continues_the_uninterrupted_one(self):
    uninterrupted = self._uninterrupted()
    resumed = self._batches(2, 2)
    for expected, actual in zip(uninterrupted[2:], resumed):
      self.assertEqual(set(expected), set(actual))
      for key in expected:
        self.assertAllEqual(expected[key], actual[key], msg=key)
    # Another seed is another stream: test_close_ends_a_pipeline_waiting_for_a_fresher_index's pipeline.

  def test_fixed_swaps_number_batches_by_the_step_that_trains_them(self):
    """Under swap_every_steps=2, a stream resumed after 1 batch makes the batch of step 2 with the step-0
    index (the only one), the same batch as the uninterrupted stream's second; step 3's index (step 2's)
    never comes."""
    dataset, state = self._dataset(1, seed=5, swap_every_steps=2, wait_timeout_seconds=0.1)
    batches = iter(dataset)
    second = self._numpy(next(batches))
    self.assertEqual(state.indexes_used, [0])
    self.assertAllEqual(self._uninterrupted()[1][realm_model.CANDIDATE + "_token_ids"],
                        second[realm_model.CANDIDATE + "_token_ids"])
    with self.assertRaisesRegex(tf.errors.OpError, "no index of step 2 in time"):
      next(batches)

  def test_close_ends_a_pipeline_waiting_for_a_fresher_index(self):
    """A trainer that finished while the pipeline prepared batches ahead, waiting for an index within
    the staleness bound, closes the state: the wait ends (in the real trainer a waiting pipeline thread
    kept the finished process from exiting).

    The pipeline is seed 6's: its first batch, made while the index is fresh enough, also shows that
    another seed is another stream (the resume test could pass if the seed were ignored)."""
    dataset, state = self._dataset(0, seed=6, max_staleness_steps=0)
    batches = iter(dataset)
    other = self._numpy(next(batches))
    self.assertFalse(
        np.array_equal(other[realm_model.QUERY + "_token_ids"],
                       self._uninterrupted()[0][realm_model.QUERY + "_token_ids"]))
    outcome = []

    def consume():
      try:
        for _ in batches:  # batches made before the trainer's step moved on, then a wait
          outcome.append("a batch")
      except tf.errors.OpError as e:
        outcome.append(e.message)

    # A refresher "runs" (holds the lock), so without close() the wait would never end.
    with process_lock.exclusive(os.path.join(self.model_dir, process_lock.LOCK_NAME), "refresher"):
      state.trainer_step = 5  # the only index is step 0's: every batch from now on waits for a newer one
      thread = threading.Thread(target=consume, daemon=True)
      thread.start()
      thread.join(2.0)
      self.assertTrue(thread.is_alive())
      state.close()
      thread.join(120)  # a hang guard only
    self.assertFalse(thread.is_alive())
    self.assertNotEmpty(outcome)
    self.assertEqual(["a batch"] * (len(outcome) - 1), outcome[:-1])
    self.assertIn("training finished", outcome[-1])

  # The bootstrap index (step 0) damaged before any checkpoint: nothing but the trainer's bootstrap can
  # publish another, so the pipeline refuses to wait for one and a restarted trainer builds it again
  # (found by bench/fault_soak, whose trainer and refresher waited for each other).

  def _model_dir_copy(self, damaged: bool):
    """A copy of the class's model dir (its config and bootstrap index, no checkpoint), and its index 0."""
    copy = os.path.join(self.create_tempdir().full_path, "model")
    shutil.copytree(self.model_dir, copy)
    index_0 = os.path.join(published_index.index_root(copy), "0")
    if damaged:
      with open(os.path.join(index_0, published_index.PUBLISHED_NAME), "w") as f:
        f.write("{")
    return copy, index_0

  def _state_of(self, model_dir, messages, wait_timeout_seconds, **options):
    return realm_input.RetrievalState(published_index.IndexWatcher(model_dir, messages.append),
                                      self.table,
                                      self.config.num_candidates,
                                      log=messages.append,
                                      wait_timeout_seconds=wait_timeout_seconds,
                                      **options)

  def test_unusable_bootstrap_index_is_refused_at_once_and_rebuilt_on_restart(self):
    query = self.config.featurizer(self.tokenizer).query_inputs(self.tokenizer.tokenize([b"a river"]))
    # The first retrieval of a pipeline with and without fixed swaps (the soak's trainer swaps at every
    # checkpoint): refused at once, naming the index (a wait would end in TimeoutError after 30 s).
    for swaps in ({}, {"swap_every_steps": 10}):
      model_dir, index_0 = self._model_dir_copy(damaged=True)
      messages = []
      state = self._state_of(model_dir, messages, 30, **swaps)
      with self.assertRaisesRegex(index_format.CorruptIndexError,
                                  r"index/0\) is unusable.*--bootstrap_index",
                                  msg=swaps):
        state.retrieve(*(np.asarray(x) for x in query), np.array([0], np.int64), step=1)
      self.assertTrue(realm_input.needs_bootstrap(model_dir, messages.append))
      self.assertFalse(os.path.exists(index_0))
      self.assertTrue(any("deleting the unusable index" in m for m in messages), messages)

  def test_featurizing_functions_are_shared_by_what_they_compute(self):
    # A pipeline built with another Tokenizer and Featurizer of the same vocabulary and settings calls
    # the functions the first traced; other lengths or casing get their own (a pipeline that reused them
    # would pack queries to the wrong length).
    same = self.config.tokenizer()
    self.assertIs(realm_input._masked_queries_function(same, self.config.featurizer(same)),
                  realm_input._masked_queries_function(self.tokenizer, self.featurizer))
    self.assertIs(realm_input._assemble_function(self.config.featurizer(same), 3, 4),
                  realm_input._assemble_function(self.featurizer, 3, 4))
    longer = dataclasses.replace(self.config, query_seq_len=self.config.query_seq_len + 8)
    self.assertIsNot(realm_input._masked_queries_function(same, longer.featurizer(same)),
                     realm_input._masked_queries_function(same, self.featurizer))
    self.assertIsNot(realm_input._assemble_function(longer.featurizer(same), 3, 4),
                     realm_input._assemble_function(self.featurizer, 3, 4))
    self.assertIsNot(realm_input._assemble_function(self.featurizer, 3, 5),
                     realm_input._assemble_function(self.featurizer, 3, 4))
    cased = dataclasses.replace(self.config, do_lower_case=not self.config.do_lower_case).tokenizer()
    self.assertIsNot(realm_input._masked_queries_function(cased, self.featurizer),
                     realm_input._masked_queries_function(same, self.featurizer))

  def test_a_usable_index_or_a_checkpoint_means_no_bootstrap(self):
    model_dir, _ = self._model_dir_copy(damaged=False)
    self.assertFalse(realm_input.needs_bootstrap(model_dir))
    model_dir, index_0 = self._model_dir_copy(damaged=True)
    tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), model_dir, 1,
                               checkpoint_name="ckpt").save(checkpoint_number=5)
    # With a checkpoint the refresher can embed it: the pipeline waits, nothing is deleted.
    self.assertFalse(realm_input.needs_bootstrap(model_dir))
    self.assertTrue(os.path.exists(index_0))
    with self.assertRaises(TimeoutError):
      self._state_of(model_dir, [], 0.1).ensure_index()


class LiveIndexUpdateTest(tf.test.TestCase):
  """A running trainer's input pipeline picks up bin/update_index's index (update_published_index) at its
  next index check: retrieval then reads the derived corpus's rows, never a removed document, and still
  drops a query's own document after that document was replaced.

  The retriever mean-pools a random tiny BERT, under which a query made of a document's own words finds
  that document first, so what is retrieved is observable without training.
  """

  def setUp(self):
    super().setUp()
    root = self.create_tempdir().full_path
    vocab = os.path.join(_TESTDATA, "vocab.txt")
    small = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=64)
    self.config = realm_config_lib.RealmConfig(retriever_bert=small,
                                               reader_bert=small,
                                               vocab_path=vocab,
                                               projection_size=16,
                                               query_seq_len=32,
                                               candidate_seq_len=64,
                                               max_masks=4,
                                               num_candidates=4,
                                               embedder_pooling="mean")
    self.model_dir = os.path.join(root, "model")
    self.config.save(self.model_dir)
    self.tokenizer = self.config.tokenizer()
    self.featurizer = self.config.featurizer(self.tokenizer)
    self.documents = list(corpus.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")))[:12]
    self.corpus_prefix = os.path.join(root, "corpus", "blocks")
    corpus.write_corpus(lambda: self.documents, self.tokenizer, self.corpus_prefix, 2)
    self.pretraining_prefix = os.path.join(root, "pretraining", "sentences")
    pretraining.write_pretraining_corpus(
        lambda: list(pretraining.read_raw_documents(os.path.join(_TESTDATA, "pretraining.jsonl")))[:12],
        self.pretraining_prefix, 1)
    tf_keras.utils.set_random_seed(0)
    self.retriever = self.config.build_retriever()
    checkpoint = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=self.retriever)),
        self.model_dir,
        max_to_keep=3).save(checkpoint_number=5)
    self.options = refresher.RefresherOptions(model_dir=self.model_dir,
                                              corpus_prefix=self.corpus_prefix,
                                              index_implementation="brute_force",
                                              batch_size=8)
    # One embedder for every publication here, as the refresher keeps one (each new one traces again).
    self.embedder = refresher.corpus_embedder(self.config, self.retriever, self.options)
    self.base_index = self._publish(5, info={"checkpoint": checkpoint})
    self.messages = []

  def _publish(self, step, **kwargs):
    return refresher.build_and_publish(self.config,
                                       self.retriever,
                                       step,
                                       self.options,
                                       log=lambda _: None,
                                       embedder=self.embedder,
                                       **kwargs)

  def _retrieve(self, state, text, own_fingerprint=0, step=None):
    """The bodies (token id lists) retrieve() returns for a query made of `text` (for step `step`)."""
    inputs = self.featurizer.query_inputs(self.tokenizer.tokenize([text.encode("utf-8")]))
    rows, _, _, body_values, body_lengths = state.retrieve(*(np.asarray(x) for x in inputs),
                                                           np.array([own_fingerprint], np.int64),
                                                           step=step)
    bodies = np.split(body_values, np.cumsum(body_lengths)[:-1])
    # Rows and token ids come from one corpus version: the version now in use.
    for row, body in zip(rows[0], bodies):
      self.assertAllEqual(body, state.corpus.body_token_ids.row(row))
    return [body.tolist() for body in bodies]

  def _swapping_state(self):
    """A RetrievalState that swaps indexes every 10 steps and waits up to 60 s for one."""
    return realm_input.RetrievalState(published_index.IndexWatcher(self.model_dir, self.messages.append),
                                      corpus_table.CorpusTable.load(self.corpus_prefix),
                                      self.config.num_candidates,
                                      log=self.messages.append,
                                      swap_every_steps=10,
                                      wait_timeout_seconds=60)

  def _index_of(self, state, step):
    """The step of the index state retrieves from for training step `step`."""
    self._retrieve(state, self.documents[0].body, step=step)
    return state.index.step

  def _body_ids(self, text):
    return self.tokenizer.tokenize([text.encode("utf-8")]).to_list()[0]

  def test_fixed_swaps_train_each_step_on_the_index_its_number_fixes(self):
    publish = self._publish
    for step in (0, 10):
      publish(step)  # and setUp's 5: an index between two swaps, as a shorter checkpoint interval makes
    state = self._swapping_state()
    index_of = functools.partial(self._index_of, state)

    self.assertEqual([index_of(s) for s in (1, 10, 11, 20)], [0, 0, 10, 10])
    # Step 21 waits for the index of step 20; one of step 15, published first, is passed over.
    lock = os.path.join(self.model_dir, process_lock.LOCK_NAME)
    with process_lock.exclusive(lock, "refresher"):
      late = threading.Thread(target=lambda: [time.sleep(0.5), publish(15), time.sleep(0.5), publish(20)])
      late.start()
      self.assertEqual(index_of(21), 20)
      late.join()
    # A restarted refresher published step 35's index, never 30's: step 31 uses it, and says so.
    publish(35)
    self.assertEqual(index_of(31), 35)
    self.assertTrue(any("index of step 30" in m and "using the index of step 35" in m for m in self.messages),
                    self.messages)
    self.assertEqual(state.indexes_used, [0, 10, 20, 35])
    # Step 40's index is damaged after publication: the refresher will not embed ckpt-40 again, so
    # step 41 trains on the index in use instead of waiting for ever, and says so.
    path = publish(40)
    with open(os.path.join(path, published_index.PUBLISHED_NAME), "w") as f:
      f.write("{")
    self.assertEqual(index_of(41), 35)
    self.assertTrue(any("index of step 40" in m and "is unusable" in m for m in self.messages), self.messages)
    # An index that never comes ends the wait with an error naming it.
    state.wait_timeout_seconds = 0.1
    with self.assertRaisesRegex(TimeoutError, "no index of step 50"):
      index_of(51)

  def test_fixed_swaps_do_not_wait_for_the_index_of_an_unreadable_checkpoint(self):
    """Found by bench/fault_soak's long soak: the trainer saved ckpt-10 and its pipeline waited for the
    index of step 10; the checkpoint's data file was then deleted, so the refresher skipped it and waited
    for a newer checkpoint, which the waiting trainer could not write. The refresher now records the
    checkpoint it cannot read, and the pipeline trains on the newest index before it (setUp's step 5)
    until the next swap, with a warning. Without that the wait ends in TimeoutError after 60 s."""
    self._publish(0)
    state = self._swapping_state()
    index_of = functools.partial(self._index_of, state)

    self.assertEqual(index_of(10), 0)
    saved = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=self.retriever)),
        self.model_dir,
        max_to_keep=3).save(checkpoint_number=10)
    for path in tf.io.gfile.glob(saved + ".data-*"):
      os.remove(path)
    refresher_log = []
    refresh = threading.Thread(target=refresher.run,
                               args=(dataclasses.replace(self.options, poll_seconds=0.2),),
                               kwargs={"log": refresher_log.append},
                               daemon=True)
    refresh.start()  # the pipeline below waits first: the refresher still builds its tower
    try:
      # Without the refresher's record the wait ends in TimeoutError after the state's 60 s.
      self.assertEqual(index_of(11), 5)
    finally:
      training_state.write_done_marker(self.model_dir)
      refresh.join(60)
    self.assertFalse(refresh.is_alive())
    self.assertTrue(any(f"skipping {saved}" in m for m in refresher_log), refresher_log)
    self.assertTrue(
        any("index of step 10" in m and f"will not be published (the refresher cannot read {saved}" in m and
            "training on the index of step 5" in m for m in self.messages), self.messages)
    self.assertEqual(published_index.unreadable_checkpoint(self.model_dir, 10)["checkpoint"], saved)
    self.assertEqual(published_index.published_steps(self.model_dir), [0, 5])

  def test_running_pipeline_swaps_in_an_updated_corpus(self):
    watcher = published_index.IndexWatcher(self.model_dir,
                                           self.messages.append,
                                           corpus_prefix=self.corpus_prefix)
    state = realm_input.RetrievalState(watcher,
                                       corpus_table.CorpusTable.load(self.corpus_prefix),
                                       self.config.num_candidates,
                                       check_every_batches=1,
                                       log=self.messages.append,
                                       expected_dim=self.config.projection_size)
    # Each of the pipeline's retrievals in order (batch i is retrieval i's): the index it used and whether
    # it began after the update was published. tf.data makes batches ahead of the consumer, how many
    # depends on the machine's load, so the check below follows retrievals, not a count of batches.
    published = threading.Event()
    retrievals = []

    def recording_retrieve(*args, retrieve=state.retrieve):
      began_after = published.is_set()
      result = retrieve(*args)
      retrievals.append((state.index.step, began_after))  # the pipeline retrieves one batch at a time
      return result

    state.retrieve = recording_retrieve  # what realm_dataset's py_function calls
    batches = iter(
        realm_input.realm_dataset(pretraining.pretraining_dataset(self.pretraining_prefix),
                                  self.tokenizer,
                                  self.featurizer,
                                  state,
                                  batch_size=2,
                                  seed=1))
    del state.retrieve  # this test's own retrievals below are not the pipeline's
    batch = next(batches)
    consumed = 1
    self.assertEqual(state.index.step, 5)

    # While the pipeline runs: replace a document (its new text keeps the old one), remove one, add one.
    # The replaced document keeps its first sentence, from which a pre-training query may be cut.
    replaced, removed = self.documents[3], self.documents[7]
    new_body = replaced.body.split(". ")[0] + ". It was rebuilt after the great flood."
    added = {
        "id": "new-1",
        "title": "Quorvath Zelindra",
        "body": "Quorvath Zelindra was born in the village of Yxmoor beside the river Plessa."
    }
    change_path = os.path.join(self.create_tempdir().full_path, "change.jsonl")
    with open(change_path, "w", encoding="utf-8") as f:
      for record in (added, {"id": replaced.doc_id, "title": replaced.title, "body": new_body}):
        f.write(json.dumps(record) + "\n")
    updated_index = index_update.update_published_index(self.base_index,
                                                        index_update.read_change_set(
                                                            change_path, remove_ids=[removed.doc_id]),
                                                        on_existing="replace",
                                                        batch_size=8,
                                                        log=lambda _: None)
    published.set()
    updated = self.corpus_prefix + "-v1"

    # The pipeline checks for a newer index before every retrieval: the first retrieval that began after
    # the update was published uses it. The batches tf.data made ahead before that (how many varies
    # with the load) come first; batch i is retrieval i's.
    while not retrievals[consumed - 1][1]:
      batch = next(batches)
      consumed += 1
    self.assertEqual(retrievals[0][0], 5)
    self.assertEqual(retrievals[consumed - 1][0], 6, retrievals)
    self.assertEqual(state.index.path, updated_index, "\n".join(self.messages))
    self.assertEqual(state.corpus.prefix, updated)
    self.assertEqual(watcher.corpus_prefix, updated)
    self.assertEqual(state.indexes_used, [5, 6])
    self.assertTrue(any("retrieving from the updated corpus" in m for m in self.messages), self.messages)
    # The last batch's candidates are rows of the updated corpus, featurized from its token ids.
    rows = list(corpus.read_corpus(updated))
    expected = {
        tuple(t) for t in self.featurizer.candidate_inputs(
            [r["title_token_ids"] for r in rows], [r["body_token_ids"] for r in rows]).token_ids.numpy()
    }
    candidates = batch[realm_model.CANDIDATE + "_token_ids"].numpy()[:, 1:].reshape(
        [-1, self.config.candidate_seq_len])
    for candidate in candidates:
      self.assertIn(tuple(candidate), expected)

    # The added document is retrieved by a question about it. With as many candidates as the updated
    # corpus has documents but one, every query retrieves nearly all of it: never the removed document,
    # and the replaced one only with its new text.
    self.assertEqual(
        self._retrieve(state, "Where was Quorvath Zelindra born? Yxmoor")[0], self._body_ids(added["body"]))
    wide = realm_input.RetrievalState(watcher, state.corpus, state.corpus.num_docs, log=lambda _: None)
    removed_ids, old_ids, new_ids = (self._body_ids(text) for text in (removed.body, replaced.body, new_body))
    for doc in self.documents:
      retrieved = self._retrieve(wide, doc.body)
      self.assertNotIn(removed_ids, retrieved)
      self.assertNotIn(old_ids, retrieved)
    # A query cut from the replaced document's pre-training text (whose fingerprint is that of the old
    # text) does not retrieve the new version of its own document; another query does.
    own = int(
        corpus_table.document_fingerprint(tf.constant(replaced.title), tf.constant(replaced.body)).numpy())
    self.assertIn(new_ids, self._retrieve(wide, new_body))
    self.assertNotIn(new_ids, self._retrieve(wide, new_body, own))

    # A refresh that began before the update publishes an index of the older corpus afterwards: the
    # trainer skips it, and the update is not lost (the next refresh embeds the updated corpus).
    self._publish(9)
    self.assertEqual(watcher.newest_step(), 6)
    self.assertTrue(any("a refresh that began before the update" in m for m in self.messages))
    self.assertEqual(published_index.current_corpus(self.model_dir, self.corpus_prefix, lambda _: None),
                     updated)
    # Nor can an update of that index branch off the corpus history.
    with self.assertRaisesRegex(index_update.UpdateError, "Wait for the next refresh"):
      index_update.update_published_index(os.path.join(published_index.index_root(self.model_dir), "9"),
                                          index_update.read_change_set(remove_ids=[self.documents[0].doc_id]),
                                          log=lambda _: None)


if __name__ == "__main__":
  tf.test.main()
