"""MIPS indexes by name: build and load either implementation, and measure one against exact search.

REALM chooses each query's candidate documents by maximum inner product search over the document
embeddings of a (stale) checkpoint. One interface (mips_index.MipsIndex), two implementations:

  brute_force  brute_force_index.BruteForceIndex: tf.matmul + tf.math.top_k over the whole corpus, the
               original REALM release's method ("sufficiently fast to reproduce our original results").
               Exact. Queries and documents are processed in blocks so no score matrix exceeds 64 MB.
  scann        scann_index.ScannIndex: ScaNN (what the REALM paper and ORQA used), a k-means tree and
               asymmetric hashing, then an exact re-score of the best candidates (of int8 vectors for a
               compressed index: int8_rescoring.py).

The saved form (a directory with a manifest, checksums and the vectors) is index_format.py's; a saved
index names its implementation, and load_index picks it.
"""

from typing import Dict, Optional, Type

import numpy as np

from realm_tf.retrieval import brute_force_index
from realm_tf.retrieval import index_format
from realm_tf.retrieval import mips_index
from realm_tf.retrieval import scann_index

IMPLEMENTATIONS: Dict[str, Type[mips_index.MipsIndex]] = {
    cls.implementation: cls for cls in (brute_force_index.BruteForceIndex, scann_index.ScannIndex)
}
assert set(IMPLEMENTATIONS) == set(index_format.IMPLEMENTATION_FILES), "a saved form for each implementation"


def load_index(directory: str, verify: bool = True, **options) -> mips_index.MipsIndex:
  """Loads the index saved in directory, whichever implementation the manifest names.

  Args:
    directory: a directory written by MipsIndex.save.
    verify: check the manifest, checksums and shapes first (index_format.verify_index); skip only for a
      directory verified moments ago (hashing reads every byte).
    **options: runtime options of the implementation (see its `_load`).
  Raises:
    index_format.CorruptIndexError: the directory is missing, temporary, incomplete or does not match
      its manifest.
  """
  implementation = index_format.read_manifest(directory)["implementation"]
  return IMPLEMENTATIONS[implementation].load(directory, verify=verify, **options)


def build_index(embeddings: np.ndarray,
                doc_ids: Optional[np.ndarray] = None,
                implementation: str = "scann",
                **options) -> mips_index.MipsIndex:
  """Builds an index of the named implementation ("scann" or "brute_force"); see their build()."""
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"unknown index implementation {implementation!r}; choose one of "
                     f"{sorted(IMPLEMENTATIONS)}")
  return IMPLEMENTATIONS[implementation].build(embeddings, doc_ids, **options)


def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray, k: int) -> float:
  """Fraction of the exact top-k that the approximate top-k found, averaged over queries.

  Args:
    approx_ids: int [batch, >= k'] ids from the index under test, best first.
    exact_ids: int [batch, >= k'] ids from exact search, best first.
    k: cutoff; k' = min(k, exact_ids.shape[1]) so a corpus smaller than k still has a defined recall.
  Returns:
    A float in [0, 1].
  """
  approx = np.asarray(approx_ids)
  exact = np.asarray(exact_ids)
  if approx.ndim != 2 or exact.ndim != 2 or approx.shape[0] != exact.shape[0] or not approx.shape[0]:
    raise ValueError(f"recall_at_k: approx_ids {approx.shape} and exact_ids {exact.shape} must both be "
                     "[batch, k] with the same non-zero batch")
  if k < 1:
    raise ValueError(f"recall_at_k: k must be >= 1, got {k}")
  k = min(k, exact.shape[1])
  if approx.shape[1] < k:
    raise ValueError(f"recall_at_k: approx_ids has {approx.shape[1]} columns, fewer than k={k}")
  hits = (approx[:, :k, None] == exact[:, None, :k]).any(axis=-1)  # [batch, k]
  return float(hits.mean())
