"""SIGKILL to a real bin/train_realm process (an OOM kill or a lost VM: no handler runs): every
checkpoint it listed stays complete and readable, the run is not marked done, and the same command
resumes from the last checkpoint.

SIGTERM (a handled stop) is bin/preemption_test's, but for one case that needs REALM's pipeline: a SIGTERM
while the trainer waits for an index ends the wait and the process at once. The trainer here trains a
one-layer, hidden-32 BERT on short sequences without XLA: what is tested is the process and its
checkpoints, not the model. The corpora are written in this process, once for the class, from the first
40 testdata documents (bin/demo_pipeline_test writes whole ones); the bootstrap index each trainer
process embeds first is then seconds less. The resumed run after the SIGKILL is bin/train_realm's main in
this process, with the same command line (realm_tf/testing/in_process): what it must do is read the killed
run's files, and a third process start would cost seconds of CPU for nothing more.
"""

import gc
import json
import os
import signal
import subprocess
import time

import tensorflow as tf

from realm_tf import demo_pipeline
from realm_tf import tokenization
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus
from realm_tf.data import pretraining
from realm_tf.retrieval import published_index
from realm_tf.testing import in_process
from realm_tf.testing import tiny_inputs
from realm_tf.training import preemption

_SIZES = dict(projection_size=32, query_seq_len=16, candidate_seq_len=64, max_masks=4, num_candidates=4)


def setUpModule():
  # The objects of the imports (TensorFlow's millions) out of reach of the garbage collector: every
  # in-process main ends with gc.collect() (realm_tf/testing/in_process, training.loop), which otherwise
  # walks all of them each time. They live as long as the process anyway; what the tests make is still
  # collected.
  gc.freeze()


class SigkillTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # The runs only read these.
    testdata = demo_pipeline.PipelineOptions.testdata_dir
    out = os.path.join(tf.compat.v1.test.get_temp_dir(), "sigkill_inputs")
    os.makedirs(out, exist_ok=True)
    cls.vocab = os.path.join(testdata, "vocab.txt")
    cls.retrieval = os.path.join(out, "corpus", "blocks")
    cls.pretraining = os.path.join(out, "pretraining", "sentences")
    tokenizer = tokenization.Tokenizer(cls.vocab)
    corpus.write_corpus(lambda: list(corpus.read_documents(os.path.join(testdata, "corpus.jsonl")))[:40],
                        tokenizer,
                        cls.retrieval,
                        num_shards=2)
    pretraining.write_pretraining_corpus(
        lambda: list(pretraining.read_raw_documents(os.path.join(testdata, "pretraining.jsonl")))[:40],
        cls.pretraining,
        num_shards=2)
    cls.bert_config = tiny_inputs.write_small_bert_config(out)

  def _flags(self, model_dir, **overrides):
    """bin/train_realm's flags for this class's tiny corpora and BERT, bootstrapping its own index."""
    return dict(model_dir=model_dir,
                pretraining_corpus_path=self.pretraining,
                retrieval_corpus_path=self.retrieval,
                vocab_path=self.vocab,
                bert_config=self.bert_config,
                jit_compile=False,
                **_SIZES,
                batch_size=4,
                bootstrap_index=True,
                index_implementation="brute_force",
                **overrides)

  def test_sigkilled_trainer_resumes_from_its_last_checkpoint(self):
    out = self.create_tempdir().full_path
    model_dir = os.path.join(out, "kill")
    flags = self._flags(model_dir, save_checkpoints_steps=10, log_every_steps=5)
    log_path = os.path.join(out, "first.log")
    with open(log_path, "w") as log_file:
      trainer = subprocess.Popen(demo_pipeline.binary_command("train_realm", num_train_steps=1000, **flags),
                                 stdout=log_file,
                                 stderr=subprocess.STDOUT,
                                 env=demo_pipeline.binary_env())
      # No wall clock here: 20 steps take seconds on a quiet machine and minutes on a busy one. A trainer
      # that stalls waiting for an index raises NoRefresherError and exits (caught by poll() below);
      # any other hang ends at the target's timeout.
      while training_state.latest_step(model_dir) is None or training_state.latest_step(model_dir) < 20:
        self.assertIsNone(trainer.poll(), open(log_path).read()[-3000:])
        time.sleep(0.2)
      trainer.send_signal(signal.SIGKILL)
      trainer.wait()
    killed_at = training_state.latest_step(model_dir)
    self.assertGreaterEqual(killed_at, 20)
    # Every checkpoint the manager lists is complete and readable.
    state = tf.train.get_checkpoint_state(model_dir)
    for path in state.all_model_checkpoint_paths:
      self.assertNotEmpty(tf.train.list_variables(path))
    self.assertFalse(training_state.training_done(model_dir))

    # A trainer killed while it published its bootstrap index leaves the temporary directory of it (found
    # by bench/fault_soak: a SIGKILL during the publication, and the refresher, which removes such
    # directories when it starts, never restarted); the resumed trainer removes it.
    exited = subprocess.Popen(["true"])
    exited.wait()
    leftover = os.path.join(published_index.index_root(model_dir), f".tmp-0-{exited.pid}-0123abcd")
    os.makedirs(os.path.join(leftover, "mips"))
    resumed_steps = killed_at + 10
    result = in_process.run_main(
        "train_realm.py",
        *demo_pipeline.binary_command("train_realm", num_train_steps=resumed_steps, **flags)[2:])
    self.assertIsNone(result.error, result.traceback)
    second = result.log
    self.assertFalse(os.path.exists(leftover), second[-3000:])
    self.assertIn(f"removing unfinished index {leftover}", second)
    self.assertIn(f"resumed from {os.path.join(model_dir, f'ckpt-{killed_at}')} at step {killed_at}", second)
    self.assertEqual(training_state.latest_step(model_dir), resumed_steps)
    self.assertTrue(training_state.training_done(model_dir))
    with open(os.path.join(model_dir, "train_summary.json")) as f:
      self.assertGreater(json.load(f)["final"]["loss"], 0)

  def test_sigterm_while_the_trainer_waits_for_an_index_saves_and_exits(self):
    """Found by bench/fault_soak's long soak: a trainer whose next step waited for the index its fixed
    swap needs had not exited 120 s after a SIGTERM. Its main thread waited inside TensorFlow for the
    batch, so Python never ran the SIGTERM handler, and the step boundary where the request is looked at
    never came. Here no refresher runs, so step 2 waits for the index of step 1 (until NoRefresherError
    after 120 s: without the fix the process is still alive 60 s after the SIGTERM)."""
    out = self.create_tempdir().full_path
    model_dir = os.path.join(out, "term")
    log_path = os.path.join(out, "trainer.log")
    with open(log_path, "w") as log_file:
      trainer = subprocess.Popen(demo_pipeline.binary_command(
          "train_realm",
          **self._flags(model_dir,
                        num_train_steps=1000,
                        save_checkpoints_steps=1,
                        index_swap_steps=1,
                        log_every_steps=1)),
                                 stdout=log_file,
                                 stderr=subprocess.STDOUT,
                                 env=demo_pipeline.binary_env())
      self.addCleanup(lambda: trainer.poll() is None and trainer.kill())
      saved = os.path.join(model_dir, "ckpt-1")

      def read():
        with open(log_path) as f:
          return f.read()

      while f"saved {saved}" not in read() or "step 2 trains on the index of step 1" not in read():
        self.assertIsNone(trainer.poll(), read()[-3000:])
        time.sleep(0.2)
      time.sleep(1.0)  # the main thread is now inside TensorFlow, waiting for step 2's batch
      trainer.send_signal(signal.SIGTERM)
      try:
        code = trainer.wait(timeout=60)
      except subprocess.TimeoutExpired:
        trainer.kill()
        self.fail(f"the trainer had not exited 60 s after SIGTERM:\n{read()[-3000:]}")
    log = read()
    self.assertEqual(code, preemption.EXIT_STATUS, log[-3000:])
    self.assertIn(
        f"SIGTERM: saved {saved} at step 1 of 1000 and stopped (it came while step 2 waited for its "
        "input); run the same command again to resume from it", log)
    self.assertNotIn("Traceback", log)
    self.assertFalse(training_state.training_done(model_dir))
    self.assertEqual(training_state.latest_step(model_dir), 1)


if __name__ == "__main__":
  tf.test.main()
