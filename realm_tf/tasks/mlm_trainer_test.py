"""Tests of BERT masked-LM pre-training: it learns, resumes, exports a reader warm start, and warm-starts
from every format realm_tf reads (Model Garden, TF1 Google BERT, Hugging Face safetensors without a head)."""

import json
import os
import shutil
import tempfile

import numpy as np
from safetensors import numpy as safetensors_numpy
import tensorflow as tf

from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import bert_mapping_test as fixtures
from realm_tf.checkpoints import sources
from realm_tf.data import mlm as mlm_data
from realm_tf.modeling import bert
from realm_tf.modeling import knowledge_augmented_encoder as kae_lib
from realm_tf.tasks import mlm_trainer
from realm_tf.testing import released_weights
from realm_tf.training import loop

_TESTDATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "testdata")
_VOCAB = os.path.join(_TESTDATA, "vocab.txt")


def _vocab_size():
  with open(_VOCAB) as f:
    return sum(1 for _ in f)


def _config():
  return bert.tiny_config(_vocab_size(),
                          hidden_size=32,
                          num_layers=1,
                          intermediate_size=64,
                          max_position_embeddings=64)


class MlmTrainerTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.directory = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    # One 1-step run (a run's tracing and evaluation cost more than its steps) serves both cases: the
    # learning case resumes it, the refusal case resumes a copy of it with other masking. Uncompiled:
    # the learning case's long run is the MLM path's XLA case (an XLA compile costs seconds per run).
    cls.model_dir = os.path.join(cls.directory, "mlm")
    cls.first_logs = []
    cls.before = mlm_trainer.train(cls._options(cls.model_dir, 1, jit_compile=False),
                                   tf.distribute.get_strategy(), cls.first_logs.append)
    cls.one_step_dir = os.path.join(cls.directory, "one_step")
    shutil.copytree(cls.model_dir, cls.one_step_dir)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.directory, ignore_errors=True)
    super().tearDownClass()

  @staticmethod
  def _options(model_dir, steps, init=None, config=None, jit_compile=True):
    # Sequences of 32 wordpieces: a step costs half as much as at 64, and 200 steps learn clearly.
    return mlm_trainer.MlmTrainerOptions(bert_config=config or _config(),
                                         vocab_path=_VOCAB,
                                         input_path=os.path.join(_TESTDATA, "corpus.jsonl"),
                                         loop=loop.LoopOptions(model_dir=model_dir,
                                                               num_train_steps=steps,
                                                               save_checkpoints_steps=100,
                                                               log_every_steps=1000,
                                                               jit_compile=jit_compile),
                                         masking=mlm_data.MaskingOptions(max_seq_len=32, max_predictions=5),
                                         batch_size=16,
                                         learning_rate=3e-3,
                                         warmup_steps=0,
                                         init_checkpoint=init,
                                         eval_percent=5.0)

  def test_learns_resumes_and_exports_a_reader_warm_start(self):
    model_dir = self.model_dir
    logs = list(self.first_logs)
    before = self.before  # after 1 step
    # Resumed twice: one more step (uncompiled), then to step 200 compiled with XLA.
    mlm_trainer.train(self._options(model_dir, 2, jit_compile=False), tf.distribute.get_strategy(),
                      logs.append)
    after = mlm_trainer.train(self._options(model_dir, 200), tf.distribute.get_strategy(), logs.append)
    resumed = [line for line in logs if line.startswith("resumed")]
    self.assertEqual(resumed, [
        f"resumed from {os.path.join(model_dir, 'ckpt-1')} at step 1",
        f"resumed from {os.path.join(model_dir, 'ckpt-2')} at step 2"
    ])
    # Held-out documents: 1 step leaves the model near chance, 200 steps learn the frequent pieces and
    # beyond (here about 0.03 -> 0.18 accuracy, 5.6 -> 4.1 loss).
    self.assertGreater(after["masked_lm_accuracy"], before["masked_lm_accuracy"] + 0.1)
    self.assertLess(after["masked_lm_loss"], before["masked_lm_loss"] - 1.0)

    export = os.path.join(model_dir, mlm_trainer.EXPORT_NAME)
    with open(os.path.join(export, mlm_trainer.EVAL_NAME)) as f:
      self.assertEqual(json.load(f)["step"], 200)
    self.assertEqual(sources.config_from_source(os.path.join(export, "bert_config.json")), _config())
    # The export is what REALM's reader (and ORQA's) warm-start from: the same logits as the trainer's.
    reader = kae_lib.KnowledgeAugmentedEncoder(_config())
    bert_mapping.load_bert_weights(reader.encoder, export, masked_lm=reader.masked_lm)
    trained = mlm_trainer.build_model(_config())
    tf.train.Checkpoint(model=trained).read(os.path.join(model_dir, "ckpt-200")).expect_partial()
    ids = tf.constant([[2, 40, 41, 42, 3, 50, 51, 3]])
    inputs = ((ids, tf.ones_like(ids), tf.zeros_like(ids)), tf.constant([[1, 5]]))
    self.assertAllClose(reader(inputs), trained.encoder(inputs), atol=1e-5, rtol=1e-5)

  def test_resume_with_other_masking_is_refused(self):
    model_dir = self.one_step_dir  # trained 1 step with max_predictions 5
    options = self._options(model_dir, 2)
    changed = mlm_trainer.MlmTrainerOptions(
        **dict(vars(options), masking=mlm_data.MaskingOptions(max_seq_len=32, max_predictions=6)))
    with self.assertRaisesRegex(
        ValueError, "mlm_run.json: --model_dir was trained with other settings.*"
        "max_predictions"):
      mlm_trainer.train(changed, tf.distribute.get_strategy(), lambda _: None)


