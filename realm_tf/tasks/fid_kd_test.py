"""Tests of the FiD-KD iterative loop (realm_tf.tasks.fid_kd) on a slice of testdata."""

import dataclasses
import json
import os
from unittest import mock

import numpy as np
import tensorflow as tf

from realm_tf.checkpoints import fid_warm_start
from realm_tf.checkpoints import training_state
from realm_tf.modeling import bert
from realm_tf.modeling import embedder
from realm_tf.modeling import fid_reader
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.tasks import fid_kd
from realm_tf.testing import eager_functions
from realm_tf.testing import fid_kd_testing
from realm_tf.testing import test_paths
from realm_tf.testing import tiny_inputs

_TESTDATA = os.path.join(test_paths.repo_root(), "testdata")
_VOCAB_PATH = os.path.join(_TESTDATA, "vocab.txt")
_BERT = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=32)
_CONFIG = realm_config_lib.RealmConfig(retriever_bert=_BERT,
                                       reader_bert=_BERT,
                                       vocab_path=_VOCAB_PATH,
                                       projection_size=16,
                                       query_seq_len=16,
                                       candidate_seq_len=48)
# answer_seq_len 4: greedy decoding traces the decoder once per answer position.
_FID = fid_reader.FidConfig(vocab_size=285,
                            hidden_size=32,
                            num_heads=2,
                            num_encoder_layers=1,
                            num_decoder_layers=1,
                            intermediate_size=32,
                            passage_seq_len=96,
                            answer_seq_len=4)


class BatchesTest(tf.test.TestCase):

  def test_epoch_function_is_called_per_epoch_and_order_is_seeded(self):
    calls = []

    def epoch(e):
      calls.append(e)
      return {"x": np.arange(6, dtype=np.int64) + 100 * e}

    batches = lambda seed: [b["x"].numpy().tolist() for b in fid_kd._batches(epoch, 4, seed).take(4)]
    first = batches(0)
    # 4 batches of 4 from epochs of 6: epochs 0..2 are read, each a permutation of its own values.
    self.assertEqual([0, 1, 2], sorted(set(calls))[:3])
    flat = [v for b in first for v in b]
    self.assertCountEqual(list(range(6)), flat[:6])
    self.assertCountEqual([100 + i for i in range(6)], flat[6:12])
    self.assertEqual(first, batches(0))
    self.assertNotEqual(first, batches(1))
    with self.assertRaisesRegex(ValueError, "cannot fill a batch of 8"):
      fid_kd._batches({"x": np.zeros([6])}, 8, 0)


