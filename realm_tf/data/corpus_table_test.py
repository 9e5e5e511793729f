"""Tests of the in-memory corpus (realm_tf.data.corpus_table)."""

import os

import numpy as np
import tensorflow as tf

from realm_tf import tokenization
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import corpus_table
from realm_tf.testing import tiny_inputs

_DOCS = [
    corpus_lib.Document("T1", "Wenor founded it.", "a"),
    corpus_lib.Document("T2", "x", "b"),
    corpus_lib.Document("Tœ", "Kelarlé ñ", "c")
]


class CorpusTableTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    directory = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), f"corpus_table_test_{os.getpid()}")
    os.makedirs(directory, exist_ok=True)
    cls.tokenizer = tokenization.Tokenizer(tiny_inputs.write_vocab(directory))
    cls.prefix = os.path.join(directory, "corpus", "blocks")
    corpus_lib.write_corpus(lambda: _DOCS, cls.tokenizer, cls.prefix, num_shards=2)
    cls.table = corpus_table.CorpusTable.load(cls.prefix)

  def _ids(self, text):
    return self.tokenizer.tokenize([text.encode("utf-8")]).to_list()[0]

  def test_rows_in_corpus_order(self):
    table = self.table
    self.assertEqual(3, table.num_docs)
    self.assertEqual(["T1", "T2", "Tœ"], list(table.titles))
    self.assertEqual("Kelarlé ñ", table.bodies[2])
    self.assertEqual("Kelarlé ñ", table.bodies[-1])
    self.assertEqual(["a", "b"], table.doc_ids[:2])
    self.assertEqual(["T1 Wenor founded it.", "T2 x", "Tœ Kelarlé ñ"], table.texts())
    for i, doc in enumerate(_DOCS):
      self.assertAllEqual(self._ids(doc.body), table.body_token_ids.row(i))
      self.assertAllEqual(self._ids(doc.title), table.title_token_ids.row(i))
    with self.assertRaises(IndexError):
      _ = table.bodies[3]

  def test_dense_bodies_truncate_and_pad(self):
    token_ids, lengths = self.table.dense_bodies(3)
    self.assertEqual((3, 3), token_ids.shape)
    self.assertEqual(np.int32, token_ids.dtype)
    self.assertAllEqual([3, 1, len(self._ids("Kelarlé ñ")[:3])], lengths)
    self.assertAllEqual(self._ids("Wenor founded it.")[:3], token_ids[0])
    self.assertAllEqual([self._ids("x")[0], 0, 0], token_ids[1])
    # C is the longest body kept, not max_len.
    wide, _ = self.table.dense_bodies(1000)
    self.assertEqual(max(len(self._ids(d.body)) for d in _DOCS), wide.shape[1])

  def test_gather_and_lookups(self):
    title_values, title_lengths, body_values, body_lengths = self.table.gather(np.array([2, 0]))
    self.assertEqual(np.int64, body_values.dtype)
    self.assertAllEqual(self._ids("Kelarlé ñ") + self._ids("Wenor founded it."), body_values)
    self.assertAllEqual([len(self._ids("Kelarlé ñ")), len(self._ids("Wenor founded it."))], body_lengths)
    self.assertAllEqual(self._ids("Tœ") + self._ids("T1"), title_values)
    self.assertLen(title_lengths, 2)
    self.assertAllEqual([1, -1, 0], self.table.rows_of(["b", "zz", "a"]))
    titles, bodies = self.table.ragged_token_ids()
    self.assertEqual(self._ids("x"), bodies[1].numpy().tolist())
    self.assertEqual(tf.int64, titles.dtype)

  def test_fingerprints_match_the_in_graph_fingerprint(self):
    own = corpus_table.document_fingerprint(tf.constant("T2"), tf.constant("x")).numpy()
    self.assertEqual(own, self.table.fingerprints[1])
    self.assertEqual({int(own)}, self.table.excluded(own))

  def test_from_texts_equals_the_written_corpus(self):
    table = corpus_table.CorpusTable.from_texts(self.tokenizer, [d.title for d in _DOCS],
                                                [d.body for d in _DOCS], [d.doc_id for d in _DOCS],
                                                "blocks.jsonl")
    for name in ("titles", "bodies", "doc_ids"):
      self.assertEqual(list(getattr(self.table, name)), list(getattr(table, name)))
    self.assertAllEqual(self.table.fingerprints, table.fingerprints)
    self.assertAllEqual(self.table.id_hashes, table.id_hashes)
    for mine, theirs in zip(self.table.dense_bodies(8), table.dense_bodies(8)):
      self.assertAllEqual(mine, theirs)
    self.assertAllEqual(self.table.title_token_ids.values, table.title_token_ids.values)
    with self.assertRaisesRegex(ValueError, "blocks.jsonl: no blocks to read"):
      corpus_table.CorpusTable.from_texts(self.tokenizer, [], [], [], "blocks.jsonl")

  def test_a_replaced_document_aliases_its_old_fingerprint(self):
    updated = self.prefix + "-v1"
    records = list(corpus_lib.read_corpus(self.prefix))
    records[1] = dict(records[1], body="y", body_token_ids=self._ids("y"))  # doc "b" replaced
    del records[0]  # doc "a" removed
    corpus_lib.write_derived_corpus(self.prefix, lambda: records, len(records), updated, 1, {
        "replaced": ["b"],
        "removed": ["a"]
    })
    newer = corpus_table.CorpusTable.load(updated, previous=self.table)
    old = int(self.table.fingerprints[1])
    self.assertEqual({old: int(newer.fingerprints[0])}, newer.aliases)
    self.assertEqual({old, int(newer.fingerprints[0])}, newer.excluded(old))


if __name__ == "__main__":
  tf.test.main()
