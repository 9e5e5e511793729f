"""Tests of FiD-KD's --keep_better_retriever (realm_tf.training.fid_kd): rejection, resume, the flag off.

Apart from fid_kd_test so that each target's short FiD-KD runs stay well inside the test timeout on
2 loaded cores.
"""

import hashlib
import json
import os
from unittest import mock

import tensorflow as tf

from realm_tf import testing_utils
from realm_tf.checkpoints import training_state
from realm_tf.modeling import bert
from realm_tf.modeling import embedder
from realm_tf.modeling import fid_reader
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.training import fid_kd

_VOCAB_PATH = os.path.join(testing_utils.repo_root(), "testdata", "vocab.txt")
_BERT = bert.tiny_config(285, hidden_size=32, num_layers=1, intermediate_size=32)
_CONFIG = realm_config_lib.RealmConfig(retriever_bert=_BERT, reader_bert=_BERT, vocab_path=_VOCAB_PATH,
                                       projection_size=16, query_seq_len=16, candidate_seq_len=48)
_FID = fid_reader.FidConfig(vocab_size=285, hidden_size=32, num_heads=2, num_encoder_layers=1,
                         num_decoder_layers=1, intermediate_size=32, passage_seq_len=48, answer_seq_len=8)


def _fingerprint(retriever) -> str:
  return hashlib.sha1(b"".join(w.tobytes() for w in retriever.get_weights())).hexdigest()


class KeepBetterRetrieverTest(tf.test.TestCase):
  """--keep_better_retriever with a dev recall that every distillation lowers.

  retriever_eval.retriever_recall is replaced by one that scores the initial retriever's weights 50 and
  any other weights 40, so each round's distilled retriever is worse than its start (whatever tiny
  training does), and a round's recall_before says which weights it started from.
  """

  def setUp(self):
    super().setUp()
    directory = self.get_temp_dir()
    self.paths = testing_utils.testdata_qa_slice(directory, 8, 4, 20)
    self.initial = None

  def _options(self, model_dir, **kwargs):
    options = dict(
        config=_CONFIG, fid=_FID, model_dir=model_dir, retrieval_corpus_path=self.paths["corpus"],
        train_path=self.paths["train"], dev_path=self.paths["dev"], initial_passages="bm25",
        iterations=2, num_passages=3, reader_steps=2, retriever_steps=3, reader_batch_size=4,
        retriever_batch_size=4, reader_single_passage_steps=0, retriever_learning_rate=1e-2,
        recall_ks=(1, 5), embed_batch_size=32, predict_batch_size=8,
        # Every round trains the retriever (a round whose passages hold too few answers would skip it
        # and keep its start's weights, which the recall mock scores as unchanged).
        distill_answer_bearing_only=False)
    return fid_kd.FidKdOptions(**{**options, **kwargs})

  def _recall(self, retriever, *args, **kwargs):
    del args, kwargs
    if self.initial is None:  # the first call of a fresh run measures the initial retriever
      self.initial = _fingerprint(retriever)
    value = 50.0 if _fingerprint(retriever) == self.initial else 40.0
    return {"gold_recall@1": value / 2, "gold_recall@5": value, "answer_recall@5": value}

  def _run(self, options):
    logs = []
    with mock.patch.object(fid_kd.retriever_eval, "retriever_recall", self._recall):
      return fid_kd.run(options, log=logs.append), logs

  def test_worse_round_is_rejected_and_the_next_starts_from_the_previous_retriever(self):
    model_dir = os.path.join(self.get_temp_dir(), "keep")
    metrics, logs = self._run(self._options(model_dir))
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
    self.assertNotEqual(self.initial, _fingerprint(distilled))
    with open(os.path.join(model_dir, fid_kd.SUMMARY_NAME), encoding="utf-8") as f:
      self.assertEqual([False, False], [m["accepted"] for m in json.load(f)])

  def test_resume_after_a_rejected_round_continues_from_the_accepted_retriever(self):
    model_dir = os.path.join(self.get_temp_dir(), "resume")
    first, _ = self._run(self._options(model_dir, iterations=1))
    self.assertFalse(first[0]["accepted"])
    # A restarted process: the recall mock knows the initial weights only from their checkpoint.
    initial = embedder.build_retriever(_BERT, projection_size=16)
    training_state.restore_retriever(initial, os.path.join(model_dir, fid_kd.INITIAL_RETRIEVER_DIR))
    self.initial = _fingerprint(initial)
    metrics, logs = self._run(self._options(model_dir))
    self.assertLen([line for line in logs if "continuing from initial_retriever" in line], 1)
    self.assertEqual(first[0], metrics[0])
    self.assertEqual(50.0, metrics[1]["recall_before"]["gold_recall@5"])

  def test_flag_off_continues_from_the_distilled_retriever(self):
    model_dir = os.path.join(self.get_temp_dir(), "off")
    metrics, logs = self._run(self._options(model_dir, keep_better_retriever=False,
                                            selection_metric="answer_recall@5"))
    self.assertEqual([True, True], [m["accepted"] for m in metrics])
    self.assertEqual(["iteration_0/retriever", "iteration_1/retriever"],
                     [m["retriever_after"] for m in metrics])
    self.assertEqual(40.0, metrics[1]["recall_before"]["gold_recall@5"])
    self.assertEqual([], [line for line in logs if "REJECTED" in line])


if __name__ == "__main__":
  tf.test.main()
