"""Tests for realm_tf.data.squad_open: recall of hand-made rankings, and the real SQuAD-open corpus and
questions in $REALM_TF_SHARED_DATA/squad (skipped when absent)."""

import csv
import json
import os
import sys

import numpy as np
import tensorflow as tf

from realm_tf import evaluation
from realm_tf.data import corpus
from realm_tf.data import qa
from realm_tf.data import squad_open
from realm_tf.testing import test_paths


def _write_squad(path, articles):
  """articles: [(title, [(context, [(question, [answers])])])] in the SQuAD v1.1 layout."""
  data = [{
      "title":
          title,
      "paragraphs": [{
          "context":
              context,
          "qas": [{
              "id": f"{title}-{i}-{j}",
              "question": question,
              "answers": [{
                  "text": a,
                  "answer_start": 0
              } for a in answers]
          } for j, (question, answers) in enumerate(qas)]
      } for i, (context, qas) in enumerate(paragraphs)]
  } for title, paragraphs in articles]
  with open(path, "w", encoding="utf-8") as f:
    json.dump({"version": "1.1", "data": data}, f)
  return path


class SquadOpenTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    directory = self.create_tempdir().full_path
    self.train = _write_squad(os.path.join(directory, "train.json"),
                              [("Alpha_Article", [("Alpha one text.", [("q?", ["one"])]),
                                                  ("Alpha two text.", [])]),
                               ("Beta", [("Beta text about Paris.", [])])])
    self.dev = _write_squad(
        os.path.join(directory, "dev.json"),
        [("Gamma", [("Its capital is PARIS\n France.", [("What is the capital?", ["paris france"])]),
                    ("Gamma second paragraph.", [("Which paragraph?", ["second", "2nd"]),
                                                 ("Missing?", ["nowhere at all"])])])])
    self.data = squad_open.load_squad_open(self.train, self.dev)

  def test_corpus_and_questions(self):
    self.assertEqual([d.doc_id for d in self.data.documents], ["1", "2", "3", "4", "5"])
    self.assertEqual(self.data.documents[0].title, "Alpha Article")
    self.assertEqual(self.data.num_train_paragraphs, 3)
    self.assertEqual([q.question for q in self.data.questions],
                     ["What is the capital?", "Which paragraph?", "Missing?"])  # dev questions only
    self.assertAllEqual(self.data.gold_rows(), [3, 4, 4])
    dev = self.data.dev_corpus()
    self.assertEqual([d.doc_id for d in dev.documents], ["4", "5"])  # same ids as in the full corpus
    self.assertAllEqual(dev.gold_rows(), [0, 1, 1])

  def test_rankings_recall(self):
    # Question 0: gold (row 3) at rank 2; its answer "paris france" matches row 3 only after lower
    # casing and whitespace collapsing, and never matches row 2 ("Paris" alone).
    # Question 1: gold (row 4) at rank 1. Question 2: gold at rank 3, answer nowhere.
    rows = np.array([[2, 3, 0], [4, 0, 1], [0, 1, 4]])
    recall = evaluation.rankings_recall(rows, ks=(1, 2, 3), **self.data.recall_inputs())
    self.assertEqual(recall["num_questions"], 3)
    self.assertAllClose([recall[f"answer_recall@{k}"] for k in (1, 2, 3)], [100 / 3, 200 / 3, 200 / 3])
    self.assertAllClose([recall[f"gold_recall@{k}"] for k in (1, 2, 3)], [100 / 3, 200 / 3, 100])

  def test_answer_is_looked_for_in_the_body_only(self):
    # "Alpha Article" is the title of rows 0 and 1, not in their bodies: no answer hit.
    data = squad_open.SquadOpen(self.data.documents,
                                [qa.QAExample("t?", ["Alpha Article"], metadata={"doc_id": "1"})], 3)
    recall = evaluation.rankings_recall(np.array([[0, 1]]), ks=(1, 2), **data.recall_inputs())
    self.assertEqual(recall["answer_recall@2"], 0)
    self.assertEqual(recall["gold_recall@1"], 100)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, r"must be \[num_questions=3, k\]"):
      evaluation.rankings_recall(np.zeros([2, 3], np.int64), ks=(1,), **self.data.recall_inputs())
    with self.assertRaisesRegex(ValueError, "cannot give recall@3"):
      evaluation.rankings_recall(np.zeros([3, 2], np.int64), ks=(1, 3), **self.data.recall_inputs())
    overlapping = _write_squad(os.path.join(self.create_tempdir().full_path, "dev.json"),
                               [("Beta", [("Beta again.", [("q?", ["again"])])])])
    with self.assertRaisesRegex(qa.InputError, r"1 articles also occur in .*train.json \(e.g. 'Beta'\)"):
      squad_open.load_squad_open(self.train, overlapping)

  def test_find_squad_files(self):
    directory = self.create_tempdir().full_path
    with self.assertRaisesRegex(
        FileNotFoundError, r"no train-v1\.1\.json or train-v1\.1\.rebuilt"
        r"\.json and no dev-v1\.1\.json or .*bin/download_data\.py"):
      squad_open.find_squad_files(directory)
    # The shared mirror's rebuilt names, then the official names (bin/download_data's), which win.
    for name in ("train-v1.1.rebuilt.json", "dev-v1.1.rebuilt.json"):
      _write_squad(os.path.join(directory, name), [])
    rebuilt = squad_open.find_squad_files(directory)
    self.assertEqual(rebuilt, (os.path.join(
        directory, "train-v1.1.rebuilt.json"), os.path.join(directory, "dev-v1.1.rebuilt.json")))
    for name in ("train-v1.1.json", "dev-v1.1.json"):
      _write_squad(os.path.join(directory, name), [])
    self.assertEqual(squad_open.find_squad_files(directory),
                     (os.path.join(directory, "train-v1.1.json"), os.path.join(directory, "dev-v1.1.json")))


