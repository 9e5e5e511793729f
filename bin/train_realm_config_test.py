"""bin/train_realm runs from a config file with --params_override, writes MODEL_DIR/train_realm.yaml, and
resumes from that file (issue 39's done-when); a config file's mistake stops it before any work."""

import gc
import os

import tensorflow as tf
import yaml

from realm_tf.testing import in_process
from realm_tf.testing import test_paths
from realm_tf.testing import tiny_inputs

_TESTDATA = os.path.join(test_paths.repo_root(), "testdata")


def setUpModule():
  # The objects of the imports (TensorFlow's millions) out of reach of the garbage collector: every
  # in-process main ends with gc.collect() (realm_tf/testing/in_process, training.loop), which otherwise
  # walks all of them each time. They live as long as the process anyway; what the tests make is still
  # collected.
  gc.freeze()


class TrainRealmConfigFileTest(tf.test.TestCase):

  def test_runs_from_a_config_file_and_resumes_from_the_file_it_wrote(self):
    tmp = self.create_tempdir().full_path
    corpora = tiny_inputs.write_small_realm_corpora(tmp, 10)
    model_dir = f"{tmp}/realm"
    with open(f"{tmp}/small.yaml", "w") as f:
      yaml.safe_dump(
          {
              "model_dir": model_dir,
              "data": {
                  "pretraining_corpus_path": corpora["pretraining"],
                  "retrieval_corpus_path": corpora["retrieval"]
              },
              "model": {
                  "vocab_path": f"{_TESTDATA}/vocab.txt",
                  "bert_config": tiny_inputs.write_small_bert_config(tmp)
              },
              "retriever": {
                  "projection_size": 16,
                  "query_seq_len": 16,
                  "candidate_seq_len": 32
              },
              "realm": {
                  "num_candidates": 4,
                  "max_masks": 4
              },
              "index": {
                  "bootstrap_index": True,
                  "index_implementation": "brute_force"
              },
              "train": {
                  "batch_size": 2,
                  "num_train_steps": 5,
                  "save_checkpoints_steps": 5,
                  "jit_compile": False
              },
          }, f)
    result = in_process.run_main("train_realm.py", f"--config_file={tmp}/small.yaml",
                                 "--params_override=train.num_train_steps=1,train.save_checkpoints_steps=1")
    self.assertIsNone(result.error, result.traceback)
    written = f"{model_dir}/train_realm.yaml"
    with open(written) as f:
      config = yaml.safe_load(f)
    self.assertEqual(config["train"]["num_train_steps"], 1)  # the override, over the file
    self.assertEqual(config["train"]["learning_rate"], 3e-5)  # the binary's default, written in full
    self.assertEqual(tf.train.latest_checkpoint(model_dir), f"{model_dir}/ckpt-1")

    # Resumed from the file it wrote: the same run (its checkpoint of step 1 restored, nothing left to
    # train; a resume that trains on is the loop's own test).
    result = in_process.run_main("train_realm.py", f"--config_file={written}")
    self.assertIsNone(result.error, result.traceback)
    self.assertIn(f"configuration written to {written}", result.log)
    self.assertIn("already at step 1 >= --num_train_steps=1; nothing to do", result.log)
    with open(written) as f:
      self.assertEqual(yaml.safe_load(f), config)

  def test_a_config_file_mistake_stops_before_any_work(self):
    tmp = self.create_tempdir().full_path
    with open(f"{tmp}/bad.yaml", "w") as f:
      f.write(f"model_dir: {tmp}/realm\ntrain:\n  batch_size: 0\n")
    result = in_process.run_main("train_realm.py", f"--config_file={tmp}/bad.yaml")
    self.assertIn(f"{tmp}/bad.yaml: train.batch_size: 0 is out of range; allowed: an integer >= 1",
                  str(result.error))
    self.assertFalse(os.path.exists(f"{tmp}/realm"))


if __name__ == "__main__":
  tf.test.main()
