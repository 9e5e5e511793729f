"""The retrievers an ORQA model can read from: its dense tower, BM25, their hybrid, or the gold block.

Why more than the dense tower: on SQuAD-open BM25 beats every dense retriever realm_tf has trained
(answer recall@5 89.8 against 84.8 over 20,963 paragraphs, docs/results.md), and reciprocal rank
fusion of the two beats both (90.5). A user who wants the best retrieval on their own text needs BM25
or the hybrid in the product, not in a bench. This module turns a question set into the corpus rows
each retriever returns; the reader then reads those rows (OrqaModel.predict_answers(block_rows=...)).

  dense   the model's own search (exact inner products against its frozen index), done in the graph
  bm25    BM25 (realm_tf/retrieval/bm25.py) over each block's title and body: on SQuAD-open title +
          body measured better than the body alone at every k (docs/results.md)
  hybrid  reciprocal rank fusion (realm_tf/retrieval/fusion.py, k = 60) of BM25's and the dense tower's
          top FUSION_DEPTH (of BM25's, only documents that match a query term); nothing tuned, so no labelled questions are spent on it. With bm25_weight w:
          instead a weighted sum (w for BM25, 1 - w for the dense tower) of their z-normalised scores
          over the same top FUSION_DEPTH (fusion.weighted_score_fusion), w tuned on held-out questions
  gold    each question's own block (the QA record's "doc_id"): the reader with retrieval solved, the
          ceiling a retriever can lift the system to
"""

from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from realm_tf.retrieval import bm25
from realm_tf.retrieval import fusion

DENSE, BM25, HYBRID, GOLD = "dense", "bm25", "hybrid", "gold"
RETRIEVERS = (DENSE, BM25, HYBRID, GOLD)
# Documents taken from each ranking before fusing: a document at rank 1,000 still adds 1 / 1,060, so a
# ranking far shallower than this would drop documents the other one ranks well.
FUSION_DEPTH = 1000


def check_retrievers(values: Sequence[str], flag: str = "--retriever") -> None:
  """Raises ValueError naming flag when a value is not one of RETRIEVERS (or there is none)."""
  unknown = [v for v in values if v not in RETRIEVERS]
  if unknown or not values:
    raise ValueError(f"{flag}: unknown retriever {unknown[0] if unknown else '(none given)'!r}; choose "
                     f"from {', '.join(RETRIEVERS)} (comma-separated for several)")


def block_texts(titles: Sequence[str], bodies: Sequence[str]) -> list:
  """What BM25 indexes for each block: its title and body."""
  return [f"{t} {b}" if t else b for t, b in zip(titles, bodies)]


def build_bm25(titles: Sequence[str], bodies: Sequence[str]) -> bm25.Bm25Index:
  return bm25.Bm25Index(block_texts(titles, bodies))


def fuse(sparse_rows: np.ndarray,
         dense_rows: np.ndarray,
         depth: int,
         sparse_scores: Optional[np.ndarray] = None,
         dense_scores: Optional[np.ndarray] = None,
         bm25_weight: Optional[float] = None) -> np.ndarray:
  """The hybrid ranking int64 [Q, depth] of two rankings of the same rows: reciprocal rank fusion, or
  with bm25_weight the weighted sum of their z-normalised scores (which then must be given)."""
  if bm25_weight is None:
    return fusion.reciprocal_rank_fusion([sparse_rows, dense_rows], depth)
  check_bm25_weight(bm25_weight)
  return fusion.weighted_score_fusion([sparse_rows, dense_rows], [sparse_scores, dense_scores],
                                      [bm25_weight, 1.0 - bm25_weight], depth)


