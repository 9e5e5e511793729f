"""Test-only stand-ins for pieces of realm_tf.tasks.fid_kd that tests of other behaviour need not run."""

from typing import Dict, List

import numpy as np

from realm_tf.data import corpus_table


class EagerCorpusEmbedding:
  """fid_kd.embed_corpus's stand-in: the retriever's document tower over the whole corpus's packed
  candidates (the run's featurizer, as corpus_embedding.candidate_dataset packs them) in one eager call.

  The same embeddings up to float rounding (the real one buckets documents by length and compiles with
  XLA; BERT masks its padding), without building a tf.data pipeline and compiling per call: about 2-3 s
  of CPU per call on a testdata slice, two calls a round. For tests whose checks do not depend on the
  index (fid_kd_test's loop test runs the real one once and checks this one against it). Patch it in
  with mock.patch.object(fid_kd, "embed_corpus", EagerCorpusEmbedding()).
  """

  def __init__(self):
    self._candidates: Dict[str, List[np.ndarray]] = {}
    self.calls = 0

  def __call__(self, retriever, options) -> np.ndarray:
    prefix = options.retrieval_corpus_path
    if prefix not in self._candidates:
      corpus = corpus_table.CorpusTable.load(prefix)
      self._candidates[prefix] = [
          np.asarray(c) for c in options.config.featurizer().candidate_inputs(*corpus.ragged_token_ids())
      ]
    self.calls += 1
    return np.asarray(retriever.embed_documents(tuple(self._candidates[prefix]), training=False), np.float32)
