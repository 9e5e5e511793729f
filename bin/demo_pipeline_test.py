"""Tests of bin/demo_pipeline end to end: the real refresher process beside the real trainer process.

Slow by nature (separate processes, each importing TensorFlow), so the corpora are written once for the
class (prepare_corpora, its bin/generate_* programs' main() run in this process: they run as processes in
bin/demo_pipeline_corpora_test) and one short run covers the pipeline; a finished run
continued to more steps is realm_tf/demo_pipeline_test's, a SIGKILLed trainer's recovery
bin/train_realm_sigkill_test's, a given REALM corpus and the logs of a rerun
bin/demo_pipeline_corpora_test's. What is tested is the
processes, not the model: they train a BERT smaller than the demo's tiny preset (one layer, hidden 32)
on short sequences without XLA, in the train step and in the index embedding (XLA of REALM's train step:
realm_tf/modeling/realm_test.py and realm_tf/training/train_lib_test.py; of the embedding:
realm_tf/retrieval/corpus_embedding_test.py).
"""

import functools
import gc
import os
from unittest import mock

import tensorflow as tf

from realm_tf import demo_pipeline
from realm_tf import retriever_eval
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus_table
from realm_tf.data import qa as qa_lib
from realm_tf.modeling import realm_config
from realm_tf.retrieval import corpus_embedding
from realm_tf.testing import in_process
from realm_tf.testing import tiny_inputs

# The model of every trainer here (retriever and reader): PipelineOptions' sizes below and this BERT.
_SIZES = dict(projection_size=32, query_seq_len=16, candidate_seq_len=64, max_masks=4, num_candidates=4)


def setUpModule():
  # The objects of the imports (TensorFlow's millions) out of reach of the garbage collector: every
  # in-process main ends with gc.collect() (realm_tf/testing/in_process, training.loop), which otherwise
  # walks all of them each time. They live as long as the process anyway; what the tests make is still
  # collected.
  gc.freeze()


def _logs_tail(out: str) -> str:
  """What a failed run_realm check shows: the end of the refresher's and the trainer's logs."""
  tails = []
  for name in ("refresh_doc_embeds.log", "train_realm.log"):
    with open(os.path.join(out, name), errors="replace") as f:
      lines = [line for line in f if "] " in line and "controller.py" not in line]
    tails.append(f"{name}:\n" + "".join(lines[-15:]))
  return "\n".join(tails)


def _run_binary_in_process(binary, log_path, show=None, echo=print, **flags):
  """demo_pipeline.run_binary's stand-in: bin/<binary>'s main in this process with the same command line
  (a process start costs seconds of CPU)."""
  del log_path, show, echo  # the process's log; nothing here reads it
  result = in_process.run_main(binary + ".py", *demo_pipeline.binary_command(binary, **flags)[2:])
  if result.error is not None:
    raise AssertionError(f"bin/{binary}.py failed:\n{result.traceback}")


def _short_options(output_dir: str, bert_config: str, **overrides) -> demo_pipeline.PipelineOptions:
  values = dict(output_dir=output_dir,
                realm_steps=40,
                save_checkpoints_steps=20,
                realm_batch_size=4,
                index_swap_steps=20,
                realm_learning_rate=1e-3,
                index_implementation="brute_force",
                realm_bert_config=bert_config,
                realm_jit_compile=False,
                **_SIZES)
  values.update(overrides)
  return demo_pipeline.PipelineOptions(**values)


class PipelineTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # The corpora of every run here (prepare_corpora, once, its bin/generate_* programs in this process):
    # the runs only read them.
    cls.out = os.path.join(tf.compat.v1.test.get_temp_dir(), "demo_pipeline")
    os.makedirs(cls.out, exist_ok=True)
    cls.bert_config = tiny_inputs.write_small_bert_config(cls.out)
    with mock.patch.object(demo_pipeline, "run_binary", _run_binary_in_process):
      cls.paths = demo_pipeline.prepare_corpora(_short_options(cls.out, cls.bert_config), echo=lambda _: None)

  def test_trainer_trains_on_refreshed_indexes_and_loss_falls(self):
    out = self.create_tempdir().full_path
    options = _short_options(out, self.bert_config)
    paths = self.paths
    summary = demo_pipeline.run_realm(options, paths, init_retriever=None, echo=lambda _: None)
    # Fixed swaps: the bootstrap index (step 0) for steps 1-20, then exactly the index the refresher
    # published from ckpt-20, whatever else it published meanwhile.
    self.assertEqual(summary["indexes_used"], [0, 20], summary)
    self.assertLess(summary["final"]["loss"], summary["first_loss"], summary)
    self.assertEqual(summary["refresher_exit_code"], 0)
    model_dir = summary["model_dir"]
    self.assertTrue(training_state.training_done(model_dir))
    self.assertEqual(training_state.latest_step(model_dir), 40)
    index_dir = os.path.join(model_dir, "index")

    # Recall with the document tower of another checkpoint: the questions go through the latest
    # checkpoint's query tower and the corpus through step 20's document tower, as retriever_eval gets
    # them when handed step 20's embeddings; naming the latest checkpoint twice changes nothing.
    # Every embedding of the corpus here without XLA, as the trainer and the refresher embed it: the
    # checks compare recalls, not compilers (XLA of the embedding: corpus_embedding_test).
    no_xla = functools.partial(corpus_embedding.embed_corpus, jit_compile=False)
    with mock.patch.object(corpus_embedding, "embed_corpus", no_xla):
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
          lambda inputs: towers[first].embed_documents(inputs, training=False),
          corpus.prefix,
          config.featurizer(),
          log=lambda _: None)
      self.assertEqual(
          demo_pipeline.retriever_recall(model_dir, latest, paths["retrieval"], qa_paths, first),
          retriever_eval.retriever_recall(towers[latest],
                                          config,
                                          corpus,
                                          qa_lib.load_jsonl(qa_paths[0]),
                                          ks=(1, 5, 20),
                                          doc_embeddings=first_docs))

    # The refresher published the bootstrap index and one per checkpoint, the final one included, and
    # left no temporary directory behind. (A finished run continued to more steps:
    # realm_tf/demo_pipeline_test checks that its refresher starts without the old done marker, loop_test
    # that the trainer clears it; keep-K: published_index_test.)
    self.assertCountEqual(os.listdir(index_dir), ["0", "20", "40"], _logs_tail(options.output_dir))


if __name__ == "__main__":
  tf.test.main()
