"""Maximum inner product search (MIPS) over document embeddings: the interface every index implements.

REALM chooses each query's candidate documents by MIPS over the document embeddings of a (stale)
checkpoint; the trainer then re-scores the candidates with live weights, so the index only has to find
good candidates fast. Callers hold a `MipsIndex` and never care which implementation it is
(brute_force_index.py, scann_index.py; index.py builds and loads by name). Every implementation returns
EXACT inner products against its stored vectors, sorted descending, ties broken by the lower row, and
`k` larger than the number of documents is clamped (search returns `min(k, num_docs)` columns), so a
tiny test corpus works with the same k as a real one. The saved form is index_format.py's.
"""

import abc
import json
import os
import platform
import shutil
import time
from typing import Any, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import io_utils
from realm_tf.retrieval import index_format
from realm_tf.retrieval import int8_rescoring


class MipsIndex(abc.ABC):
  """A searchable set of float32 document embeddings [num_docs, dim] with an int64 id per row.

  Build with `BruteForceIndex.build(...)` / `ScannIndex.build(...)` (or `index.build_index`), load
  with `index.load_index(directory)`. Searching is read-only and safe from several threads.
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
                      "index.build_index(..., implementation=...)")
    embeddings = index_format.validated_embeddings(embeddings)
    doc_ids = index_format.validated_doc_ids(doc_ids, embeddings.shape[0])
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
    directory = os.path.abspath(index_format.check_local(directory))
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
        index_format.write_npy(os.path.join(tmp, index_format.DOC_IDS_NAME), (self._num_docs,),
                               index_format.doc_ids_dtype(self._doc_ids), [self._doc_ids])
      blocks = self._stored_blocks()
      for name, shape, dtype in index_format.stored_vectors(self._num_docs, self._dim, self._parameters):
        if name in blocks:  # not ScaNN's own files, which its serialize writes
          index_format.write_npy(os.path.join(tmp, name), shape, dtype, blocks[name])
      self._write_implementation_files(tmp)
      files = {}
      for rel in index_format.files_under(tmp):
        path = os.path.join(tmp, rel)
        io_utils.fsync_path(path)
        files[rel] = {"sha256": index_format.sha256(path), "bytes": os.path.getsize(path)}
      for root, _, _ in os.walk(tmp):
        io_utils.fsync_path(root)
      now = time.time()
      manifest = {
          "format_version":
              index_format.FORMAT_VERSION,
          "implementation":
              self.implementation,
          "step":
              None if step is None else int(step),
          "num_docs":
              self._num_docs,
          "dim":
              self._dim,
          "doc_ids":
              "rows" if self._doc_ids is None else "stored",
          "dtype":
              np.dtype(index_format.stored_vectors(self._num_docs, self._dim, self._parameters)[0][2]).name,
          "parameters":
              self._parameters,
          "files":
              files,
          "created":
              time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
          "created_unix":
              now,
          "versions":
              self._library_versions(),
          "extra":
              extra,
      }
      io_utils.write_json_atomic(os.path.join(tmp, index_format.MANIFEST_NAME), manifest)
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
    """File name -> row blocks of each stored vector file this class writes (see index_format.stored_vectors)."""
    return {index_format.EMBEDDINGS_NAME: self._embedding_blocks()}

  def _library_versions(self) -> Dict[str, str]:
    """The versions recorded in the manifest: what wrote the files, for a reader that cannot load them."""
    return {"numpy": np.__version__, "tensorflow": tf.__version__, "python": platform.python_version()}

  def _write_implementation_files(self, directory: str) -> None:
    """Writes implementation-specific files into the temporary directory (none by default)."""

  @classmethod
  def load(cls, directory: str, verify: bool = True, **options) -> "MipsIndex":
    """Loads a saved index of this class's implementation (index.load_index picks it from the manifest).

    Args:
      directory: a directory written by `save`.
      verify: check the manifest, checksums and shapes first (`index_format.verify_index`); skip only for a directory
        verified moments ago (hashing reads every byte).
      **options: runtime options of the implementation (see its `_load`).
    Raises:
      index_format.CorruptIndexError: the directory is missing, temporary, incomplete or does not match its manifest.
    """
    directory = os.path.abspath(index_format.check_local(directory))
    manifest = index_format.verify_index(directory) if verify else index_format.read_manifest(directory)
    if cls is MipsIndex:
      raise TypeError("MipsIndex is abstract: load with index.load_index(directory), which picks the "
                      "implementation the manifest names")
    if manifest["implementation"] != cls.implementation:
      raise ValueError(f"{directory} holds a {manifest['implementation']!r} index, not "
                       f"{cls.implementation!r}; load it with index.load_index()")
    stored = index_format.stored_vectors(manifest["num_docs"], manifest["dim"], manifest["parameters"],
                                         manifest["format_version"])
    arrays = {}
    try:
      doc_ids = None
      if index_format.stores_doc_ids(manifest):
        doc_ids = np.load(os.path.join(directory, index_format.DOC_IDS_NAME), allow_pickle=False)
        if doc_ids.shape != (manifest["num_docs"],):
          raise index_format.CorruptIndexError(
              f"{os.path.join(directory, index_format.DOC_IDS_NAME)}: shape {doc_ids.shape} does "
              f"not match the manifest's ({manifest['num_docs']},); rebuild the index")
        doc_ids = doc_ids.astype(np.int64)
      for name, _, _ in stored:
        arrays[name] = np.load(os.path.join(directory, name), mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
      raise index_format.CorruptIndexError(
          f"{directory}: cannot read the arrays ({e}); rebuild the index") from e
    for name, shape, _ in stored:
      array = arrays[name]
      if array.shape != shape:
        raise index_format.CorruptIndexError(
            f"{os.path.join(directory, name)}: shape {array.shape} does not match "
            f"the manifest's {shape}; rebuild the index")
    embeddings = arrays.get(index_format.EMBEDDINGS_NAME)
    if index_format.INT8_CODES_NAME in arrays:
      embeddings = int8_rescoring.Int8Embeddings(np.array(arrays[index_format.INT8_CODES_NAME]),
                                                 np.array(arrays[index_format.INT8_SCALES_NAME]))
    elif index_format.SCANN_INT8_CODES_NAME in arrays:
      # A read-only memory map: ScaNN's searcher holds these codes in memory already, and re-scoring
      # reads only the candidates' rows.
      embeddings = int8_rescoring.Int8Embeddings.from_multipliers(
          arrays[index_format.SCANN_INT8_CODES_NAME],
          np.array(arrays[index_format.SCANN_INT8_MULTIPLIERS_NAME]))
    return cls._load(directory, manifest, embeddings, doc_ids, **options)

  @classmethod
  @abc.abstractmethod
  def _load(cls, directory: str, manifest: Dict[str, Any], embeddings: np.ndarray, doc_ids: np.ndarray,
            **options) -> "MipsIndex":
    """Constructs from a verified directory; embeddings is a read-only memory map of embeddings.npy
    (Int8Embeddings for a compressed index)."""
