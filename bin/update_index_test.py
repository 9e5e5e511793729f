"""Runs bin/update_index as a user would on testdata: on a REALM run's published index (then bin/train_orqa
--index_dir takes the updated index), on the ORQA run's frozen index (then bin/eval_orqa retrieves from
the updated corpus, and the blocks bin/export_saved_model's open-QA model serves hold a replaced
document's new text), and with bad change sets, which stop with a message and leave the published index
as it was. And on a converted index (bin/convert_checkpoint --layout=block_emb from a TF1 checkpoint in
the released layout): the update writes a new converted index that bin/train_orqa --index_dir and
bin/eval_orqa take, and that a converted ORQA's exported open-QA model serves.

bin/update_index runs once as a separate process, a failing one (exit status, the message on stderr, nothing
written). Every other run calls the binary's main() in this process (_main_in_process, through
realm_tf/testing/in_process: the module loaded afresh, its flags parsed from the same command line, its stdout
and absl log captured; a data error ends main with sys.exit(message)), or, for the open-QA models, reads what
bin/export_saved_model exports or makes the library calls it makes: a process start pays for Python and
TensorFlow again, and bin/train_orqa, bin/eval_orqa and bin/export_saved_model run as processes in
orqa_binaries_test.

The corpus has as many documents as the reader reads (reader_beam_size 5), so the exported model returns
the text of every block whatever its untrained retriever ranks first.
"""

import contextlib
import gc
import io
import json
import os
import shutil
import subprocess
import sys
from unittest import mock

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import tokenization
from realm_tf.checkpoints import training_state
from realm_tf.conversion import released_conversion
from realm_tf.data import corpus as corpus_lib
from realm_tf.export import loader
from realm_tf.export import saved_models
from realm_tf.modeling import bert
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import converted_index
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import index_format
from realm_tf.retrieval import index_update
from realm_tf.retrieval import published_index
from realm_tf.retrieval import refresher
from realm_tf.runs import orqa_model
from realm_tf.testing import in_process
from realm_tf.testing import released_weights
from realm_tf.testing import test_paths
from realm_tf.testing import tiny_inputs

_REPO = test_paths.repo_root()
_VOCAB = os.path.join(_REPO, "testdata", "vocab.txt")
_NEW_BODY = "Ostrel Vanquine built the copper lighthouse of Merrowdale in the year of the long frost."
_UNCHANGED = "The published index is unchanged"
# One layer of width 32 (tiny_config's is 2 x 64): every model of the test, REALM's, the trained ORQA's
# (bin/train_orqa --bert_config=<its bert_config.json>) and the converted towers. Tracing and saving the
# models is most of the test's time; no check depends on the size.
_BERT = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=64)


