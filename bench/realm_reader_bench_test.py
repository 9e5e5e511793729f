"""Tests of bench/realm_reader_bench.py's masked news statements."""

import os

from absl.testing import absltest

from bench import realm_reader_bench
from realm_tf import tokenization
from realm_tf.data import corpus_table
from realm_tf.data import synthetic
from realm_tf.testing import test_paths

_TESTDATA = os.path.join(test_paths.repo_root(), "testdata")


class StatementsTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):  # read-only for the cases: built once
    super().setUpClass()
    cls.tokenizer = tokenization.Tokenizer(os.path.join(_TESTDATA, "vocab.txt"))
    docs = synthetic.load_jsonl(os.path.join(_TESTDATA, "corpus.jsonl"))
    cls.corpus = corpus_table.CorpusTable.from_texts(cls.tokenizer, [d["title"] for d in docs],
                                                     [d["body"] for d in docs], [d["id"] for d in docs],
                                                     "testdata/corpus.jsonl")
    cls.news = synthetic.all_news_items()[:20]

  def test_each_sentence_masks_its_fact_and_points_at_its_subjects_article(self):
    statements = realm_reader_bench._statements(self.tokenizer, self.corpus, self.news)
    self.assertLen(statements, sum(len(r["sentences"]) for r in self.news))
    for query, positions, targets, row in statements:
      self.assertEqual([query[p - 1] for p in positions], [self.tokenizer.mask_id] * len(targets))
      self.assertEqual(query.count(self.tokenizer.mask_id), len(targets))
      # The article of the row states the masked fact: its wordpieces hold the targets contiguously.
      body = self.corpus.body_token_ids.row(row).tolist()
      self.assertTrue(any(body[i:i + len(targets)] == targets for i in range(len(body))), row)
    # Another row would not: the fact is stated by its subject's article alone.
    query, positions, targets, row = statements[0]
    other = self.corpus.body_token_ids.row((row + 1) % self.corpus.num_docs).tolist()
    self.assertFalse(any(other[i:i + len(targets)] == targets for i in range(len(other))))

  def test_a_subject_without_an_article_is_an_error_naming_it(self):
    news = [dict(self.news[0], doc_id="person-9999")]
    with self.assertRaisesRegex(ValueError, "person-9999.*--data_dir"):
      realm_reader_bench._statements(self.tokenizer, self.corpus, news)


if __name__ == "__main__":
  absltest.main()
