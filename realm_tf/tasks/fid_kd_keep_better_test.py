"""Tests of FiD-KD's --keep_better_retriever (realm_tf.tasks.fid_kd): rejection, resume, the flag off.

Apart from fid_kd_test so that each target's short FiD-KD runs stay well inside the test timeout on
2 loaded cores. Every round costs its tracing (a reader and a retriever training step, decoding,
scores), so the runs are few and short: one 2-round run with the flag on, read by the rejection case and
resumed (after its first round) by the resume case, and one with it off; one training step per phase
(what a round trains does not matter here, only which weights it starts from and keeps). The recall is
a stand-in (below), so the corpus embeddings only pick round 1's passages: they are computed eagerly
(fid_kd_testing.EagerCorpusEmbedding); fid_kd_test's loop test runs the real embedding. The runs'
tf.functions run eagerly too (eager_functions.functions_run_eagerly): every round builds new models and
would trace their steps, decoding and scores anew, most of a round's CPU time; fid_kd_test's loop test
runs them traced.
"""

import hashlib
import json
import os
import shutil
import tempfile
from unittest import mock

import tensorflow as tf

from realm_tf.checkpoints import training_state
from realm_tf.modeling import bert
from realm_tf.modeling import embedder
from realm_tf.modeling import fid_reader
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.tasks import fid_kd
from realm_tf.testing import eager_functions
from realm_tf.testing import fid_kd_testing
from realm_tf.testing import test_paths
from realm_tf.testing import tiny_inputs

_VOCAB_PATH = os.path.join(test_paths.repo_root(), "testdata", "vocab.txt")
_BERT = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=32)
_CONFIG = realm_config_lib.RealmConfig(retriever_bert=_BERT,
                                       reader_bert=_BERT,
                                       vocab_path=_VOCAB_PATH,
                                       projection_size=16,
                                       query_seq_len=16,
                                       candidate_seq_len=48)
# answer_seq_len 4: greedy decoding traces the decoder once per answer position.
_FID = fid_reader.FidConfig(vocab_size=285,
                            hidden_size=32,
                            num_heads=2,
                            num_encoder_layers=1,
                            num_decoder_layers=1,
                            intermediate_size=32,
                            passage_seq_len=48,
                            answer_seq_len=4)


def _fingerprint(retriever) -> str:
  return hashlib.sha1(b"".join(w.tobytes() for w in retriever.get_weights())).hexdigest()


class _Recall:
  """retriever_eval.retriever_recall's stand-in: the initial retriever's weights score 50, any others 40."""

  def __init__(self, initial=None):
    self.initial = initial

  def __call__(self, retriever, *args, **kwargs):
    del args, kwargs
    if self.initial is None:  # the first call of a fresh run measures the initial retriever
      self.initial = _fingerprint(retriever)
    value = 50.0 if _fingerprint(retriever) == self.initial else 40.0
    return {"gold_recall@1": value / 2, "gold_recall@5": value, "answer_recall@5": value}


