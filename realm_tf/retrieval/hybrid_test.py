"""Tests of the retrievers bin/eval_orqa reads from (realm_tf/retrieval/hybrid.py): what each returns,
that the hybrid recovers a document BM25 finds and the dense tower misses, and the errors."""

import json
import os

from absl.testing import absltest
import numpy as np

from realm_tf.retrieval import hybrid

_TESTDATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "testdata")


def _corpus():
  with open(os.path.join(_TESTDATA, "corpus.jsonl"), encoding="utf-8") as f:
    records = [json.loads(line) for line in f][:200]
  return ([r["title"] for r in records], [r["body"] for r in records], [r["id"] for r in records])


class HybridTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.titles, cls.bodies, cls.ids = _corpus()
    cls.sparse = hybrid.build_bm25(cls.titles, cls.bodies)

  def test_bm25_indexes_titles(self):
    # A person's name is the title of their own document; the body says "X was born in ...".
    row = next(i for i, t in enumerate(self.titles) if self.ids[i].startswith("person"))
    rows = hybrid.candidate_rows(hybrid.BM25, [f"Who is {self.titles[row]}?"],
                                 3,
                                 dense_fn=lambda d: self.fail("bm25 asked the dense tower"),
                                 sparse=self.sparse)["rows"]
    self.assertEqual(rows.shape, (1, 3))
    self.assertEqual(rows[0, 0], row)
    self.assertIn(self.titles[row], hybrid.block_texts(self.titles, self.bodies)[row])

  def test_hybrid_finds_what_bm25_finds_and_dense_misses(self):
    row = next(i for i, t in enumerate(self.titles) if self.ids[i].startswith("person"))
    question = f"Where was {self.titles[row]} born?"
    self.assertEqual(self.sparse.search([question], 1)[0][0, 0], row)
    # A dense tower that disagrees with BM25: its ranking is BM25's reversed, but for the document, which
    # it ranks 8th, out of its top 5.
    reversed_bm25 = [int(r) for r in self.sparse.search([question], len(self.bodies))[0][0, ::-1] if r != row]
    dense = np.array([reversed_bm25[:7] + [row] + reversed_bm25[7:]])
    asked = []

    def dense_fn(depth):
      asked.append(depth)
      return dense[:, :depth], np.linspace(1.0, 0.0, depth)[np.newaxis]

    self.assertNotIn(row, dense[0, :5])
    result = hybrid.candidate_rows(hybrid.HYBRID, [question], 5, dense_fn, self.sparse)
    # Ranked well by both (1st and 8th), it beats every document one of them ranks near the bottom.
    self.assertEqual(result["rows"][0, 0], row)
    self.assertEqual(result["rows"].shape, (1, 5))
    # Each side ranked the whole (small) corpus before fusing, not just the top 5.
    self.assertEqual(asked, [len(self.bodies)])
    self.assertEqual(result["bm25_rows"].shape, (1, len(self.bodies)))
    # The fused rows are distinct corpus rows.
    self.assertLen(set(result["rows"][0].tolist()), 5)

  def test_weighted_hybrid_follows_the_margins(self):
    row = next(i for i, t in enumerate(self.titles) if self.ids[i].startswith("person"))
    question = f"Where was {self.titles[row]} born?"
    sparse_rows = self.sparse.search([question], len(self.bodies))[0][0]
    # A dense tower sure of another document (far above the rest) and indifferent to all others.
    other = int(sparse_rows[-1])
    dense = np.array([[other] + [int(r) for r in sparse_rows if r != other]])
    scores = np.concatenate([[0.9], np.full(len(self.bodies) - 1, 0.1)])[np.newaxis]
    fn = lambda d: (dense[:, :d], scores[:, :d])
    rrf = hybrid.candidate_rows(hybrid.HYBRID, [question], 1, fn, self.sparse)["rows"]
    bm25_only = hybrid.candidate_rows(hybrid.HYBRID, [question], 1, fn, self.sparse, bm25_weight=1.0)["rows"]
    dense_only = hybrid.candidate_rows(hybrid.HYBRID, [question], 1, fn, self.sparse, bm25_weight=0.0)["rows"]
    self.assertEqual(bm25_only[0, 0], row)
    self.assertEqual(dense_only[0, 0], other)
    self.assertEqual(rrf[0, 0], row)  # BM25's first is also the dense tower's second
    self.assertEqual(hybrid.label(hybrid.HYBRID, 0.5), "hybrid_w0.5")
    self.assertEqual(hybrid.label(hybrid.HYBRID), "hybrid")
    with self.assertRaisesRegex(ValueError, r"--hybrid_bm25_weight=1.5: the BM25 weight .* in \[0, 1\]"):
      hybrid.check_bm25_weight(1.5)

  def test_dense_is_the_towers_ranking(self):
    dense = np.arange(40).reshape(4, 10)[:, ::-1]
    rows = hybrid.candidate_rows(hybrid.DENSE, ["q"] * 4, 3, lambda d: (dense[:, :d], None))["rows"]
    np.testing.assert_array_equal(rows, dense[:, :3])

  def test_gold_reads_each_questions_own_document(self):
    rows = hybrid.candidate_rows(hybrid.GOLD, ["a", "b"],
                                 5,
                                 lambda d: None,
                                 question_doc_ids=[self.ids[7], self.ids[3]],
                                 corpus_doc_ids=self.ids)
    np.testing.assert_array_equal(rows["rows"], [[7], [3]])

  def test_gold_errors_name_the_file_and_the_question(self):
    with self.assertRaisesRegex(ValueError, r"dev.jsonl: question 1 has no \"doc_id\""):
      hybrid.gold_rows([self.ids[0], None], self.ids, "dev.jsonl")
    with self.assertRaisesRegex(ValueError, r"dev.jsonl: question 0's doc_id 'nope' is not a document"):
      hybrid.gold_rows(["nope"], self.ids, "dev.jsonl")

  def test_unknown_retriever_names_the_flag(self):
    with self.assertRaisesRegex(
        ValueError, r"--retriever: unknown retriever 'sparse'; choose from dense, "
        r"bm25, hybrid, gold"):
      hybrid.check_retrievers(["dense", "sparse"])
    with self.assertRaisesRegex(ValueError, r"--retrievers: unknown retriever '\(none given\)'"):
      hybrid.check_retrievers([], flag="--retrievers")
    with self.assertRaisesRegex(ValueError, "needs a BM25 index"):
      hybrid.candidate_rows(hybrid.HYBRID, ["q"], 5, lambda d: None)


if __name__ == "__main__":
  absltest.main()