class LoopTest(tf.test.TestCase):

  def test_iterations_write_artifacts_and_resume(self):
    directory = self.get_temp_dir()
    paths = tiny_inputs.testdata_qa_slice(directory, 8, 4, 20)
    model_dir = os.path.join(directory, "run")
    options = fid_kd.FidKdOptions(
        config=_CONFIG,
        fid=_FID,
        model_dir=model_dir,
        retrieval_corpus_path=paths["corpus"],
        train_path=paths["train"],
        dev_path=paths["dev"],
        initial_passages="bm25",
        iterations=2,
        # Each training phase traces its step; one step each, but the reader's 4 steps of 4 run into a
        # second epoch of the 8 questions (answers substituted anew) through the shared loop.
        num_passages=3,
        reader_steps=4,
        retriever_steps=1,
        reader_batch_size=4,
        retriever_batch_size=4,
        reader_single_passage_steps=1,
        reader_answer_substitution_rate=1.0,
        retriever_learning_rate=1e-3,
        recall_ks=(1, 5),
        embed_batch_size=32,
        predict_batch_size=8)
    # The real corpus embedding (tf.data pipeline, length buckets) runs once, for round 0's first index,
    # and the eager stand-in must give the same rows; the other three calls take the stand-in. Its
    # document tower runs eagerly: compiled with XLA (anew per call, 4 length buckets) it costs about 4 s
    # of CPU, and corpus_embedding_test compiles the same tower.
    eager_embed = fid_kd_testing.EagerCorpusEmbedding()
    real_embed = eager_functions.eagerly(fid_kd.embed_corpus)

    def embed_corpus(retriever, run_options):
      if eager_embed.calls:
        return eager_embed(retriever, run_options)
      embeddings = real_embed(retriever, run_options)
      self.assertEqual((20, 16), embeddings.shape)
      self.assertAllClose(embeddings, eager_embed(retriever, run_options), atol=1e-5, rtol=1e-5)
      return embeddings

    # A first run stops after iteration 0 ("crash"); the second resumes: it skips iteration 0 and starts
    # iteration 1 from iteration 0's distilled retriever.
    logs = []
    # The single-passage phase trains the reader eagerly: the 3-passage phase traces the same step.
    with mock.patch.object(fid_kd, "embed_corpus", embed_corpus), \
         mock.patch.object(fid_kd, "_train_reader_on_single_passages",
                           eager_functions.eagerly(fid_kd._train_reader_on_single_passages)):
      first = fid_kd.run(dataclasses.replace(options, iterations=1), log=logs.append)
      self.assertLen(first, 1)
      self.assertEqual([], [line for line in logs if "skipped" in line])
      logs.clear()
      # Round 1 runs eagerly: round 0 traced the same steps, decoding and scores (round 1 trains no
      # single-passage reader and no retriever: its dense passages hold too few answers).
      with eager_functions.functions_run_eagerly():
        metrics = fid_kd.run(options, log=logs.append)
    self.assertEqual(4, eager_embed.calls)  # the real embedding's check, then 3 rounds' indexes
    self.assertLen([line for line in logs if "skipped" in line], 1)
    self.assertLen(metrics, 2)
    self.assertEqual(first[0], metrics[0])
    # Round 1 starts from the retriever round 0 ended with (its distilled one if accepted, else its start).
    self.assertEqual(metrics[0]["recall_end"], metrics[1]["recall_before"])
    for m in metrics:
      self.assertEqual(m["accepted"], m["recall_after"]["gold_recall@5"]
                       >= m["recall_before"]["gold_recall@5"])
    self.assertEqual(["bm25", "dense"], [m["passages"] for m in metrics])
    # BM25 finds the gold documents of these name questions in a 20-document corpus.
    self.assertGreaterEqual(metrics[0]["reader_passages_gold_recall"], 75.0)
    for i, m in enumerate(metrics):
      it_dir = fid_kd.iteration_dir(model_dir, i)
      for name in ("metrics.json", "scores.jsonl"):
        self.assertTrue(os.path.exists(os.path.join(it_dir, name)), name)
      self.assertIsNotNone(tf.train.latest_checkpoint(os.path.join(it_dir, "reader")))
      self.assertBetween(m["reader_exact_match"], 0.0, 100.0)
    # Iteration 0 reads BM25 passages, which hold most answers: the teacher's and the retriever's gold
    # top-1 are measured, the reader trains on single passages first and its answers are substituted.
    for key in ("reader_gold_top1", "retriever_gold_top1"):
      self.assertBetween(metrics[0][key], 0.0, 100.0)
    self.assertGreaterEqual(metrics[0]["reader_single_passage_examples"], 4)
    self.assertIn("reader_single_passage_training", metrics[0])
    self.assertGreater(metrics[0]["reader_substituted_fraction"], 0.0)
    # Only questions whose passages hold an answer are distilled (--distill_answer_bearing_only).
    self.assertBetween(metrics[0]["distilled_questions"], 4, 8)
    for i, m in enumerate(metrics):
      it_dir = fid_kd.iteration_dir(model_dir, i)
      self.assertIn("gold_recall@5", m["recall_after"])
      with open(os.path.join(it_dir, "scores.jsonl"), encoding="utf-8") as f:
        scores = [json.loads(line) for line in f]
      self.assertLen(scores, 8)
      self.assertLen(scores[0]["passages"], 3)
      self.assertLen({p["row"] for p in scores[0]["passages"]}, 3)
    # The distilled retriever reads back through the shared restore (model/retriever/ layout), and KD
    # moved it away from the initial one.
    restored = embedder.build_retriever(_BERT, projection_size=16)
    training_state.restore_retriever(restored, metrics[1]["retriever_checkpoint"])
    initial = embedder.build_retriever(_BERT, projection_size=16)
    training_state.restore_retriever(initial, os.path.join(model_dir, fid_kd.INITIAL_RETRIEVER_DIR))
    self.assertGreater(
        max(float(np.abs(a - b).max()) for a, b in zip(restored.get_weights(), initial.get_weights())), 1e-6)
    # A finished run only reads its metrics back.
    logs.clear()
    self.assertEqual(metrics, fid_kd.run(options, log=logs.append))
    self.assertLen([line for line in logs if "skipped" in line], 2)
    with open(os.path.join(model_dir, fid_kd.SUMMARY_NAME), encoding="utf-8") as f:
      self.assertLen(json.load(f), 2)

  def test_bert_reader_encoder_is_warm_started_every_iteration(self):
    directory = self.get_temp_dir()
    paths = tiny_inputs.testdata_qa_slice(directory, 8, 4, 20)
    # A bin/train_mlm-style export (Model Garden checkpoint + bert_config.json) of a BERT of the corpus
    # vocab, hidden 32 (the decoder's 16 gets a projection).
    bert_config = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=32)
    source = bert.build_encoder(bert_config)
    ids = tf.zeros([1, 1], tf.int32)
    source(bert.encoder_inputs(ids, tf.ones_like(ids), ids))
    export = os.path.join(directory, "mlm_bert")
    tf.train.Checkpoint(encoder=source).write(os.path.join(export, "ckpt-1"))
    with open(os.path.join(export, "checkpoint"), "w", encoding="utf-8") as f:
      f.write('model_checkpoint_path: "ckpt-1"\n')
    with open(os.path.join(export, "bert_config.json"), "w", encoding="utf-8") as f:
      json.dump(bert_config.to_dict(), f)
    reader_config = dataclasses.replace(_FID,
                                        hidden_size=16,
                                        encoder="bert",
                                        bert=fid_warm_start.bert_encoder_config(export, 285))
    options = fid_kd.FidKdOptions(
        config=_CONFIG,
        fid=reader_config,
        model_dir=os.path.join(directory, "bert_run"),
        retrieval_corpus_path=paths["corpus"],
        train_path=paths["train"],
        dev_path=paths["dev"],
        iterations=2,
        num_passages=3,
        reader_steps=1,
        retriever_steps=1,
        reader_batch_size=4,
        # A retriever batch of more than the 8 training questions: no round trains the retriever (this
        # case needs only the readers; the loop test above distils).
        retriever_batch_size=16,
        reader_single_passage_steps=0,
        recall_ks=(1, 5),
        embed_batch_size=32,
        predict_batch_size=8,
        reader_init_checkpoint=export,
        reader_learning_rate=1e-2)
    logs = []
    real_iteration = fid_kd._run_iteration

    def run_iteration(options, data, retriever, iteration, start, log):
      # Iteration 0 traces the BERT reader's training step, decoding and scores; iteration 1 runs them
      # eagerly (the same functions again), warm-started as iteration 0.
      run = real_iteration if iteration == 0 else eager_functions.eagerly(real_iteration)
      return run(options, data, retriever, iteration, start, log)

    # The corpus embeddings (which only pick the passages here) computed eagerly; the loop test above
    # runs the real ones.
    with mock.patch.object(fid_kd, "embed_corpus", fid_kd_testing.EagerCorpusEmbedding()) as embed, \
         mock.patch.object(fid_kd, "_run_iteration", run_iteration):
      metrics = fid_kd.run(options, log=logs.append)
    self.assertEqual(4, embed.calls)  # before and after each iteration's distillation
    self.assertEqual([None, None], [m["retriever_training"] for m in metrics])
    self.assertLen([line for line in logs if "the retriever is not trained this iteration" in line], 2)
    self.assertLen([line for line in logs if "reader encoder warm-started" in line], 2)
    # Each iteration (re-)loaded the export (the two log lines) and its reader trained the warm-started
    # encoder: the saved encoder is near the export, but not equal to it.
    for i, m in enumerate(metrics):
      reader = fid_reader.build_reader(reader_config)
      tf.train.Checkpoint(model=reader).read(m["reader_checkpoint"]).assert_existing_objects_matched()
      moved = max(
          float(np.abs(a.numpy() - b.numpy()).max())
          for a, b in zip(source.weights, reader.bert_encoder.weights))
      self.assertBetween(moved, 1e-6, 1.0, msg=f"iteration {i}")
    self.assertTrue(tf.io.gfile.exists(os.path.join(options.model_dir, fid_reader.CONFIG_NAME)))
    self.assertEqual(reader_config, fid_reader.FidConfig.load(options.model_dir))
    with self.assertRaisesRegex(ValueError, "--reader_init_checkpoint=.*warm-starts a BERT reader"):
      fid_kd.run(dataclasses.replace(options, fid=_FID, model_dir=os.path.join(directory, "t5_run")),
                 log=lambda _: None)

  def test_bad_selection_metric_is_refused(self):
    directory = self.get_temp_dir()
    paths = tiny_inputs.testdata_qa_slice(directory, 8, 4, 20)
    for metric in ("gold_recall@3", "recall@5", "gold_precision@5"):
      options = fid_kd.FidKdOptions(config=_CONFIG,
                                    fid=_FID,
                                    model_dir=os.path.join(directory, "bad_metric"),
                                    retrieval_corpus_path=paths["corpus"],
                                    train_path=paths["train"],
                                    dev_path=paths["dev"],
                                    recall_ks=(1, 5),
                                    selection_metric=metric)
      with self.assertRaisesRegex(ValueError, "--selection_metric.*--recall_ks=1,5"):
        fid_kd.run(options, log=lambda _: None)

  def test_changed_reader_config_is_refused(self):
    directory = self.get_temp_dir()
    paths = tiny_inputs.testdata_qa_slice(directory, 8, 4, 20)
    model_dir = os.path.join(directory, "run2")
    _CONFIG.save(model_dir)
    _FID.save(model_dir)
    options = fid_kd.FidKdOptions(config=_CONFIG,
                                  fid=fid_reader.FidConfig(vocab_size=285, hidden_size=16, num_heads=2),
                                  model_dir=model_dir,
                                  retrieval_corpus_path=paths["corpus"],
                                  train_path=paths["train"],
                                  dev_path=paths["dev"])
    with self.assertRaisesRegex(ValueError, "another FiD reader configuration"):
      fid_kd.run(options, log=lambda _: None)


if __name__ == "__main__":
  tf.test.main()
