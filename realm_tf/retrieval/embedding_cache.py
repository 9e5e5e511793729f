"""A disk cache of text embeddings: NAME.npy (float32 [N, D]) beside NAME.json (what it was made from).

Why: embedding a 20k-paragraph corpus with a 6-layer encoder takes a quarter of an hour on a 2-core
CPU, and several benchmarks (zero-shot baselines, later REALM/ORQA rows, the index benchmark on real
vectors) want the same vectors. The file name is stable, so other scripts can point at it
(`--embeddings_npy=.bench_cache/...npy`); the JSON beside it holds a fingerprint of the model and of
every text, and a cached array is used only when the fingerprint matches, so a changed corpus, model or
sequence length recomputes instead of silently reusing stale vectors. No pickle: np.save with
allow_pickle=False, JSON metadata, both written atomically (the .npy first, so a JSON never describes a
missing or partial array).
"""

import hashlib
import json
import os
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from realm_tf import io_utils


def fingerprint(model_id: str, texts: Sequence[str]) -> str:
  """sha256 (hex) of the model id and every text, in order."""
  digest = hashlib.sha256(model_id.encode("utf-8") + b"\0")
  for text in texts:
    digest.update(text.encode("utf-8") + b"\0")
  return digest.hexdigest()


def _read_metadata(json_path: str) -> Dict[str, Any]:
  try:
    with open(json_path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError):
    return {}


def _paths(cache_dir: str, name: str) -> Tuple[str, str]:
  return os.path.join(cache_dir, name + ".npy"), os.path.join(cache_dir, name + ".json")


def _load_if_current(npy_path: str, json_path: str, want: str,
                     num_texts: int) -> Optional[Tuple[np.ndarray, Dict[str, Any]]]:
  metadata = _read_metadata(json_path)
  if metadata.get("fingerprint") == want and os.path.exists(npy_path):
    array = np.load(npy_path, allow_pickle=False)
    if array.dtype == np.float32 and array.ndim == 2 and array.shape[0] == num_texts:
      return array, dict(metadata, path=npy_path, cached=True)
  return None


def lookup(cache_dir: str, name: str, model_id: str,
           texts: Sequence[str]) -> Optional[Tuple[np.ndarray, Dict[str, Any]]]:
  """cached_embeddings' result if cache_dir/name holds these texts' embeddings by model_id, else None.

  Never computes: for readers of vectors another program makes (a fixed index built from them, say),
  which should stop with instructions rather than spend that program's time.
  """
  npy_path, json_path = _paths(cache_dir, name)
  return _load_if_current(npy_path, json_path, fingerprint(model_id, texts), len(texts))


def cached_embeddings(cache_dir: str, name: str, model_id: str, texts: Sequence[str],
                      compute: Callable[[Sequence[str]], np.ndarray]) -> Tuple[np.ndarray, Dict[str, Any]]:
  """(embeddings [len(texts), D] float32, metadata) from cache_dir/name.npy, computed on a miss.

  metadata: model_id, fingerprint, num_texts, dim, compute_seconds (of the run that made the file),
  created, path, and cached (whether this call read the file rather than computing it).
  """
  npy_path, json_path = _paths(cache_dir, name)
  want = fingerprint(model_id, texts)
  hit = _load_if_current(npy_path, json_path, want, len(texts))
  if hit is not None:
    return hit
  start = time.perf_counter()
  array = np.asarray(compute(texts))
  seconds = time.perf_counter() - start
  if array.dtype != np.float32 or array.ndim != 2 or array.shape[0] != len(texts):
    raise ValueError(f"cached_embeddings({name}): compute returned {array.dtype} {array.shape}, expected "
                     f"float32 [{len(texts)}, D]")
  os.makedirs(cache_dir, exist_ok=True)
  with io_utils.atomic_write(npy_path, "wb") as f:
    np.save(f, array, allow_pickle=False)
  metadata = {
      "model_id": model_id,
      "fingerprint": want,
      "num_texts": len(texts),
      "dim": int(array.shape[1]),
      "compute_seconds": seconds,
      "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
  }
  io_utils.write_json_atomic(json_path, metadata)
  return array, dict(metadata, path=npy_path, cached=False)
