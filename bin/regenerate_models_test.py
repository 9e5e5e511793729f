"""Regenerating testdata/models/ (bin/generate_testdata.py --models, as a user or CI would) reaches the
shipped models' numbers: the reader BERT's held-out masked-token accuracy and the ICT start's recall of
the testdata questions, within a tolerance (not their bytes: another CPU rounds differently).

About 11 minutes on 2 cores, so it is tagged manual and bin/test leaves it out; run it with
  bazel test //bin:regenerate_models_test
or `python bin/regenerate_models_test.py` after changing what the models are trained on or how.
"""

import json
import os
import subprocess

import tensorflow as tf

from realm_tf import demo_pipeline

# Masked-token accuracy over the 185 held-out predictions; recall in points of 200 questions.
_ACCURACY_TOLERANCE = 0.03
_RECALL_TOLERANCE = 5.0


class RegenerateModelsTest(tf.test.TestCase):

  def test_regenerated_models_reach_the_shipped_numbers(self):
    out = self.create_tempdir().full_path
    testdata = os.path.join(out, "testdata")
    subprocess.run(demo_pipeline.binary_command("generate_testdata",
                                                output_dir=testdata,
                                                models=True,
                                                work_dir=os.path.join(out, "work")),
                   check=True,
                   env=demo_pipeline.binary_env())
    shipped = demo_pipeline.load_models_manifest(demo_pipeline.SHIPPED_MODELS)
    with open(os.path.join(testdata, "models", demo_pipeline.MODELS_MANIFEST)) as f:
      regenerated = json.load(f)
    print("shipped:", json.dumps(shipped["reader_bert"]), json.dumps(shipped["ict"]["recall"]))
    print("regenerated:", json.dumps(regenerated["reader_bert"]), json.dumps(regenerated["ict"]["recall"]))
    self.assertEqual(regenerated["ict"]["realm_config"], shipped["ict"]["realm_config"])
    self.assertAllClose(regenerated["reader_bert"]["masked_lm_accuracy"],
                        shipped["reader_bert"]["masked_lm_accuracy"],
                        atol=_ACCURACY_TOLERANCE)
    for k in (1, 5, 20):
      self.assertAllClose(regenerated["ict"]["recall"][f"gold_recall@{k}"],
                          shipped["ict"]["recall"][f"gold_recall@{k}"],
                          atol=_RECALL_TOLERANCE)


if __name__ == "__main__":
  tf.test.main()