class KeepBetterRetrieverTest(tf.test.TestCase):
  """--keep_better_retriever with a dev recall that every distillation lowers.

  retriever_eval.retriever_recall is replaced by one that scores the initial retriever's weights 50 and
  any other weights 40, so each round's distilled retriever is worse than its start (whatever tiny
  training does), and a round's recall_before says which weights it started from.
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.directory = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    cls.paths = tiny_inputs.testdata_qa_slice(cls.directory, 8, 4, 20)
    # The run the rejection and resume cases read: 2 rounds with the flag on (the default).
    cls.keep_dir = os.path.join(cls.directory, "keep")
    cls.keep_recall = _Recall()
    cls.keep_metrics, cls.keep_logs = cls._run(cls._options(cls.keep_dir), cls.keep_recall)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.directory, ignore_errors=True)
    super().tearDownClass()

  @classmethod
  def _options(cls, model_dir, **kwargs):
    options = dict(
        config=_CONFIG,
        fid=_FID,
        model_dir=model_dir,
        retrieval_corpus_path=cls.paths["corpus"],
        train_path=cls.paths["train"],
        dev_path=cls.paths["dev"],
        initial_passages="bm25",
        iterations=2,
        num_passages=3,
        reader_steps=1,
        retriever_steps=1,
        reader_batch_size=4,
        retriever_batch_size=4,
        reader_single_passage_steps=0,
        retriever_learning_rate=1e-2,
        recall_ks=(1, 5),
        embed_batch_size=32,
        predict_batch_size=8,
        # Every round trains the retriever (a round whose passages hold too few answers would skip it
        # and keep its start's weights, which the recall mock scores as unchanged).
        distill_answer_bearing_only=False)
    return fid_kd.FidKdOptions(**{**options, **kwargs})

  @staticmethod
  def _run(options, recall):
    logs = []
    with mock.patch.object(fid_kd.retriever_eval, "retriever_recall", recall), \
         mock.patch.object(fid_kd, "embed_corpus", fid_kd_testing.EagerCorpusEmbedding()), \
         eager_functions.functions_run_eagerly():
      return fid_kd.run(options, log=logs.append), logs

  def test_worse_round_is_rejected_and_the_next_starts_from_the_previous_retriever(self):
    metrics, logs = self.keep_metrics, self.keep_logs
    self.assertEqual([False, False], [m["accepted"] for m in metrics])
    self.assertEqual([fid_kd.INITIAL_RETRIEVER_DIR] * 2, [m["retriever_after"] for m in metrics])
    # Round 1 started from the initial weights again (their recall is 50), not round 0's distilled one.
    self.assertEqual(50.0, metrics[1]["recall_before"]["gold_recall@5"])
    self.assertEqual([40.0, 40.0], [m["recall_after"]["gold_recall@5"] for m in metrics])
    self.assertEqual([50.0, 50.0], [m["recall_end"]["gold_recall@5"] for m in metrics])
    self.assertLen([line for line in logs if "REJECTED" in line], 2)
    # The distilled retrievers are still saved (for inspection), and differ from the initial one.
    distilled = embedder.build_retriever(_BERT, projection_size=16)
    training_state.restore_retriever(distilled, metrics[0]["retriever_checkpoint"])
    self.assertNotEqual(self.keep_recall.initial, _fingerprint(distilled))
    with open(os.path.join(self.keep_dir, fid_kd.SUMMARY_NAME), encoding="utf-8") as f:
      self.assertEqual([False, False], [m["accepted"] for m in json.load(f)])

  def test_resume_after_a_rejected_round_continues_from_the_accepted_retriever(self):
    # The model dir of a first run of 1 iteration (the 2-round run's, without round 1 and the summary:
    # round 0 wrote nothing else); round 0 was rejected.
    first = self.keep_metrics[:1]
    self.assertFalse(first[0]["accepted"])
    model_dir = os.path.join(self.directory, "resume")
    shutil.copytree(
        self.keep_dir,
        model_dir,
        ignore=lambda d, names:
        ([fid_kd.SUMMARY_NAME, os.path.basename(fid_kd.iteration_dir(model_dir, 1))]
         if os.path.samefile(d, self.keep_dir) else []))
    self.assertFalse(tf.io.gfile.exists(fid_kd.iteration_dir(model_dir, 1)))
    # A restarted process: the recall mock knows the initial weights only from their checkpoint.
    initial = embedder.build_retriever(_BERT, projection_size=16)
    training_state.restore_retriever(initial, os.path.join(model_dir, fid_kd.INITIAL_RETRIEVER_DIR))
    metrics, logs = self._run(self._options(model_dir), _Recall(_fingerprint(initial)))
    self.assertLen([line for line in logs if "continuing from initial_retriever" in line], 1)
    self.assertEqual(first[0], metrics[0])
    self.assertEqual(50.0, metrics[1]["recall_before"]["gold_recall@5"])

  def test_flag_off_continues_from_the_distilled_retriever(self):
    model_dir = os.path.join(self.directory, "off")
    metrics, logs = self._run(
        self._options(model_dir, keep_better_retriever=False, selection_metric="answer_recall@5"), _Recall())
    self.assertEqual([True, True], [m["accepted"] for m in metrics])
    self.assertEqual(["iteration_0/retriever", "iteration_1/retriever"],
                     [m["retriever_after"] for m in metrics])
    self.assertEqual(40.0, metrics[1]["recall_before"]["gold_recall@5"])
    self.assertEqual([], [line for line in logs if "REJECTED" in line])


if __name__ == "__main__":
  tf.test.main()
