"""Sharded GZIP TFRecord outputs written all-or-nothing, with a manifest; shared by every corpus writer.

Records are split into contiguous runs `{prefix}-{i:05d}-of-{n:05d}`, so the row order of the output (sorted
shard order, then record order) is the input order and stable across runs. Shards are written under
temporary names and renamed only when all of them are complete; shards of an earlier output under the same
prefix with another shard count are removed afterwards; `{prefix}.manifest.json` (counts and a sha256 per
shard) is written last, so a prefix with a manifest is complete.
"""

import hashlib
import json
import os
import re
from typing import Callable, Dict, List

import tensorflow as tf

from realm_tf import io_utils

MANIFEST_SUFFIX = ".manifest.json"


def shard_paths(prefix: str, num_shards: int) -> List[str]:
  return [f"{prefix}-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)]


def sha256_file(path: str) -> str:
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      digest.update(chunk)
  return digest.hexdigest()


class ShardedWriter:
  """Writes exactly `total` serialized records into contiguous shards; a context manager.

  Leaving the `with` block without finish() (an error) removes every temporary shard and leaves earlier
  outputs under the final names untouched.
  """

  def __init__(self, output_prefix: str, total: int, num_shards: int):
    self.output_prefix = output_prefix
    self.total = total
    self.num_shards = max(1, min(num_shards, total))
    self.finals = shard_paths(output_prefix, self.num_shards)
    self._temps: List[str] = []
    self._boundaries = [total * i // self.num_shards for i in range(self.num_shards + 1)]
    self._output_dir = os.path.dirname(output_prefix) or "."
    self._writers = []
    self._shard = 0
    self.written = 0

  def __enter__(self) -> "ShardedWriter":
    tf.io.gfile.makedirs(self._output_dir)
    self._temps = [io_utils.temporary_path(p) for p in self.finals]
    self._writers = [tf.io.TFRecordWriter(p, options="GZIP") for p in self._temps]
    return self

  def write(self, record: bytes) -> None:
    if self.written == self.total:
      raise RuntimeError(f"the input changed while it was read: counted {self.total} documents, then read "
                         "more; write from a file that is not being modified")
    while self.written >= self._boundaries[self._shard + 1]:
      self._shard += 1
    self._writers[self._shard].write(record)
    self.written += 1

  def finish(self, manifest: Dict, log: Callable[[str], None] = lambda message: None) -> Dict:
    """Publishes the shards, removes stale ones, writes the manifest (plus "shards") and returns it."""
    if self.written != self.total:
      raise RuntimeError(f"the input changed while it was read: counted {self.total} documents, then read "
                         f"{self.written}; write from a file that is not being modified")
    self._close()
    for tmp, final in zip(self._temps, self.finals):
      io_utils.publish(tmp, final)
    # Matched by name, not glob: brackets or '*' in a user's prefix must not reach other directories.
    shard_name = re.compile(re.escape(os.path.basename(self.output_prefix)) + r"-\d{5}-of-\d{5}$")
    stale = sorted(
        os.path.join(self._output_dir, name)
        for name in tf.io.gfile.listdir(self._output_dir)
        if shard_name.match(name) and os.path.join(self._output_dir, name) not in self.finals)
    for path in stale:
      log(f"removing {path}: a shard of an earlier output with another shard count")
      tf.io.gfile.remove(path)
    manifest = dict(manifest,
                    shards=[{
                        "path": os.path.basename(p),
                        "num_documents": self._boundaries[i + 1] - self._boundaries[i],
                        "sha256": sha256_file(p)
                    } for i, p in enumerate(self.finals)])
    io_utils.write_json_atomic(self.output_prefix + MANIFEST_SUFFIX, manifest)
    return manifest

  def _close(self) -> None:
    for writer in self._writers:
      writer.close()
    self._writers = []

  def __exit__(self, *unused_exc_info) -> None:
    self._close()
    for tmp in self._temps:
      if tf.io.gfile.exists(tmp):
        tf.io.gfile.remove(tmp)


def read_manifest(output_prefix: str, what: str, hint: str) -> dict:
  """The manifest of a complete output; `what` names the kind of output, `hint` the binary writing it."""
  path = output_prefix + MANIFEST_SUFFIX
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"{path} does not exist: {output_prefix} is not a complete {what}; write it "
                            f"with {hint}")
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


def listed_shards(output_prefix: str, manifest: dict, hint: str) -> List[str]:
  """The shard paths a manifest lists, in row order; a clear error names any missing one."""
  directory = os.path.dirname(output_prefix)
  paths = [os.path.join(directory, s["path"]) for s in manifest["shards"]]
  missing = [p for p in paths if not tf.io.gfile.exists(p)]
  if missing:
    raise FileNotFoundError(f"{output_prefix}: shards listed in its manifest are missing: {missing}; "
                            f"regenerate it with {hint}")
  return paths
