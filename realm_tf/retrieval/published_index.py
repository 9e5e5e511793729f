"""Publishing indexes into MODEL_DIR/index/<step>/ and watching for them, without ever exposing a partial one.

Layout of one published index (all written under MODEL_DIR/index/.tmp-<step>-<pid>-<rand>/, fsynced, then
renamed to MODEL_DIR/index/<step>/ in one step):
  mips/             the MIPS index (realm_tf.retrieval.index: embeddings, ids, ScaNN files, manifest)
  query_embedder/   SavedModel of the query tower of the SAME checkpoint step: the input pipeline embeds
                    masked queries with it, so queries and documents come from one model version
  published.json    step, corpus, counts, time; written last inside the temporary directory

The refresher keeps the newest K. The trainer-side IndexWatcher returns the newest complete index, skips
temporary, incomplete or corrupt ones with one warning each, and loads a new one while training goes on.
"""

import json
import os
import re
import shutil
import time
from typing import Callable, Dict, List, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from realm_tf import io_utils
from realm_tf.retrieval import index as index_lib

INDEX_DIR = "index"
MIPS_DIR = "mips"
QUERY_EMBEDDER_DIR = "query_embedder"
PUBLISHED_NAME = "published.json"
_STEP_DIR = re.compile(r"^\d+$")


def index_root(model_dir: str) -> str:
  return os.path.join(model_dir, INDEX_DIR)


class _QueryEmbedderModule(tf.Module):
  """SavedModel wrapper: BERT inputs of masked queries -> embeddings."""

  def __init__(self, query_embedder):
    super().__init__()
    self.query_embedder = query_embedder

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)] * 3)
  def embed(self, token_ids, mask, segment_ids):
    return {"embeddings": self.query_embedder((token_ids, mask, segment_ids), training=False)}


def publish_index(model_dir: str, step: int, mips_index: index_lib.MipsIndex, query_embedder,
                  info: Optional[Dict] = None, keep: int = 3,
                  log: Callable[[str], None] = print) -> str:
  """Writes a complete index for `step` and makes it visible atomically; returns its final path.

  Args:
    model_dir: the trainer's model directory.
    step: the checkpoint step the embeddings come from.
    mips_index: the built index over the corpus.
    query_embedder: the query tower of the same step (a Keras model taking BERT inputs).
    info: extra facts recorded in published.json (corpus prefix, checkpoint path, timings).
    keep: how many published indexes to keep (the oldest are deleted after publishing).
  """
  root = index_root(model_dir)
  tf.io.gfile.makedirs(root)
  final = os.path.join(root, str(step))
  tmp = io_utils.temporary_path(os.path.join(root, str(step)))
  try:
    tf.io.gfile.makedirs(tmp)
    mips_index.save(os.path.join(tmp, MIPS_DIR), step=step)
    tf.saved_model.save(_QueryEmbedderModule(query_embedder), os.path.join(tmp, QUERY_EMBEDDER_DIR))
    record = dict(info or {}, step=int(step), num_docs=int(mips_index.num_docs),
                  dim=int(mips_index.dim), published_unix_time=time.time())
    io_utils.write_json_atomic(os.path.join(tmp, PUBLISHED_NAME), record)
    for directory, _, files in os.walk(tmp):
      for name in files:
        io_utils.fsync_path(os.path.join(directory, name))
    if tf.io.gfile.exists(final):
      # A refresher restarted on the same checkpoint: replace the old copy (same step, same content).
      shutil.rmtree(final)
    os.rename(tmp, final)
    io_utils.fsync_path(root)
  finally:
    if tf.io.gfile.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)
  for old in published_steps(model_dir)[:-keep] if keep > 0 else []:
    log(f"removing old index {os.path.join(root, str(old))} (keeping the newest {keep})")
    shutil.rmtree(os.path.join(root, str(old)), ignore_errors=True)
  return final


def published_steps(model_dir: str) -> List[int]:
  """Steps of the directories under MODEL_DIR/index/ named like a step (temporary ones excluded),
  ascending. Completeness is not checked here; see verify_published."""
  root = index_root(model_dir)
  if not tf.io.gfile.isdir(root):
    return []
  return sorted(int(name.rstrip("/")) for name in tf.io.gfile.listdir(root)
                if _STEP_DIR.match(name.rstrip("/")))


def clean_temporary(model_dir: str, log: Callable[[str], None] = print) -> int:
  """Removes temporary directories a killed refresher left behind; returns how many."""
  root = index_root(model_dir)
  if not tf.io.gfile.isdir(root):
    return 0
  removed = 0
  for name in tf.io.gfile.listdir(root):
    # .tmp-*: an index being published; .embeddings-*: worker rows of a multi-host refresh.
    if io_utils.is_temporary(name.rstrip("/")) or name.startswith(".embeddings-"):
      log(f"removing unfinished index {os.path.join(root, name)} (a refresher stopped while writing it)")
      shutil.rmtree(os.path.join(root, name.rstrip("/")), ignore_errors=True)
      removed += 1
  return removed