def _run(script, *args, timeout=400):
  env = dict(os.environ, PYTHONPATH=_REPO, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
  return subprocess.run([sys.executable, os.path.join(_REPO, "bin", script), *args],
                        capture_output=True,
                        text=True,
                        env=env,
                        timeout=timeout,
                        check=False)


class _InProcess:
  """What bin/<script>'s main() did in this process: exit (sys.exit's message, None if main returned),
  stdout, and log (its absl log lines)."""

  def __init__(self, exit_message, stdout, log):
    self.exit = exit_message
    self.stdout = stdout
    self.log = log


def _main_in_process(script, *args):
  """Runs bin/<script>'s main with the command line args in this process (realm_tf/testing/in_process: loaded
  afresh, its flags parsed as app.run parses them and removed afterwards). A data error ends
  bin/update_index's main with sys.exit(message), which a process turns into exit status 1 and the
  message on stderr; any other exception fails the test with main's traceback."""
  stdout = io.StringIO()
  with contextlib.redirect_stdout(stdout):
    result = in_process.run_main(script, *args)  # returns main's SystemExit in result.error
  if isinstance(result.error, SystemExit):
    return _InProcess(str(result.error.code), stdout.getvalue(), result.log)
  if result.error is not None:
    raise AssertionError(f"bin/{script} failed:\n{result.traceback}")
  return _InProcess(None, stdout.getvalue(), result.log)


def _write_jsonl(path, records):
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(json.dumps(r) + "\n" for r in records)
  return path


def _embed_eagerly(retriever, featurizer, corpus_prefix):
  """The document tower's embeddings of the corpus [num_docs, D], row i = document i, as one eager batch:
  the fixtures' block_emb. corpus_embedding's pipeline would trace its featurization and the tower for
  5 documents; the update's probes re-embed unchanged rows through that pipeline and must reproduce
  these."""
  rows = list(corpus_lib.read_corpus(corpus_prefix))
  inputs = featurizer.candidate_inputs(tf.ragged.constant([r["title_token_ids"] for r in rows], tf.int64),
                                       tf.ragged.constant([r["body_token_ids"] for r in rows], tf.int64))
  return retriever.embed_documents(tuple(inputs), training=False).numpy()


def _snapshot(directory):
  """Every file under directory with its bytes: equal snapshots mean nothing was written there."""
  found = {}
  for root, _, names in os.walk(directory):
    for name in names:
      with open(os.path.join(root, name), "rb") as f:
        found[os.path.relpath(os.path.join(root, name), directory)] = f.read()
  return found


class UpdateIndexBinaryTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # The objects of the imports (TensorFlow's millions) out of reach of the garbage collector: every
    # in-process main ends with gc.collect() (realm_tf/testing/in_process, training.loop), which otherwise
    # walks all of them each time. They live as long as the process anyway; what the tests make is still
    # collected.
    gc.freeze()
    cls.tmp = tf.compat.v1.test.get_temp_dir()
    paths = tiny_inputs.testdata_qa_slice(cls.tmp, num_train=3, num_dev=1, num_docs=5)
    cls.corpus, cls.train, cls.dev = paths["corpus"], paths["train"], paths["dev"]
    cls.documents = list(corpus_lib.read_corpus(cls.corpus))
    # _BERT as a Google bert_config.json, for bin/train_orqa --bert_config.
    cls.bert_config = os.path.join(cls.tmp, "bert_config.json")
    with open(cls.bert_config, "w") as f:
      json.dump(
          {
              "vocab_size": _BERT.vocab_size,
              "hidden_size": _BERT.hidden_size,
              "num_hidden_layers": _BERT.num_layers,
              "num_attention_heads": _BERT.num_attention_heads,
              "intermediate_size": _BERT.intermediate_size,
              "hidden_act": "gelu",
              "max_position_embeddings": _BERT.max_position_embeddings
          }, f)
    assert bert.BertConfig.from_json_file(cls.bert_config) == _BERT, cls.bert_config
    cls._realm = None

  def _dev_retrieved_ids(self, orqa_dir):
    """The block ids bin/eval_orqa (main in-process) retrieves for the dev questions of an ORQA run."""
    result = _main_in_process("eval_orqa.py", f"--model_dir={orqa_dir}", f"--qa_path={self.dev}",
                              "--recall_ks=1,5")
    self.assertIsNone(result.exit)
    with open(os.path.join(orqa_dir, "eval", "qa.dev.predictions.jsonl")) as f:
      return [i for line in f for i in json.loads(line)["retrieved_ids"]]

  @classmethod
  def _realm_run(cls):
    """A REALM run as bin/train_realm and bin/refresh_doc_embeds leave it, in the configuration
    bin/train_orqa's flags below build: (model dir, checkpoint). Made on first use, once (a shard whose
    tests need none does not pay for it)."""
    if cls._realm is None:
      realm_dir = os.path.join(cls.tmp, "realm")
      config = realm_config_lib.RealmConfig(retriever_bert=_BERT,
                                            reader_bert=_BERT,
                                            vocab_path=_VOCAB,
                                            projection_size=32,
                                            query_seq_len=32,
                                            candidate_seq_len=128)
      config.save(realm_dir)
      tf_keras.utils.set_random_seed(0)
      retriever = config.build_retriever()
      root = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=retriever))
      checkpoint = tf.train.CheckpointManager(root, realm_dir, max_to_keep=3).save(checkpoint_number=3)
      # The rows embedded eagerly: the refresher's embedding pipeline is refresher_test's part (its XLA
      # path too), and the update's probes re-embed unchanged rows through it and must reproduce these.
      featurizer = config.featurizer()
      refresher.build_and_publish(
          config,
          retriever,
          3,
          refresher.RefresherOptions(model_dir=realm_dir,
                                     corpus_prefix=cls.corpus,
                                     index_implementation="brute_force",
                                     embed_jit_compile=False),
          info={"checkpoint": checkpoint},
          log=lambda message: None,
          embedder=lambda corpus_prefix, **unused: _embed_eagerly(retriever, featurizer, corpus_prefix))
      cls._realm = (realm_dir, checkpoint)
    return cls._realm

  def _assert_failed_untouched(self, result, directory, before, *parts):
    """A failed process: exit status, message on stderr, nothing written under directory."""
    self.assertNotEqual(result.returncode, 0, result.stdout)
    for part in parts + (_UNCHANGED,):
      self.assertIn(part, result.stderr)
    self.assertEqual(_snapshot(directory), before)

  def _assert_refused(self, result, directory, before, *parts, unchanged=_UNCHANGED):
    """main() in this process stopped with sys.exit(message) and wrote nothing under directory."""
    self.assertIsNotNone(result.exit, f"main returned: {result.stdout}")
    for part in parts + (unchanged,):
      self.assertIn(part, result.exit)
    self.assertEqual(_snapshot(directory), before)

  def test_realm_index_then_orqa_frozen_index(self):
    realm_dir, checkpoint = self._realm_run()
    # 1. A REALM run's newest index: one document added, one removed.
    added = {"id": "added-1", "title": "Ostrel Vanquine", "body": "Ostrel Vanquine keeps bees."}
    removed = self.documents[4]["doc_id"]
    result = _main_in_process("update_index.py", f"--index={realm_dir}", f"--remove_ids={removed}",
                              "--documents=" + _write_jsonl(os.path.join(self.tmp, "add.jsonl"), [added]))
    self.assertIsNone(result.exit)
    updated_index = os.path.join(published_index.index_root(realm_dir), "4")
    self.assertIn(f"published {updated_index}", result.stdout)
    updated_corpus = self.corpus + "-v1"
    self.assertEqual(published_index.verify_published(updated_index)["corpus_prefix"], updated_corpus)

    # 2. bin/train_orqa --index_dir takes it, given the run's corpus, and trains on the updated corpus
    # (one step: the step count is not what is checked).
    orqa_dir = os.path.join(self.tmp, "orqa")
    result = _main_in_process("train_orqa.py", f"--model_dir={orqa_dir}", f"--train_path={self.train}",
                              f"--retrieval_corpus_path={self.corpus}", f"--index_dir={updated_index}",
                              f"--retriever_checkpoint={checkpoint}", f"--vocab_path={_VOCAB}",
                              f"--bert_config={self.bert_config}", "--projection_size=32",
                              "--query_seq_len=32", "--candidate_seq_len=128", "--reader_seq_len=128",
                              "--span_hidden_size=32", "--batch_size=2", "--num_train_steps=1",
                              "--save_checkpoints_steps=1", "--nojit_compile")
    self.assertIsNone(result.exit)
    self.assertIn("training on that corpus", result.log)
    frozen = os.path.join(orqa_dir, "frozen_index")
    self.assertEqual(index_format.read_manifest(frozen)["extra"]["corpus_prefix"], updated_corpus)

    # 3. Bad change sets on the ORQA run: a clear error, the frozen index untouched.
    before = _snapshot(frozen)
    result = _main_in_process("update_index.py", f"--index={orqa_dir}", "--remove_ids=no-such-id")
    self._assert_refused(result, frozen, before, "does not hold: 'no-such-id'")
    existing = self.documents[0]
    change = _write_jsonl(os.path.join(self.tmp, "replace.jsonl"), [{
        "id": existing["doc_id"],
        "title": existing["title"],
        "body": _NEW_BODY
    }])
    result = _main_in_process("update_index.py", f"--index={orqa_dir}", f"--documents={change}")
    self._assert_refused(result, frozen, before, "--on_existing=replace")
    result = _main_in_process("update_index.py", f"--index={orqa_dir}", f"--documents={change}",
                              f"--remove_ids={existing['doc_id']}")
    self._assert_refused(result, frozen, before, "both removed")

    # 4. Replace a document's text in the ORQA run; bin/eval_orqa reads the updated corpus: the reader
    # reads all 5 blocks, so every question's retrieved ids are the updated corpus's.
    result = _main_in_process("update_index.py", f"--index={orqa_dir}", f"--documents={change}",
                              "--on_existing=replace")
    self.assertIsNone(result.exit)
    self.assertIn(f"updated {frozen}", result.stdout)
    self.assertNotEqual(_snapshot(frozen), before)
    retrieved = self._dev_retrieved_ids(orqa_dir)
    self.assertIn("added-1", retrieved)
    self.assertNotIn(removed, retrieved)
    # What bin/export_saved_model's open-QA model of that run serves: the blocks of
    # orqa_model.load_trained (export_all hands them to export_open_qa as they are;
    # test_converted_orqa_served_from_the_updated_index serves an exported model of an updated index, and
    # orqa_binaries_test runs the binary as a process).
    bodies = list(orqa_model.load_trained(orqa_dir).blocks.bodies)
    self.assertIn(_NEW_BODY, bodies)
    self.assertIn(added["body"], bodies)
    self.assertNotIn(existing["body"], bodies)
    self.assertNotIn(self.documents[4]["body"], bodies)

  def test_bad_change_sets_leave_the_realm_index_untouched(self):
    realm_dir, _ = self._realm_run()
    model_dir = os.path.join(self.tmp, "realm_bad")
    tf.io.gfile.makedirs(model_dir)
    for name in os.listdir(realm_dir):  # its own copy: the other test publishes into realm/
      source = os.path.join(realm_dir, name)
      if name != "index" and os.path.isfile(source):
        tf.io.gfile.copy(source, os.path.join(model_dir, name), overwrite=True)
    shutil.copytree(os.path.join(published_index.index_root(realm_dir), "3"),
                    os.path.join(published_index.index_root(model_dir), "3"))
    before = _snapshot(model_dir)
    # The one failing process: exit status, the message on stderr, nothing written.
    duplicate = _write_jsonl(os.path.join(self.tmp, "dup.jsonl"), [{
        "id": "x",
        "title": "a",
        "body": "b"
    }, {
        "id": "x",
        "title": "c",
        "body": "d"
    }])
    result = _run("update_index.py", f"--index={model_dir}", f"--documents={duplicate}")
    self._assert_failed_untouched(result, model_dir, before, "'x' more than once")
    wrong_format = os.path.join(self.tmp, "docs.csv")
    with open(wrong_format, "w") as f:
      f.write("id,title,body\n")
    result = _main_in_process("update_index.py", f"--index={model_dir}", f"--documents={wrong_format}")
    self._assert_refused(result, model_dir, before, "unknown corpus format")

  def _converted(self, name):
    """A converted index of the corpus under tmp/name and the converted embedder that computed it.

    The released layout: block_emb [num_blocks, D] in a TF1 checkpoint, blocks.tfr and titles.tfr, and
    the converted embedder (realm_config.json + ckpt-0 = Checkpoint(retriever=...), as
    bin/convert_checkpoint writes it) whose document tower computed block_emb. Mean pooling: under a
    random tiny BERT a query made of a document's words then finds that document.
    Returns (converted dir, embedder dir, config, retriever, block_emb)."""
    embedder_dir = os.path.join(self.tmp, name, "conv_embedder")
    config = realm_config_lib.RealmConfig(retriever_bert=_BERT,
                                          reader_bert=_BERT,
                                          vocab_path=_VOCAB,
                                          projection_size=32,
                                          query_seq_len=32,
                                          candidate_seq_len=128,
                                          embedder_pooling="mean")
    config.save(embedder_dir)
    tf_keras.utils.set_random_seed(1)
    retriever = config.build_retriever()
    tf.train.CheckpointManager(tf.train.Checkpoint(retriever=retriever),
                               embedder_dir,
                               max_to_keep=1,
                               checkpoint_name="ckpt").save(checkpoint_number=0)
    block_emb = _embed_eagerly(retriever, config.featurizer(), self.corpus)
    released = os.path.join(self.tmp, name, "released")
    os.makedirs(released)
    encoded = released_weights.write_tf1_checkpoint(os.path.join(released, "encoded.ckpt"),
                                                    {"block_emb": block_emb})
    for file_name, field in (("blocks.tfr", "body"), ("titles.tfr", "title")):
      with tf.io.TFRecordWriter(os.path.join(released, file_name)) as writer:
        for document in self.documents:
          writer.write(document[field].encode("utf-8"))
    converted = os.path.join(self.tmp, name, "wiki_index")
    released_conversion.convert(encoded,
                                converted,
                                blocks_path=os.path.join(released, "blocks.tfr"),
                                titles_path=os.path.join(released, "titles.tfr"),
                                index_implementation="brute_force")
    return converted, embedder_dir, config, retriever, block_emb

  def test_converted_index(self):
    # The binaries' main() in this process: test_realm_index_then_orqa_frozen_index runs each as a process.
    converted, embedder_dir, config, retriever, block_emb = self._converted("conv")
    before = _snapshot(converted)

    # A released block's id is its row number; one is removed and a document added.
    added = {
        "id": "added-1",
        "title": "Quorvath Zelindra",
        "body": "Quorvath Zelindra was born in the village of Yxmoor beside the river Plessa."
    }
    documents = _write_jsonl(os.path.join(self.tmp, "conv", "add.jsonl"), [added])
    result = _main_in_process("update_index.py", f"--index={converted}/mips", f"--documents={documents}",
                              "--remove_ids=4")
    # The tower is not part of a block_emb conversion.
    self._assert_refused(result,
                         converted,
                         before,
                         "--checkpoint",
                         unchanged=f"The converted index {converted} is unchanged")
    result = _main_in_process("update_index.py", f"--index={converted}", f"--checkpoint={embedder_dir}",
                              f"--documents={documents}", "--remove_ids=4")
    self.assertIsNone(result.exit)
    updated = converted + "-v1"
    self.assertIn(f"wrote {updated}", result.stdout)
    self.assertEqual(_snapshot(converted), before)
    blocks = converted_index.load_block_texts(os.path.join(updated, "blocks.jsonl"))
    self.assertEqual([b["id"] for b in blocks], ["0", "1", "2", "3", "added-1"])
    self.assertEqual([b["row"] for b in blocks], list(range(5)))
    self.assertEqual([b["text"] for b in blocks], [d["body"] for d in self.documents[:4]] + [added["body"]])
    mips = index_lib.load_index(os.path.join(updated, "mips"))
    self.assertAllClose(np.asarray(mips.embeddings)[:4], block_emb[:4])
    # The added block is retrieved by a question about it (with the tower's query embedder); the
    # removed block is no row any more, so no query returns it.
    tokenizer = config.tokenizer()
    featurizer = config.featurizer(tokenizer)

    def top(text):
      inputs = featurizer.query_inputs(tokenizer.tokenize([text.encode("utf-8")]))
      query = retriever.embed_queries(tuple(tf.constant(x, tf.int32) for x in inputs), training=False)
      return [blocks[r]["id"] for r in mips.search(np.asarray(query), k=mips.num_docs)[0][0]]

    self.assertEqual(top("Where was Quorvath Zelindra born? Yxmoor beside the river Plessa")[0], "added-1")
    for document in self.documents:
      self.assertNotIn("4", top(document["body"]))

    # Bad input: an unknown id; a second update derives from the first and takes its tower.
    updated_before = _snapshot(updated)
    result = _main_in_process("update_index.py", f"--index={updated}", "--remove_ids=no-such-id")
    self._assert_refused(result,
                         updated,
                         updated_before,
                         "does not hold: 'no-such-id'",
                         unchanged=f"The converted index {updated} is unchanged")
    self.assertFalse(os.path.exists(converted + "-v2"))

    # bin/train_orqa --index_dir takes the updated index with the corpus of its blocks.jsonl; bin/eval_orqa
    # and bin/export_saved_model read that run.
    corpus = os.path.join(self.tmp, "conv", "corpus", "blocks")
    corpus_lib.write_corpus(lambda: corpus_lib.read_documents(os.path.join(updated, "blocks.jsonl")),
                            tokenizer,
                            corpus,
                            num_shards=1)
    orqa_dir = os.path.join(self.tmp, "conv", "orqa")
    result = _main_in_process("train_orqa.py", f"--model_dir={orqa_dir}", f"--train_path={self.train}",
                              f"--retrieval_corpus_path={corpus}", f"--index_dir={updated}/mips",
                              f"--retriever_checkpoint={embedder_dir}", f"--vocab_path={_VOCAB}",
                              f"--bert_config={self.bert_config}", "--projection_size=32",
                              "--query_seq_len=32", "--candidate_seq_len=128", "--reader_seq_len=128",
                              "--span_hidden_size=32", "--embedder_pooling=mean", "--batch_size=2",
                              "--num_train_steps=1", "--save_checkpoints_steps=1", "--nojit_compile")
    self.assertIsNone(result.exit)
    self.assertIn(f"frozen index from {updated}/mips", result.log)
    retrieved = self._dev_retrieved_ids(orqa_dir)
    self.assertIn("added-1", retrieved)
    self.assertNotIn("4", retrieved)
    # What bin/export_saved_model's open-QA model of that run serves: the blocks of
    # orqa_model.load_trained (export_all hands them to export_open_qa as they are; orqa_binaries_test
    # runs the binary as a process).
    bodies = list(orqa_model.load_trained(orqa_dir).blocks.bodies)
    self.assertIn(added["body"], bodies)
    self.assertNotIn(self.documents[4]["body"], bodies)

  def test_converted_index_update_killed_before_its_rename(self):
    converted, embedder_dir, config, _, _ = self._converted("conv_killed")
    before = _snapshot(converted)
    # A change set tokenized with another vocab is refused before anything is written.
    other = os.path.join(self.tmp, "conv_killed", "other", "blocks")
    corpus_lib.write_corpus(lambda: [corpus_lib.Document("t", "another vocab's text", "x-1")],
                            tokenization.Tokenizer(
                                tiny_inputs.write_vocab(os.path.join(self.tmp, "conv_killed"),
                                                        name="other_vocab.txt")),
                            other,
                            num_shards=1)
    with self.assertRaisesRegex(index_update.UpdateError, "tokenized with another vocab than the tower"):
      index_update.update_converted_index(converted,
                                          index_update.read_change_set(other),
                                          checkpoint=embedder_dir,
                                          log=lambda message: None)
    change = index_update.read_change_set(remove_ids=["1"])
    real_rename = os.rename

    def killed(source, target):
      if os.path.basename(target) == "wiki_index-v1":
        raise OSError("injected: killed before the rename")
      return real_rename(source, target)

    with mock.patch.object(index_update.os, "rename", killed):
      with self.assertRaisesRegex(OSError, "injected"):
        index_update.update_converted_index(converted, change, log=lambda message: None)
    # Nothing but the converted index it started from: no -v1, no temporary directory left.
    self.assertEqual(sorted(os.listdir(os.path.dirname(converted))),
                     ["conv_embedder", "other", "other_vocab.txt", "released", "wiki_index"])
    self.assertEqual(_snapshot(converted), before)
    written = index_update.update_converted_index(converted, change, log=lambda message: None)
    self.assertEqual(written, converted + "-v1")
    self.assertEqual(
        [b["id"] for b in converted_index.load_block_texts(os.path.join(written, "blocks.jsonl"))],
        ["0", "2", "3", "4"])

  def test_converted_orqa_served_from_the_updated_index(self):
    # Google's released ORQA as bin/convert_checkpoint converts it (a TF1 checkpoint in the original
    # layout), and a block_emb computed by its document tower.
    release = os.path.join(self.tmp, "served", "release")
    os.makedirs(release)
    positions = 64
    bert_config = bert.BertConfig(vocab_size=285,
                                  hidden_size=32,
                                  num_layers=1,
                                  num_attention_heads=2,
                                  intermediate_size=64,
                                  max_position_embeddings=positions)
    checkpoint = released_weights.write_tf1_checkpoint(
        os.path.join(release, "model.ckpt-300000"),
        released_weights.released_orqa_weights(bert_config, projection_size=16, span_hidden_size=8))
    orqa_dir = os.path.join(self.tmp, "served", "orqa_nq")
    released_conversion.convert(checkpoint, orqa_dir, vocab_path=_VOCAB, num_attention_heads=2)
    config = realm_config_lib.RealmConfig.load(orqa_dir)
    retriever = config.build_retriever()
    training_state.restore_retriever(retriever, orqa_dir)
    block_emb = _embed_eagerly(retriever, config.featurizer(), self.corpus)
    encoded = released_weights.write_tf1_checkpoint(os.path.join(release, "encoded.ckpt"),
                                                    {"block_emb": block_emb})
    # The titles too: the tower embedded "[CLS] title [SEP] body [SEP]", and blocks without them would
    # not reproduce block_emb (the update's probes stop it).
    for file_name, field in (("blocks.tfr", "body"), ("titles.tfr", "title")):
      with tf.io.TFRecordWriter(os.path.join(release, file_name)) as writer:
        for document in self.documents:
          writer.write(document[field].encode("utf-8"))
    index_dir = os.path.join(self.tmp, "served", "wiki")
    released_conversion.convert(encoded,
                                index_dir,
                                blocks_path=os.path.join(release, "blocks.tfr"),
                                titles_path=os.path.join(release, "titles.tfr"),
                                index_implementation="brute_force")

    # bin/update_index's main() in this process (it runs as a process in
    # test_realm_index_then_orqa_frozen_index).
    added = {"id": "added-1", "title": "Ostrel Vanquine", "body": _NEW_BODY}
    result = _main_in_process(
        "update_index.py", f"--index={index_dir}", f"--checkpoint={orqa_dir}", "--remove_ids=4",
        "--documents=" + _write_jsonl(os.path.join(self.tmp, "served", "add.jsonl"), [added]))
    self.assertIsNone(result.exit)
    self.assertIn(f"wrote {index_dir}-v1", result.stdout)
    # The open-QA model bin/export_saved_model --model_dir=<converted ORQA> --index_dir=<updated index>
    # writes (export_all's load_converted and export_open_qa; bin/released_orqa_test runs that binary
    # command as a process, with its query_embedder).
    export_dir = os.path.join(self.tmp, "served", "export")
    saved_models.export_open_qa(orqa_model.load_converted(orqa_dir, f"{index_dir}-v1"),
                                os.path.join(export_dir, "open_qa"))
    outputs = loader.answer_questions(loader.load_open_qa(os.path.join(export_dir, "open_qa")),
                                      ["Who built a lighthouse?"])
    # The reader reads 5 blocks, all the updated index holds: the added one (by its id) and no removed one.
    self.assertCountEqual([d.decode() for d in outputs["doc_ids"][0]], ["0", "1", "2", "3", "added-1"])
    texts = [t.decode("utf-8") for t in outputs["block_texts"][0]]
    self.assertIn(_NEW_BODY, texts)
    self.assertNotIn(self.documents[4]["body"], texts)


if __name__ == "__main__":
  tf.test.main()
