"""The rows an ORQA run's training questions read when it trains on BM25's or the hybrid's candidates.

bin/train_orqa --retriever=bm25|hybrid trains the reader on what bin/eval_orqa --retriever=bm25|hybrid
will give it (a reader trained on the dense tower's blocks reads BM25's differently ranked ones at test
time), and the query tower learns to score those rows. The rows of every training question are searched
ONCE at the start (BM25 over 20,963 paragraphs takes seconds; the hybrid's dense side is the warm-start
query tower, so that a restarted run reads the same rows as an uninterrupted one) and kept in
MODEL_DIR/train_candidates.npz, reused while they still describe the run: the same retriever, BM25
weight, depth, questions and corpus.
"""

import hashlib
import io
import json
import os
from typing import Callable, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import io_utils
from realm_tf.data import corpus as corpus_lib
from realm_tf.retrieval import bm25
from realm_tf.retrieval import hybrid

CANDIDATES_NAME = "train_candidates.npz"
# Retrievers a run can train on. Not gold: a reader trained on each question's own paragraph learns from
# what no retriever will hand it (bin/eval_orqa's gold row is the ceiling, not a way to train).
TRAINABLE = (hybrid.DENSE, hybrid.BM25, hybrid.HYBRID)


def check_retriever(retriever: str, bm25_weight: Optional[float], flag: str = "--retriever") -> None:
  """ValueError naming the flag for a retriever a run cannot train on, or a weight out of [0, 1]."""
  if retriever not in TRAINABLE:
    raise ValueError(f"{flag}={retriever}: bin/train_orqa trains on one of {', '.join(TRAINABLE)} (gold is "
                     "an evaluation ceiling: no retriever gives the reader each question's own paragraph)")
  hybrid.check_weight_of(retriever, bm25_weight, flag)


def _describe(retriever: str, bm25_weight: Optional[float], depth: int, questions: Sequence[str],
              corpus_prefix: str) -> dict:
  digest = hashlib.sha256("\n".join(questions).encode("utf-8")).hexdigest()
  return {
      "retriever": hybrid.label(retriever, bm25_weight),
      "depth": int(depth),
      "num_questions": len(questions),
      "questions_sha256": digest,
      "corpus_fingerprint": corpus_lib.fingerprint(corpus_prefix)
  }


def _read(path: str) -> Tuple[Optional[dict], Optional[np.ndarray]]:
  """The saved description and rows, or (None, None) when the file does not hold them readably."""
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      # allow_pickle=False: the file holds an int array and a JSON string, nothing to execute.
      with np.load(io.BytesIO(f.read()), allow_pickle=False) as saved:
        return json.loads(str(saved["description"])), np.asarray(saved["rows"])
  except (ValueError, KeyError, OSError, tf.errors.OpError):
    return None, None


def training_rows(model_dir: str,
                  retriever: str,
                  questions: Sequence[str],
                  depth: int,
                  corpus_prefix: str,
                  sparse_fn: Callable[[], bm25.Bm25Index],
                  dense_fn: Callable[[int], Tuple[np.ndarray, np.ndarray]],
                  bm25_weight: Optional[float] = None,
                  log: Callable[[str], None] = print) -> np.ndarray:
  """int32 [len(questions), depth]: each training question's rows from retriever (bm25 or hybrid), best
  first; reused from MODEL_DIR/train_candidates.npz when it describes this run, else searched and saved
  there atomically.

  sparse_fn: the BM25 index of the corpus (built only when searching); dense_fn(d): the warm-start query
  tower's top d rows of the questions and their scores (hybrid.candidate_rows's dense_fn).
  """
  check_retriever(retriever, bm25_weight)
  if retriever == hybrid.DENSE:
    raise ValueError("the dense tower searches in the training step; it has no candidate rows")
  path = os.path.join(model_dir, CANDIDATES_NAME)
  expected = _describe(retriever, bm25_weight, depth, questions, corpus_prefix)
  if tf.io.gfile.exists(path):
    saved, rows = _read(path)
    if saved == expected:
      log(f"reusing the {expected['retriever']} candidates of the training questions in {path}")
      return rows
    changed = "unreadable" if saved is None else ", ".join(
        f"{k} {saved.get(k)} -> {v}" for k, v in expected.items() if saved.get(k) != v)
    log(f"{path} no longer describes this run ({changed}): searching the training questions again")
  else:
    # Before the search, which is silent: with the hybrid it embeds every question with the query tower
    # (about 30 minutes for SQuAD's 83,094 on 2 shared cores), so a log that stops here is not a hang.
    log(f"searching {len(questions)} training questions with {expected['retriever']} (top {depth}) "
        "before the first step" +
        (", each embedded by the warm-start query tower" if retriever == hybrid.HYBRID else ""))
  rows = hybrid.candidate_rows(retriever,
                               list(questions),
                               depth,
                               dense_fn,
                               sparse_fn(),
                               bm25_weight=bm25_weight)["rows"]
  if rows.shape[1] < depth or (rows < 0).any():
    raise ValueError(f"{retriever} found fewer than {depth} rows for some training question; lower "
                     "--retriever_beam_size to at most the corpus size")
  rows = rows.astype(np.int32)
  buffer = io.BytesIO()  # np.savez seeks in what it writes, which a GFile does not allow
  np.savez(buffer, rows=rows, description=np.array(json.dumps(expected, sort_keys=True)))
  with io_utils.atomic_write(path, "wb") as f:
    f.write(buffer.getvalue())
  log(f"searched {len(questions)} training questions with {expected['retriever']} (top {depth}): {path}")
  return rows
