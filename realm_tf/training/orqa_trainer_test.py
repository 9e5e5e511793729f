"""Tests of ORQA fine-tuning as a library: a short run on a testdata slice writes the model dir (configs,
frozen index, best checkpoint pointed at by best_metric.json), bin/eval_orqa's evaluation of that model
dir reproduces the selected dev metrics, a restart reuses the frozen index, and retriever checkpoints
load tower by tower or fail with a message that names the flag and the fix."""

import json
import os

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import testing_utils
from realm_tf.data import corpus as corpus_lib
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import orqa as orqa_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.modeling import reader as reader_lib
from realm_tf.retrieval import index as index_lib
from realm_tf.training import loop
from realm_tf.training import orqa_trainer

_TESTDATA = os.path.join(testing_utils.repo_root(), "testdata")
_VOCAB_PATH = os.path.join(_TESTDATA, "vocab.txt")
_BERT = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=64)
_CONFIG = realm_config_lib.RealmConfig(retriever_bert=_BERT, reader_bert=_BERT, vocab_path=_VOCAB_PATH,
                                       projection_size=16, query_seq_len=24, candidate_seq_len=64)


def _options(model_dir, paths, steps, **overrides):
  values = dict(
      config=_CONFIG,
      orqa=orqa_lib.OrqaConfig(reader_seq_len=64, span_hidden_size=16, max_span_width=5,
                               retriever_beam_size=24, reader_beam_size=3,
                               retrieval_corpus_path=paths["corpus"]),
      loop=loop.LoopOptions(model_dir=model_dir, num_train_steps=steps, save_checkpoints_steps=3,
                            log_every_steps=3, jit_compile=False),
      train_path=paths["train"], dev_path=paths["dev"], batch_size=2, learning_rate=1e-3,
      eval_every_steps=2, eval_batch_size=4)
  values.update(overrides)
  return orqa_trainer.OrqaTrainerOptions(**values)


