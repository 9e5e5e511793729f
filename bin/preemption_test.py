"""SIGTERM to a real trainer process (what a preempted Cloud TPU VM or a scheduler sends): it saves the
step it reached, exits with status 143 without marking the run done, and the same command resumes at
exactly that step.

This process does not import TensorFlow (seconds of CPU): the trainers are separate processes, and the
checkpoint state file is read as text.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

from absl.testing import absltest

from realm_tf.training import preemption

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TESTDATA = os.path.join(_REPO, "testdata")
_DEADLINE_SECONDS = 240  # start-up of TensorFlow and the first compiled step on a loaded 2-core machine


def _latest_checkpoint(model_dir):
  """tf.train.latest_checkpoint without TensorFlow: the model_checkpoint_path of MODEL_DIR/checkpoint
  (a text proto; a relative path is relative to model_dir)."""
  with open(os.path.join(model_dir, "checkpoint")) as f:
    found = re.search(r'^model_checkpoint_path: "(.*)"$', f.read(), re.MULTILINE)
  return found and os.path.join(model_dir, found.group(1))


class PreemptionTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    # A one-layer, hidden-32 BERT as a bert_config.json (bin/train_mlm --bert_config takes its path):
    # the loop's SIGTERM handling is what is tested, not the model.
    self.bert_config = os.path.join(self.create_tempdir().full_path, "bert_config.json")
    with open(os.path.join(_TESTDATA, "vocab.txt")) as f:
      vocab_size = len(f.read().splitlines())
    with open(self.bert_config, "w") as f:
      json.dump(
          {
              "vocab_size": vocab_size,
              "hidden_size": 32,
              "num_hidden_layers": 1,
              "num_attention_heads": 2,
              "intermediate_size": 64,
              "max_position_embeddings": 64
          }, f)

  def _start(self, model_dir, log_path, num_train_steps):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
    args = [
        sys.executable,
        os.path.join(_REPO, "bin",
                     "train_mlm.py"), f"--model_dir={model_dir}", f"--input_path={_TESTDATA}/corpus.jsonl",
        f"--vocab_path={_TESTDATA}/vocab.txt", f"--bert_config={self.bert_config}", "--batch_size=4",
        "--max_seq_len=32", "--max_predictions_per_seq=4", f"--num_train_steps={num_train_steps}",
        "--save_checkpoints_steps=100000", "--log_every_steps=1", "--jit_compile=false"
    ]
    log = open(log_path, "w")
    self.addCleanup(log.close)
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=_REPO)
    self.addCleanup(lambda: process.poll() is None and process.kill())
    return process

  def _read(self, path):
    with open(path) as f:
      return f.read()

  def test_sigterm_saves_the_step_reached_and_the_run_resumes_there(self):
    model_dir = os.path.join(self.create_tempdir().full_path, "mlm")
    log_path = os.path.join(self.create_tempdir().full_path, "first.log")
    process = self._start(model_dir, log_path, num_train_steps=100000)
    deadline = time.time() + _DEADLINE_SECONDS
    while not re.search(r"step 3/100000", self._read(log_path)):
      if process.poll() is not None or time.time() > deadline:
        self.fail(f"the trainer did not reach step 3 (rc {process.poll()}):\n{self._read(log_path)[-3000:]}")
      time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    self.assertEqual(process.wait(timeout=_DEADLINE_SECONDS), preemption.EXIT_STATUS,
                     self._read(log_path)[-3000:])
    log = self._read(log_path)
    found = re.search(r"SIGTERM: saved (\S+) at step (\d+) of 100000 and stopped", log)
    self.assertIsNotNone(found, log[-3000:])
    path, step = found.group(1), int(found.group(2))
    self.assertGreaterEqual(step, 3)
    self.assertEqual(path, os.path.join(model_dir, f"ckpt-{step}"))
    self.assertTrue(os.path.exists(path + ".index"))
    self.assertEqual(_latest_checkpoint(model_dir), path)
    self.assertNotIn("Traceback", log)
    self.assertFalse(os.path.exists(os.path.join(model_dir, "TRAINING_DONE")))
    self.assertFalse(os.path.exists(os.path.join(model_dir, "bert")))  # the final export did not run

    resumed_log = os.path.join(os.path.dirname(log_path), "second.log")
    second = self._start(model_dir, resumed_log, num_train_steps=step + 2)
    self.assertEqual(second.wait(timeout=_DEADLINE_SECONDS), 0, self._read(resumed_log)[-3000:])
    resumed = self._read(resumed_log)
    self.assertIn(f"resumed from {path} at step {step}", resumed)
    self.assertIn(f"step {step + 1}/{step + 2}", resumed)
    self.assertNotIn(f"step {step}/", resumed)  # no step trained twice
    self.assertTrue(os.path.exists(os.path.join(model_dir, "bert")))


if __name__ == "__main__":
  absltest.main()
