"""Tests for bench/squad_open_realm_bench.py's own-paragraph-excluded recall, on a toy corpus: which
questions it counts (an answer another paragraph holds too) and where their hits are found."""

from unittest import mock

import numpy as np
import tensorflow as tf

from bench import squad_open_realm_bench as realm_bench
from realm_tf.data import corpus
from realm_tf.data import qa
from realm_tf.data import squad_open

_BODIES = [
    "Paris is the capital of France.", "The Louvre in PARIS holds the Mona  Lisa.",
    "Berlin is the capital of Germany.", "Rome is older than both.", "The Mona Lisa smiles."
]


def _squad(answers_and_gold):
  documents = [corpus.Document(f"title {i}", body, doc_id=str(i)) for i, body in enumerate(_BODIES)]
  questions = [
      qa.QAExample(f"q{i}", answers, metadata={"doc_id": str(gold)})
      for i, (answers, gold) in enumerate(answers_and_gold)
  ]
  return squad_open.SquadOpen(documents, questions, 0)


class OwnExcludedRecallTest(tf.test.TestCase):

  @mock.patch.object(realm_bench, "_KS", (1, 2))
  def test_counts_questions_answered_elsewhere_and_skips_their_own_paragraph(self):
    squad = _squad([
        (["paris"], 0),  # also in row 1 (case differs)
        (["Berlin"], 2),  # only its own paragraph: not counted
        (["Tokyo", "Paris"], 1),  # its second answer is in row 0
        (["mona lisa"], 4),  # also in row 1 (whitespace differs)
        (["Rome"], 3)
    ])  # only its own paragraph: not counted
    # Rankings of max(_KS) + 1 rows, the own paragraph anywhere in them or not at all.
    rows = np.array([
        [0, 2, 1],  # own first: the rest is [2, 1], a hit at 2
        [2, 0, 1],
        [0, 1, 2],  # own second: [0, 2], a hit at 1
        [3, 2, 0],  # own absent: the first two, [3, 2], no hit
        [3, 0, 1]
    ])
    recall = realm_bench._own_excluded_recall(rows, squad.questions, squad)
    self.assertEqual(recall["own_excluded_num_questions"], 3.0)
    self.assertAlmostEqual(recall["own_excluded_answer_recall@1"], 100 / 3)
    self.assertAlmostEqual(recall["own_excluded_answer_recall@2"], 200 / 3)
    self.assertNotIn("own_excluded_gold_recall@1", recall)

  @mock.patch.object(realm_bench, "_KS", (1, 2))
  def test_plain_recall_reads_the_first_rows_only(self):
    squad = _squad([(["paris"], 0), (["Berlin"], 2)])
    rows = np.array([[1, 3, 0], [3, 4, 2]])
    first_hits = realm_bench._first_hits(rows, squad.questions, squad)
    self.assertEqual(first_hits, [1, 0])  # row 1 holds "PARIS"; Berlin's row 2 is beyond max(_KS)
    recall = realm_bench._recall_of_index(rows, first_hits, squad.questions, squad)
    self.assertEqual(recall["gold_recall@2"], 0.0)  # both golds are third, beyond max(_KS)
    self.assertEqual(recall["answer_recall@1"], 50.0)


if __name__ == "__main__":
  tf.test.main()
