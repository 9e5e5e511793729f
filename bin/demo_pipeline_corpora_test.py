"""Tests of bin/demo_pipeline's corpora step: prepare_corpora runs the real bin/generate_* processes once
for the class, with a REALM pre-training corpus given by path, and their logs survive a rerun.

The demo's training processes are bin/demo_pipeline_test's (on the default corpora).
"""

import json
import os
import tempfile

from absl.testing import absltest

from realm_tf import demo_pipeline
from realm_tf.data import pretraining
from realm_tf.data import synthetic


class CorporaTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # A directory of its own: outside Bazel the default temporary directory outlives the run, and a
    # second run's rerun check would count the first run's log headers too.
    cls.out = tempfile.mkdtemp(prefix="corpora-", dir=absltest.get_default_test_tmpdir())
    news = os.path.join(cls.out, "news.jsonl")
    with open(os.path.join(demo_pipeline.PipelineOptions.testdata_dir, "pretraining.jsonl")) as f, \
        open(news, "w") as w:
      w.writelines([line for line in f if json.loads(line)["title"] == synthetic.NEWS_TITLE][:7])
    cls.paths = demo_pipeline.prepare_corpora(demo_pipeline.PipelineOptions(output_dir=cls.out,
                                                                            realm_pretraining_path=news),
                                              echo=lambda _: None)

  def test_realm_pretraining_path_gives_realm_its_own_corpus(self):
    self.assertEqual(pretraining.read_manifest(self.paths["realm_pretraining"])["num_documents"], 7)
    self.assertEqual(pretraining.read_manifest(self.paths["pretraining"])["num_documents"], 444)  # ICT's

  def test_a_rerun_appends_to_its_log(self):
    # A resumed benchmark reruns its binaries with the same log paths; what the first run printed stays.
    # The first run: setUpClass's bin/generate_retrieval_corpus (prepare_corpora); the rerun fails.
    out = self.create_tempdir().full_path
    log_path = os.path.join(self.out, "data", "generate_retrieval_corpus.log")
    with self.assertRaisesRegex(RuntimeError, log_path):
      demo_pipeline.run_binary("generate_retrieval_corpus",
                               log_path,
                               input_path=os.path.join(out, "second.jsonl"),
                               vocab_path=os.path.join(demo_pipeline.REPO, "testdata", "vocab.txt"),
                               output_prefix=os.path.join(out, "blocks"))
    with open(log_path) as f:
      lines = f.read().splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("===== ")]
    self.assertLen(headers, 2, lines)
    self.assertEqual(headers[0], 0)
    first, second = lines[:headers[1]], lines[headers[1]:]
    self.assertIn("wrote 300 documents into 2 shards", "\n".join(first))
    self.assertNotIn("does not exist", "\n".join(first))
    self.assertIn("second.jsonl does not exist", "\n".join(second))


if __name__ == "__main__":
  absltest.main()