def verify_published(path: str) -> Dict:
  """Checks a published index directory; returns published.json or raises CorruptIndexError."""
  record_path = os.path.join(path, PUBLISHED_NAME)
  if not tf.io.gfile.exists(record_path):
    raise index_lib.CorruptIndexError(f"{path}: no {PUBLISHED_NAME}; the index is incomplete")
  with tf.io.gfile.GFile(record_path) as f:
    try:
      record = json.load(f)
    except json.JSONDecodeError as e:
      raise index_lib.CorruptIndexError(f"{record_path}: unreadable ({e})") from e
  manifest = index_lib.verify_index(os.path.join(path, MIPS_DIR))
  if manifest.get("num_docs") != record.get("num_docs"):
    raise index_lib.CorruptIndexError(f"{path}: {PUBLISHED_NAME} says {record.get('num_docs')} "
                                      f"documents, the MIPS index {manifest.get('num_docs')}")
  if not tf.io.gfile.exists(os.path.join(path, QUERY_EMBEDDER_DIR, "saved_model.pb")):
    raise index_lib.CorruptIndexError(f"{path}: no {QUERY_EMBEDDER_DIR}/saved_model.pb")
  return record


class LoadedIndex(NamedTuple):
  """A published index in memory: its step, the MIPS index and the stale query tower."""
  step: int
  path: str
  mips: index_lib.MipsIndex
  record: Dict
  query_embedder: object  # the loaded SavedModel

  def embed_queries(self, token_ids, mask, segment_ids) -> np.ndarray:
    """int32 [B, Q] x3 -> float32 [B, D] with the query tower of this index's step."""
    return self.query_embedder.embed(tf.constant(token_ids, tf.int32), tf.constant(mask, tf.int32),
                                     tf.constant(segment_ids, tf.int32))["embeddings"].numpy()


def load_published(path: str, record: Optional[Dict] = None) -> LoadedIndex:
  record = record or verify_published(path)
  mips = index_lib.load_index(os.path.join(path, MIPS_DIR), verify=False)
  query_embedder = tf.saved_model.load(os.path.join(path, QUERY_EMBEDDER_DIR))
  return LoadedIndex(int(record["step"]), path, mips, record, query_embedder)


class IndexWatcher:
  """Trainer-side view of MODEL_DIR/index/: the newest complete index, loaded on demand.

  Checksums are verified once per directory (a published index never changes); a corrupt or
  incomplete one is skipped with a single warning and not retried.
  """

  def __init__(self, model_dir: str, log: Callable[[str], None] = print):
    self.model_dir = model_dir
    self._log = log
    self._bad = set()
    self._verified: Dict[int, Dict] = {}

  def newest_step(self) -> Optional[int]:
    """The step of the newest complete, uncorrupted published index, or None."""
    for step in reversed(published_steps(self.model_dir)):
      if step in self._bad:
        continue
      if step in self._verified:
        return step
      path = os.path.join(index_root(self.model_dir), str(step))
      try:
        self._verified[step] = verify_published(path)
        return step
      except (index_lib.CorruptIndexError, OSError, tf.errors.OpError) as e:
        # Deleted under us by keep-K cleanup, or really broken: either way not usable.
        if tf.io.gfile.exists(path):
          self._log(f"WARNING: skipping index {path}: {e}")
          self._bad.add(step)
    return None

  def load_newer(self, current_step: Optional[int]) -> Optional[LoadedIndex]:
    """Loads the newest index if it is newer than current_step, else returns None."""
    step = self.newest_step()
    if step is None or (current_step is not None and step <= current_step):
      return None
    path = os.path.join(index_root(self.model_dir), str(step))
    try:
      return load_published(path, self._verified[step])
    except (index_lib.CorruptIndexError, OSError, tf.errors.OpError, ValueError) as e:
      if tf.io.gfile.exists(path):
        self._log(f"WARNING: skipping index {path}: {e}")
        self._bad.add(step)
      return None

  def wait_for_newer(self, current_step: Optional[int], poll_seconds: float = 2.0,
                     timeout_seconds: Optional[float] = None,
                     reason: str = "") -> Optional[LoadedIndex]:
    """Blocks (sleeping between looks) until an index newer than current_step is published."""
    deadline = None if timeout_seconds is None else time.time() + timeout_seconds
    announced = False
    while True:
      loaded = self.load_newer(current_step)
      if loaded is not None:
        return loaded
      if deadline is not None and time.time() >= deadline:
        return None
      if not announced:
        what = "a first index" if current_step is None else f"an index newer than step {current_step}"
        self._log(f"waiting for bin/refresh_doc_embeds to publish {what} under "
                  f"{index_root(self.model_dir)}{': ' + reason if reason else ''}")
        announced = True
      time.sleep(poll_seconds)
