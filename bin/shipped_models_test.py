"""testdata/models/ holds what its models.json says: the reader BERT's held-out masked-token accuracy and
the ICT start's recall of the testdata questions, measured anew from the shipped weights by the demo's
own code (bin/train_mlm evaluating without training; demo_pipeline.retriever_recall).

That regenerating the models reaches those numbers is bin/regenerate_models_test's (11 minutes on 2
cores, so outside bin/test).
"""

import dataclasses
import json
import os

import tensorflow as tf

from realm_tf import demo_pipeline
from realm_tf.modeling import realm_config

_TESTDATA = os.path.join(demo_pipeline.REPO, "testdata")


class ShippedModelsTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = demo_pipeline.load_models_manifest(demo_pipeline.SHIPPED_MODELS)
    cls.out = os.path.join(tf.compat.v1.test.get_temp_dir(), "shipped_models")
    cls.options = demo_pipeline.PipelineOptions(output_dir=cls.out)
    cls.paths = demo_pipeline.prepare_corpora(cls.options, echo=lambda _: None)

  def test_the_reader_bert_has_its_held_out_accuracy(self):
    export = demo_pipeline.run_mlm(dataclasses.replace(self.options, mlm_steps=0),
                                   self.paths,
                                   echo=lambda _: None,
                                   init_checkpoint=os.path.join(demo_pipeline.SHIPPED_MODELS,
                                                                demo_pipeline.READER_BERT))
    with open(os.path.join(export, "eval.json")) as f:
      measured = json.load(f)
    expected = self.manifest["reader_bert"]
    self.assertEqual(measured["num_predictions"], expected["num_predictions"])
    self.assertAllClose(measured["masked_lm_accuracy"], expected["masked_lm_accuracy"], atol=1e-6)
    self.assertAllClose(measured["masked_lm_loss"], expected["masked_lm_loss"], atol=1e-3)

  def test_the_ict_start_has_its_recall(self):
    ict = self.manifest["ict"]
    config_dir = os.path.join(self.out, "ict_config")
    realm_config.RealmConfig.from_dict(
        dict(ict["realm_config"], vocab_path=os.path.join(_TESTDATA, "vocab.txt"))).save(config_dir)
    recall = demo_pipeline.retriever_recall(
        config_dir, os.path.join(demo_pipeline.SHIPPED_MODELS, demo_pipeline.ICT_START),
        self.paths["retrieval"], demo_pipeline.question_paths(_TESTDATA))
    for k in (1, 5, 20):
      # Percent of 200 questions; a tie in scores broken otherwise on another CPU moves one question.
      self.assertAllClose(recall[f"gold_recall@{k}"], ict["recall"][f"gold_recall@{k}"], atol=0.5)


if __name__ == "__main__":
  tf.test.main()
