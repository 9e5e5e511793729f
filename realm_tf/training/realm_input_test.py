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

  def _batches(self, count: int, skip: int, seed: int = 5):
    state = realm_input.RetrievalState(
        published_index.IndexWatcher(self.model_dir, log=lambda _: None), self.table,
        self.config.num_candidates, log=lambda _: None, expected_dim=self.config.projection_size)
    dataset = realm_input.realm_dataset(
        pretraining.pretraining_dataset(self.pretraining_prefix), self.tokenizer,
        self.config.featurizer(self.tokenizer), state, batch_size=3, seed=seed, skip_batches=skip)
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


if __name__ == "__main__":
  tf.test.main()
