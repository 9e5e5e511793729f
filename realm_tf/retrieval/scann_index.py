"""Approximate MIPS with ScaNN (what the REALM paper and ORQA used) behind the MipsIndex interface.

A k-means tree over the documents, asymmetric hashing (AH) of the residuals to score the documents of
the searched leaves, then an exact re-score of the best `num_candidates`. Below `tree_min_docs`
documents a tree makes no sense, and ScaNN is built as its exact brute-force scorer. The exact re-score
of ScaNN's candidates is done here in numpy rather than by ScaNN's own `reorder`: ScaNN's reorder keeps
a second float32 copy of the corpus in memory and on disk (`dataset.npy`), while the embeddings are
stored anyway; so an index costs the embeddings plus D/2 bytes of AH codes per document, not twice the
embeddings. A compressed index (rescoring="int8", int8_rescoring.py) re-scores against ScaNN's int8
vectors instead: exact for the dequantized vectors, not for the originals.
"""

import dataclasses
import math
import os
import shutil
import tempfile
from importlib import metadata
from typing import Any, Dict, Optional, Tuple

import numpy as np

from realm_tf.retrieval import index_format
from realm_tf.retrieval import int8_rescoring
from realm_tf.retrieval import mips_index


@dataclasses.dataclass(frozen=True)
class ScannOptions:
  """ScaNN parameters; None means "scale with num_docs" (see `resolve`).

  Attributes:
    num_leaves: k-means tree leaves. Default min(2 sqrt(N), N / 100, training_sample_size / 40): 200 at
      20k, 632 at 100k, 2000 at 1M, 2500 at 13M (ORQA used 1000 at 13M), so leaves hold >= 100 documents
      and k-means sees >= 40 samples per leaf.
    num_leaves_to_search: leaves scored per query. Default 10% of the leaves, at least 10 (ORQA searched
      100 of 1000). On MiniLM embeddings of SQuAD replicated to 1M, 5% gave recall@10 0.949 and 10%
      0.970 at 24x brute force (bench/results/index_bench_squad_minilm.json); raised per search when the
      requested number of candidates would not fit in the searched leaves.
    training_sample_size: documents sampled to train the tree and the AH codebooks: min(N, 100000).
    num_candidates: documents re-scored per query (ScaNN's "reorder"): max(this, k). Default 100 with
      float32 re-scoring, 300 with int8: the int8 vectors rank near neighbours a little less well, and
      more candidates make that up (1M MiniLM-derived points: recall@10 0.931 at 100, 0.950 at 300,
      float32 0.954 at 100; bench/results/index_bench_int8.json), while re-scoring int8 costs little.
    dimensions_per_block: AH dimensions per 4-bit code (2, as ORQA). 4 halves the codes (32 instead of 64
      B/doc at D=128; a compressed index is 198 B/doc at 1M with 2) but finds far fewer of the true neighbours among its
      candidates on real vectors: recall@10 0.765 with int8 re-scoring at 1M MiniLM-derived points,
      against 0.975 on synthetic clusters (bench/results/index_bench_compressed.json).
    anisotropic_quantization_threshold: ScaNN's anisotropic loss threshold for AH; None = off (ORQA).
    tree_min_docs: below this many documents ScaNN is built as its exact float32 brute-force scorer
      (no tree, no hashing): a tree of a few dozen leaves gains nothing and AH needs training data.
    training_threads: threads for training (0 = ScaNN's default).
    rescoring: the stored vectors the candidates are re-scored with: "float32" (the embeddings
      themselves) or "int8" (ScaNN's int8 reordering vectors, kept as int8_rescoring.Int8Embeddings: a quarter of the
      bytes; recall@10 against exact search and bytes per document in bench/index_bench.py).
    int8_anisotropic_threshold: ScaNN's noise shaping of the int8 vectors (its
      anisotropic_quantization_threshold for reordering; 0.2 as ScaNN recommends for AH; None = plain
      rounding). At 1M MiniLM-derived points recall@10 0.960 with it, 0.947 without (300 candidates).
  """
  num_leaves: Optional[int] = None
  num_leaves_to_search: Optional[int] = None
  training_sample_size: Optional[int] = None
  num_candidates: Optional[int] = None
  dimensions_per_block: int = 2
  anisotropic_quantization_threshold: Optional[float] = None
  tree_min_docs: int = 5000
  training_threads: int = 0
  rescoring: str = "float32"
  int8_anisotropic_threshold: Optional[float] = 0.2

  def resolve(self, num_docs: int) -> Dict[str, Any]:
    """The concrete parameters for num_docs documents, with "mode": "tree_ah" or "brute_force"."""
    if self.rescoring not in index_format.RESCORING_DTYPES:
      raise ValueError(
          f"ScannIndex: rescoring must be one of {index_format.RESCORING_DTYPES}, got {self.rescoring!r}")
    for name in ("num_leaves", "num_leaves_to_search", "training_sample_size", "num_candidates",
                 "dimensions_per_block", "tree_min_docs", "training_threads"):
      value = getattr(self, name)
      if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or
                                value < (0 if name in ("training_threads", "tree_min_docs") else 1)):
        raise ValueError(f"ScannIndex: {name} must be a positive integer, got {value!r}")
    params = dataclasses.asdict(self)
    if params["num_candidates"] is None:
      params["num_candidates"] = _DEFAULT_NUM_CANDIDATES[self.rescoring]
    if num_docs < self.tree_min_docs:
      params.update(mode="brute_force", num_leaves=None, num_leaves_to_search=None, training_sample_size=None)
      return params
    sample = min(num_docs, self.training_sample_size or 100000)
    leaves = self.num_leaves or max(2, int(min(2 * math.sqrt(num_docs), num_docs / 100, sample / 40)))
    if leaves > num_docs:
      raise ValueError(f"ScannIndex: num_leaves={leaves} exceeds the {num_docs} documents")
    to_search = self.num_leaves_to_search or min(leaves, max(10, math.ceil(0.1 * leaves)))
    if to_search > leaves:
      raise ValueError(f"ScannIndex: num_leaves_to_search={to_search} exceeds num_leaves={leaves}")
    params.update(mode="tree_ah",
                  num_leaves=int(leaves),
                  num_leaves_to_search=int(to_search),
                  training_sample_size=int(sample))
    return params