class SharedDataTest(tf.test.TestCase):
  """The real SQuAD v1.1 files in $REALM_TF_SHARED_DATA/squad."""

  def setUp(self):
    super().setUp()
    self.directory = test_paths.shared_data_path("squad")
    if self.directory is None:
      self.skipTest(test_paths.missing_data_message("squad"))

  def test_squad_open(self):
    data = squad_open.load_squad_open(*squad_open.find_squad_files(self.directory))
    self.assertLen(data.documents, 20963)
    self.assertEqual(data.num_train_paragraphs, 18896)
    self.assertLen(data.questions, 10570)
    gold = data.gold_rows()
    self.assertTrue(np.all(gold >= 18896))  # every gold paragraph is a dev paragraph
    dev = data.dev_corpus()
    self.assertLen(dev.documents, 2067)
    self.assertAllEqual(dev.gold_rows(), gold - 18896)
    self.assertTrue(all(isinstance(d, corpus.Document) for d in data.documents))
    # Ids, texts and titles are the paragraphs TSV's (id, text, title, split).
    csv.field_size_limit(sys.maxsize)
    with open(os.path.join(self.directory, squad_open.PARAGRAPHS_FILE), encoding="utf-8", newline="") as f:
      rows = list(csv.reader(f, delimiter="\t"))
    self.assertEqual(rows[0], ["id", "text", "title", "split"])
    self.assertLen(rows, 1 + 20963)
    for row, document in zip(rows[1:], data.documents):
      self.assertEqual(row[:3], [document.doc_id, document.body, document.title])
    self.assertEqual([r[3] for r in rows[1:]].count("dev"), 2067)
    # The gold paragraph holds the answer: answer recall@1 of the gold ranking is 100%.
    recall = evaluation.rankings_recall(gold[:, None], ks=(1,), **data.recall_inputs())
    self.assertEqual(recall["gold_recall@1"], 100)
    self.assertGreater(recall["answer_recall@1"], 99.9)


if __name__ == "__main__":
  tf.test.main()
