"""Publishing indexes into MODEL_DIR/index/<step>/ and watching for them, without ever exposing a partial one.

Layout of one published index (all written under MODEL_DIR/index/.tmp-<step>-<pid>-<rand>/, fsynced, then
renamed to MODEL_DIR/index/<step>/ in one step):
  mips/             the MIPS index (realm_tf.retrieval.index: embeddings, ids, ScaNN files, manifest)
  query_embedder/   SavedModel of the query tower of the SAME checkpoint step: the input pipeline embeds
                    masked queries with it, so queries and documents come from one model version
                    (realm_tf.modeling.query_embedder_module, BERT_INPUTS:
                    embed(token_ids, mask, segment_ids))
  published.json    step, corpus, counts, time; written last inside the temporary directory

The refresher keeps the newest K. The trainer-side IndexWatcher returns the newest complete index, skips
temporary, incomplete or corrupt ones with one warning each, and loads a new one while training goes on.
"""

import glob
import json
import os
import re
import shutil
import threading
import time
from typing import Callable, Dict, List, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from realm_tf import io_utils
from realm_tf import process_lock
from realm_tf import stopping
from realm_tf.data import corpus as corpus_lib
from realm_tf.modeling import query_embedder_module as query_embedder_lib
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import index_format
from realm_tf.retrieval import mips_index

INDEX_DIR = "index"
MIPS_DIR = "mips"
QUERY_EMBEDDER_DIR = "query_embedder"
PUBLISHED_NAME = "published.json"
_STEP_DIR = re.compile(r"^\d+$")
# How long a trainer waiting for an index tolerates no live refresher (none started yet, or gone) before
# it stops with NoRefresherError: long enough for a refresher started beside it to import TensorFlow.
REFRESHER_GRACE_SECONDS = 120.0
# MODEL_DIR/index/unreadable-ckpt-<step>.json: the refresher could not read that checkpoint, so no index of
# its step will come (record_unreadable_checkpoint).
UNREADABLE_PREFIX = "unreadable-ckpt-"


class IndexWriteError(RuntimeError):
  """The model dir cannot take an index (full or unwritable); published ones are untouched."""


class NoRefresherError(RuntimeError):
  """A trainer waits for an index that no running refresher will publish."""


class WaitCancelled(stopping.InputStopped):
  """A wait for an index ended because its trainer is stopping: it finished, or SIGTERM asked it to stop
  (see IndexWatcher.wait_for_newer's stop)."""


def index_root(model_dir: str) -> str:
  return os.path.join(model_dir, INDEX_DIR)


def publish_index(model_dir: str,
                  step: int,
                  mips: mips_index.MipsIndex,
                  query_embedder,
                  info: Optional[Dict] = None,
                  keep: int = 3,
                  log: Callable[[str], None] = print) -> str:
  """Writes a complete index for `step` and makes it visible atomically; returns its final path.

  Args:
    model_dir: the trainer's model directory.
    step: the checkpoint step the embeddings come from.
    mips: the built index over the corpus.
    query_embedder: the query tower of the same step (a Keras model taking BERT inputs), or the
      query_embedder/ SavedModel directory of an index published before, copied as it is
      (bin/update_index: the documents change, the towers do not).
    info: extra facts recorded in published.json (corpus prefix, checkpoint path, timings).
    keep: how many published indexes to keep (the oldest are deleted after publishing; the one just
      published is kept even when later steps have indexes).
  """
  root = index_root(model_dir)
  tf.io.gfile.makedirs(root)
  final = os.path.join(root, str(step))
  tmp = io_utils.temporary_path(os.path.join(root, str(step)))
  try:
    tf.io.gfile.makedirs(tmp)
    mips.save(os.path.join(tmp, MIPS_DIR), step=step)
    if isinstance(query_embedder, str):
      shutil.copytree(query_embedder, os.path.join(tmp, QUERY_EMBEDDER_DIR))
    else:
      tower = query_embedder_lib.QueryEmbedderModule(query_embedder, query_embedder_lib.BERT_INPUTS)
      tf.saved_model.save(tower, os.path.join(tmp, QUERY_EMBEDDER_DIR))
    record = dict(info or {},
                  step=int(step),
                  num_docs=int(mips.num_docs),
                  dim=int(mips.dim),
                  published_unix_time=time.time())
    io_utils.write_json_atomic(os.path.join(tmp, PUBLISHED_NAME), record)
    for directory, _, files in os.walk(tmp):
      for name in files:
        io_utils.fsync_path(os.path.join(directory, name))
    if tf.io.gfile.exists(final):
      # Never replaced in place (a reader could see it half-deleted): the copy there is of the same
      # checkpoint, published by an earlier or concurrent process.
      log(f"index of step {step} is already published at {final}; keeping that one")
    else:
      try:
        os.rename(tmp, final)
      except OSError as e:
        if not tf.io.gfile.exists(final):
          raise
        log(f"index of step {step} was published at {final} meanwhile ({e}); keeping that one")
      io_utils.fsync_path(root)
  except (OSError, tf.errors.OpError) as e:
    raise IndexWriteError(
        f"cannot write the index of step {step} into {root}: {e}. The indexes published there are "
        "untouched; free space (or fix permissions) and restart bin/refresh_doc_embeds, which "
        "publishes the newest checkpoint's index") from e
  finally:
    if tf.io.gfile.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)
  published_corpus = (info or {}).get("corpus_prefix")
  for old in published_steps(model_dir)[:-keep] if keep > 0 else []:
    if old == int(step):
      # Older than the newest `keep` only when a trainer fell back to an earlier checkpoint (the later ones
      # damaged or lost) after their indexes were published: its next step waits for this index.
      continue
    old_path = os.path.join(root, str(old))
    old_record = _read_record(old_path) if published_corpus else None
    updated = derived_corpus(old_record, published_corpus) if old_record else None
    if updated:
      # A refresh that began before a bin/update_index publishes the old corpus's index after the
      # update's: that index is then the only record that the corpus was updated (current_corpus), so it
      # stays until an index of the updated corpus replaces it, whatever keep says.
      log(f"keeping old index {old_path}: it embeds {updated}, which bin/update_index derived from the "
          f"corpus of this index ({published_corpus}); the next refresh embeds it")
      continue
    log(f"removing old index {old_path} (keeping the newest {keep})")
    shutil.rmtree(old_path, ignore_errors=True)
  return final


