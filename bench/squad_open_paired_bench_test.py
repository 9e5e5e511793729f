"""bench/squad_open_paired_bench.py's question-by-question comparison: every row against each baseline on
the measures both have, and bin/eval_orqa's predictions read as exact matches in the QA file's order."""

import json
import os

from absl.testing import absltest
import numpy as np

from bench import squad_open_paired_bench
from realm_tf.data import qa


class PairedRowsTest(absltest.TestCase):

  def test_each_row_against_each_baseline_on_shared_measures(self):
    outcomes = {
        "bm25": {
            "recall@5": np.array([1, 1, 0, 0], bool),
            "exact_match": np.array([1, 0, 0, 0], bool)
        },
        "hybrid": {
            "recall@5": np.array([1, 0, 1, 1], bool),
            "exact_match": np.array([0, 0, 1, 0], bool)
        },
        "zero-shot hybrid": {
            "recall@5": np.array([0, 1, 1, 0], bool)
        },
    }
    paired = squad_open_paired_bench.paired_rows(outcomes, ["bm25", "zero-shot hybrid"])
    self.assertEqual(sorted(paired), ["bm25", "hybrid", "zero-shot hybrid"])
    self.assertNotIn("versus bm25", paired["bm25"])
    self.assertEqual(paired["hybrid"]["versus bm25"]["recall@5"], {"gained": 2, "lost": 1, "p_value": 1.0})
    self.assertEqual(paired["hybrid"]["versus bm25"]["exact_match"], {"gained": 1, "lost": 1, "p_value": 1.0})
    # The zero-shot row has no exact match: only recall is compared with it.
    self.assertEqual(list(paired["hybrid"]["versus zero-shot hybrid"]), ["recall@5"])
    self.assertEqual(paired["hybrid"]["versus zero-shot hybrid"]["recall@5"], {
        "gained": 2,
        "lost": 1,
        "p_value": 1.0
    })


class ExactMatchesTest(absltest.TestCase):

  def _examples(self):
    return [
        qa.QAExample("who wrote it?", ["Ada Lovelace"]),
        qa.QAExample("where?", ["Paris", "paris, France"]),
    ]

  def _write(self, records):
    path = os.path.join(self.create_tempdir().full_path, "dev.hybrid.predictions.jsonl")
    with open(path, "w", encoding="utf-8") as f:
      f.writelines(json.dumps(r) + "\n" for r in records)
    return path

  def test_predictions_scored_in_the_qa_files_order(self):
    path = self._write([{
        "question": "who wrote it?",
        "prediction": "ada lovelace"
    }, {
        "question": "where?",
        "prediction": "London"
    }])
    np.testing.assert_array_equal(squad_open_paired_bench.exact_matches(path, self._examples()),
                                  [True, False])

  def test_predictions_of_other_questions_are_refused(self):
    path = self._write([{
        "question": "where?",
        "prediction": "Paris"
    }, {
        "question": "who wrote it?",
        "prediction": "Ada Lovelace"
    }])
    with self.assertRaisesRegex(ValueError, "not the QA file's"):
      squad_open_paired_bench.exact_matches(path, self._examples())

  def test_a_missing_file_is_none(self):
    self.assertIsNone(squad_open_paired_bench.exact_matches("/nonexistent/dev.bm25.predictions.jsonl", []))


if __name__ == "__main__":
  absltest.main()
