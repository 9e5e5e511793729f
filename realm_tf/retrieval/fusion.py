"""Hybrid retrieval: reciprocal rank fusion of several rankings of the same corpus.

Why rank fusion rather than a weighted sum of scores: BM25 scores are unbounded and vary with the query's
length and rarity, while dense scores are cosines, so any weight between them has to be tuned on held-out
questions of each data set. Reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009) scores a
document by sum over rankings of 1 / (k + rank), with rank from 1 and k = 60 as published; it needs
nothing tuned, which keeps a hybrid row honest on a benchmark whose only labelled questions are its test
questions. weighted_score_fusion is the tuned alternative: a weighted sum of z-normalised scores, whose
weight has to be chosen on held-out questions of the data set.
"""

from typing import Sequence

import numpy as np

DEFAULT_K = 60


def reciprocal_rank_fusion(rankings: Sequence[np.ndarray], depth: int, k: int = DEFAULT_K) -> np.ndarray:
  """Fused ranking int64 [Q, depth] from rankings, each int [Q, R_i] of row ids, best first.

  A document absent from a ranking contributes nothing for it, so each ranking should be deeper than
  depth (a document ranked 1,000th still adds 1 / 1,060). Negative ids are padding and ignored. Ties
  break towards the smaller row id, so the result is deterministic. If fewer than depth distinct documents
  occur for a query, the rest of its row is -1.
  """
  if not rankings:
    raise ValueError("reciprocal_rank_fusion: no rankings to fuse")
  if depth < 1 or k < 0:
    raise ValueError(f"reciprocal_rank_fusion: need depth >= 1 and k >= 0, got depth={depth} k={k}")
  rankings = [np.asarray(r) for r in rankings]
  num_queries = rankings[0].shape[0]
  for i, r in enumerate(rankings):
    if r.ndim != 2 or r.shape[0] != num_queries:
      raise ValueError(f"reciprocal_rank_fusion: rankings[{i}] has shape {r.shape}; every ranking must "
                       f"be [num_queries={num_queries}, R]")
  fused = np.full([num_queries, depth], -1, np.int64)
  for q in range(num_queries):
    rows = np.concatenate([r[q] for r in rankings]).astype(np.int64)
    weights = np.concatenate([1.0 / (k + np.arange(1, r.shape[1] + 1)) for r in rankings])
    keep = rows >= 0
    ids, inverse = np.unique(rows[keep], return_inverse=True)
    scores = np.bincount(inverse, weights=weights[keep], minlength=len(ids))
    # lexsort: the last key is primary; -scores puts the best first, ids break ties upwards.
    order = np.lexsort((ids, -scores))[:depth]
    fused[q, :len(order)] = ids[order]
  return fused


def weighted_score_fusion(rankings: Sequence[np.ndarray], scores: Sequence[np.ndarray],
                          weights: Sequence[float], depth: int) -> np.ndarray:
  """Fused ranking int64 [Q, depth] by a weighted sum of standardised scores.

  rankings[i] int [Q, R_i] (row ids, best first, negative ids are padding) and scores[i] float [Q, R_i]
  their scores. Per query, each ranking's scores are z-normalised over its own R_i documents (BM25's
  unbounded scores and cosines become comparable), a document a ranking lacks gets that ranking's lowest
  normalised score, and documents are ordered by sum_i weights[i] * z_i; ties break towards the smaller
  row id. Unlike reciprocal_rank_fusion the weights must be tuned on held-out questions (never the test
  questions). Rows past the documents that occur are -1.
  """
  if not rankings or len(rankings) != len(scores) or len(rankings) != len(weights):
    raise ValueError(f"weighted_score_fusion: need as many rankings, scores and weights, got "
                     f"{len(rankings)}, {len(scores)} and {len(weights)}")
  if depth < 1:
    raise ValueError(f"weighted_score_fusion: depth must be >= 1, got {depth}")
  rankings = [np.asarray(r, np.int64) for r in rankings]
  scores = [np.asarray(s, np.float64) for s in scores]
  num_queries = rankings[0].shape[0]
  for i, (r, s) in enumerate(zip(rankings, scores)):
    if r.ndim != 2 or r.shape[0] != num_queries or s.shape != r.shape:
      raise ValueError(f"weighted_score_fusion: rankings[{i}] has shape {r.shape} and scores[{i}] "
                       f"{s.shape}; each must be [num_queries={num_queries}, R] alike")
  fused = np.full([num_queries, depth], -1, np.int64)
  for q in range(num_queries):
    ids = np.unique(np.concatenate([r[q][r[q] >= 0] for r in rankings]))
    total = np.zeros(len(ids))
    for r, s, w in zip(rankings, scores, weights):
      keep = r[q] >= 0
      values = s[q][keep]
      if not len(values):  # pylint: disable=g-explicit-length-test (an array)
        continue
      z = (values - values.mean()) / (values.std() or 1.0)
      # Everything this ranking lacks scores as its worst document.
      column = np.full(len(ids), z.min())
      column[np.searchsorted(ids, r[q][keep])] = z
      total += w * column
    order = np.lexsort((ids, -total))[:depth]
    fused[q, :len(order)] = ids[order]
  return fused