def published_steps(model_dir: str) -> List[int]:
  """Steps of the directories under MODEL_DIR/index/ named like a step (temporary ones excluded),
  ascending. Completeness is not checked here; see verify_published."""
  root = index_root(model_dir)
  if not tf.io.gfile.isdir(root):
    return []
  return sorted(
      int(name.rstrip("/")) for name in tf.io.gfile.listdir(root) if _STEP_DIR.match(name.rstrip("/")))


def _unreadable_path(model_dir: str, step: int) -> str:
  return os.path.join(index_root(model_dir), f"{UNREADABLE_PREFIX}{int(step)}.json")


def record_unreadable_checkpoint(model_dir: str, step: int, checkpoint_path: str, reason: str) -> str:
  """Records that the refresher could not restore checkpoint_path and will not embed it: no index of its
  step will be published. A trainer under fixed swaps waiting for that index reads this
  (unreadable_checkpoint) and trains on an earlier one instead of waiting for ever (found by
  bench/fault_soak: ckpt-40 damaged after the trainer saved it, while its pipeline waited for index 40).
  Returns the marker's path; raises IndexWriteError when it cannot be written (a restarted refresher
  tries the checkpoint again, and records it then)."""
  path = _unreadable_path(model_dir, step)
  try:
    tf.io.gfile.makedirs(index_root(model_dir))
    io_utils.write_json_atomic(path, {
        "checkpoint": checkpoint_path,
        "reason": reason,
        "recorded_unix_time": time.time()
    })
  except (OSError, tf.errors.OpError) as e:
    raise IndexWriteError(
        f"cannot record that {checkpoint_path} is unreadable in {path}: {e}. A trainer waiting for the "
        "index of its step (--index_swap_steps) keeps waiting; free space (or fix permissions) and restart "
        "bin/refresh_doc_embeds, which tries the checkpoint again") from e
  return path


def unreadable_checkpoint(model_dir: str, step: int) -> Optional[Dict]:
  """What record_unreadable_checkpoint recorded about the checkpoint of `step` (its path and why it
  cannot be read), or None."""
  path = _unreadable_path(model_dir, step)
  try:
    with tf.io.gfile.GFile(path) as f:
      return json.load(f)
  except (json.JSONDecodeError, OSError, tf.errors.OpError):
    return None  # not recorded (written atomically: absent or complete)


