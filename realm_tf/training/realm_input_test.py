"""The REALM input pipeline on testdata: features as the trainer expects them, and a deterministic stream.

Determinism is what lets a killed trainer continue its loss curve: a resumed run asks for the stream with
the consumed batches skipped and must get exactly the batches the uninterrupted run would have seen next
(for the same seed and index).
"""

import os

import numpy as np
import tensorflow as tf

from realm_tf.data import corpus
from realm_tf.data import pretraining
from realm_tf.modeling import bert
from realm_tf.modeling import realm as realm_model
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import published_index
from realm_tf.retrieval import refresher
from realm_tf.training import realm_input

_TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata")


class _LexicalRetrievalState(realm_input.RetrievalState):
  """Candidates by wordpiece overlap with the query, so they hold the query's facts (an untrained
  index returns nearly the same documents for every query)."""

  def retrieve(self, token_ids, mask, segment_ids, own_fingerprints):
    bodies = [set(row) for row in self.corpus.body_ids.numpy()]
    rows = []
    for ids, m in zip(np.asarray(token_ids), np.asarray(mask)):
      query = set(ids[m > 0][1:-1])
      overlap = np.array([len(query & body) for body in bodies])
      rows.append(np.argsort(-overlap, kind="stable")[:self.num_candidates - 1])
    return np.asarray(rows, np.int32)


class RealmInputTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    root = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), f"realm_input_test_{os.getpid()}")
    vocab = os.path.join(_TESTDATA, "vocab.txt")
    cls.config = realm_config_lib.RealmConfig(
        retriever_bert=bert.tiny_config(285, num_layers=1), reader_bert=bert.tiny_config(285),
        vocab_path=vocab, projection_size=16, query_seq_len=32, candidate_seq_len=64, max_masks=4,
        num_candidates=4)
    cls.model_dir = os.path.join(root, "model")
    cls.config.save(cls.model_dir)
    cls.tokenizer = cls.config.tokenizer()
    cls.corpus_prefix = os.path.join(root, "corpus", "blocks")
    corpus.write_corpus(lambda: corpus.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")),
                        cls.tokenizer, cls.corpus_prefix, 2)
    cls.pretraining_prefix = os.path.join(root, "pretraining", "sentences")
    pretraining.write_pretraining_corpus(
        lambda: pretraining.read_raw_documents(os.path.join(_TESTDATA, "pretraining.jsonl")),
        cls.pretraining_prefix, 2)
    refresher.bootstrap(cls.config, None, refresher.RefresherOptions(
        model_dir=cls.model_dir, corpus_prefix=cls.corpus_prefix,
        index_implementation="brute_force"), log=lambda _: None)
    cls.table = realm_input.CorpusTable(cls.corpus_prefix)

  def _batches(self, count: int, skip: int, seed: int = 5, span_substitution_rate: float = 0.0,
               state_class=realm_input.RetrievalState, reader_warmup_steps: int = 0):
    state = state_class(
        published_index.IndexWatcher(self.model_dir, log=lambda _: None), self.table,
        self.config.num_candidates, log=lambda _: None, expected_dim=self.config.projection_size)
    dataset = realm_input.realm_dataset(
        pretraining.pretraining_dataset(self.pretraining_prefix), self.tokenizer,
        self.config.featurizer(self.tokenizer), state, batch_size=3, seed=seed, skip_batches=skip,
        span_substitution_rate=span_substitution_rate, reader_warmup_steps=reader_warmup_steps)
    return [{k: v.numpy() for k, v in batch.items()} for batch in dataset.take(count)]

  def test_features_have_static_shapes_and_the_null_document_first(self):
    batch = self._batches(1, 0)[0]
    n, q, c = self.config.num_candidates, self.config.query_seq_len, self.config.candidate_seq_len
    self.assertEqual(batch[realm_model.QUERY + "_token_ids"].shape, (3, q))
    self.assertEqual(batch[realm_model.CANDIDATE + "_token_ids"].shape, (3, n, c))
    self.assertEqual(batch[realm_model.JOINT + "_token_ids"].shape, (3, n, q + c))
    null = batch[realm_model.CANDIDATE + "_token_ids"][:, 0, :3]
    self.assertAllEqual(null, [[self.tokenizer.cls_id, self.tokenizer.sep_id, self.tokenizer.sep_id]] * 3)
    # Every example predicts at least one real [MASK] position, and those positions hold [MASK].
    mask = batch[realm_model.MLM_MASK]
    self.assertTrue(np.all(mask[:, 0] == 1.0))
    positions = batch[realm_model.MLM_POSITIONS]
    query_ids = batch[realm_model.QUERY + "_token_ids"]
    for b in range(3):
      for p, m in zip(positions[b], mask[b]):
        if m:
          self.assertEqual(query_ids[b, p], self.tokenizer.mask_id)

  def test_resumed_stream_continues_the_uninterrupted_one(self):
    uninterrupted = self._batches(4, 0)
    resumed = self._batches(2, 2)
    for expected, actual in zip(uninterrupted[2:], resumed):
      self.assertEqual(set(expected), set(actual))
      for key in expected:
        self.assertAllEqual(expected[key], actual[key], msg=key)
    # Another seed is another stream (the test could fail if the seed were ignored).
    other = self._batches(1, 0, seed=6)[0]
    self.assertFalse(np.array_equal(other[realm_model.QUERY + "_token_ids"],
                                    uninterrupted[0][realm_model.QUERY + "_token_ids"]))

  def test_span_substitution_relabels_the_target_and_its_copies_in_the_joint_inputs_only(self):
    plain = self._batches(6, 0, state_class=_LexicalRetrievalState)
    substituted = self._batches(6, 0, span_substitution_rate=1.0, state_class=_LexicalRetrievalState)
    copies = 0
    for before, after in zip(plain, substituted):
      # Same examples and candidates; the retriever's inputs are the real documents.
      for key in (realm_model.QUERY + "_token_ids", realm_model.CANDIDATE + "_token_ids",
                  realm_model.MLM_POSITIONS, realm_model.MLM_MASK):
        self.assertAllEqual(before[key], after[key], msg=key)
      mask = before[realm_model.MLM_MASK] > 0
      old, new = before[realm_model.MLM_TARGETS], after[realm_model.MLM_TARGETS]
      self.assertTrue(np.all(old[mask] != new[mask]) or np.mean(old[mask] != new[mask]) > 0.9)
      self.assertAllEqual(old[~mask], new[~mask])
      joint_before = before[realm_model.JOINT + "_token_ids"]
      joint_after = after[realm_model.JOINT + "_token_ids"]
      segments = before[realm_model.JOINT + "_segment_ids"]
      for b in range(3):
        span, replacement = list(old[b][mask[b]]), list(new[b][mask[b]])
        for n in range(self.config.num_candidates):
          doc_before = list(joint_before[b, n][segments[b, n] == 1])
          doc_after = list(joint_after[b, n][segments[b, n] == 1])
          # The query half never changes; the document's copies of the span become the replacement.
          self.assertAllEqual(joint_before[b, n][segments[b, n] == 0], joint_after[b, n][segments[b, n] == 0])
          expected, i = [], 0
          while i < len(doc_before):
            if doc_before[i:i + len(span)] == span:
              expected += replacement
              i += len(span)
              copies += 1
            else:
              expected.append(doc_before[i])
              i += 1
          self.assertEqual(doc_after, expected)
    # The candidates share the query's names, so they hold some of the masked facts.
    self.assertGreater(copies, 0)
    # Seeded by the batch number: a resumed stream draws the same replacements.
    resumed = self._batches(2, 4, span_substitution_rate=1.0, state_class=_LexicalRetrievalState)
    for expected, actual in zip(substituted[4:], resumed):
      for key in expected:
        self.assertAllEqual(expected[key], actual[key], msg=key)

  def test_reader_warmup_keeps_only_candidates_holding_the_span_for_its_batches(self):
    plain = self._batches(6, 0, state_class=_LexicalRetrievalState)
    warm = self._batches(6, 0, state_class=_LexicalRetrievalState, reader_warmup_steps=4)
    holders = skipped = 0
    for number, (before, after) in enumerate(zip(plain, warm)):
      if number >= 4:  # past the warm-up: the plain batch
        for key in before:
          self.assertAllEqual(before[key], after[key], msg=key)
        continue
      self.assertAllEqual(before[realm_model.QUERY + "_token_ids"], after[realm_model.QUERY + "_token_ids"])
      for b in range(3):
        span = list(before[realm_model.MLM_TARGETS][b][before[realm_model.MLM_MASK][b] > 0])
        docs = lambda batch: [
            tuple(batch[realm_model.JOINT + "_token_ids"][b, n][batch[realm_model.JOINT + "_segment_ids"][b, n] == 1])
            for n in range(1, self.config.num_candidates)]
        holding = [d for d in docs(before) if any(list(d[i:i + len(span)]) == span for i in range(len(d)))]
        if not holding:
          self.assertAllEqual(after[realm_model.MLM_MASK][b], np.zeros_like(after[realm_model.MLM_MASK][b]))
          skipped += 1
          continue
        holders += 1
        self.assertAllEqual(after[realm_model.MLM_MASK][b], before[realm_model.MLM_MASK][b])
        self.assertEqual(set(docs(after)), set(holding))  # every holder kept, nothing else
        # The retriever's inputs follow the same candidates as the reader's.
        self.assertAllEqual(after[realm_model.CANDIDATE + "_token_ids"][b, 0], before[realm_model.CANDIDATE + "_token_ids"][b, 0])
    self.assertGreater(holders, 0)

  def test_span_substitution_rate_out_of_range_is_refused(self):
    with self.assertRaisesRegex(ValueError, "span_substitution_rate"):
      self._batches(1, 0, span_substitution_rate=1.5)


if __name__ == "__main__":
  tf.test.main()
