"""Tests for bench/minilm_lib.py's merging of squad_open_bench result rows (no model or data needed)."""

from absl.testing import absltest

from bench import minilm_lib


def _row(corpus, method, value):
  return {"corpus": corpus, "method": method, "recall": {"answer_recall@5": value}}


class MergedRowsTest(absltest.TestCase):

  def test_a_run_of_one_method_keeps_the_others_and_replaces_its_own_in_place(self):
    previous = [_row("all", "bm25", 89.8), _row("all", "minilm", 80.0), _row("dev", "bm25", 94.1)]
    merged = minilm_lib.merged_rows(previous, [_row("all", "minilm", 82.7), _row("dev", "minilm", 89.2)])
    self.assertEqual([(r["corpus"], r["method"], r["recall"]["answer_recall@5"]) for r in merged],
                     [("all", "bm25", 89.8), ("all", "minilm", 82.7), ("dev", "bm25", 94.1),
                      ("dev", "minilm", 89.2)])

  def test_without_a_previous_file_the_run_is_the_result(self):
    new = [_row("dev", "hybrid", 95.1)]
    self.assertEqual(minilm_lib.merged_rows([], new), new)


if __name__ == "__main__":
  absltest.main()