def usable(model_dir: str, step: int) -> Optional[str]:
  """None when the published index of `step` verifies (verify_published), else why not (absent, or
  damaged: a file truncated, deleted or changed)."""
  path = os.path.join(index_root(model_dir), str(step))
  if not tf.io.gfile.exists(path):
    return f"{path} does not exist"
  try:
    verify_published(path)
    # The query tower has no checksums: loading it is what the trainer does (found by bench/fault_soak:
    # an index whose tower lost its variables file verified, so the refresher embedded nothing older
    # while the trainer skipped it and waited).
    tf.saved_model.load(os.path.join(path, QUERY_EMBEDDER_DIR))
  except (index_format.CorruptIndexError, OSError, tf.errors.OpError, ValueError) as e:
    return str(e).splitlines()[0][:500]
  return None


def looks_damaged(model_dir: str, step: int) -> Optional[str]:
  """A cheap look at the published index of `step` (no checksums, unlike usable): why it is damaged
  (published.json or the MIPS manifest unreadable, a listed file missing or of another size, the query
  tower's files missing), or None. What an idle refresher can afford every half minute."""
  path = os.path.join(index_root(model_dir), str(step))
  try:
    with open(os.path.join(path, PUBLISHED_NAME)) as f:
      json.load(f)
    mips = os.path.join(path, MIPS_DIR)
    with open(os.path.join(mips, index_format.MANIFEST_NAME)) as f:
      files = json.load(f)["files"]
    for rel, entry in files.items():
      if os.path.getsize(os.path.join(mips, rel)) != entry["bytes"]:
        return f"{os.path.join(mips, rel)} has another size than its manifest says"
    tower = os.path.join(path, QUERY_EMBEDDER_DIR)
    for name in ("saved_model.pb", os.path.join("variables", "variables.index")):
      if not os.path.isfile(os.path.join(tower, name)):
        return f"{os.path.join(tower, name)} is missing"
    if not glob.glob(os.path.join(tower, "variables", "variables.data-*")):
      return f"{os.path.join(tower, 'variables')} has no variables.data-* file"
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    return f"{path}: {str(e).splitlines()[0][:300]}"
  return None


def remove_damaged(model_dir: str, step: int, reason: str, log: Callable[[str], None] = print) -> None:
  """Removes the damaged published index of `step` so that its step can be published again (publication
  never replaces an index in place). Renamed to a temporary name first: no reader finds it half-deleted,
  and a removal cut short is cleaned up as a killed publication's (clean_temporary)."""
  path = os.path.join(index_root(model_dir), str(step))
  log(f"WARNING: removing the damaged index {path} ({reason}): its checkpoint is embedded again")
  doomed = io_utils.temporary_path(path)
  try:
    os.rename(path, doomed)
  except FileNotFoundError:
    return
  except OSError as e:
    raise IndexWriteError(f"cannot remove the damaged index {path}: {e}; delete it by hand and restart "
                          "bin/refresh_doc_embeds, which publishes its step again") from e
  shutil.rmtree(doomed, ignore_errors=True)


def clean_temporary(model_dir: str, log: Callable[[str], None] = print, worker_rows: bool = True) -> int:
  """Removes temporary directories whose writer has exited (a killed refresher or trainer); returns how
  many. One whose writer still runs (a trainer publishing its bootstrap index, another process's
  publication) is left alone: its pid is in its name (io_utils.temporary_path), checked on this host.
  worker_rows: also the rows of an unfinished multi-host refresh (written on other hosts, so no pid
  tells whether they are still being written): only the refresher, which owns them, removes them."""
  root = index_root(model_dir)
  if not tf.io.gfile.isdir(root):
    return 0
  removed = 0
  for name in tf.io.gfile.listdir(root):
    name = name.rstrip("/")
    # .tmp-*: an index being published; .embeddings-*: worker rows of a multi-host refresh.
    if io_utils.is_temporary(name):
      pid = process_lock.writer_pid(name)
      if pid is not None and process_lock.is_running(pid):
        log(f"leaving {os.path.join(root, name)}: its writer (pid {pid}) is still running")
        continue
      log(f"removing unfinished index {os.path.join(root, name)} (its writer stopped while writing it)")
    elif worker_rows and name.startswith(".embeddings-"):
      log(f"removing worker rows {os.path.join(root, name)} of an unfinished multi-host refresh")
    else:
      continue
    path = os.path.join(root, name)
    if tf.io.gfile.isdir(path):
      shutil.rmtree(path, ignore_errors=True)
    else:  # a marker file (record_unreadable_checkpoint) its writer did not rename into place
      tf.io.gfile.remove(path)
    removed += 1
  return removed


