"""Maximum inner product search (MIPS) over document embeddings: one interface, two implementations.

REALM chooses each query's candidate documents by MIPS over the document embeddings of a (stale)
checkpoint; the trainer then re-scores the candidates with live weights, so the index only has to find
good candidates fast. Two implementations sit behind one interface (`MipsIndex`) so that callers never
care which one they hold:

  BruteForceIndex  tf.matmul + tf.math.top_k over the whole corpus, the original REALM release's method
                   ("sufficiently fast to reproduce our original results"). Exact. Queries and documents
                   are processed in blocks so no score matrix exceeds 64 MB, whatever the corpus.
  ScannIndex       ScaNN (what the REALM paper and ORQA used): a k-means tree over the documents,
                   asymmetric hashing (AH) of the residuals to score the documents of the searched
                   leaves, then an exact float32 re-score of the best `num_candidates`. Below
                   `tree_min_docs` documents a tree makes no sense, and ScaNN is built as its exact
                   brute-force scorer.

Both return EXACT inner products against the stored float32 embeddings (as ORQA re-scored ScaNN's ids),
sorted descending, ties broken by the lower row. A compressed ScaNN index (rescoring="int8") stores int8
vectors with one float32 scale per dimension instead (132 instead of 512 bytes per document at D=128)
and re-scores against those: the scores are exact for the dequantized vectors, not for the originals. The exact re-score of ScaNN's candidates is done here in
numpy rather than by ScaNN's own `reorder`: ScaNN's reorder keeps a second float32 copy of the corpus in
memory and on disk (`dataset.npy`), while the embeddings are stored here anyway; so an index costs the
embeddings plus D/2 bytes of AH codes per document, not twice the embeddings.

`k` larger than the number of documents is clamped: search returns `min(k, num_docs)` columns (every
document, sorted), so a tiny test corpus works with the same k as a real one.

Saved form (a directory; `save` writes it beside its final name and renames it, so readers see either
nothing or a complete index; `verify_index` checks it before anything is loaded):
  manifest.json     format_version, implementation, step, num_docs, dim, parameters, sha256 and size of
                    every other file, created time, library versions, and the caller's `extra`
  embeddings.npy    float32 [num_docs, dim] (np.save, no pickle); a compressed ScaNN index has none:
                    its int8 vectors are ScaNN's own scann/int8_dataset.npy [num_docs, dim] and
                    scann/int8_multipliers.npy [dim] (format 1: embeddings_int8.npy, embedding_scales.npy)
  doc_ids.npy       int32 (or int64 where an id needs it) [num_docs]: the id returned for each row;
                    absent when the ids are the row numbers (manifest "doc_ids": "rows"), as a
                    refresher's are: at 1M documents the file would be 4-8 of a compressed index's
                    ~200 bytes per document
  scann/            ScaNN only: the pybind searcher's serialized assets (loaded without ScaNN's pickle
                    path; the manifest's checksums cover every file)
Indexes live on a local or shared POSIX filesystem (a directory rename is atomic there, not on gs://).
"""

import abc
import dataclasses
import hashlib
import json
import math
import os
import platform
import shutil
import tempfile
import time
from importlib import metadata
from typing import Any, Dict, List, Optional, Tuple, Type

import numpy as np
import tensorflow as tf

from realm_tf import io_utils

# 2: doc_ids.npy is omitted for row-number ids and may be int32; a compressed index keeps ScaNN's int8
# vectors (noise-shaped) instead of its own. Version 1 indexes are still read.
FORMAT_VERSION = 2
_READABLE_FORMAT_VERSIONS = (1, 2)
MANIFEST_NAME = "manifest.json"
EMBEDDINGS_NAME = "embeddings.npy"
INT8_CODES_NAME = "embeddings_int8.npy"  # format 1
INT8_SCALES_NAME = "embedding_scales.npy"  # format 1
SCANN_INT8_CODES_NAME = "scann/int8_dataset.npy"  # format 2: ScaNN's reordering vectors
SCANN_INT8_MULTIPLIERS_NAME = "scann/int8_multipliers.npy"
RESCORING_DTYPES = ("float32", "int8")
DOC_IDS_NAME = "doc_ids.npy"
SCANN_DIR = "scann"
_SCANN_ASSETS = "scann_assets.pbtxt"
_HASH_CHUNK = 1 << 20


class CorruptIndexError(ValueError):
  """A directory is not a complete, intact saved index (missing, partial, tampered or truncated)."""


# ---------------------------------------------------------------------------------------------------
# Helpers shared by both implementations.


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


def _check_local(directory: str) -> str:
  directory = os.fspath(directory)
  if "://" in directory:
    raise ValueError(f"{directory}: indexes must live on a local or shared POSIX filesystem (their "
                     "atomic publication is a directory rename); copy them there first")
  return directory


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
      digest.update(chunk)
  return digest.hexdigest()


def _files_under(directory: str) -> List[str]:
  """Relative paths ('/'-separated) of every regular file under directory, sorted."""
  found = []
  for root, _, names in os.walk(directory):
    for name in names:
      found.append(os.path.relpath(os.path.join(root, name), directory).replace(os.sep, "/"))
  return sorted(found)