class TrainAndEvaluateTest(tf.test.TestCase):

  def test_short_run_best_checkpoint_and_evaluation(self):
    tf_keras.utils.set_random_seed(0)
    tmp = self.create_tempdir().full_path
    paths = testing_utils.testdata_qa_slice(tmp, 12, 8, 24, num_shards=2)
    model_dir = os.path.join(tmp, "orqa")
    logs = []
    summary = orqa_trainer.train(_options(model_dir, paths, steps=4), tf.distribute.get_strategy(),
                                 log=logs.append)
    self.assertLen(summary["dev_history"], 2)  # steps 2 and 4
    self.assertEqual([h["step"] for h in summary["dev_history"]], [2, 4])
    self.assertGreater(summary["first_loss"], 0.0)

    saved = realm_config_lib.RealmConfig.load(model_dir)
    self.assertFalse(saved.share_embedders)
    self.assertEqual(orqa_lib.OrqaConfig.load(model_dir).reader_beam_size, 3)
    frozen = index_lib.load_index(orqa_trainer.frozen_index_dir(model_dir))
    self.assertEqual(frozen.embeddings.shape, (24, 16))

    best = orqa_trainer.read_best(model_dir)
    self.assertIn(best["step"], (2, 4))
    self.assertEqual(best["checkpoint"], f"best/ckpt-{best['step']}")
    best_files = os.listdir(os.path.join(model_dir, "best"))
    self.assertTrue(all(name.startswith(f"ckpt-{best['step']}.") for name in best_files), best_files)
    for key in ("accuracy", "exact_match", "f1", "recall@1", "recall@5", "recall@20", "recall@100"):
      self.assertIn(key, best["metrics"])
    self.assertEqual(best["metrics"]["recall@20"] <= best["metrics"]["recall@100"], True)
    # Dev metrics go to TensorBoard once, under MODEL_DIR/dev, not again among the training scalars.
    tags = {}
    for run in ("train", "dev"):
      for path in tf.io.gfile.glob(os.path.join(model_dir, run, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
          tags.setdefault(run, set()).update(v.tag for v in event.summary.value)
    self.assertIn("exact_match", tags["dev"])
    self.assertIn("loss", tags["train"])
    self.assertFalse({t for t in tags["train"] if t.startswith("dev_")},
                     tags["train"])

    # bin/eval_orqa's path: the best checkpoint, the same dev metrics, and the files it promises.
    result = orqa_trainer.evaluate_model_dir(model_dir, paths["dev"], batch_size=4, log=logs.append)
    self.assertEqual(result["checkpoint"], os.path.join(model_dir, best["checkpoint"]))
    for key, value in best["metrics"].items():
      self.assertAllClose(result[key], value, msg=key)
    with open(result["predictions_path"], encoding="utf-8") as f:
      records = [json.loads(line) for line in f]
    self.assertLen(records, 8)
    self.assertEqual(set(records[0]), {"question", "prediction", "score", "retrieved_ids",
                                       "predicted_id"})
    self.assertLen(records[0]["retrieved_ids"], 3)
    self.assertIn(records[0]["predicted_id"], records[0]["retrieved_ids"])
    with open(result["metrics_path"]) as f:
      self.assertEqual(json.load(f)["num_examples"], 8)

    # A restart continues from ckpt-4 with the same frozen index.
    before = np.array(frozen.embeddings)
    orqa_trainer.train(_options(model_dir, paths, steps=5, dev_path=None),
                       tf.distribute.get_strategy(), log=logs.append)
    self.assertTrue(any("reusing the frozen index" in line for line in logs))
    self.assertTrue(any("resumed from" in line and "ckpt-4" in line for line in logs))
    self.assertAllEqual(index_lib.load_index(orqa_trainer.frozen_index_dir(model_dir)).embeddings,
                        before)


class RetrieverCheckpointTest(tf.test.TestCase):

  def test_shared_and_two_tower_checkpoints(self):
    tmp = self.create_tempdir().full_path
    tf_keras.utils.set_random_seed(1)
    shared = embedder_lib.build_retriever(_BERT, 16)
    shared_path = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=shared)).write(
        os.path.join(tmp, "shared", "ckpt-1"))
    loaded = orqa_trainer.load_retriever_checkpoint(_CONFIG, shared_path)
    self.assertAllEqual(loaded.query_embedder.weights[0], shared.doc_embedder.weights[0])

    two = embedder_lib.build_retriever(_BERT, 16, share_embedders=False)
    two.query_embedder.weights[0].assign(two.query_embedder.weights[0] + 1.0)
    two_path = tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=two)).write(
        os.path.join(tmp, "two", "ckpt-1"))
    loaded = orqa_trainer.load_retriever_checkpoint(_CONFIG, two_path)
    self.assertAllEqual(loaded.query_embedder.weights[0], two.query_embedder.weights[0])
    self.assertAllEqual(loaded.doc_embedder.weights[0], two.doc_embedder.weights[0])
    self.assertNotAllEqual(loaded.query_embedder.weights[0], loaded.doc_embedder.weights[0])

  def test_wrong_hidden_size_names_flag_and_fix(self):
    tmp = self.create_tempdir().full_path
    other = embedder_lib.build_retriever(bert.tiny_config(285, hidden_size=64, num_layers=1), 16)
    path = tf.train.Checkpoint(retriever=other).write(os.path.join(tmp, "ckpt-0"))
    with self.assertRaisesRegex(ValueError, r"--retriever_checkpoint=.*ckpt-0 does not fit this run's "
                                r"retriever \(hidden_size 32.*--bert_config"):
      orqa_trainer.load_retriever_checkpoint(_CONFIG, path)


class ReaderWarmStartTest(tf.test.TestCase):

  def test_whole_span_reader_from_a_reader_checkpoint(self):
    tmp = self.create_tempdir().full_path
    def reader(seed, span_hidden_size=8):
      tf_keras.utils.set_random_seed(seed)
      model = reader_lib.SpanReader(_BERT, seq_len=16, span_hidden_size=span_hidden_size,
                                    max_span_width=3)
      ids = tf.zeros([1, 1, 16], tf.int32)
      model(((ids, ids, ids), ids, tf.zeros([1, 1])))
      return model

    source = reader(1)
    path = tf.train.Checkpoint(reader=source).write(os.path.join(tmp, "ckpt-0"))
    target = reader(2)
    message = orqa_trainer.warm_start_reader(target, path)
    self.assertIn("span head", message)
    self.assertAllEqual(target.span_output.kernel, source.span_output.kernel)
    self.assertAllEqual(target.encoder.weights[0], source.encoder.weights[0])
    with self.assertRaisesRegex(ValueError, "--span_hidden_size"):
      orqa_trainer.warm_start_reader(reader(3, span_hidden_size=4), path)