def verify_published(path: str) -> Dict:
  """Checks a published index directory; returns published.json or raises CorruptIndexError."""
  record_path = os.path.join(path, PUBLISHED_NAME)
  if not tf.io.gfile.exists(record_path):
    raise index_format.CorruptIndexError(f"{path}: no {PUBLISHED_NAME}; the index is incomplete")
  with tf.io.gfile.GFile(record_path) as f:
    try:
      record = json.load(f)
    except json.JSONDecodeError as e:
      raise index_format.CorruptIndexError(f"{record_path}: unreadable ({e})") from e
  manifest = index_format.verify_index(os.path.join(path, MIPS_DIR))
  if manifest.get("num_docs") != record.get("num_docs"):
    raise index_format.CorruptIndexError(f"{path}: {PUBLISHED_NAME} says {record.get('num_docs')} "
                                         f"documents, the MIPS index {manifest.get('num_docs')}")
  if not tf.io.gfile.exists(os.path.join(path, QUERY_EMBEDDER_DIR, "saved_model.pb")):
    raise index_format.CorruptIndexError(f"{path}: no {QUERY_EMBEDDER_DIR}/saved_model.pb")
  return record


def _read_record(path: str) -> Optional[Dict]:
  """published.json of a published index, or None when it is missing or unreadable. No checksums: it is
  written last inside the temporary directory, so its presence means the rename published a complete
  index, and the corpus it names is checked on its own (fingerprint)."""
  try:
    with tf.io.gfile.GFile(os.path.join(path, PUBLISHED_NAME)) as f:
      return json.load(f)
  except (json.JSONDecodeError, OSError, tf.errors.OpError):
    return None


def derived_corpus(record: Dict, corpus_prefix: str) -> Optional[str]:
  """The corpus a published index embeds (its published.json `record`) when bin/update_index derived it
  from corpus_prefix, directly or through earlier updates, and it is still the corpus the index embedded
  (fingerprint); else None (the same corpus, an unrelated one, or a derived one rewritten since)."""
  found = record.get("corpus_prefix")
  if not found or os.path.abspath(found) == os.path.abspath(corpus_prefix):
    return None
  try:
    if (tf.io.gfile.exists(found + corpus_lib.MANIFEST_SUFFIX) and
        corpus_lib.fingerprint(found) == record.get("corpus_fingerprint") and
        corpus_lib.descends_from(found, corpus_prefix)):
      return found
  except (OSError, ValueError, KeyError, tf.errors.OpError):
    pass
  return None


def current_corpus(model_dir: str, corpus_prefix: str, log: Callable[[str], None] = print) -> str:
  """The corpus a refresher or trainer started on corpus_prefix should use now: corpus_prefix itself, or
  the newest version bin/update_index derived from it that a published index embeds.

  bin/update_index publishes an index of a NEW corpus (corpus_prefix is never rewritten: the indexes in
  use point at its rows). Following it here is what makes the next full refresh embed the updated
  corpus, and a (re)started trainer read the updated documents. Every published index is looked at, not
  only the newest: a refresh that began before the update publishes an index of the older corpus after
  it (with a higher step), and following only the newest would then drop the update for good. Of the
  versions found, the one derived from all the others is taken (update_published_index refuses to
  branch the history, so they form one chain). Only descendants are followed: an index of an unrelated
  corpus is still skipped by IndexWatcher, as before. A damaged index (looks_damaged) is not followed:
  nothing could be retrieved from its corpus.
  """
  chosen, chosen_path = corpus_prefix, None
  for step in reversed(published_steps(model_dir)):
    path = os.path.join(index_root(model_dir), str(step))
    record = _read_record(path)
    found = derived_corpus(record, chosen) if record else None
    damaged = looks_damaged(model_dir, step) if found else None
    if damaged:
      # Found by bench/fault_soak: a trainer restarted on the corpus of a damaged update's index (its only
      # index) skipped every other index as one of the older corpus and waited for ever.
      log(f"WARNING: not following {found}: the index {path} that embeds it is damaged ({damaged}); "
          f"using {chosen}. Run bin/update_index again to apply that update")
      continue
    if found:
      chosen, chosen_path = found, path
  if chosen_path:
    log(f"the index {chosen_path} embeds {chosen}, which bin/update_index derived from "
        f"{corpus_prefix}: using that corpus")
  return chosen


