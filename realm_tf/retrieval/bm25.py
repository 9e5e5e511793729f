"""BM25 sparse retrieval (the bm25s package): the DrQA-style lexical baseline for the dense retrievers.

Why bm25s: it scores with Lucene's BM25 (the variant Anserini/Pyserini and most open-QA papers report)
from a precomputed sparse matrix in pure numpy, so a 20k-paragraph corpus indexes in seconds and needs
no Java. Text analysis is bm25s's: lower case, tokens of two or more word characters (scikit-learn's
pattern), its English stopword list and PyStemmer's Snowball stemmer; documents and queries go through
the same analysis, so a query word matches every inflection the stemmer folds together.
"""

from typing import Optional, Sequence, Tuple

import bm25s
import numpy as np
import Stemmer

# Lucene's defaults (Anserini/Pyserini use k1 0.9, b 0.4 for MS MARCO; 1.2-1.5 / 0.75 are the classic
# settings): kept as bm25s's defaults so rows compare with other bm25s numbers.
DEFAULT_K1 = 1.5
DEFAULT_B = 0.75


class Bm25Index:
  """A BM25 index over a list of texts; search returns row indices into that list.

  Args:
    texts: the documents (e.g. title and body joined by the caller).
    k1, b: BM25's term-frequency saturation and length normalisation.
    stopwords: a bm25s stopword-list name ("en") or None for no stopword removal.
    stemmer_language: a Snowball language for PyStemmer ("english"), or None for no stemming.
  """

  def __init__(self,
               texts: Sequence[str],
               k1: float = DEFAULT_K1,
               b: float = DEFAULT_B,
               stopwords: Optional[str] = "en",
               stemmer_language: Optional[str] = "english"):
    if not texts:
      raise ValueError("Bm25Index: no texts to index; pass at least one document")
    for i, text in enumerate(texts):
      if not isinstance(text, str):
        raise TypeError(f"Bm25Index: texts[{i}] is {type(text).__name__}, expected str")
    if k1 < 0 or not 0 <= b <= 1:
      raise ValueError(f"Bm25Index: need k1 >= 0 and 0 <= b <= 1, got k1={k1} b={b}")
    try:
      self._stemmer = Stemmer.Stemmer(stemmer_language) if stemmer_language else None
    except KeyError:
      raise ValueError(f"Bm25Index: PyStemmer has no {stemmer_language!r} stemmer; choose one of "
                       f"{Stemmer.algorithms()}") from None
    self._stopwords = stopwords or []
    self.parameters = {
        "k1": k1,
        "b": b,
        "method": "lucene",
        "stopwords": stopwords,
        "stemmer_language": stemmer_language,
        "bm25s": bm25s.__version__
    }
    self._retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
    self._retriever.index(self._analyze(texts), show_progress=False)
    self.num_docs = len(texts)

  def _analyze(self, texts: Sequence[str]):
    # Strings (not bm25s's per-call ids) so that query tokens map onto the index's vocabulary.
    return bm25s.tokenize(list(texts),
                          lower=True,
                          stopwords=self._stopwords,
                          stemmer=self._stemmer,
                          return_ids=False,
                          show_progress=False)

  def search(self, queries: Sequence[str], k: int) -> Tuple[np.ndarray, np.ndarray]:
    """(row indices int64 [len(queries), k'], scores float32 [len(queries), k']), best first.

    k' = min(k, number of documents). A query with no indexed term scores 0 everywhere; its rows are
    then arbitrary (but deterministic).
    """
    if k < 1:
      raise ValueError(f"Bm25Index.search: k must be >= 1, got {k}")
    k = min(k, self.num_docs)
    if not queries:
      return np.zeros([0, k], np.int64), np.zeros([0, k], np.float32)
    ids, scores = self._retriever.retrieve(self._analyze(queries), k=k, show_progress=False, n_threads=0)
    return np.asarray(ids, np.int64), np.asarray(scores, np.float32)
