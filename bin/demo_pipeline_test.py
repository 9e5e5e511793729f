"""Tests of bin/demo_pipeline end to end: the real refresher process beside the real trainer process.

Slow by nature (separate processes, each importing TensorFlow), so one short run covers the pipeline and
one kill-and-resume run covers recovery.
"""

import json
import os
import signal
import subprocess
import time

import tensorflow as tf

from bin import demo_pipeline
from realm_tf import retriever_eval
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus_table
from realm_tf.data import pretraining
from realm_tf.data import qa as qa_lib
from realm_tf.data import synthetic
from realm_tf.modeling import realm_config
from realm_tf.retrieval import corpus_embedding


def _short_options(output_dir: str, **overrides) -> demo_pipeline.PipelineOptions:
  values = dict(output_dir=output_dir, realm_steps=60, save_checkpoints_steps=20, realm_batch_size=4,
                max_index_staleness_steps=40, realm_learning_rate=1e-3,
                index_implementation="brute_force")
  values.update(overrides)
  return demo_pipeline.PipelineOptions(**values)


class PipelineTest(tf.test.TestCase):

  def test_trainer_trains_on_refreshed_indexes_and_loss_falls(self):
    out = self.create_tempdir().full_path
    options = _short_options(out)
    paths = demo_pipeline.prepare_corpora(options, echo=lambda _: None)
    summary = demo_pipeline.run_realm(options, paths, init_retriever=None, echo=lambda _: None)
    # The bootstrap index (step 0) and at least one index the refresher published from a checkpoint.
    self.assertGreaterEqual(len(summary["indexes_used"]), 2, summary)
    self.assertIn(0, summary["indexes_used"])
    self.assertLess(summary["final"]["loss"], summary["first_loss"], summary)
    self.assertEqual(summary["refresher_exit_code"], 0)
    model_dir = summary["model_dir"]
    self.assertTrue(training_state.training_done(model_dir))
    self.assertEqual(training_state.latest_step(model_dir), 60)
    index_dir = os.path.join(model_dir, "index")
    names = os.listdir(index_dir)
    self.assertEmpty([n for n in names if n.startswith(".tmp")], names)
    self.assertLessEqual(len(names), 3)  # keep=3

    # Recall with the document tower of another checkpoint: the questions go through the latest
    # checkpoint's query tower and the corpus through step 20's document tower, as retriever_eval gets
    # them when handed step 20's embeddings; naming the latest checkpoint twice changes nothing.
    qa_paths = [os.path.join(options.testdata_dir, "qa.dev.jsonl")]
    latest, first = tf.train.latest_checkpoint(model_dir), os.path.join(model_dir, "ckpt-20")
    self.assertEqual(
        demo_pipeline.retriever_recall(model_dir, latest, paths["retrieval"], qa_paths, latest),
        demo_pipeline.retriever_recall(model_dir, latest, paths["retrieval"], qa_paths))
    config = realm_config.RealmConfig.load(model_dir)
    towers = {}
    for path in (latest, first):
      towers[path] = config.build_retriever()
      training_state.restore_retriever(towers[path], path)
    corpus = corpus_table.CorpusTable.load(paths["retrieval"])
    first_docs = corpus_embedding.embed_corpus(
        lambda inputs: towers[first].embed_documents(inputs, training=False), corpus.prefix,
        config.featurizer(), log=lambda _: None)
    self.assertEqual(
        demo_pipeline.retriever_recall(model_dir, latest, paths["retrieval"], qa_paths, first),
        retriever_eval.retriever_recall(towers[latest], config, corpus, qa_lib.load_jsonl(qa_paths[0]),
                                        ks=(1, 5, 20), doc_embeddings=first_docs))

    # The finished run continued to more steps: the refresher started beside it must not take the first
    # run's done marker for the end of this one, so the new final checkpoint gets its index.
    more = demo_pipeline.run_realm(_short_options(out, realm_steps=80), paths, init_retriever=None,
                                   echo=lambda _: None)
    self.assertEqual(training_state.latest_step(model_dir), 80)
    self.assertEqual(more["refresher_exit_code"], 0)
    self.assertIn("80", os.listdir(index_dir))

  def test_realm_pretraining_path_gives_realm_its_own_corpus(self):
    out = self.create_tempdir().full_path
    news = os.path.join(out, "news.jsonl")
    with open(os.path.join(demo_pipeline.PipelineOptions.testdata_dir, "pretraining.jsonl")) as f, \
        open(news, "w") as w:
      records = [line for line in f if json.loads(line)["title"] == synthetic.NEWS_TITLE][:7]
      w.writelines(records)
    paths = demo_pipeline.prepare_corpora(_short_options(out, realm_pretraining_path=news),
                                          echo=lambda _: None)
    self.assertEqual(pretraining.read_manifest(paths["realm_pretraining"])["num_documents"], 7)
    self.assertEqual(pretraining.read_manifest(paths["pretraining"])["num_documents"], 444)  # ICT's

  def test_a_rerun_appends_to_its_log(self):
    # A resumed benchmark reruns its binaries with the same log paths; what the first run printed stays.
    out = self.create_tempdir().full_path
    log_path = os.path.join(out, "logs", "corpus.log")
    for attempt in ("first", "second"):
      with self.assertRaisesRegex(RuntimeError, log_path):
        demo_pipeline.run_binary("generate_retrieval_corpus", log_path,
                                 input_path=os.path.join(out, f"{attempt}.jsonl"),
                                 vocab_path=os.path.join(demo_pipeline.REPO, "testdata", "vocab.txt"),
                                 output_prefix=os.path.join(out, "blocks"))
    with open(log_path) as f:
      lines = f.read().splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("===== ")]
    self.assertLen(headers, 2, lines)
    self.assertEqual(headers[0], 0)
    first, second = lines[:headers[1]], lines[headers[1]:]
    self.assertIn("first.jsonl does not exist", "\n".join(first))
    self.assertIn("second.jsonl does not exist", "\n".join(second))

  def test_sigkilled_trainer_resumes_from_its_last_checkpoint(self):
    out = self.create_tempdir().full_path
    options = _short_options(out)
    paths = demo_pipeline.prepare_corpora(options, echo=lambda _: None)
    model_dir = os.path.join(out, "kill")
    flags = dict(model_dir=model_dir, pretraining_corpus_path=paths["pretraining"],
                 retrieval_corpus_path=paths["retrieval"], vocab_path=paths["vocab"],
                 bert_config="tiny", projection_size=32, query_seq_len=32, candidate_seq_len=128,
                 max_masks=8, num_candidates=4, batch_size=4, save_checkpoints_steps=10,
                 log_every_steps=5, bootstrap_index=True, index_implementation="brute_force")
    log_path = os.path.join(out, "first.log")
    with open(log_path, "w") as log_file:
      trainer = subprocess.Popen(
          demo_pipeline.binary_command("train_realm", num_train_steps=1000, **flags),
          stdout=log_file, stderr=subprocess.STDOUT, env=demo_pipeline.binary_env())
      # No wall clock here: 20 steps take seconds on a quiet machine and minutes on a busy one. A trainer
      # that stalls waiting for an index raises NoRefresherError and exits (caught by poll() below);
      # any other hang ends at the target's timeout.
      while training_state.latest_step(model_dir) is None or training_state.latest_step(model_dir) < 20:
        self.assertIsNone(trainer.poll(), open(log_path).read()[-3000:])
        time.sleep(0.5)
      trainer.send_signal(signal.SIGKILL)
      trainer.wait()
    killed_at = training_state.latest_step(model_dir)
    self.assertGreaterEqual(killed_at, 20)
    # Every checkpoint the manager lists is complete and readable.
    state = tf.train.get_checkpoint_state(model_dir)
    for path in state.all_model_checkpoint_paths:
      self.assertNotEmpty(tf.train.list_variables(path))
    self.assertFalse(training_state.training_done(model_dir))

    resumed_steps = killed_at + 10
    demo_pipeline.run_binary("train_realm", os.path.join(out, "second.log"),
                        num_train_steps=resumed_steps, **flags)
    with open(os.path.join(out, "second.log")) as f:
      second = f.read()
    self.assertIn(f"resumed from {os.path.join(model_dir, f'ckpt-{killed_at}')} at step {killed_at}",
                  second)
    self.assertEqual(training_state.latest_step(model_dir), resumed_steps)
    with open(os.path.join(model_dir, "train_summary.json")) as f:
      self.assertEqual(json.load(f)["final"]["loss"] > 0, True)


if __name__ == "__main__":
  tf.test.main()
