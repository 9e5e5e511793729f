"""The saved form of a MIPS index (realm_tf/retrieval/mips_index.py): its files, manifest and checks.

A saved index is a directory; MipsIndex.save writes it beside its final name and renames it, so readers
see either nothing or a complete index; `verify_index` checks it before anything is loaded:
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

import hashlib
import json
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

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
SCANN_ASSETS_NAME = "scann_assets.pbtxt"
# The files each implementation needs beside the vectors and ids (its class writes them): what
# verify_index checks for, and the implementations a manifest may name.
IMPLEMENTATION_FILES = {"brute_force": [], "scann": [f"{SCANN_DIR}/{SCANN_ASSETS_NAME}"]}
_HASH_CHUNK = 1 << 20


class CorruptIndexError(ValueError):
  """A directory is not a complete, intact saved index (missing, partial, tampered or truncated)."""


def check_local(directory: str) -> str:
  directory = os.fspath(directory)
  if "://" in directory:
    raise ValueError(f"{directory}: indexes must live on a local or shared POSIX filesystem (their "
                     "atomic publication is a directory rename); copy them there first")
  return directory


def sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
      digest.update(chunk)
  return digest.hexdigest()


def files_under(directory: str) -> List[str]:
  """Relative paths ('/'-separated) of every regular file under directory, sorted."""
  found = []
  for root, _, names in os.walk(directory):
    for name in names:
      found.append(os.path.relpath(os.path.join(root, name), directory).replace(os.sep, "/"))
  return sorted(found)


def npy_header(path: str) -> Tuple[Tuple[int, ...], np.dtype]:
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


def write_npy(path: str, shape: Tuple[int, ...], dtype, parts) -> None:
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


def validated_embeddings(embeddings: np.ndarray) -> np.ndarray:
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


def validated_doc_ids(doc_ids: Optional[np.ndarray], num_docs: int) -> Optional[np.ndarray]:
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


def doc_ids_dtype(doc_ids: np.ndarray) -> np.dtype:
  """The narrowest of int32 / int64 that holds every id."""
  info = np.iinfo(np.int32)
  if doc_ids.size and (doc_ids.min() < info.min or doc_ids.max() > info.max):
    return np.dtype(np.int64)
  return np.dtype(np.int32)


def stored_vectors(num_docs: int,
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
  if manifest["implementation"] not in IMPLEMENTATION_FILES:
    raise CorruptIndexError(f"{path}: unknown implementation {manifest['implementation']!r} (known: "
                            f"{sorted(IMPLEMENTATION_FILES)})")
  if manifest["num_docs"] < 1 or manifest["dim"] < 1:
    raise CorruptIndexError(f"{path}: num_docs={manifest['num_docs']} and dim={manifest['dim']} must "
                            "be positive")
  return manifest


def read_manifest(directory: str) -> Dict[str, Any]:
  """The manifest of a saved index (checked for shape, not checksums: see verify_index), e.g. to read
  what its writer recorded under "extra" before loading it."""
  return _read_manifest(os.path.abspath(check_local(directory)))


def stores_doc_ids(manifest: Dict[str, Any]) -> bool:
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
  directory = os.path.abspath(check_local(directory))
  manifest = _read_manifest(directory)
  files = manifest["files"]
  stored = stored_vectors(manifest["num_docs"], manifest["dim"], manifest["parameters"],
                          manifest["format_version"])
  id_files = [DOC_IDS_NAME] if stores_doc_ids(manifest) else []
  required = [name for name, _, _ in stored] + id_files + IMPLEMENTATION_FILES[manifest["implementation"]]
  for rel in required:
    if rel not in files:
      raise CorruptIndexError(f"{directory}: the manifest lists no {rel}; rebuild the index")
  try:
    on_disk = set(files_under(directory)) - {MANIFEST_NAME}
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
      if sha256(path) != entry.get("sha256"):
        raise CorruptIndexError(f"{path} does not match its sha256 in the manifest; the file is "
                                "corrupt: rebuild the index")
    unlisted = sorted(on_disk - set(files))
    if unlisted:
      raise CorruptIndexError(f"{os.path.join(directory, unlisted[0])} is not listed in the manifest "
                              f"({len(unlisted)} unlisted files); the directory was modified after it "
                              "was saved: rebuild the index")
    num_docs = manifest["num_docs"]
    for rel, want_shape, want_dtype in stored + [(name, (num_docs,), np.int64) for name in id_files]:
      path = os.path.join(directory, rel)
      try:
        shape, dtype = npy_header(path)
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