def _npy_header(path: str) -> Tuple[Tuple[int, ...], np.dtype]:
  """(shape, dtype) from a .npy header without reading the data."""
  with open(path, "rb") as f:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
      shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(f)
    else:
      shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(f)
  if fortran_order:
    raise ValueError("Fortran order")
  return tuple(shape), dtype


def _write_npy(path: str, shape: Tuple[int, ...], dtype, parts) -> None:
  """Writes a .npy (readable by np.load(allow_pickle=False)) from row blocks, without joining them."""
  with open(path, "wb") as f:
    np.lib.format.write_array_header_1_0(f, {
        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
        "fortran_order": False,
        "shape": tuple(shape)
    })
    for part in parts:
      f.write(np.ascontiguousarray(part, dtype=dtype).tobytes())
    f.flush()
    os.fsync(f.fileno())


def _versions(implementation: str) -> Dict[str, str]:
  versions = {"numpy": np.__version__, "tensorflow": tf.__version__, "python": platform.python_version()}
  if implementation == ScannIndex.implementation:
    versions["scann"] = metadata.version("scann")
  return versions


def _validated_embeddings(embeddings: np.ndarray) -> np.ndarray:
  if not isinstance(embeddings, np.ndarray):
    raise ValueError(f"embeddings must be a numpy array [num_docs, dim] of float32, got "
                     f"{type(embeddings).__name__}; convert with np.asarray(x, np.float32)")
  if embeddings.ndim != 2:
    raise ValueError(f"embeddings must be [num_docs, dim], got shape {embeddings.shape}")
  if embeddings.dtype != np.float32:
    raise ValueError(f"embeddings must be float32, got {embeddings.dtype}; pass "
                     "embeddings.astype(np.float32) (the index stores and scores float32)")
  num_docs, dim = embeddings.shape
  if num_docs == 0 or dim == 0:
    raise ValueError(f"embeddings has shape {embeddings.shape}; an index needs at least one document "
                     "and one dimension (was the corpus empty?)")
  for start in range(0, num_docs, 65536):  # in blocks: no [num_docs, dim] boolean temporary
    finite = np.isfinite(embeddings[start:start + 65536]).all(axis=1)
    if not finite.all():
      raise ValueError(f"embeddings row {start + int(np.argmin(finite))} has NaN or Inf; the document "
                       "embedder diverged or read bad input; fix it before building an index")
  return np.ascontiguousarray(embeddings)


def _validated_doc_ids(doc_ids: Optional[np.ndarray], num_docs: int) -> Optional[np.ndarray]:
  """int64 ids, or None when they are the row numbers (then neither stored nor held in memory)."""
  if doc_ids is None:
    return None
  doc_ids = np.asarray(doc_ids)
  if doc_ids.shape != (num_docs,):
    raise ValueError(f"doc_ids must be [num_docs] = [{num_docs}] (one id per embedding row), got shape "
                     f"{doc_ids.shape}")
  if not np.issubdtype(doc_ids.dtype, np.integer):
    raise ValueError(f"doc_ids must be integers (int64), got {doc_ids.dtype}")
  doc_ids = doc_ids.astype(np.int64)
  if np.unique(doc_ids).size != num_docs:
    raise ValueError("doc_ids contains duplicates; each row must have its own id (pass None to use the "
                     "row numbers)")
  if np.array_equal(doc_ids, np.arange(num_docs, dtype=np.int64)):
    return None
  return doc_ids


def _doc_ids_dtype(doc_ids: np.ndarray) -> np.dtype:
  """The narrowest of int32 / int64 that holds every id."""
  info = np.iinfo(np.int32)
  if doc_ids.size and (doc_ids.min() < info.min or doc_ids.max() > info.max):
    return np.dtype(np.int64)
  return np.dtype(np.int32)


@dataclasses.dataclass(frozen=True)
class Int8Embeddings:
  """Embeddings kept as int8 codes with one float32 scale per dimension: row r is codes[r] * scales.

  The compressed index's re-scoring vectors, as plain arrays that dequantize on demand for what reads
  `MipsIndex.embeddings` (ORQA's in-graph scoring, the exports, index updates). A ScaNN index takes
  them from ScaNN's own int8 reordering (`from_multipliers`; its codes are chosen to keep inner
  products, "noise shaping"); format 1 indexes stored their own, rounded per dimension.
  """
  codes: np.ndarray  # int8 [num_docs, dim]
  scales: np.ndarray  # float32 [dim]

  @classmethod
  def from_multipliers(cls, codes: np.ndarray, multipliers: np.ndarray) -> "Int8Embeddings":
    """ScaNN's fixed-point form: row r is codes[r] / multipliers."""
    multipliers = np.asarray(multipliers, np.float32)
    scales = np.ones_like(multipliers)
    np.divide(1.0, multipliers, out=scales, where=multipliers != 0)  # a zero dimension: codes are 0
    return cls(codes, scales)

  @property
  def shape(self) -> Tuple[int, int]:
    return self.codes.shape

  def rows(self, rows: np.ndarray) -> np.ndarray:
    """float32 [..., dim] of the dequantized rows."""
    return self.codes[rows].astype(np.float32) * self.scales

  def dequantized(self) -> np.ndarray:
    out = np.empty(self.codes.shape, np.float32)
    for start in range(0, self.codes.shape[0], 65536):
      out[start:start + 65536] = self.codes[start:start + 65536].astype(np.float32) * self.scales
    out.flags.writeable = False
    return out


