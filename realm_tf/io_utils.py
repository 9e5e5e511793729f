"""Atomic writes: an output is either absent or complete under its final name, never partial.

Every file a user or another process loads (corpus shards, manifests, indexes, predictions) is written to a
temporary name in the same directory, flushed to disk, and renamed. A rename within one POSIX filesystem is
atomic, so a reader or a crash never sees half a file.
"""

import contextlib
import json
import os
import uuid

import tensorflow as tf


def temporary_path(final_path: str) -> str:
  """A unique temporary name beside final_path (same directory, hence same filesystem)."""
  directory, base = os.path.split(final_path)
  return os.path.join(directory, f".tmp-{base}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def is_temporary(path: str) -> bool:
  return os.path.basename(path).startswith(".tmp-")


def fsync_path(path: str) -> None:
  """Flushes a local file or directory to disk; a no-op for remote filesystems (gs://)."""
  if "://" in path:
    return
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def publish(tmp_path: str, final_path: str) -> None:
  """Renames a finished temporary file over final_path, durably."""
  fsync_path(tmp_path)
  tf.io.gfile.rename(tmp_path, final_path, overwrite=True)
  fsync_path(os.path.dirname(final_path) or ".")


@contextlib.contextmanager
def atomic_write(final_path: str, mode: str = "w"):
  """Context manager yielding a file object; the file appears under final_path only on success."""
  tmp_path = temporary_path(final_path)
  try:
    with tf.io.gfile.GFile(tmp_path, mode) as f:
      yield f
    publish(tmp_path, final_path)
  finally:
    if tf.io.gfile.exists(tmp_path):
      tf.io.gfile.remove(tmp_path)


def copy_atomic(source_path: str, final_path: str) -> None:
  """Copies a file; final_path is never a partial copy (absent, its old version, or the new one)."""
  tmp_path = temporary_path(final_path)
  try:
    tf.io.gfile.copy(source_path, tmp_path, overwrite=True)
    publish(tmp_path, final_path)
  finally:
    if tf.io.gfile.exists(tmp_path):
      tf.io.gfile.remove(tmp_path)


def write_json_atomic(path: str, value) -> None:
  with atomic_write(path) as f:
    f.write(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_jsonl_atomic(path: str, records) -> int:
  """Writes an iterable of JSON-serializable records, one per line; returns how many."""
  count = 0
  with atomic_write(path) as f:
    for record in records:
      f.write(json.dumps(record, ensure_ascii=False) + "\n")
      count += 1
  return count