def unmatched_as_padding(rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
  """BM25's rows with those that match no query term (score 0) set to -1, which fusion ignores: BM25
  ranks them in an arbitrary order, and a rank there would lift a document by the accident of its row
  number above one the dense tower ranks better (sparse_in_graph.retrieve_rows does the same)."""
  return np.where(np.asarray(scores) > 0, rows, -1)


def check_bm25_weight(weight: Optional[float], flag: str = "--hybrid_bm25_weight") -> None:
  if weight is not None and not 0.0 <= weight <= 1.0:
    raise ValueError(f"{flag}={weight}: the BM25 weight of the hybrid's score sum must be in [0, 1] (the "
                     "dense tower gets 1 minus it); leave it unset for reciprocal rank fusion")


def check_weight_of(retriever: str, bm25_weight: Optional[float], flag: str = "--retriever") -> None:
  """check_bm25_weight, and ValueError naming both flags for a weight given to a retriever other than the
  hybrid, the only one that fuses (bin/train_orqa and bin/export_saved_model take one retriever)."""
  check_bm25_weight(bm25_weight)
  if bm25_weight is not None and retriever != HYBRID:
    raise ValueError(f"--hybrid_bm25_weight={bm25_weight} weighs the hybrid's fusion; {flag}={retriever} "
                     "fuses nothing: drop it, or pass --retriever=hybrid")


def label(retriever: str, bm25_weight: Optional[float] = None) -> str:
  """The name a retriever's row and files carry: the hybrid with a weight is hybrid_w<weight>."""
  return f"{retriever}_w{bm25_weight:g}" if retriever == HYBRID and bm25_weight is not None else retriever


def gold_rows(question_doc_ids: Sequence[Optional[str]], corpus_doc_ids: Sequence[str],
              source: str) -> np.ndarray:
  """int64 [Q, 1]: the corpus row of each question's own document.

  Raises ValueError naming source (the QA file) and the first question without a doc_id, or whose doc_id
  is not in the corpus.
  """
  row_of = {doc_id: i for i, doc_id in enumerate(corpus_doc_ids)}
  rows = np.zeros([len(question_doc_ids), 1], np.int64)
  for i, doc_id in enumerate(question_doc_ids):
    if doc_id is None:
      raise ValueError(f"{source}: question {i} has no \"doc_id\"; the gold retriever reads each "
                       "question's own document, so every QA record needs a \"doc_id\" naming a corpus "
                       "document (bench/squad_open_e2e_bench.py writes SQuAD's)")
    if str(doc_id) not in row_of:
      raise ValueError(f"{source}: question {i}'s doc_id {doc_id!r} is not a document of the corpus; "
                       "the QA file and the model's retrieval corpus must number documents alike")
    rows[i, 0] = row_of[str(doc_id)]
  return rows


def candidate_rows(retriever: str,
                   questions: Sequence[str],
                   depth: int,
                   dense_fn: Callable[[int], Tuple[np.ndarray, np.ndarray]],
                   sparse: Optional[bm25.Bm25Index] = None,
                   question_doc_ids: Optional[Sequence[Optional[str]]] = None,
                   corpus_doc_ids: Optional[Sequence[str]] = None,
                   source: str = "the QA file",
                   bm25_weight: Optional[float] = None) -> Dict[str, np.ndarray]:
  """The rows retriever returns for questions, best first: {"rows": int64 [Q, depth'], ...}.

  dense_fn(d) gives the dense tower's top d rows [Q, d] and their scores (the hybrid asks for
  FUSION_DEPTH); sparse is the BM25 index of the corpus (bm25 and hybrid); bm25_weight: see fuse.
  depth' = min(depth, corpus size); gold gives 1 row. For the hybrid, "bm25_rows" and "dense_rows" hold
  the two rankings fused.
  """
  check_retrievers([retriever])
  if retriever == DENSE:
    return {"rows": np.asarray(dense_fn(depth)[0], np.int64)}
  if retriever == GOLD:
    if question_doc_ids is None or corpus_doc_ids is None:
      raise ValueError("the gold retriever needs the questions' and the corpus's doc_ids")
    return {"rows": gold_rows(question_doc_ids, corpus_doc_ids, source)}
  if sparse is None:
    raise ValueError(f"the {retriever} retriever needs a BM25 index of the corpus")
  if retriever == BM25:
    return {"rows": sparse.search(list(questions), depth)[0]}
  fusion_depth = max(depth, FUSION_DEPTH)
  sparse_rows, sparse_scores = sparse.search(list(questions), fusion_depth)
  sparse_rows = unmatched_as_padding(sparse_rows, sparse_scores)
  dense_rows, dense_scores = dense_fn(min(fusion_depth, sparse.num_docs))
  dense_rows = np.asarray(dense_rows, np.int64)
  return {
      "rows":
          fuse(sparse_rows, dense_rows, min(depth, sparse.num_docs), sparse_scores, dense_scores,
               bm25_weight),
      "bm25_rows":
          sparse_rows,
      "dense_rows":
          dense_rows
  }