def _stored_vectors(num_docs: int,
                    dim: int,
                    parameters: Dict[str, Any],
                    format_version: int = FORMAT_VERSION) -> List[Tuple[str, Tuple[int, ...], Any]]:
  """(file name, shape, dtype) of the document vectors an index with these parameters stores."""
  if parameters.get("rescoring", "float32") == "int8":
    if format_version == 1:
      return [(INT8_CODES_NAME, (num_docs, dim), np.int8), (INT8_SCALES_NAME, (dim,), np.float32)]
    return [(SCANN_INT8_CODES_NAME, (num_docs, dim), np.int8),
            (SCANN_INT8_MULTIPLIERS_NAME, (dim,), np.float32)]
  return [(EMBEDDINGS_NAME, (num_docs, dim), np.float32)]


# ---------------------------------------------------------------------------------------------------
# The interface.


class MipsIndex(abc.ABC):
  """A searchable set of float32 document embeddings [num_docs, dim] with an int64 id per row.

  Build with `BruteForceIndex.build(...)` / `ScannIndex.build(...)` (or `build_index`), load with
  `load_index(directory)`. Searching is read-only and safe from several threads.
  """

  implementation: str = ""  # the manifest's "implementation" value

  def __init__(self,
               num_docs: int,
               dim: int,
               doc_ids: Optional[np.ndarray],
               parameters: Dict[str, Any],
               manifest: Optional[Dict[str, Any]] = None):
    self._num_docs = int(num_docs)
    self._dim = int(dim)
    self._doc_ids = doc_ids  # None: the row numbers
    if doc_ids is not None:
      self._doc_ids.flags.writeable = False
    self._parameters = dict(parameters)
    self._manifest = manifest

  # -- properties -----------------------------------------------------------------------------------

  @property
  def num_docs(self) -> int:
    return self._num_docs

  @property
  def dim(self) -> int:
    return self._dim

  @property
  def doc_ids(self) -> np.ndarray:
    """int64 [num_docs]: the id search returns for each row (the row number by default; then a new
    array on each call, as none is held)."""
    if self._doc_ids is None:
      return np.arange(self._num_docs, dtype=np.int64)
    return self._doc_ids

  @property
  @abc.abstractmethod
  def embeddings(self) -> np.ndarray:
    """float32 [num_docs, dim], read-only."""

  @property
  def parameters(self) -> Dict[str, Any]:
    """The resolved build/search parameters, as recorded in the manifest."""
    return dict(self._parameters)

  @property
  def manifest(self) -> Optional[Dict[str, Any]]:
    """The manifest this index was loaded from or last saved as; None for a fresh unsaved index."""
    return None if self._manifest is None else dict(self._manifest)

  @property
  def step(self) -> Optional[int]:
    """The training step recorded at save time (the checkpoint the embeddings came from), or None."""
    return None if self._manifest is None else self._manifest.get("step")

  def __repr__(self) -> str:
    return (f"{type(self).__name__}(num_docs={self.num_docs}, dim={self.dim}, step={self.step}, "
            f"parameters={self._parameters})")

  # -- building -------------------------------------------------------------------------------------

  @classmethod
  def build(cls, embeddings: np.ndarray, doc_ids: Optional[np.ndarray] = None, **options) -> "MipsIndex":
    """Builds an index over embeddings.

    Args:
      embeddings: float32 [num_docs, dim], finite. Kept by reference (no copy): do not modify it after.
      doc_ids: optional int [num_docs], unique; search returns these instead of row numbers.
      **options: implementation options (see the subclass).
    """
    if cls is MipsIndex:
      raise TypeError("MipsIndex is abstract: call BruteForceIndex.build, ScannIndex.build or "
                      "build_index(..., implementation=...)")
    embeddings = _validated_embeddings(embeddings)
    doc_ids = _validated_doc_ids(doc_ids, embeddings.shape[0])
    return cls._build(embeddings, doc_ids, **options)

  @classmethod
  @abc.abstractmethod
  def _build(cls, embeddings: np.ndarray, doc_ids: np.ndarray, **options) -> "MipsIndex":
    """Builds from validated inputs."""

  # -- searching ------------------------------------------------------------------------------------

  def search(self, queries, k: int, **search_options) -> Tuple[np.ndarray, np.ndarray]:
    """Top-k documents by inner product for each query.

    Args:
      queries: float [batch, dim] (numpy or an eager tensor); cast to float32.
      k: number of results per query (>= 1); clamped to num_docs.
      **search_options: implementation overrides (ScannIndex: num_candidates, num_leaves_to_search).
    Returns:
      ids: int64 [batch, min(k, num_docs)], doc_ids of the best documents, best first.
      scores: float32 [batch, min(k, num_docs)], their exact inner products, descending.
    """
    queries = self._validated_queries(queries)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
      raise ValueError(f"k must be a positive integer, got {k!r}")
    k = min(int(k), self._num_docs)
    if queries.shape[0] == 0:
      return np.zeros([0, k], np.int64), np.zeros([0, k], np.float32)
    rows, scores = self._search_rows(queries, k, **search_options)
    ids = rows.astype(np.int64, copy=False) if self._doc_ids is None else self._doc_ids[rows]
    return ids, scores.astype(np.float32, copy=False)

  def _validated_queries(self, queries) -> np.ndarray:
    queries = np.asarray(queries)
    if queries.ndim != 2:
      raise ValueError(f"queries must be [batch, dim] = [batch, {self._dim}], got shape {queries.shape}"
                       "; a single query q is queries=q[None, :]")
    if queries.shape[1] != self._dim:
      raise ValueError(f"index has D={self._dim}, queries have {queries.shape[1]}; queries must come "
                       "from the query tower that matches the document embeddings of this index")
    if not np.issubdtype(queries.dtype, np.floating):
      raise ValueError(f"queries must be floating point (float32), got {queries.dtype}")
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if not np.isfinite(queries).all():
      raise ValueError("queries contain NaN or Inf; the query embedder diverged or read bad input")
    return queries

  @abc.abstractmethod
  def _search_rows(self, queries: np.ndarray, k: int, **search_options) -> Tuple[np.ndarray, np.ndarray]:
    """Top-k rows for validated float32 queries [batch, dim], 1 <= k <= num_docs.

    Returns int64 rows [batch, k] and float32 exact scores [batch, k], descending, ties by lower row.
    """

  # -- saving and loading ---------------------------------------------------------------------------

  def save(self,
           directory: str,
           step: Optional[int] = None,
           extra: Optional[Dict[str, Any]] = None,
           overwrite: bool = False) -> Dict[str, Any]:
    """Writes the index to `directory` atomically and returns its manifest.

    Everything is written into a temporary sibling directory (`.tmp-<name>-...`, fsynced file by file),
    the manifest last, and the directory is then renamed to its final name: a reader or a crash sees no
    index or a complete one, never a partial one.

    Args:
      directory: the final directory, e.g. MODEL_DIR/index/<step>; must not exist unless overwrite.
      step: the training step the embeddings came from (recorded; None if not from training).
      extra: JSON-serializable caller metadata recorded under "extra" (checkpoint path, timings...).
      overwrite: replace an existing directory (briefly absent during the swap).
    """
    directory = os.path.abspath(_check_local(directory))
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0):
      raise ValueError(f"{directory}: step must be a non-negative integer or None, got {step!r}")
    extra = dict(extra or {})
    try:
      json.dumps(extra, allow_nan=False)
    except (TypeError, ValueError) as e:
      raise ValueError(f"{directory}: extra must be JSON-serializable ({e})") from e
    if os.path.exists(directory) and not overwrite:
      raise FileExistsError(f"{directory} already exists; a published index is never modified in "
                            "place: save under a new name or pass overwrite=True")
    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    tmp = io_utils.temporary_path(directory)
    os.mkdir(tmp)
    try:
      if self._doc_ids is not None:
        _write_npy(os.path.join(tmp, DOC_IDS_NAME), (self._num_docs,), _doc_ids_dtype(self._doc_ids),
                   [self._doc_ids])
      blocks = self._stored_blocks()
      for name, shape, dtype in _stored_vectors(self._num_docs, self._dim, self._parameters):
        if name in blocks:  # not ScaNN's own files, which its serialize writes
          _write_npy(os.path.join(tmp, name), shape, dtype, blocks[name])
      self._write_implementation_files(tmp)
      files = {}
      for rel in _files_under(tmp):
        path = os.path.join(tmp, rel)
        io_utils.fsync_path(path)
        files[rel] = {"sha256": _sha256(path), "bytes": os.path.getsize(path)}
      for root, _, _ in os.walk(tmp):
        io_utils.fsync_path(root)
      now = time.time()
      manifest = {
          "format_version": FORMAT_VERSION,
          "implementation": self.implementation,
          "step": None if step is None else int(step),
          "num_docs": self._num_docs,
          "dim": self._dim,
          "doc_ids": "rows" if self._doc_ids is None else "stored",
          "dtype": np.dtype(_stored_vectors(self._num_docs, self._dim, self._parameters)[0][2]).name,
          "parameters": self._parameters,
          "files": files,
          "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
          "created_unix": now,
          "versions": _versions(self.implementation),
          "extra": extra,
      }
      io_utils.write_json_atomic(os.path.join(tmp, MANIFEST_NAME), manifest)
      io_utils.fsync_path(tmp)
      if os.path.exists(directory):
        old = io_utils.temporary_path(directory)
        os.rename(directory, old)
        os.rename(tmp, directory)
        shutil.rmtree(old, ignore_errors=True)
      else:
        os.rename(tmp, directory)
      io_utils.fsync_path(parent)
    except BaseException:
      shutil.rmtree(tmp, ignore_errors=True)
      raise
    self._manifest = manifest
    return dict(manifest)

  @abc.abstractmethod
  def _embedding_blocks(self):
    """Yields float32 row blocks of the embeddings, in order (for saving without a joined copy)."""

  def _stored_blocks(self) -> Dict[str, Any]:
    """File name -> row blocks of each stored vector file this class writes (see _stored_vectors)."""
    return {EMBEDDINGS_NAME: self._embedding_blocks()}

  def _write_implementation_files(self, directory: str) -> None:
    """Writes implementation-specific files into the temporary directory (none by default)."""

  @classmethod
  def load(cls, directory: str, verify: bool = True, **options) -> "MipsIndex":
    """Loads a saved index; `MipsIndex.load` (= `load_index`) picks the implementation from the manifest.

    Args:
      directory: a directory written by `save`.
      verify: check the manifest, checksums and shapes first (`verify_index`); skip only for a directory
        verified moments ago (hashing reads every byte).
      **options: runtime options of the implementation (see its `_load`).
    Raises:
      CorruptIndexError: the directory is missing, temporary, incomplete or does not match its manifest.
    """
    directory = os.path.abspath(_check_local(directory))
    manifest = verify_index(directory) if verify else _read_manifest(directory)
    impl_cls = _IMPLEMENTATIONS[manifest["implementation"]]
    if cls is not MipsIndex and impl_cls is not cls:
      raise ValueError(f"{directory} holds a {manifest['implementation']!r} index, not "
                       f"{cls.implementation!r}; load it with load_index()")
    stored = _stored_vectors(manifest["num_docs"], manifest["dim"], manifest["parameters"],
                             manifest["format_version"])
    arrays = {}
    try:
      doc_ids = None
      if _stores_doc_ids(manifest):
        doc_ids = np.load(os.path.join(directory, DOC_IDS_NAME), allow_pickle=False)
        if doc_ids.shape != (manifest["num_docs"],):
          raise CorruptIndexError(f"{os.path.join(directory, DOC_IDS_NAME)}: shape {doc_ids.shape} does "
                                  f"not match the manifest's ({manifest['num_docs']},); rebuild the index")
        doc_ids = doc_ids.astype(np.int64)
      for name, _, _ in stored:
        arrays[name] = np.load(os.path.join(directory, name), mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
      raise CorruptIndexError(f"{directory}: cannot read the arrays ({e}); rebuild the index") from e
    for name, shape, _ in stored:
      array = arrays[name]
      if array.shape != shape:
        raise CorruptIndexError(f"{os.path.join(directory, name)}: shape {array.shape} does not match "
                                f"the manifest's {shape}; rebuild the index")
    embeddings = arrays.get(EMBEDDINGS_NAME)
    if INT8_CODES_NAME in arrays:
      embeddings = Int8Embeddings(np.array(arrays[INT8_CODES_NAME]), np.array(arrays[INT8_SCALES_NAME]))
    elif SCANN_INT8_CODES_NAME in arrays:
      # A read-only memory map: ScaNN's searcher holds these codes in memory already, and re-scoring
      # reads only the candidates' rows.
      embeddings = Int8Embeddings.from_multipliers(arrays[SCANN_INT8_CODES_NAME],
                                                   np.array(arrays[SCANN_INT8_MULTIPLIERS_NAME]))
    return impl_cls._load(directory, manifest, embeddings, doc_ids, **options)

  @classmethod
  @abc.abstractmethod
  def _load(cls, directory: str, manifest: Dict[str, Any], embeddings: np.ndarray, doc_ids: np.ndarray,
            **options) -> "MipsIndex":
    """Constructs from a verified directory; embeddings is a read-only memory map of embeddings.npy
    (Int8Embeddings for a compressed index)."""


def _read_manifest(directory: str) -> Dict[str, Any]:
  path = os.path.join(directory, MANIFEST_NAME)
  if not os.path.isdir(directory):
    raise CorruptIndexError(f"{directory} does not exist or is not a directory; pass the directory "
                            "an index was saved to")
  if io_utils.is_temporary(directory):
    raise CorruptIndexError(f"{directory} is the temporary directory of an unfinished (or crashed) "
                            "save and is never loaded; delete it")
  if not os.path.isfile(path):
    raise CorruptIndexError(f"{directory} has no {MANIFEST_NAME}: it is not a complete saved index "
                            "(save writes the manifest last); rebuild it or delete the directory")
  try:
    with open(path, encoding="utf-8") as f:
      manifest = json.load(f)
  except (OSError, ValueError) as e:
    raise CorruptIndexError(f"{path} is not readable JSON ({e}); rebuild the index") from e
  if not isinstance(manifest, dict):
    raise CorruptIndexError(f"{path} is not a JSON object; rebuild the index")
  if manifest.get("format_version") not in _READABLE_FORMAT_VERSIONS:
    raise CorruptIndexError(f"{path}: format_version is {manifest.get('format_version')!r}, this "
                            f"realm_tf reads {list(_READABLE_FORMAT_VERSIONS)}; rebuild the index with "
                            "this version")
  if manifest.get("doc_ids", "stored") not in ("rows", "stored"):
    raise CorruptIndexError(f"{path}: field 'doc_ids' is {manifest.get('doc_ids')!r}, not 'rows' or "
                            "'stored'; rebuild the index")
  for key, kind in (("implementation", str), ("num_docs", int), ("dim", int), ("files", dict), ("parameters",
                                                                                                dict)):
    if not isinstance(manifest.get(key), kind):
      raise CorruptIndexError(f"{path}: field {key!r} is missing or not a {kind.__name__}; rebuild "
                              "the index")
  if manifest["implementation"] not in _IMPLEMENTATIONS:
    raise CorruptIndexError(f"{path}: unknown implementation {manifest['implementation']!r} (known: "
                            f"{sorted(_IMPLEMENTATIONS)})")
  if manifest["num_docs"] < 1 or manifest["dim"] < 1:
    raise CorruptIndexError(f"{path}: num_docs={manifest['num_docs']} and dim={manifest['dim']} must "
                            "be positive")
  return manifest


def read_manifest(directory: str) -> Dict[str, Any]:
  """The manifest of a saved index (checked for shape, not checksums: see verify_index), e.g. to read
  what its writer recorded under "extra" before loading it."""
  return _read_manifest(os.path.abspath(_check_local(directory)))


def _stores_doc_ids(manifest: Dict[str, Any]) -> bool:
  """Whether the index has a doc_ids.npy (not when its ids are the row numbers; format 1 always has)."""
  return manifest.get("doc_ids", "stored") == "stored"


def verify_index(directory: str) -> Dict[str, Any]:
  """Checks that a directory is a complete, intact saved index and returns its manifest.

  Checks: not a temporary directory; manifest.json present, parseable, of this format version; the files
  the implementation needs are listed; every listed file exists with the recorded size and sha256; no
  unlisted file; embeddings.npy is float32 [num_docs, dim] and doc_ids.npy int32 or int64 [num_docs]. Reads every
  byte (about 1 s per GB).

  Raises:
    CorruptIndexError: naming the directory and the offending file. A watcher skips such directories.
  """
  directory = os.path.abspath(_check_local(directory))
  manifest = _read_manifest(directory)
  files = manifest["files"]
  impl_cls = _IMPLEMENTATIONS[manifest["implementation"]]
  stored = _stored_vectors(manifest["num_docs"], manifest["dim"], manifest["parameters"],
                           manifest["format_version"])
  id_files = [DOC_IDS_NAME] if _stores_doc_ids(manifest) else []
  required = [name for name, _, _ in stored] + id_files + impl_cls.required_files
  for rel in required:
    if rel not in files:
      raise CorruptIndexError(f"{directory}: the manifest lists no {rel}; rebuild the index")
  try:
    on_disk = set(_files_under(directory)) - {MANIFEST_NAME}
    for rel, entry in sorted(files.items()):
      path = os.path.normpath(os.path.join(directory, rel))
      if os.path.isabs(rel) or not path.startswith(directory + os.sep) or rel == MANIFEST_NAME:
        raise CorruptIndexError(f"{directory}: the manifest lists an invalid file name {rel!r}")
      if rel not in on_disk:
        raise CorruptIndexError(f"{path} is missing; the index is incomplete: rebuild it")
      if not isinstance(entry, dict) or os.path.getsize(path) != entry.get("bytes"):
        raise CorruptIndexError(f"{path} has {os.path.getsize(path)} bytes, the manifest says "
                                f"{entry.get('bytes') if isinstance(entry, dict) else None}; the file "
                                "is truncated or was replaced: rebuild the index")
      if _sha256(path) != entry.get("sha256"):
        raise CorruptIndexError(f"{path} does not match its sha256 in the manifest; the file is "
                                "corrupt: rebuild the index")
    unlisted = sorted(on_disk - set(files))
    if unlisted:
      raise CorruptIndexError(f"{os.path.join(directory, unlisted[0])} is not listed in the manifest "
                              f"({len(unlisted)} unlisted files); the directory was modified after it "
                              "was saved: rebuild the index")
    num_docs, dim = manifest["num_docs"], manifest["dim"]
    for rel, want_shape, want_dtype in stored + [(name, (num_docs,), np.int64) for name in id_files]:
      path = os.path.join(directory, rel)
      try:
        shape, dtype = _npy_header(path)
      except ValueError as e:
        raise CorruptIndexError(f"{path} is not a valid .npy file ({e}); rebuild the index") from e
      if rel == DOC_IDS_NAME and dtype == np.dtype(np.int32):
        want_dtype = np.int32  # ids that fit are stored as int32
      if shape != want_shape or dtype != np.dtype(want_dtype):
        raise CorruptIndexError(f"{path} is {np.dtype(dtype).name} {list(shape)}, the manifest says "
                                f"{np.dtype(want_dtype).name} {list(want_shape)}; rebuild the index")
  except OSError as e:
    raise CorruptIndexError(f"{directory}: cannot read the index ({e}); it may have been deleted "
                            "while being read") from e
  return manifest


def load_index(directory: str, verify: bool = True, **options) -> MipsIndex:
  """Loads the index saved in directory, whichever implementation the manifest names."""
  return MipsIndex.load(directory, verify=verify, **options)


def build_index(embeddings: np.ndarray,
                doc_ids: Optional[np.ndarray] = None,
                implementation: str = "scann",
                **options) -> MipsIndex:
  """Builds an index of the named implementation ("scann" or "brute_force"); see their build()."""
  if implementation not in _IMPLEMENTATIONS:
    raise ValueError(f"unknown index implementation {implementation!r}; choose one of "
                     f"{sorted(_IMPLEMENTATIONS)}")
  return _IMPLEMENTATIONS[implementation].build(embeddings, doc_ids, **options)


# ---------------------------------------------------------------------------------------------------
# Exact search with TensorFlow.


class BruteForceIndex(MipsIndex):
  """Exact MIPS: tf.matmul + tf.math.top_k, as the REALM release's BruteForceRetriever (on /CPU:0).

  The embeddings are held as TensorFlow tensors of `doc_block_size` rows (so no single op sees the whole
  corpus); each batch of `query_batch_size` queries is scored against one block at a time and the
  running top-k merged, so peak score memory is query_batch_size x doc_block_size floats.

  Options (build and load):
    query_batch_size: queries scored at once (default 64, the original's retrieval_batch_size).
    doc_block_size: documents per block (default 262144: 64 MB of scores per block at 64 queries;
      smaller blocks measured slower at 1M documents).
    device: where the tensors live and the matmuls run (default "/CPU:0", host memory, where the input
      pipeline runs; "/GPU:0" for a corpus that fits on the accelerator).
  """

  implementation = "brute_force"
  required_files: List[str] = []

  def __init__(self,
               blocks: List[tf.Tensor],
               doc_ids: np.ndarray,
               query_batch_size: int,
               doc_block_size: int,
               device: str,
               manifest: Optional[Dict[str, Any]] = None):
    num_docs = sum(int(b.shape[0]) for b in blocks)
    super().__init__(num_docs, int(blocks[0].shape[1]), doc_ids, {
        "query_batch_size": query_batch_size,
        "doc_block_size": doc_block_size
    }, manifest)
    self._blocks = blocks
    self._query_batch_size = query_batch_size
    self._device = device

  @staticmethod
  def _checked_options(query_batch_size: int, doc_block_size: int) -> None:
    for name, value in (("query_batch_size", query_batch_size), ("doc_block_size", doc_block_size)):
      if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"BruteForceIndex: {name} must be a positive integer, got {value!r}")

  @classmethod
  def _from_rows(cls,
                 embeddings: np.ndarray,
                 doc_ids: np.ndarray,
                 query_batch_size: int,
                 doc_block_size: int,
                 device: str,
                 manifest=None) -> "BruteForceIndex":
    cls._checked_options(query_batch_size, doc_block_size)
    with tf.device(device):
      blocks = [
          tf.constant(np.asarray(embeddings[start:start + doc_block_size], np.float32))
          for start in range(0, embeddings.shape[0], doc_block_size)
      ]
    return cls(blocks, doc_ids, int(query_batch_size), int(doc_block_size), device, manifest)

  @classmethod
  def _build(cls,
             embeddings: np.ndarray,
             doc_ids: np.ndarray,
             query_batch_size: int = 64,
             doc_block_size: int = 262144,
             device: str = "/CPU:0") -> "BruteForceIndex":
    return cls._from_rows(embeddings, doc_ids, query_batch_size, doc_block_size, device)

  @classmethod
  def _load(cls,
            directory,
            manifest,
            embeddings,
            doc_ids,
            query_batch_size: Optional[int] = None,
            doc_block_size: Optional[int] = None,
            device: str = "/CPU:0") -> "BruteForceIndex":
    saved = manifest["parameters"]
    return cls._from_rows(embeddings, doc_ids, query_batch_size or saved.get("query_batch_size", 64),
                          doc_block_size or saved.get("doc_block_size", 262144), device, manifest)

  @property
  def embeddings(self) -> np.ndarray:
    """float32 [num_docs, dim]: a fresh numpy copy of the tensors (TensorFlow owns the memory)."""
    result = np.concatenate([b.numpy() for b in self._blocks], axis=0)
    result.flags.writeable = False
    return result

  def _embedding_blocks(self):
    for block in self._blocks:
      yield block.numpy()

  def _search_rows(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    all_rows, all_scores = [], []
    with tf.device(self._device):
      for start in range(0, queries.shape[0], self._query_batch_size):
        q = tf.constant(queries[start:start + self._query_batch_size])  # [b, dim]
        best_scores, best_rows, offset = None, None, 0
        for block in self._blocks:  # block: [block_docs, dim]
          scores, rows = tf.math.top_k(tf.matmul(q, block, transpose_b=True),
                                       k=min(k, int(block.shape[0])))  # [b, <=k]
          rows = tf.cast(rows, tf.int64) + offset
          offset += int(block.shape[0])
          if best_scores is None:
            best_scores, best_rows = scores, rows
            continue
          # The running best (lower rows) comes first, so top_k's lower-position-first tie rule keeps
          # ties ordered by row.
          merged_scores = tf.concat([best_scores, scores], axis=1)
          merged_rows = tf.concat([best_rows, rows], axis=1)
          best_scores, positions = tf.math.top_k(merged_scores, k=min(k, int(merged_scores.shape[1])))
          best_rows = tf.gather(merged_rows, positions, batch_dims=1)
        all_rows.append(best_rows.numpy())
        all_scores.append(best_scores.numpy())
    return np.concatenate(all_rows), np.concatenate(all_scores)


# ---------------------------------------------------------------------------------------------------
# Approximate search with ScaNN.


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
      themselves) or "int8" (ScaNN's int8 reordering vectors, kept as Int8Embeddings: a quarter of the
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
    if self.rescoring not in RESCORING_DTYPES:
      raise ValueError(f"ScannIndex: rescoring must be one of {RESCORING_DTYPES}, got {self.rescoring!r}")
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


class ScannIndex(MipsIndex):
  """Approximate MIPS with ScaNN (tree + asymmetric hashing), exact re-score of the best candidates.

  Build options are the fields of `ScannOptions` (keyword arguments). Search options (per call):
  num_candidates and num_leaves_to_search override the built defaults, e.g. for a recall/speed sweep.
  A query whose searched leaves hold fewer than k documents is answered by exact search instead, so
  every row has min(k, num_docs) results.
  """

  implementation = "scann"
  required_files = [f"{SCANN_DIR}/{_SCANN_ASSETS}"]

  def __init__(self,
               searcher,
               embeddings,
               doc_ids: np.ndarray,
               parameters: Dict[str, Any],
               manifest: Optional[Dict[str, Any]] = None):
    super().__init__(embeddings.shape[0], embeddings.shape[1], doc_ids, parameters, manifest)
    self._searcher = searcher
    if isinstance(embeddings, Int8Embeddings):
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
    scann_dir = os.path.join(directory, SCANN_DIR)
    params = dict(manifest["parameters"])
    for name, value in (("num_candidates", num_candidates), ("num_leaves_to_search", num_leaves_to_search)):
      if value is not None:
        params[name] = int(value)
    try:
      with open(os.path.join(scann_dir, _SCANN_ASSETS), encoding="utf-8") as f:
        assets = f.read()
      # ScannNumpy directly rather than scann_ops_pybind.load_searcher: the latter unpickles a
      # scann_docids.pkl when one is present, and indexes never go through pickle.
      pybind = _scann_pybind()
      searcher = pybind.ScannSearcher(pybind.scann_pybind.ScannNumpy(scann_dir, assets))
    except (OSError, RuntimeError, ValueError) as e:
      raise CorruptIndexError(f"{scann_dir}: ScaNN cannot load the searcher ({e}); rebuild the "
                              "index") from e
    if not isinstance(embeddings, Int8Embeddings):
      embeddings = np.array(embeddings)
    return cls(searcher, embeddings, doc_ids, params, manifest)

  @property
  def embeddings(self) -> np.ndarray:
    """float32 [num_docs, dim]; a compressed index dequantizes its int8 vectors (a new array)."""
    if isinstance(self._vectors, Int8Embeddings):
      return self._vectors.dequantized()
    return self._vectors

  def _embedding_blocks(self):
    yield self.embeddings

  def _stored_blocks(self) -> Dict[str, Any]:
    if isinstance(self._vectors, Int8Embeddings):
      return {}  # ScaNN's serialize writes its int8 vectors
    return super()._stored_blocks()

  def _scann_reorders(self) -> bool:
    """Whether the searcher re-scores from its int8 vectors itself (format 1 compressed indexes and
    brute-force mode hand back the candidates and leave the re-scoring to _search_rows)."""
    return (self._parameters["rescoring"] == "int8" and self._parameters["mode"] == "tree_ah" and
            "int8_anisotropic_threshold" in self._parameters)

  def _write_implementation_files(self, directory: str) -> None:
    scann_dir = os.path.join(directory, SCANN_DIR)
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
    if isinstance(self._vectors, Int8Embeddings):
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


def _scann_int8_vectors(searcher) -> Int8Embeddings:
  """The int8 vectors a ScaNN searcher built with int8 scoring holds, read back from its serialized
  form (the pybind searcher has no accessor)."""
  directory = tempfile.mkdtemp(prefix="scann-int8-")
  try:
    searcher.serialize(directory, relative_path=True)
    return Int8Embeddings.from_multipliers(
        np.load(os.path.join(directory, os.path.basename(SCANN_INT8_CODES_NAME)), allow_pickle=False),
        np.load(os.path.join(directory, os.path.basename(SCANN_INT8_MULTIPLIERS_NAME)), allow_pickle=False))
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


_IMPLEMENTATIONS: Dict[str, Type[MipsIndex]] = {
    BruteForceIndex.implementation: BruteForceIndex,
    ScannIndex.implementation: ScannIndex,
}
