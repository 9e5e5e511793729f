"""Tests of ORQA fine-tuning as a library: a short run on a testdata slice writes the model dir (configs,
frozen index, best checkpoint pointed at by best_metric.json), bin/eval_orqa's evaluation of that model
dir reproduces the selected dev metrics, and a restart reuses the frozen index."""

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import retriever_eval
from realm_tf.data import corpus_table
from realm_tf.modeling import bert
from realm_tf.modeling import orqa as orqa_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import hybrid
from realm_tf.retrieval import index as index_lib
from realm_tf.runs import best_checkpoint
from realm_tf.runs import frozen_index
from realm_tf.runs import orqa_evaluation
from realm_tf.runs import train_candidates
from realm_tf.runs import warm_start
from realm_tf.tasks import orqa_trainer
from realm_tf.testing import eager_functions
from realm_tf.testing import test_paths
from realm_tf.testing import tiny_inputs
from realm_tf.training import loop

_TESTDATA = os.path.join(test_paths.repo_root(), "testdata")
_VOCAB_PATH = os.path.join(_TESTDATA, "vocab.txt")
_BERT = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=64)
_CONFIG = realm_config_lib.RealmConfig(retriever_bert=_BERT,
                                       reader_bert=_BERT,
                                       vocab_path=_VOCAB_PATH,
                                       projection_size=16,
                                       query_seq_len=24,
                                       candidate_seq_len=64)


def _options(model_dir, paths, steps, **overrides):
  values = dict(config=_CONFIG,
                orqa=orqa_lib.OrqaConfig(reader_seq_len=64,
                                         span_hidden_size=16,
                                         max_span_width=5,
                                         retriever_beam_size=24,
                                         reader_beam_size=3,
                                         retrieval_corpus_path=paths["corpus"]),
                loop=loop.LoopOptions(model_dir=model_dir,
                                      num_train_steps=steps,
                                      save_checkpoints_steps=3,
                                      log_every_steps=3,
                                      jit_compile=False),
                train_path=paths["train"],
                dev_path=paths["dev"],
                batch_size=2,
                learning_rate=1e-3,
                eval_every_steps=2,
                eval_batch_size=4)
  values.update(overrides)
  return orqa_trainer.OrqaTrainerOptions(**values)


class TrainAndEvaluateTest(tf.test.TestCase):

  def test_short_run_best_checkpoint_and_evaluation(self):
    tf_keras.utils.set_random_seed(0)
    tmp = self.create_tempdir().full_path
    paths = tiny_inputs.testdata_qa_slice(tmp, 12, 8, 24, num_shards=2)
    model_dir = os.path.join(tmp, "orqa")
    logs = []
    summary = orqa_trainer.train(_options(model_dir, paths, steps=4),
                                 tf.distribute.get_strategy(),
                                 log=logs.append)
    self.assertLen(summary["dev_history"], 2)  # steps 2 and 4
    self.assertEqual([h["step"] for h in summary["dev_history"]], [2, 4])
    self.assertGreater(summary["first_loss"], 0.0)

    saved = realm_config_lib.RealmConfig.load(model_dir)
    self.assertFalse(saved.share_embedders)
    self.assertEqual(orqa_lib.OrqaConfig.load(model_dir).reader_beam_size, 3)
    frozen = index_lib.load_index(frozen_index.frozen_index_dir(model_dir))
    self.assertEqual(frozen.embeddings.shape, (24, 16))

    best = best_checkpoint.read_best(model_dir)
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
    self.assertFalse({t for t in tags["train"] if t.startswith("dev_")}, tags["train"])

    # bin/eval_orqa's path: the best checkpoint, the same dev metrics, and the files it promises. Its
    # predictor's functions run eagerly: the run's dev evaluations traced the same OrqaPredictor.
    with eager_functions.functions_run_eagerly():
      result = orqa_evaluation.evaluate_model_dir(model_dir, paths["dev"], batch_size=4, log=logs.append)
    self.assertEqual(result["checkpoint"], os.path.join(model_dir, best["checkpoint"]))
    for key, value in best["metrics"].items():
      self.assertAllClose(result[key], value, msg=key)
    with open(result["predictions_path"], encoding="utf-8") as f:
      records = [json.loads(line) for line in f]
    self.assertLen(records, 8)
    self.assertEqual(set(records[0]), {"question", "prediction", "score", "retrieved_ids", "predicted_id"})
    self.assertLen(records[0]["retrieved_ids"], 3)
    self.assertIn(records[0]["predicted_id"], records[0]["retrieved_ids"])
    with open(result["metrics_path"]) as f:
      self.assertEqual(json.load(f)["num_examples"], 8)

    # A restart continues from ckpt-4 with the same frozen index. Its one step runs eagerly: the first
    # run traced the same training step (a trace costs about 5 s of CPU, the step a fraction of one).
    before = np.array(frozen.embeddings)
    with eager_functions.functions_run_eagerly():
      orqa_trainer.train(_options(model_dir, paths, steps=5, dev_path=None),
                         tf.distribute.get_strategy(),
                         log=logs.append)
    self.assertTrue(any("reusing the frozen index" in line for line in logs))
    self.assertTrue(any("resumed from" in line and "ckpt-4" in line for line in logs))
    self.assertAllEqual(index_lib.load_index(frozen_index.frozen_index_dir(model_dir)).embeddings, before)


