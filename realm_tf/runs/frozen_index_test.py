"""Tests of an ORQA run's frozen index: taken from --index_dir only when it embeds this corpus row for
row (shape and corpus fingerprint), and refused at evaluation once the corpus at its path changed."""

import os

import numpy as np
import tensorflow as tf

from realm_tf.data import corpus as corpus_lib
from realm_tf.retrieval import index as index_lib
from realm_tf.runs import frozen_index
from realm_tf.testing import tiny_inputs


def _prepare(model_dir, paths, index_dir, log):
  # With index_dir given, neither the featurizer nor the retriever is used.
  return frozen_index.prepare_frozen_index(model_dir,
                                           paths["corpus"],
                                           None,
                                           16,
                                           tf.distribute.get_strategy(),
                                           lambda: None,
                                           index_dir=index_dir,
                                           log=log)


class FrozenIndexTest(tf.test.TestCase):

  def test_index_of_another_corpus_is_refused(self):
    tmp = self.create_tempdir().full_path
    paths = tiny_inputs.testdata_qa_slice(tmp, 12, 8, 24, num_shards=2)
    index_dir = os.path.join(tmp, "other_index")
    index_lib.build_index(np.ones([5, 16], np.float32), implementation="brute_force").save(index_dir)
    model_dir = os.path.join(tmp, "orqa")
    with self.assertRaisesRegex(ValueError, r"shape \(5, 16\) but corpus .* has 24 documents"):
      _prepare(model_dir, paths, index_dir, log=lambda _: None)
    self.assertFalse(os.path.exists(frozen_index.frozen_index_dir(model_dir)))

    # An index of this corpus (here a saved MIPS index; a published MODEL_DIR/index/<step> works the
    # same) becomes the run's frozen index, unchanged.
    embeddings = np.random.default_rng(0).normal(size=[24, 16]).astype(np.float32)
    index_lib.build_index(embeddings, implementation="brute_force").save(index_dir, overwrite=True)
    logs = []
    frozen = _prepare(model_dir, paths, index_dir, log=logs.append)
    self.assertAllEqual(frozen, embeddings)
    saved = index_lib.load_index(frozen_index.frozen_index_dir(model_dir))
    self.assertAllEqual(saved.embeddings, embeddings)
    self.assertEqual(saved.manifest["extra"]["index_dir"], index_dir)
    self.assertIn(f"frozen index from {index_dir}", logs)

  def test_index_or_frozen_index_of_a_same_size_corpus_with_other_documents_is_refused(self):
    tmp = self.create_tempdir().full_path
    paths = tiny_inputs.testdata_qa_slice(tmp, 12, 8, 24, num_shards=2)
    # 24 documents too, but other ones (other train questions' gold documents): only the fingerprint
    # tells the corpora apart.
    other = tiny_inputs.testdata_qa_slice(os.path.join(tmp, "other"), 30, 0, 24)["corpus"]
    embeddings = np.random.default_rng(0).normal(size=[24, 16]).astype(np.float32)
    index_dir = os.path.join(tmp, "index_of_other")
    index_lib.build_index(embeddings, implementation="brute_force").save(
        index_dir, extra={"corpus_fingerprint": corpus_lib.fingerprint(other)})
    model_dir = os.path.join(tmp, "orqa")
    with self.assertRaisesRegex(
        ValueError, f"{index_dir} embeds another corpus .* than {paths['corpus']}"
        r".*Pass --index_dir of an index built from this corpus"):
      _prepare(model_dir, paths, index_dir, log=lambda _: None)
    self.assertFalse(os.path.exists(frozen_index.frozen_index_dir(model_dir)))

    # Built from this corpus, the frozen index records its fingerprint; evaluation and export (through
    # load_frozen_index) refuse it once the corpus at that path holds other documents.
    index_lib.build_index(embeddings, implementation="brute_force").save(
        index_dir, overwrite=True, extra={"corpus_fingerprint": corpus_lib.fingerprint(paths["corpus"])})
    _prepare(model_dir, paths, index_dir, log=lambda _: None)
    self.assertAllEqual(frozen_index.load_frozen_index(model_dir, paths["corpus"]), embeddings)
    with self.assertRaisesRegex(ValueError, "frozen_index embeds another corpus .*The corpus changed"):
      frozen_index.load_frozen_index(model_dir, other)


if __name__ == "__main__":
  tf.test.main()
