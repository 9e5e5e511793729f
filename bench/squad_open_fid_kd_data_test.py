"""Tests for bench/squad_open_fid_kd_data.py, without MiniLM weights or SQuAD data: the drawn train
paragraphs join Z with their questions (and only theirs), the selection questions are dev questions,
everything is written once (a rerun resumes, another draw is refused), and the rounds' retrievers are
found as bin/train_fid_kd leaves them."""

import json
import os

import tensorflow as tf

from bench import squad_open_fid_kd_data as data
from realm_tf.data import corpus
from realm_tf.data import corpus_table
from realm_tf.data import qa
from realm_tf.data import squad_open
from realm_tf.tasks import fid_kd
from realm_tf.testing import tiny_inputs


def _read_jsonl(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def _squad():
  """6 train paragraphs (ids 1-6), 3 dev paragraphs (ids 7-9); one question per train paragraph, two
  per dev paragraph."""
  train_docs = [
      corpus.Document(f"train title {i}", f"the river {i} runs past the mill", str(i)) for i in range(1, 7)
  ]
  dev_docs = [
      corpus.Document(f"dev title {i}", f"the village {i} lies on a hill", str(i)) for i in range(7, 10)
  ]
  train = [
      qa.QAExample(f"where does river {i} run", [f"mill {i}"], metadata={"doc_id": str(i)})
      for i in range(1, 7)
  ]
  dev = [
      qa.QAExample(f"where is village {i} number {j}", ["hill"], metadata={"doc_id": str(i)})
      for i in range(7, 10)
      for j in range(2)
  ]
  return squad_open.SquadOpen(train_docs + dev_docs, dev, num_train_paragraphs=6), train


class PrepareTest(tf.test.TestCase):

  def _prepare(self, work_dir, full, train, vocab, seed=3):
    return data.prepare(work_dir,
                        full,
                        train,
                        vocab,
                        train_paragraphs=2,
                        selection_questions=4,
                        seed=seed,
                        log=lambda _: None)

  def test_drawn_paragraphs_and_their_questions(self):
    work_dir = self.create_tempdir().full_path
    vocab = tiny_inputs.write_vocab(self.create_tempdir().full_path)
    full, train = _squad()
    paths = self._prepare(work_dir, full, train, vocab)
    corpus_ids = [r["id"] for r in _read_jsonl(paths["corpus.jsonl"])]
    drawn = corpus_ids[:2]
    self.assertEqual(corpus_ids[2:], ["7", "8", "9"])  # every dev paragraph, after the drawn ones
    self.assertContainsSubset(set(drawn), {str(i) for i in range(1, 7)})
    self.assertLen(set(drawn), 2)
    training = _read_jsonl(paths["train.jsonl"])
    self.assertCountEqual([q["doc_id"] for q in training], drawn)  # only the drawn paragraphs' questions
    self.assertEqual({q["question"] for q in training},
                     {f"where does river {i} run" for i in map(int, drawn)})
    selection = _read_jsonl(paths["selection.jsonl"])
    self.assertLen(selection, 4)
    self.assertContainsSubset({q["doc_id"] for q in selection}, {"7", "8", "9"})  # dev questions only
    self.assertEqual([r["id"] for r in _read_jsonl(paths["dev_corpus.jsonl"])], ["7", "8", "9"])
    self.assertEqual(corpus_table.CorpusTable.load(paths["retrieval"]).doc_ids[:], corpus_ids)
    self.assertEqual(corpus_table.CorpusTable.load(paths["dev_retrieval"]).doc_ids[:], ["7", "8", "9"])
    # A rerun resumes on what was written; another draw in the same work dir names both.
    self.assertEqual(self._prepare(work_dir, full, train, vocab), paths)
    with self.assertRaisesRegex(Exception, "draw.json.*'seed': 3.*new --work_dir"):
      self._prepare(work_dir, full, train, vocab, seed=4)
    self.assertEqual(_read_jsonl(paths["train.jsonl"]), training)

  def test_paragraphs_without_questions_name_the_flag(self):
    full, _ = _squad()
    work_dir = self.create_tempdir().full_path
    with self.assertRaisesRegex(Exception, "--train_paragraphs=2"):
      self._prepare(work_dir, full, [], "unused")
    self.assertEqual(os.listdir(work_dir), [])  # nothing written that a corrected rerun would keep


class RoundRetrieversTest(tf.test.TestCase):

  def test_start_then_the_retriever_each_finished_round_ended_with(self):
    model_dir = self.create_tempdir().full_path
    self.assertEqual([r["round"] for r in data.round_retrievers(model_dir)], ["start"])
    for iteration, after in ((0, "iteration_0/retriever"), (1, "iteration_0/retriever")):  # 1 rejected
      os.makedirs(fid_kd.iteration_dir(model_dir, iteration))
      with open(os.path.join(fid_kd.iteration_dir(model_dir, iteration), fid_kd.METRICS_NAME), "w") as f:
        json.dump({"retriever_after": after, "accepted": iteration == 0}, f)
    os.makedirs(fid_kd.iteration_dir(model_dir, 2))  # started, not finished: no metrics.json
    rounds = data.round_retrievers(model_dir)
    self.assertEqual([r["round"] for r in rounds], ["start", 0, 1])
    self.assertEqual(rounds[0]["retriever"], os.path.join(model_dir, fid_kd.INITIAL_RETRIEVER_DIR))
    self.assertEqual(rounds[2]["retriever"], os.path.join(model_dir, "iteration_0/retriever"))
    self.assertFalse(rounds[2]["metrics"]["accepted"])


if __name__ == "__main__":
  tf.test.main()