class WarmStartTest(tf.test.TestCase):
  """Each source format restores the encoder; the head comes along where the source has one."""

  def _params(self):
    return fixtures._random_params(_config(), seed=5)  # pylint: disable=protected-access

  def _assert_encoder_is(self, model, params):
    self.assertAllClose(model.encoder.encoder.get_embedding_table().numpy(),
                        params["bert/embeddings/word_embeddings"])

  def test_tf1_google_bert_with_its_head(self):
    params = self._params()
    path = released_weights.write_tf1_checkpoint(os.path.join(self.get_temp_dir(), "bert_model.ckpt"),
                                                 fixtures._google_names(params))  # pylint: disable=protected-access
    model = mlm_trainer.build_model(_config())
    message = mlm_trainer.warm_start(model, path)
    self._assert_encoder_is(model, params)
    self.assertAllClose(model.encoder.masked_lm.bias.numpy(), params["cls/predictions/output_bias"])
    self.assertNotIn("no masked-LM head", message)

  def test_hugging_face_safetensors_without_a_head_creates_one(self):
    params = {k: v for k, v in self._params().items() if not k.startswith("cls/")}
    directory = self.create_tempdir().full_path
    safetensors_numpy.save_file(
        fixtures._hf_names(params, prefix=""),  # pylint: disable=protected-access
        os.path.join(directory, "model.safetensors"))
    model = mlm_trainer.build_model(_config())
    head_before = model.encoder.masked_lm.dense.kernel.numpy().copy()
    message = mlm_trainer.warm_start(model, directory)
    self._assert_encoder_is(model, params)
    self.assertIn("no masked-LM head, so the head starts untrained", message)
    self.assertAllEqual(model.encoder.masked_lm.dense.kernel.numpy(), head_before)

  def test_model_garden_checkpoint_of_the_encoder_alone(self):
    source = mlm_trainer.build_model(_config())
    path = tf.train.Checkpoint(encoder=source.encoder.encoder).write(
        os.path.join(self.get_temp_dir(), "encoder_only"))
    model = mlm_trainer.build_model(_config())
    message = mlm_trainer.warm_start(model, path)
    self.assertAllClose(model.encoder.encoder.get_embedding_table(),
                        source.encoder.encoder.get_embedding_table())
    self.assertIn("no masked-LM head", message)

  def test_wrong_config_is_an_error_naming_the_checkpoint(self):
    params = self._params()
    path = released_weights.write_tf1_checkpoint(os.path.join(self.get_temp_dir(), "bert_model.ckpt"),
                                                 fixtures._google_names(params))  # pylint: disable=protected-access
    bigger = bert.tiny_config(_vocab_size(), hidden_size=64, max_position_embeddings=64)
    with self.assertRaisesRegex(sources.ConversionError, "bert_model.ckpt.*--bert_config"):
      mlm_trainer.warm_start(mlm_trainer.build_model(bigger), path)


if __name__ == "__main__":
  np.random.seed(0)
  tf.test.main()