class TrainOnBm25Test(tf.test.TestCase):

  def test_the_reader_trains_and_is_selected_on_bm25s_rows(self):
    tf_keras.utils.set_random_seed(0)
    tmp = self.create_tempdir().full_path
    paths = tiny_inputs.testdata_qa_slice(tmp, 12, 8, 24)
    model_dir = os.path.join(tmp, "orqa_bm25")
    logs = []
    orqa = dataclasses.replace(_options(model_dir, paths, 1).orqa, retriever_beam_size=6)
    # Eagerly: what is checked is which rows are read, not the traced step (the test above traces it).
    with eager_functions.functions_run_eagerly():
      summary = orqa_trainer.train(_options(model_dir, paths, 2, orqa=orqa, retriever="bm25"),
                                   tf.distribute.get_strategy(),
                                   log=logs.append)
    blocks = corpus_table.CorpusTable.load(paths["corpus"])
    sparse = hybrid.build_bm25(blocks.titles, blocks.bodies)
    with open(paths["train"], encoding="utf-8") as f:
      questions = [json.loads(line)["question"] for line in f]
    saved = np.load(os.path.join(model_dir, train_candidates.CANDIDATES_NAME), allow_pickle=False)
    self.assertAllEqual(saved["rows"], sparse.search(questions, 6)[0])
    # The dev evaluation that selected the best checkpoint read BM25's rows: bin/eval_orqa --retriever=bm25
    # of that checkpoint gives the same metrics, recall included (BM25's, whatever the query tower).
    with eager_functions.functions_run_eagerly():
      result = orqa_evaluation.evaluate_retrievers(model_dir,
                                                   paths["dev"], ["bm25"],
                                                   batch_size=4,
                                                   log=logs.append)["bm25"]
    best = summary["best"]
    for key, value in best["metrics"].items():
      self.assertAllClose(result[key], value, msg=key)
    # bin/eval_orqa --reader_beam_size=5: the reader reads BM25's top 5 instead of the run's 3, into files
    # of their own beside the run's evaluation.
    with eager_functions.functions_run_eagerly():
      wider = orqa_evaluation.evaluate_retrievers(model_dir,
                                                  paths["dev"], ["bm25"],
                                                  batch_size=4,
                                                  log=logs.append,
                                                  reader_beam_size=5)["bm25"]
    self.assertEqual((result["reader_beam_size"], wider["reader_beam_size"]), (3, 5))
    self.assertEqual(os.path.dirname(wider["metrics_path"]), os.path.dirname(result["metrics_path"]))
    self.assertTrue(wider["metrics_path"].endswith(".bm25.reader_beam5.metrics.json"), wider["metrics_path"])
    self.assertTrue(os.path.exists(result["metrics_path"]))
    with open(paths["dev"], encoding="utf-8") as f:
      dev_questions = [json.loads(line)["question"] for line in f]
    with open(wider["predictions_path"], encoding="utf-8") as f:
      read = [json.loads(line)["retrieved_ids"] for line in f]
    self.assertEqual(read, [[blocks.doc_ids[r] for r in rows] for rows in sparse.search(dev_questions, 5)[0]])
    # A restart reads the saved rows instead of searching again. It also holds the query tower still
    # (--retriever_learning_rate=0) while the reader trains on: the one rate reaches the tower's
    # variables, and only them.
    with eager_functions.functions_run_eagerly():
      orqa_trainer.train(_options(model_dir,
                                  paths,
                                  3,
                                  orqa=orqa,
                                  retriever="bm25",
                                  dev_path=None,
                                  retriever_learning_rate=0.0),
                         tf.distribute.get_strategy(),
                         log=logs.append)
    self.assertTrue(any("reusing the bm25 candidates" in line for line in logs), logs)
    before, after = (tf.train.load_checkpoint(os.path.join(model_dir, f"ckpt-{step}")) for step in (2, 3))
    moved = {
        name for name in before.get_variable_to_shape_map()
        # The weights, not Adam's slots: those still follow the tower's gradient.
        if name.startswith("model/") and name.endswith("/.ATTRIBUTES/VARIABLE_VALUE") and
        ".OPTIMIZER_SLOT" not in name and not np.array_equal(before.get_tensor(name), after.get_tensor(name))
    }
    self.assertTrue(any("/reader/" in name for name in moved), moved)
    self.assertFalse([name for name in moved if "query_embedder" in name])

    # The hybrid's dense side is the warm-start query tower (here a fresh one, seeded) over the frozen
    # index: its rows are the fusion of BM25's with that tower's exact search.
    hybrid_dir = os.path.join(tmp, "orqa_hybrid")
    with eager_functions.functions_run_eagerly():
      orqa_trainer.train(_options(hybrid_dir, paths, 1, orqa=orqa, retriever="hybrid", dev_path=None),
                         tf.distribute.get_strategy(),
                         log=logs.append)
    rows = np.load(os.path.join(hybrid_dir, train_candidates.CANDIDATES_NAME), allow_pickle=False)["rows"]
    config = realm_config_lib.RealmConfig.load(hybrid_dir)
    tf_keras.utils.set_random_seed(0)  # train() seeds the warm start so
    dense = retriever_eval.dense_top_k(
        warm_start.load_retriever_checkpoint(config, None), config,
        index_lib.load_index(frozen_index.frozen_index_dir(hybrid_dir)).embeddings, questions, 24)
    self.assertAllEqual(rows, hybrid.candidate_rows("hybrid", questions, 6, lambda d: dense, sparse)["rows"])
    self.assertNotAllEqual(rows, saved["rows"])