class LoadedIndex(NamedTuple):
  """A published index in memory: its step, the MIPS index and the stale query tower."""
  step: int
  path: str
  mips: mips_index.MipsIndex
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
  """Trainer-side view of MODEL_DIR/index/: the newest complete index of the trainer's corpus, loaded on
  demand.

  Checksums are verified once per directory (a published index never changes); a corrupt or incomplete
  one, or one built from another corpus than corpus_prefix (published.json's corpus_fingerprint, or its
  document count for indexes that predate it), is skipped with a single warning and not retried: the
  trainer keeps training on the newest index that matches.

  An index of a corpus that bin/update_index derived from corpus_prefix matches too: the trainer swaps
  in that corpus with the index (realm_input.RetrievalState) and then calls follow(), after which the
  derived corpus is the one indexes must embed (an index of the older version, published by a refresh
  that began before the update, is skipped).
  """

  def __init__(self, model_dir: str, log: Callable[[str], None] = print, corpus_prefix: Optional[str] = None):
    self.model_dir = model_dir
    self._log = log
    # step -> what its directory was when skipped (_identity): a directory replaced since (a refresher
    # publishing that step again over a damaged index) is looked at again.
    self._bad: Dict[int, Optional[tuple]] = {}
    self._verified: Dict[int, Dict] = {}
    self._corpus_prefix = None
    self._corpus = None
    if corpus_prefix:
      self.follow(corpus_prefix)

  @property
  def corpus_prefix(self) -> Optional[str]:
    """The corpus indexes must embed (or descend from); None when the watcher does not check corpora."""
    return self._corpus_prefix

  def follow(self, corpus_prefix: str) -> None:
    """From now on, indexes must embed corpus_prefix or a corpus derived from it."""
    self._corpus_prefix = corpus_prefix
    self._corpus = (corpus_lib.fingerprint(corpus_prefix),
                    corpus_lib.read_manifest(corpus_prefix)["num_documents"])

  def skip(self, step: int, reason: str) -> None:
    """Never returns the index of `step` again, unless its directory is replaced (published again): the
    caller could not use it, reason says why."""
    self._log(f"WARNING: skipping {reason}")
    self._bad[step] = self._identity(step)

  def is_skipped(self, step: int) -> bool:
    """Whether the index of `step` was found unusable (corrupt, incomplete, another corpus)."""
    return step in self._bad and self._bad[step] == self._identity(step)

  def _identity(self, step: int) -> Optional[tuple]:
    """The index directory of `step` as the filesystem knows it (inode, change time), None when absent
    or not local: a republished index (the refresher replaces a damaged one) has another."""
    try:
      stat = os.stat(os.path.join(index_root(self.model_dir), str(step)))
    except OSError:
      return None
    return (stat.st_ino, stat.st_ctime_ns)

  def _other_corpus(self, path: str, record: Dict) -> Optional[str]:
    """Why the index at path is of another corpus than the trainer's, or None (its own corpus, or one
    bin/update_index derived from it)."""
    if self._corpus is None:
      return None
    expected_fingerprint, expected_docs = self._corpus
    found = record.get("corpus_fingerprint")
    if (found is not None and found != expected_fingerprint) or record.get("num_docs") != expected_docs:
      if derived_corpus(record, self._corpus_prefix):
        return None
      older = record.get("corpus_prefix")
      if older and derived_corpus(
          {
              "corpus_prefix": self._corpus_prefix,
              "corpus_fingerprint": expected_fingerprint
          }, older):
        return (f"index {path}: it embeds {older}, of which this trainer's corpus {self._corpus_prefix} "
                "is an updated version (bin/update_index): a refresh that began before the update "
                "published it. Training goes on with the newest index of the updated corpus; the next "
                "refresh embeds it (the refresher follows the update)")
      return (f"index {path} was built from the corpus {record.get('corpus_prefix')} "
              f"({record.get('num_docs')} documents, fingerprint {str(found)[:16]}), not from this "
              f"trainer's --retrieval_corpus_path={self._corpus_prefix} ({expected_docs} documents, "
              f"fingerprint {expected_fingerprint[:16]}): its rows would point at other documents. "
              f"Restart bin/refresh_doc_embeds with --retrieval_corpus_path={self._corpus_prefix} and "
              f"delete {path}; training goes on with the newest index of this corpus")
    return None

  def newest_step(self, at_most: Optional[int] = None) -> Optional[int]:
    """The step of the newest complete, uncorrupted published index of the trainer's corpus (or of one
    derived from it), or None; at_most: only indexes of that step or older count."""
    for step in reversed(published_steps(self.model_dir)):
      if at_most is not None and step > at_most:
        continue
      if step in self._bad:
        if self.is_skipped(step):
          continue
        # Published again since it was skipped: verified again.
        del self._bad[step]
        self._verified.pop(step, None)
      path = os.path.join(index_root(self.model_dir), str(step))
      record = self._verified.get(step)
      if record is None:
        try:
          record = verify_published(path)
        except (index_format.CorruptIndexError, OSError, tf.errors.OpError) as e:
          # Deleted under us by keep-K cleanup, or really broken: either way not usable.
          if tf.io.gfile.exists(path):
            self.skip(step, f"index {path}: {e}")
          continue
        self._verified[step] = record
      # Checked on every look, not cached with the checksums: the trainer's corpus moves on when it
      # follows an update (follow), and an index that matched the older version no longer does.
      mismatch = self._other_corpus(path, record)
      if mismatch:
        self.skip(step, mismatch)
        continue
      return step
    return None

  def load_newer(self, current_step: Optional[int], at_most: Optional[int] = None) -> Optional[LoadedIndex]:
    """Loads the newest index (of step at_most or older, when given) if it is newer than current_step,
    else returns None."""
    step = self.newest_step(at_most)
    if step is None or (current_step is not None and step <= current_step):
      return None
    path = os.path.join(index_root(self.model_dir), str(step))
    try:
      return load_published(path, self._verified[step])
    except (index_format.CorruptIndexError, OSError, tf.errors.OpError, ValueError) as e:
      if tf.io.gfile.exists(path):
        self.skip(step, f"index {path}: {e}")
      return None

  def wait_for_newer(self,
                     current_step: Optional[int],
                     poll_seconds: float = 2.0,
                     timeout_seconds: Optional[float] = None,
                     reason: str = "",
                     refresher_grace_seconds: Optional[float] = REFRESHER_GRACE_SECONDS,
                     stop: Optional[threading.Event] = None,
                     give_up: Optional[Callable[[], bool]] = None) -> Optional[LoadedIndex]:
    """Blocks (sleeping between looks) until an index newer than current_step is published.

    Returns None at timeout_seconds, or as soon as give_up() (asked at every look) is true: the index
    waited for will not come (realm_input.RetrievalState: its checkpoint is unreadable).

    Raises WaitCancelled as soon as `stop` is set: a trainer that finished while its input pipeline
    waits for an index sets it, since that pipeline thread would otherwise keep the process from exiting
    (TensorFlow tears the pipeline down at exit holding the GIL, which the waiting thread needs to wake).

    Raises NoRefresherError when, for refresher_grace_seconds in a row, no bin/refresh_doc_embeds holds
    the model dir's lock (none was started, it crashed, or it exited after the done marker): nothing
    would ever publish. None disables the check (and it is skipped on remote model dirs).
    """
    deadline = None if timeout_seconds is None else time.time() + timeout_seconds
    lock_path = os.path.join(self.model_dir, process_lock.LOCK_NAME)
    check_refresher = refresher_grace_seconds is not None and "://" not in self.model_dir
    unlocked_since = None
    announced = False
    while True:
      if stop is not None and stop.is_set():
        raise WaitCancelled(f"stopped waiting for an index under {index_root(self.model_dir)}: the "
                            "trainer is stopping (training finished, or SIGTERM)")
      loaded = self.load_newer(current_step)
      if loaded is not None:
        return loaded
      now = time.time()
      if (deadline is not None and now >= deadline) or (give_up is not None and give_up()):
        return None
      if check_refresher:
        if process_lock.is_held(lock_path):
          unlocked_since = None
        elif unlocked_since is None:
          unlocked_since = now
        elif now - unlocked_since >= refresher_grace_seconds:
          raise NoRefresherError(
              f"waited {now - unlocked_since:.0f} s for an index under {index_root(self.model_dir)} but "
              f"no bin/refresh_doc_embeds is running on {self.model_dir} ({lock_path} is not held): "
              f"start one with --model_dir={self.model_dir} and the trainer's --retrieval_corpus_path "
              "(see its log if one crashed), then restart this trainer; it resumes from its last "
              "checkpoint")
      if not announced:
        what = "a first index" if current_step is None else f"an index newer than step {current_step}"
        self._log(f"waiting for bin/refresh_doc_embeds to publish {what} under "
                  f"{index_root(self.model_dir)}{': ' + reason if reason else ''}")
        announced = True
      # Not past the deadline: a short timeout ends when it says, not a poll later.
      pause = poll_seconds if deadline is None else max(0.0, min(poll_seconds, deadline - now))
      if stop is not None:
        stop.wait(pause)
      else:
        time.sleep(pause)
