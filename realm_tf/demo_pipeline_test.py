"""run_realm_processes' order of work, with stand-ins for the two binaries (no model, no TensorFlow run).

The real trainer and refresher run in bin/demo_pipeline_test; what is checked here is what only the
order of their start shows: a finished run continued to more steps has its done marker cleared before
the refresher starts. The trainer clears it too, but only once it has started, and a refresher that
started first would take the old marker for the end of the continued run and exit before the new final
checkpoint (the index of that checkpoint would never be published).
"""

import json
import os
import sys
from unittest import mock

import tensorflow as tf

from realm_tf import demo_pipeline
from realm_tf.checkpoints import training_state
from realm_tf.tasks import realm_trainer

# The refresher's stand-in: records whether the done marker was there when it started.
_REFRESHER = """
import os, sys
model_dir, record = sys.argv[1], sys.argv[2]
with open(record, "w") as f:
  f.write(str(os.path.exists(os.path.join(model_dir, {marker!r}))))
"""


class RunRealmProcessesTest(tf.test.TestCase):

  def _finished_run(self, step: int) -> str:
    model_dir = self.create_tempdir().full_path
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)),
                                         model_dir,
                                         max_to_keep=1,
                                         checkpoint_name="ckpt")
    manager.save(checkpoint_number=step)
    training_state.write_done_marker(model_dir)
    return model_dir

  def _run(self, model_dir: str, num_train_steps: int) -> bool:
    """Runs the stand-ins; returns whether the refresher saw a done marker when it started."""
    record = os.path.join(self.create_tempdir().full_path, "marker_at_refresher_start")
    script = _REFRESHER.format(marker=training_state.DONE_MARKER)

    def refresher_command(binary, **flags):
      self.assertEqual(binary, "refresh_doc_embeds")
      return [sys.executable, "-c", script, flags["model_dir"], record]

    def trainer(binary, log_path, show, echo, **flags):
      del log_path, show, echo
      self.assertEqual((binary, flags["num_train_steps"]), ("train_realm", num_train_steps))
      with open(os.path.join(flags["model_dir"], realm_trainer.SUMMARY_NAME), "w") as f:
        json.dump({"final": {}}, f)

    with mock.patch.object(demo_pipeline, "binary_command", refresher_command), \
         mock.patch.object(demo_pipeline, "run_binary", trainer):
      summary = demo_pipeline.run_realm_processes(model_dir,
                                                  self.create_tempdir().full_path,
                                                  {"num_train_steps": num_train_steps}, {},
                                                  echo=lambda _: None,
                                                  refresher_timeout_s=60)
    self.assertEqual(summary["refresher_exit_code"], 0)
    with open(record) as f:
      return f.read() == "True"

  def test_continued_run_clears_the_done_marker_before_the_refresher_starts(self):
    model_dir = self._finished_run(40)
    self.assertFalse(self._run(model_dir, num_train_steps=60))
    self.assertFalse(training_state.training_done(model_dir))

  def test_rerun_of_a_finished_run_keeps_its_done_marker(self):
    # Nothing to train: the trainer exits at once, so the refresher must see the marker and exit too.
    model_dir = self._finished_run(40)
    self.assertTrue(self._run(model_dir, num_train_steps=40))
    self.assertTrue(training_state.training_done(model_dir))


if __name__ == "__main__":
  tf.test.main()