_DEFAULT_NUM_CANDIDATES = {"float32": 100, "int8": 300}


def _scann_pybind():
  """ScaNN's pybind module, imported on first use (BruteForceIndex users never load it)."""
  from scann.scann_ops.py import scann_ops_pybind  # pylint: disable=g-import-not-at-top
  return scann_ops_pybind


class ScannIndex(mips_index.MipsIndex):
  """Approximate MIPS with ScaNN (tree + asymmetric hashing), exact re-score of the best candidates.

  Build options are the fields of `ScannOptions` (keyword arguments). Search options (per call):
  num_candidates and num_leaves_to_search override the built defaults, e.g. for a recall/speed sweep.
  A query whose searched leaves hold fewer than k documents is answered by exact search instead, so
  every row has min(k, num_docs) results.
  """

  implementation = "scann"

  def __init__(self,
               searcher,
               embeddings,
               doc_ids: np.ndarray,
               parameters: Dict[str, Any],
               manifest: Optional[Dict[str, Any]] = None):
    super().__init__(embeddings.shape[0], embeddings.shape[1], doc_ids, parameters, manifest)
    self._searcher = searcher
    if isinstance(embeddings, int8_rescoring.Int8Embeddings):
      self._vectors = embeddings
    else:
      self._vectors = embeddings.view()
      self._vectors.flags.writeable = False

  @classmethod
  def _build(cls, embeddings: np.ndarray, doc_ids: np.ndarray, **options) -> "ScannIndex":
    params = ScannOptions(**options).resolve(embeddings.shape[0])
    builder = _scann_pybind().builder(embeddings, params["num_candidates"], "dot_product")
    if params["mode"] == "tree_ah":
      threshold = params["anisotropic_quantization_threshold"]
      builder = builder.tree(num_leaves=params["num_leaves"],
                             num_leaves_to_search=params["num_leaves_to_search"],
                             training_sample_size=params["training_sample_size"])
      builder = builder.score_ah(
          params["dimensions_per_block"],
          anisotropic_quantization_threshold=(float("nan") if threshold is None else float(threshold)),
          training_sample_size=params["training_sample_size"])
      if params["rescoring"] == "int8":
        # ScaNN's int8 reordering, its codes chosen to keep inner products rather than rounded per
        # dimension: at 1M MiniLM-derived points recall@10 0.960 instead of 0.947 (300 candidates).
        shaping = params["int8_anisotropic_threshold"]
        builder = builder.reorder(
            params["num_candidates"],
            quantize=_scann_reorder_type().INT8,
            anisotropic_quantization_threshold=(float("nan") if shaping is None else float(shaping)))
    else:
      builder = builder.score_brute_force(quantize=params["rescoring"] == "int8")
    if params["training_threads"]:
      builder = builder.set_n_training_threads(params["training_threads"])
    searcher = builder.build()
    vectors = _scann_int8_vectors(searcher) if params["rescoring"] == "int8" else embeddings
    return cls(searcher, vectors, doc_ids, params)

  @classmethod
  def _load(cls,
            directory,
            manifest,
            embeddings,
            doc_ids,
            num_candidates: Optional[int] = None,
            num_leaves_to_search: Optional[int] = None) -> "ScannIndex":
    scann_dir = os.path.join(directory, index_format.SCANN_DIR)
    params = dict(manifest["parameters"])
    for name, value in (("num_candidates", num_candidates), ("num_leaves_to_search", num_leaves_to_search)):
      if value is not None:
        params[name] = int(value)
    try:
      with open(os.path.join(scann_dir, index_format.SCANN_ASSETS_NAME), encoding="utf-8") as f:
        assets = f.read()
      # ScannNumpy directly rather than scann_ops_pybind.load_searcher: the latter unpickles a
      # scann_docids.pkl when one is present, and indexes never go through pickle.
      pybind = _scann_pybind()
      searcher = pybind.ScannSearcher(pybind.scann_pybind.ScannNumpy(scann_dir, assets))
    except (OSError, RuntimeError, ValueError) as e:
      raise index_format.CorruptIndexError(f"{scann_dir}: ScaNN cannot load the searcher ({e}); rebuild the "
                                           "index") from e
    if not isinstance(embeddings, int8_rescoring.Int8Embeddings):
      embeddings = np.array(embeddings)
    return cls(searcher, embeddings, doc_ids, params, manifest)

  @property
  def embeddings(self) -> np.ndarray:
    """float32 [num_docs, dim]; a compressed index dequantizes its int8 vectors (a new array)."""
    if isinstance(self._vectors, int8_rescoring.Int8Embeddings):
      return self._vectors.dequantized()
    return self._vectors

  def _embedding_blocks(self):
    yield self.embeddings

  def _library_versions(self) -> Dict[str, str]:
    return dict(super()._library_versions(), scann=metadata.version("scann"))

  def _stored_blocks(self) -> Dict[str, Any]:
    if isinstance(self._vectors, int8_rescoring.Int8Embeddings):
      return {}  # ScaNN's serialize writes its int8 vectors
    return super()._stored_blocks()

  def _scann_reorders(self) -> bool:
    """Whether the searcher re-scores from its int8 vectors itself (format 1 compressed indexes and
    brute-force mode hand back the candidates and leave the re-scoring to _search_rows)."""
    return (self._parameters["rescoring"] == "int8" and self._parameters["mode"] == "tree_ah" and
            "int8_anisotropic_threshold" in self._parameters)

  def _write_implementation_files(self, directory: str) -> None:
    scann_dir = os.path.join(directory, index_format.SCANN_DIR)
    os.mkdir(scann_dir)
    # relative_path=True: the assets name their files relative to scann_dir, so the directory can be
    # renamed after writing.
    self._searcher.serialize(scann_dir, relative_path=True)

  def _search_rows(self,
                   queries: np.ndarray,
                   k: int,
                   num_candidates: Optional[int] = None,
                   num_leaves_to_search: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    params = self._parameters
    candidates = min(self._num_docs, max(k, num_candidates or params["num_candidates"]))
    leaves = None
    if params["mode"] == "tree_ah":
      leaves = num_leaves_to_search or params["num_leaves_to_search"]
      # Leaves hold num_docs / num_leaves documents on average: search enough of them (with a 2x
      # margin for uneven leaves) that `candidates` documents can be found.
      needed = math.ceil(2 * candidates * params["num_leaves"] / self._num_docs)
      leaves = int(min(params["num_leaves"], max(leaves, needed)))
    if self._scann_reorders():
      # ScaNN re-scores the candidates from its int8 vectors and keeps the best k (re-scored again
      # below with the same vectors, for the row tie-break).
      rows, distances = self._searcher.search_batched(queries,
                                                      final_num_neighbors=k,
                                                      pre_reorder_num_neighbors=candidates,
                                                      leaves_to_search=leaves)
    else:
      rows, distances = self._searcher.search_batched(queries,
                                                      final_num_neighbors=candidates,
                                                      leaves_to_search=leaves)
    rows = np.asarray(rows).astype(np.int64)  # [batch, candidates or k]
    valid = ~np.isnan(np.asarray(distances))  # ScaNN pads a short result with NaN distances.
    # Exact scores of the candidates' stored vectors: [batch, candidates, dim] x [batch, dim, 1].
    if isinstance(self._vectors, int8_rescoring.Int8Embeddings):
      candidate_vectors = self._vectors.rows(rows)
    else:
      candidate_vectors = self._vectors[rows]
    scores = np.matmul(candidate_vectors, queries[:, :, None])[:, :, 0]
    scores[~valid] = -np.inf
    order = np.lexsort((rows, -scores), axis=-1)[:, :k]  # by score descending, then row
    top_rows = np.take_along_axis(rows, order, axis=1)
    top_scores = np.take_along_axis(scores, order, axis=1)
    short = np.flatnonzero(valid.sum(axis=1) < k)
    if short.size:
      exact_rows, exact_scores = _exact_numpy(queries[short], self.embeddings, k)
      top_rows[short], top_scores[short] = exact_rows, exact_scores
    return top_rows, top_scores


def _scann_reorder_type():
  from scann.scann_ops.py import scann_builder  # pylint: disable=g-import-not-at-top
  return scann_builder.ReorderType


def _scann_int8_vectors(searcher) -> int8_rescoring.Int8Embeddings:
  """The int8 vectors a ScaNN searcher built with int8 scoring holds, read back from its serialized
  form (the pybind searcher has no accessor)."""
  directory = tempfile.mkdtemp(prefix="scann-int8-")
  try:
    searcher.serialize(directory, relative_path=True)
    return int8_rescoring.Int8Embeddings.from_multipliers(
        np.load(os.path.join(directory, os.path.basename(index_format.SCANN_INT8_CODES_NAME)),
                allow_pickle=False),
        np.load(os.path.join(directory, os.path.basename(index_format.SCANN_INT8_MULTIPLIERS_NAME)),
                allow_pickle=False))
  finally:
    shutil.rmtree(directory, ignore_errors=True)


def _exact_numpy(queries: np.ndarray, embeddings: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
  """Exact top-k rows [batch, k] and scores by numpy (ScannIndex's fallback for under-filled queries)."""
  scores = queries @ embeddings.T  # [batch, num_docs]
  if k < scores.shape[1]:
    rows = np.argpartition(-scores, k - 1, axis=1)[:, :k]  # the k best, unordered
  else:
    rows = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
  top = np.take_along_axis(scores, rows, axis=1)
  order = np.lexsort((rows, -top), axis=-1)
  return np.take_along_axis(rows, order, axis=1).astype(np.int64), np.take_along_axis(top, order, axis=1)
