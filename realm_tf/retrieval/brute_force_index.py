"""Exact MIPS with TensorFlow: the REALM release's brute-force retriever behind the MipsIndex interface."""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from realm_tf.retrieval import mips_index


class BruteForceIndex(mips_index.MipsIndex):
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