class FrozenIndexTest(tf.test.TestCase):

  def test_index_of_another_corpus_is_refused(self):
    tmp = self.create_tempdir().full_path
    paths = testing_utils.testdata_qa_slice(tmp, 12, 8, 24, num_shards=2)
    index_dir = os.path.join(tmp, "other_index")
    index_lib.build_index(np.ones([5, 16], np.float32), implementation="brute_force").save(index_dir)
    options = _options(os.path.join(tmp, "orqa"), paths, steps=1, index_dir=index_dir)
    with self.assertRaisesRegex(ValueError, r"shape \(5, 16\) but corpus .* has 24 documents"):
      orqa_trainer.prepare_frozen_index(options, tf.distribute.get_strategy(), lambda: None,
                                        log=lambda _: None)
    self.assertFalse(os.path.exists(orqa_trainer.frozen_index_dir(options.loop.model_dir)))

    # An index of this corpus (here a saved MIPS index; a published MODEL_DIR/index/<step> works the
    # same) becomes the run's frozen index, unchanged.
    embeddings = np.random.default_rng(0).normal(size=[24, 16]).astype(np.float32)
    index_lib.build_index(embeddings, implementation="brute_force").save(index_dir, overwrite=True)
    logs = []
    frozen = orqa_trainer.prepare_frozen_index(options, tf.distribute.get_strategy(), lambda: None,
                                               log=logs.append)
    self.assertAllEqual(frozen, embeddings)
    saved = index_lib.load_index(orqa_trainer.frozen_index_dir(options.loop.model_dir))
    self.assertAllEqual(saved.embeddings, embeddings)
    self.assertEqual(saved.manifest["extra"]["index_dir"], index_dir)
    self.assertIn(f"frozen index from {index_dir}", logs)

  def test_index_or_frozen_index_of_a_same_size_corpus_with_other_documents_is_refused(self):
    tmp = self.create_tempdir().full_path
    paths = testing_utils.testdata_qa_slice(tmp, 12, 8, 24, num_shards=2)
    # 24 documents too, but other ones (other train questions' gold documents): only the fingerprint
    # tells the corpora apart.
    other = testing_utils.testdata_qa_slice(os.path.join(tmp, "other"), 30, 0, 24)["corpus"]
    embeddings = np.random.default_rng(0).normal(size=[24, 16]).astype(np.float32)
    index_dir = os.path.join(tmp, "index_of_other")
    index_lib.build_index(embeddings, implementation="brute_force").save(
        index_dir, extra={"corpus_fingerprint": corpus_lib.fingerprint(other)})
    options = _options(os.path.join(tmp, "orqa"), paths, steps=1, index_dir=index_dir)
    with self.assertRaisesRegex(ValueError, f"{index_dir} embeds another corpus .* than {paths['corpus']}"
                                r".*Pass --index_dir of an index built from this corpus"):
      orqa_trainer.prepare_frozen_index(options, tf.distribute.get_strategy(), lambda: None,
                                        log=lambda _: None)
    self.assertFalse(os.path.exists(orqa_trainer.frozen_index_dir(options.loop.model_dir)))

    # Built from this corpus, the frozen index records its fingerprint; evaluation and export (through
    # load_frozen_index) refuse it once the corpus at that path holds other documents.
    index_lib.build_index(embeddings, implementation="brute_force").save(
        index_dir, overwrite=True, extra={"corpus_fingerprint": corpus_lib.fingerprint(paths["corpus"])})
    orqa_trainer.prepare_frozen_index(options, tf.distribute.get_strategy(), lambda: None,
                                      log=lambda _: None)
    model_dir = options.loop.model_dir
    self.assertAllEqual(orqa_trainer.load_frozen_index(model_dir, paths["corpus"]), embeddings)
    with self.assertRaisesRegex(ValueError, "frozen_index embeds another corpus .*The corpus changed"):
      orqa_trainer.load_frozen_index(model_dir, other)

  def test_index_dir_needs_the_retriever_checkpoint(self):
    options = _options("/nonexistent/orqa", {"corpus": "c", "train": "t", "dev": "d"}, steps=1,
                       index_dir="/some/index")
    with self.assertRaisesRegex(ValueError, "--index_dir=/some/index needs --retriever_checkpoint"):
      orqa_trainer.train(options, tf.distribute.get_strategy(), log=lambda _: None)


if __name__ == "__main__":
  tf.test.main()
