"""Tests of realm_tf.retrieval.index_update on a REALM model dir with a published index of testdata.

The model dir is what bin/train_realm and bin/refresh_doc_embeds leave: realm_config.json, a checkpoint
and MODEL_DIR/index/<step>/ published by refresher.build_and_publish from that checkpoint. The retriever
mean-pools a random tiny BERT, under which a query made of a document's own words finds that document,
so retrieval of an added document is observable without training.
"""

import gc
import json
import os
import shutil
from unittest import mock

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import tokenization
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import text_records
from realm_tf.modeling import bert
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import index_update
from realm_tf.retrieval import published_index
from realm_tf.retrieval import refresher
from realm_tf.testing import test_paths
from realm_tf.testing import tiny_inputs

_TESTDATA = os.path.join(test_paths.repo_root(), "testdata")
_VOCAB = os.path.join(_TESTDATA, "vocab.txt")
_NUM_DOCS = 30
_STEP = 5
_NEW_DOC = {
    "id": "new-1",
    "title": "Quorvath Zelindra",
    "body": "Quorvath Zelindra was born in the village of Yxmoor beside the river Plessa."
}


def _config() -> realm_config_lib.RealmConfig:
  small = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=64)
  return realm_config_lib.RealmConfig(retriever_bert=small,
                                      reader_bert=small,
                                      vocab_path=_VOCAB,
                                      projection_size=16,
                                      query_seq_len=32,
                                      candidate_seq_len=64,
                                      max_masks=4,
                                      num_candidates=4,
                                      embedder_pooling="mean")


def _write_jsonl(path, records):
  with open(path, "w", encoding="utf-8") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")
  return path


class IndexUpdateTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    # The model dir and its published index are built once, at the path every test then works in; each
    # test starts from a pristine copy put back at that same path (the absolute corpus and checkpoint
    # paths that published.json records stay valid), so the tests do not see each other's updates.
    super().setUpClass()
    # The imports' objects (TensorFlow's millions) out of the garbage collector's full passes, which
    # otherwise walk all of them again and again; they live as long as the process anyway.
    gc.freeze()
    root = os.path.join(tf.compat.v1.test.get_temp_dir(), "index_update_test")
    cls.dir = os.path.join(root, "work")
    cls._pristine = os.path.join(root, "pristine")
    shutil.rmtree(root, ignore_errors=True)
    cls.corpus = os.path.join(cls.dir, "corpus", "blocks")
    documents = list(corpus_lib.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")))[:_NUM_DOCS]
    cls.documents = documents
    corpus_lib.write_corpus(lambda: documents, tokenization.Tokenizer(_VOCAB), cls.corpus, num_shards=2)
    cls.model_dir = os.path.join(cls.dir, "realm")
    cls.config = _config()
    cls.config.save(cls.model_dir)
    tf_keras.utils.set_random_seed(0)
    cls.retriever = cls.config.build_retriever()
    root_checkpoint = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=cls.retriever))
    cls.checkpoint = tf.train.CheckpointManager(root_checkpoint, cls.model_dir,
                                                max_to_keep=3).save(checkpoint_number=_STEP)
    options = cls._refresher_options(cls.corpus)
    # The tests' refreshes embed their corpus eagerly (_embed_eagerly): here only the rows matter, and
    # the refresher's embedding pipeline is refresher_test's (the updates embed through it; their probes
    # must reproduce these rows, and test_add_replace_remove_publishes_a_new_version_of_the_updated_corpus
    # compares an update with a refresher's run).
    cls.embedder = cls._embed_eagerly
    cls.base_index = refresher.build_and_publish(cls.config,
                                                 cls.retriever,
                                                 _STEP,
                                                 options,
                                                 info={"checkpoint": cls.checkpoint},
                                                 log=lambda message: None,
                                                 embedder=cls.embedder)
    shutil.copytree(cls.dir, cls._pristine)

  @classmethod
  def _embed_eagerly(cls, corpus_prefix, **unused):
    """The retriever's document embeddings of the corpus [num_docs, D] in one eager batch, for
    refresher.build_and_publish's embedder."""
    rows = list(corpus_lib.read_corpus(corpus_prefix))
    inputs = cls.config.featurizer().candidate_inputs(
        tf.ragged.constant([r["title_token_ids"] for r in rows], tf.int64),
        tf.ragged.constant([r["body_token_ids"] for r in rows], tf.int64))
    return cls.retriever.embed_documents(tuple(inputs), training=False).numpy()

  @classmethod
  def _refresher_options(cls, corpus_prefix, **overrides):
    # One length bucket: a refresher traces its embedding once (the shapes are corpus_embedding_test's
    # part).
    return refresher.RefresherOptions(model_dir=cls.model_dir,
                                      corpus_prefix=corpus_prefix,
                                      index_implementation="brute_force",
                                      batch_size=8,
                                      embed_jit_compile=False,
                                      embed_length_buckets=1,
                                      **overrides)

  def setUp(self):
    super().setUp()
    shutil.rmtree(self.dir)
    shutil.copytree(self._pristine, self.dir)
    self.base_index = type(self).base_index
    self.messages = []

  def _update(self, change, **kwargs):
    return index_update.update_published_index(self.base_index,
                                               change,
                                               log=self.messages.append,
                                               batch_size=8,
                                               **kwargs)

  def _query(self, loaded, texts):
    """The index's rows by score for each text, [len(texts), num_docs] (one batch of questions)."""
    tokenizer = self.config.tokenizer()
    featurizer = self.config.featurizer(tokenizer)
    ids = tokenizer.tokenize([text.encode("utf-8") for text in texts])
    inputs = featurizer.query_inputs(ids)
    query = loaded.embed_queries(*(np.asarray(x, np.int32) for x in inputs))
    rows, _ = loaded.mips.search(query, k=loaded.mips.num_docs)
    return rows

  def _assert_untouched(self):
    """Only the base index is published and no updated corpus exists."""
    self.assertEqual(published_index.published_steps(self.model_dir), [_STEP])
    self.assertEqual(sorted(n for n in os.listdir(os.path.dirname(self.corpus)) if "-v" in n), [])

  def test_add_replace_remove_publishes_a_new_version_of_the_updated_corpus(self):
    replaced, removed = self.documents[3], self.documents[7]
    new_text = "Vorlanne Tesk wrote the song of the glass harbour."
    change = index_update.read_change_set(
        _write_jsonl(os.path.join(self.dir, "change.jsonl"),
                     [_NEW_DOC, {
                         "id": replaced.doc_id,
                         "title": replaced.title,
                         "body": new_text
                     }]),
        remove_ids=[removed.doc_id])
    path = self._update(change, on_existing="replace")
    self.assertEqual(path, os.path.join(published_index.index_root(self.model_dir), str(_STEP + 1)))
    record = published_index.verify_published(path)
    updated = self.corpus + "-v1"
    self.assertEqual(record["corpus_prefix"], updated)
    self.assertEqual(record["corpus_fingerprint"], corpus_lib.fingerprint(updated))
    self.assertEqual(record["checkpoint_step"], _STEP)
    self.assertEqual({k: record["update"][k] for k in ("added", "replaced", "removed", "embedded")}, {
        "added": 1,
        "replaced": 1,
        "removed": 1,
        "embedded": 2
    })

    rows = list(corpus_lib.read_corpus(updated))
    ids = [r["doc_id"] for r in rows]
    self.assertLen(rows, _NUM_DOCS)
    self.assertNotIn(removed.doc_id, ids)
    self.assertEqual(ids[-1], "new-1")
    self.assertEqual(rows[ids.index(replaced.doc_id)]["body"], new_text)
    self.assertEqual(ids.index(replaced.doc_id), 3)  # replaced in its own row
    # The base corpus and index are untouched: consumers of the old index keep valid rows.
    self.assertLen(list(corpus_lib.read_corpus(self.corpus)), _NUM_DOCS)
    published_index.verify_published(self.base_index)

    loaded = published_index.load_published(path)
    # The newest index is the update; watchers of the updated corpus take it, and so does a running
    # trainer's watcher of the base corpus (the trainer swaps in the derived corpus with it:
    # realm_input_test), and a restarted process follows it.
    self.assertEqual(
        published_index.IndexWatcher(self.model_dir, corpus_prefix=updated).newest_step(), _STEP + 1)
    old = published_index.IndexWatcher(self.model_dir, self.fail, corpus_prefix=self.corpus)
    self.assertEqual(old.newest_step(), _STEP + 1)
    self.assertEqual(published_index.current_corpus(self.model_dir, self.corpus, lambda m: None), updated)

    # The added document is retrieved by a question about it; the removed one never is.
    questions = ["Where was Quorvath Zelindra born? Yxmoor beside the river Plessa"
                ] + [doc.body for doc in self.documents[:10] + [removed]]
    found = self._query(loaded, questions)
    self.assertEqual(ids[found[0][0]], "new-1")
    for rows in found[1:]:
      self.assertNotIn(removed.doc_id, [ids[r] for r in rows])

    # The next full refresh, by a refresher started with the base corpus as it was before the update,
    # embeds the updated corpus; with the same weights (a checkpoint of the same retriever) it gives the
    # update's rows: only the changed documents were embedded, and they are what a refresh embeds.
    root = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=self.retriever))
    tf.train.CheckpointManager(root, self.model_dir, max_to_keep=3).save(checkpoint_number=10)
    messages = []
    refreshes = refresher.run(self._refresher_options(self.corpus, poll_seconds=0.1, max_refreshes=1),
                              log=messages.append)
    self.assertEqual(refreshes, 1)
    refreshed = os.path.join(published_index.index_root(self.model_dir), "10")
    record = published_index.verify_published(refreshed)
    self.assertEqual(record["corpus_prefix"], updated)
    self.assertEqual(record["num_docs"], _NUM_DOCS)
    self.assertTrue(any("using that corpus" in m for m in messages), messages)
    self.assertAllClose(np.asarray(loaded.mips.embeddings),
                        np.asarray(published_index.load_published(refreshed).mips.embeddings),
                        atol=1e-4,
                        rtol=1e-4)

  def test_a_second_update_derives_from_the_first_and_is_followed(self):
    first = self._update(index_update.read_change_set(remove_ids=[self.documents[0].doc_id]))
    self.base_index = first
    second = self._update(index_update.read_change_set(remove_ids=[self.documents[1].doc_id]))
    self.assertEqual(published_index.verify_published(second)["corpus_prefix"], self.corpus + "-v2")
    self.assertTrue(corpus_lib.descends_from(self.corpus + "-v2", self.corpus))
    self.assertEqual(published_index.current_corpus(self.model_dir, self.corpus, lambda m: None),
                     self.corpus + "-v2")
    # A removal needs no tower: nothing was embedded.
    self.assertEqual(published_index.verify_published(second)["update"]["embedded"], 0)

  def test_the_corpus_of_a_damaged_update_is_not_followed(self):
    """Found by bench/fault_soak's long soak: the update's index (the only one of its corpus) was damaged
    before a trainer restarted; the trainer followed its corpus anyway, skipped every other index as one
    of the older corpus, and waited for ever."""
    path = self._update(index_update.read_change_set(remove_ids=[self.documents[0].doc_id]))
    os.remove(os.path.join(path, published_index.MIPS_DIR, "manifest.json"))
    messages = []
    self.assertEqual(published_index.current_corpus(self.model_dir, self.corpus, messages.append),
                     self.corpus)
    self.assertTrue(any(m.startswith("WARNING: not following") and path in m for m in messages), messages)

  def test_a_refresh_of_the_old_corpus_with_keep_1_keeps_the_update(self):
    # A refresh that began before the update publishes the base corpus's index after it, with --keep=1:
    # the update's index is the only record that the corpus was updated, so it is kept, and the next
    # refresh embeds the updated corpus (then it goes, as keep says).
    updated_path = self._update(index_update.read_change_set(remove_ids=[self.documents[2].doc_id]))
    messages = []

    def refresh(step, corpus_prefix):
      refresher.build_and_publish(self.config,
                                  self.retriever,
                                  step,
                                  self._refresher_options(corpus_prefix, keep=1),
                                  log=messages.append,
                                  embedder=self.embedder)

    refresh(10, self.corpus)
    self.assertEqual(published_index.published_steps(self.model_dir), [_STEP + 1, 10])
    self.assertTrue(any(f"keeping old index {updated_path}" in m for m in messages), messages)
    following = published_index.current_corpus(self.model_dir, self.corpus, lambda m: None)
    self.assertEqual(following, self.corpus + "-v1")
    refresh(11, following)
    self.assertEqual(published_index.published_steps(self.model_dir), [11])

  def test_unknown_id_to_remove(self):
    change = index_update.read_change_set(remove_ids=["no-such-doc", self.documents[0].doc_id])
    with self.assertRaisesRegex(index_update.UpdateError, "does not hold: 'no-such-doc'"):
      self._update(change)
    self._assert_untouched()

  def test_duplicate_ids(self):
    path = _write_jsonl(os.path.join(self.dir, "dup.jsonl"), [_NEW_DOC, _NEW_DOC])
    with self.assertRaisesRegex(index_update.UpdateError, "'new-1' more than once"):
      index_update.read_change_set(path)
    with self.assertRaisesRegex(index_update.UpdateError, "more than once"):
      index_update.read_change_set(remove_ids=["a", "b", "a"])
    with self.assertRaisesRegex(index_update.UpdateError, "both removed .* and added"):
      index_update.read_change_set(_write_jsonl(os.path.join(self.dir, "one.jsonl"), [_NEW_DOC]),
                                   remove_ids=["new-1"])

  def test_existing_id_is_an_error_unless_replace(self):
    existing = self.documents[2]
    change = index_update.read_change_set(
        _write_jsonl(os.path.join(self.dir, "existing.jsonl"), [{
            "id": existing.doc_id,
            "title": "t",
            "body": "another text"
        }]))
    with self.assertRaisesRegex(index_update.UpdateError, "--on_existing=replace"):
      self._update(change)
    self._assert_untouched()

  def test_document_without_id_and_malformed_line(self):
    with self.assertRaisesRegex(text_records.InputError, r"no_id.jsonl:1: .* needs an \"id\""):
      index_update.read_change_set(
          _write_jsonl(os.path.join(self.dir, "no_id.jsonl"), [{
              "title": "t",
              "body": "b"
          }]))
    bad = os.path.join(self.dir, "bad.jsonl")
    with open(bad, "w") as f:
      f.write(json.dumps(_NEW_DOC) + "\n{not json\n")
    with self.assertRaisesRegex(text_records.InputError, r"bad.jsonl:2: not a JSON object"):
      index_update.read_change_set(bad)

  def test_change_set_of_another_vocabulary(self):
    vocab = tiny_inputs.write_vocab(self.dir, name="other_vocab.txt")
    other = os.path.join(self.dir, "other", "blocks")
    corpus_lib.write_corpus(lambda: [corpus_lib.Document(_NEW_DOC["title"], _NEW_DOC["body"], "new-1")],
                            tokenization.Tokenizer(vocab),
                            other,
                            num_shards=1)
    with self.assertRaisesRegex(index_update.UpdateError, "tokenized with another vocab"):
      index_update.read_change_set(other, vocab_sha256=corpus_lib.vocab_sha256(_VOCAB))
    # Read without the vocab given, the index's update still refuses it.
    change = index_update.read_change_set(other)
    with self.assertRaisesRegex(index_update.UpdateError, "another vocab"):
      self._update(change)
    self._assert_untouched()

  def test_another_checkpoint_than_the_index_was_built_from(self):
    moved = self.config.build_retriever()  # the shared retriever stays as the index was built
    moved.set_weights(self.retriever.get_weights())
    for variable in moved.trainable_variables:
      variable.assign_add(tf.random.normal(variable.shape, stddev=0.5, seed=1))
    other = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=moved)).write(
        os.path.join(self.dir, "other", "ckpt"))
    change = index_update.read_change_set(_write_jsonl(os.path.join(self.dir, "add.jsonl"), [_NEW_DOC]))
    with self.assertRaisesRegex(index_update.UpdateError, "not the tower the index was built with"):
      self._update(change, checkpoint=other)
    self._assert_untouched()

  def test_only_the_newest_index_is_updated(self):
    shutil.copytree(self.base_index, os.path.join(published_index.index_root(self.model_dir), "9"))
    with self.assertRaisesRegex(index_update.UpdateError, "not the newest index"):
      self._update(index_update.read_change_set(remove_ids=[self.documents[0].doc_id]))

  def test_failure_before_the_publish_rename_leaves_the_previous_index_in_use(self):
    # A removal: no tower to rebuild, and the update still writes its corpus version before publishing.
    change = index_update.read_change_set(remove_ids=[self.documents[5].doc_id])
    real_rename = os.rename

    def killed(source, target):
      if os.path.basename(target) == str(_STEP + 1):
        raise OSError("injected: killed before the publish rename")
      return real_rename(source, target)

    with mock.patch.object(published_index.os, "rename", killed):
      with self.assertRaises(published_index.IndexWriteError):
        self._update(change)
    self.assertEqual(published_index.published_steps(self.model_dir), [_STEP])
    self.assertEqual(
        [n for n in os.listdir(published_index.index_root(self.model_dir)) if n.startswith(".tmp-")], [])
    watcher = published_index.IndexWatcher(self.model_dir, corpus_prefix=self.corpus)
    self.assertEqual(watcher.load_newer(None).step, _STEP)
    self.assertEqual(published_index.current_corpus(self.model_dir, self.corpus, lambda m: None), self.corpus)
    # The next attempt does not reuse the orphaned corpus version; it takes the next one.
    path = self._update(change)
    self.assertEqual(published_index.verify_published(path)["corpus_prefix"], self.corpus + "-v2")


if __name__ == "__main__":
  tf.test.main()
