"""testdata/models/ holds what its models.json says: the reader BERT's held-out masked-token accuracy and
the ICT start's recall of the testdata questions, measured anew from the shipped weights by the demo's
own code (bin/train_mlm evaluating without training; demo_pipeline.retriever_recall).

Both run in this process: run_mlm's bin/train_mlm through its main() (realm_tf/testing/in_process), with
the command line run_mlm builds, and the retrieval corpus written by the library call
bin/generate_retrieval_corpus makes. A process start costs seconds of CPU, and these programs run as
processes in bin/demo_pipeline_test, bin/demo_pipeline_corpora_test and bin/binaries_test.

That regenerating the models reaches those numbers is bin/regenerate_models_test's (11 minutes on 2
cores, so outside bin/test).
"""

import dataclasses
import functools
import json
import os
from unittest import mock

import tensorflow as tf

from realm_tf import demo_pipeline
from realm_tf import tokenization
from realm_tf.data import corpus
from realm_tf.modeling import realm_config
from realm_tf.retrieval import corpus_embedding
from realm_tf.testing import in_process

_TESTDATA = os.path.join(demo_pipeline.REPO, "testdata")


def _run_binary_in_process(binary, log_path, show=None, echo=print, **flags):
  """demo_pipeline.run_binary's stand-in: bin/<binary>'s main in this process with the same command line."""
  del log_path, show, echo  # the process's log; nothing here reads it
  result = in_process.run_main(binary + ".py", *demo_pipeline.binary_command(binary, **flags)[2:])
  if result.error is not None:
    raise AssertionError(f"bin/{binary}.py failed:\n{result.traceback}")


class ShippedModelsTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = demo_pipeline.load_models_manifest(demo_pipeline.SHIPPED_MODELS)
    cls.out = os.path.join(tf.compat.v1.test.get_temp_dir(), "shipped_models")
    cls.options = demo_pipeline.PipelineOptions(output_dir=cls.out)
    # prepare_corpora's retrieval corpus (its other corpora: nothing here reads them).
    cls.paths = {"vocab": os.path.join(_TESTDATA, "vocab.txt"), "retrieval": os.path.join(cls.out, "blocks")}
    corpus.write_corpus(lambda: corpus.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")),
                        tokenization.Tokenizer(cls.paths["vocab"]),
                        cls.paths["retrieval"],
                        num_shards=2)

  def test_the_reader_bert_has_its_held_out_accuracy(self):
    with mock.patch.object(demo_pipeline, "run_binary", _run_binary_in_process):
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
    # The corpus embedded without XLA: its compiles took 4.4 of the 7.1 CPU s of this measurement, the
    # same recalls come out (XLA of the embedding: corpus_embedding_test).
    no_xla = functools.partial(corpus_embedding.embed_corpus, jit_compile=False)
    with mock.patch.object(corpus_embedding, "embed_corpus", no_xla):
      recall = demo_pipeline.retriever_recall(
          config_dir, os.path.join(demo_pipeline.SHIPPED_MODELS, demo_pipeline.ICT_START),
          self.paths["retrieval"], demo_pipeline.question_paths(_TESTDATA))
    for k in (1, 5, 20):
      # Percent of 200 questions; a tie in scores broken otherwise on another CPU moves one question.
      self.assertAllClose(recall[f"gold_recall@{k}"], ict["recall"][f"gold_recall@{k}"], atol=0.5)


if __name__ == "__main__":
  tf.test.main()