class OptionsTest(tf.test.TestCase):

  def test_gold_is_not_a_retriever_to_train_on(self):
    options = _options("/nonexistent/orqa", {"corpus": "c", "train": "t", "dev": "d"}, 1, retriever="gold")
    with self.assertRaisesRegex(ValueError, "--retriever=gold: bin/train_orqa trains on one of dense, bm25"):
      orqa_trainer.train(options, tf.distribute.get_strategy(), log=lambda _: None)

  def test_retriever_learning_rate_is_the_query_towers_factor_of_the_schedule(self):
    paths = {"corpus": "c", "train": "t", "dev": "d"}
    self.assertEqual(orqa_trainer.query_tower_multipliers(_options("/m", paths, 1)), ())
    self.assertEqual(
        orqa_trainer.query_tower_multipliers(_options("/m", paths, 1, retriever_learning_rate=1e-4)),
        (("/query_embedder/", 0.1),))
    # Refused before anything is built (the corpus embedding can take an hour).
    options = _options("/nonexistent/orqa", paths, 1, learning_rate=0.0, retriever_learning_rate=1e-5)
    with self.assertRaisesRegex(ValueError, "retriever_learning_rate=1e-05 needs learning_rate > 0"):
      orqa_trainer.train(options, tf.distribute.get_strategy(), log=lambda _: None)

  def test_index_dir_needs_the_retriever_checkpoint(self):
    options = _options("/nonexistent/orqa", {
        "corpus": "c",
        "train": "t",
        "dev": "d"
    },
                       steps=1,
                       index_dir="/some/index")
    with self.assertRaisesRegex(ValueError, "--index_dir=/some/index needs --retriever_checkpoint"):
      orqa_trainer.train(options, tf.distribute.get_strategy(), log=lambda _: None)


if __name__ == "__main__":
  tf.test.main()
