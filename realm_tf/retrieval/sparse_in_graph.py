"""BM25 over wordpiece ids and reciprocal rank fusion inside a TensorFlow graph: the sparse side of an
exported hybrid retriever.

Why in the graph: an exported open_qa SavedModel must retrieve by BM25 or by the hybrid (BM25 fused with
its dense tower, realm_tf/retrieval/hybrid.py) in a process that never saw the corpus files, and through
its token-id twin that needs core TensorFlow ops only. bm25s (realm_tf/retrieval/bm25.py) analyses text in
Python (a regex, stopwords, a Snowball stemmer), which no graph can carry. So the sparse side indexes the
run's own WordPiece ids instead, analysed once per vocabulary entry when exporting:

  term_of [V]   each vocab id -> the term it counts as, or -1 for none: special tokens ([PAD], [CLS],
                [unusedN]...), punctuation, one-character words and bm25s's English stopwords count as
                nothing (bm25s drops them too); whole-word entries with the same Snowball stem count as
                one term (the stem's first vocab id), so "city" and "cities" match as bm25s matches them;
                "##" continuation pieces count as themselves.
  postings      per term, the documents holding it and their Lucene BM25 weights
                idf(t) * tf / (tf + k1 (1 - b + b |d| / avgdl)), idf = ln(1 + (N - df + 0.5) / (df + 0.5)):
                bm25s's "lucene" scoring, so with the same terms the scores equal bm25s's.

A query's score of document d is the sum over its kept pieces (repeats count, as in bm25s) of d's weight
for that piece's term: gathers, tf.ragged.range and unsorted_segment_sum over the query terms' postings
(core ops; work proportional to the postings read, not to the vocabulary). The postings are variables of
the module, saved in the SavedModel's variables, not the graph (which has a 2 GB limit).

Where it differs from bm25s: WordPiece splits words bm25s keeps whole (a rare word becomes pieces that
each match other words' pieces) and the stemmer sees only whole-word vocab entries. bench/
hybrid_export_bench.py measures what this costs on SQuAD-open.

reciprocal_rank_fusion is realm_tf/retrieval/fusion.py's in TensorFlow: the same k, float64 sums and the
same tie break (the smaller row first: tf.math.top_k returns the lower index of equal values first).
"""

import re
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf.retrieval import bm25
from realm_tf.retrieval import fusion
from realm_tf.retrieval import hybrid

# bm25s's token pattern is \w\w+: a whole word of one character (or none) is not a term.
_WORD = re.compile(r"^\w\w+$", re.UNICODE)
_PIECE = re.compile(r"\w", re.UNICODE)


def term_map(vocab: Sequence[str], stopwords: bool = True, stem: bool = True) -> np.ndarray:
  """int32 [len(vocab)]: the term each vocab entry counts as (a vocab id), or -1 (see the module doc)."""
  stemmer = None
  if stem:
    import Stemmer  # pylint: disable=g-import-not-at-top,import-outside-toplevel  (exporting only)
    stemmer = Stemmer.Stemmer("english")
  stop = set()
  if stopwords:
    from bm25s import stopwords as bm25s_stopwords  # pylint: disable=g-import-not-at-top,import-outside-toplevel
    stop = set(bm25s_stopwords.STOPWORDS_EN)
  term_of = np.full([len(vocab)], -1, np.int32)
  first_of_stem: Dict[str, int] = {}
  for i, token in enumerate(vocab):
    if token.startswith("[") and token.endswith("]"):
      continue  # [PAD], [CLS], [SEP], [MASK], [UNK], [unusedN]
    if token.startswith("##"):
      if _PIECE.search(token[2:]):
        term_of[i] = i
      continue
    word = token.lower()
    if not _WORD.match(word) or word in stop:
      continue
    key = stemmer.stemWord(word) if stemmer else word
    term_of[i] = first_of_stem.setdefault(key, i)
  return term_of


class WordpieceBm25:
  """A BM25 index over documents given as wordpiece ids; host-side (numpy) scoring for references.

  Args:
    documents: one int sequence of wordpiece ids per document (e.g. the tokenizer's ids of "title body").
    term_of: term_map(vocab).
    k1, b: BM25's parameters (bm25.py's defaults).
  """

  def __init__(self,
               documents: Sequence[Sequence[int]],
               term_of: np.ndarray,
               k1: float = bm25.DEFAULT_K1,
               b: float = bm25.DEFAULT_B):
    if not len(documents):  # pylint: disable=g-explicit-length-test (a sequence or an array)
      raise ValueError("WordpieceBm25: no documents to index; pass at least one")
    if k1 < 0 or not 0 <= b <= 1:
      raise ValueError(f"WordpieceBm25: need k1 >= 0 and 0 <= b <= 1, got k1={k1} b={b}")
    self.term_of = np.asarray(term_of, np.int32)
    self.num_docs = len(documents)
    self.k1, self.b = float(k1), float(b)
    doc_of, term_ids = [], []
    lengths = np.zeros([self.num_docs], np.float64)
    vocab_size = len(self.term_of)
    for d, ids in enumerate(documents):
      ids = np.asarray(ids, np.int64)
      if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"WordpieceBm25: document {d} has wordpiece ids outside [0, {vocab_size}): "
                         "it was tokenized with another vocabulary")
      terms = self.term_of[ids]
      terms = terms[terms >= 0]
      lengths[d] = terms.size
      doc_of.append(np.full(terms.size, d, np.int64))
      term_ids.append(terms.astype(np.int64))
    doc_of = np.concatenate(doc_of)
    term_ids = np.concatenate(term_ids)
    # Counts per (term, document), sorted by term then document: the postings.
    keys, counts = np.unique(term_ids * self.num_docs + doc_of, return_counts=True)
    terms, docs = keys // self.num_docs, keys % self.num_docs
    df = np.bincount(terms, minlength=vocab_size).astype(np.float64)
    idf = np.log(1.0 + (self.num_docs - df + 0.5) / (df + 0.5))
    average = max(lengths.mean(), 1e-9)  # every document empty: weights are 0 anyway
    norm = self.k1 * (1.0 - self.b + self.b * lengths[docs] / average)
    self.weights = (idf[terms] * counts / (counts + norm)).astype(np.float32)
    self.docs = docs.astype(np.int32)
    self.row_splits = np.concatenate([[0], np.cumsum(np.bincount(terms,
                                                                 minlength=vocab_size))]).astype(np.int64)
    self.parameters = {
        "scoring": "lucene (bm25s's)",
        "k1": self.k1,
        "b": self.b,
        "terms": "wordpiece ids mapped by term_map (realm_tf/retrieval/sparse_in_graph.py)",
        "postings": int(self.docs.size)
    }

  def scores(self, queries: Sequence[Sequence[int]]) -> np.ndarray:
    """float32 [Q, num_docs]: BM25 scores of each query (wordpiece ids, no [CLS]/[SEP]/padding)."""
    result = np.zeros([len(queries), self.num_docs], np.float32)
    for q, ids in enumerate(queries):
      for term in self.term_of[np.asarray(ids, np.int64)]:
        if term >= 0:
          begin, end = self.row_splits[term], self.row_splits[term + 1]
          result[q, self.docs[begin:end]] += self.weights[begin:end]
    return result

  def search(self, queries: Sequence[Sequence[int]], k: int) -> Tuple[np.ndarray, np.ndarray]:
    """(rows int64 [Q, k'], scores float32 [Q, k']), best first, ties to the smaller row (as the graph's
    top_k); k' = min(k, num_docs)."""
    scores = self.scores(queries)
    k = min(k, self.num_docs)
    rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return rows.astype(np.int64), np.take_along_axis(scores, rows, 1)


class InGraphBm25(tf.Module):
  """WordpieceBm25's postings as variables, scored with core TensorFlow ops (see the module doc)."""

  def __init__(self, index: WordpieceBm25, name: str = "in_graph_bm25"):
    super().__init__(name=name)
    self.num_docs = index.num_docs
    self.parameters = dict(index.parameters)
    self.term_of = tf.Variable(index.term_of, trainable=False, name="term_of")
    self.row_splits = tf.Variable(index.row_splits, trainable=False, name="row_splits")
    self.docs = tf.Variable(index.docs, trainable=False, name="docs")
    self.weights = tf.Variable(index.weights, trainable=False, name="weights")

  def scores(self, ids: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
    """float32 [B, num_docs] for queries ids int [B, L] (wordpieces, 0-padded) of lengths int [B]."""
    ids = tf.cast(ids, tf.int32)
    batch = tf.shape(ids)[0]
    terms = tf.gather(self.term_of, ids)  # [B, L]
    in_query = tf.sequence_mask(lengths, tf.shape(ids)[1])
    where = tf.where(tf.logical_and(in_query, terms >= 0))  # [M, 2]: (question, position)
    term = tf.cast(tf.gather_nd(terms, where), tf.int64)
    postings = tf.ragged.range(tf.gather(self.row_splits, term), tf.gather(self.row_splits, term + 1))
    flat = postings.flat_values
    question = tf.gather(tf.cast(where[:, 0], tf.int32), tf.cast(postings.value_rowids(), tf.int32))
    segment = question * self.num_docs + tf.gather(self.docs, flat)
    total = tf.math.unsorted_segment_sum(tf.gather(self.weights, flat), segment, batch * self.num_docs)
    return tf.reshape(total, [batch, self.num_docs])

  def search(self, ids: tf.Tensor, lengths: tf.Tensor, k: int) -> Tuple[tf.Tensor, tf.Tensor]:
    """(rows int32 [B, k], scores float32 [B, k]), best first, ties to the smaller row; k <= num_docs."""
    scores, rows = tf.math.top_k(self.scores(ids, lengths), k=k)
    return rows, scores


def reciprocal_rank_fusion(rankings: Sequence[tf.Tensor],
                           num_docs: int,
                           depth: int,
                           k: int = fusion.DEFAULT_K) -> tf.Tensor:
  """fusion.reciprocal_rank_fusion in the graph: rows int32 [B, depth] from rankings int [B, R_i] (rows
  of a num_docs corpus, best first; negative ids are padding). depth <= num_docs; a row that no ranking
  holds scores 0, so it follows every row that one does (fusion's version writes -1 there)."""
  batch = tf.shape(rankings[0])[0]
  total = tf.zeros(tf.stack([batch, num_docs]), tf.float64)
  for ranking in rankings:
    ranking = tf.cast(ranking, tf.int32)
    width = tf.shape(ranking)[1]
    weight = 1.0 / (k + tf.cast(tf.range(1, width + 1), tf.float64))
    where = tf.where(ranking >= 0)  # [M, 2]: (question, rank - 1)
    index = tf.stack([tf.cast(where[:, 0], tf.int32), tf.gather_nd(ranking, where)], 1)
    total = tf.tensor_scatter_nd_add(total, index, tf.gather(weight, where[:, 1]))
  return tf.math.top_k(total, k=depth)[1]


def weighted_score_fusion(rankings: Sequence[tf.Tensor], scores: Sequence[tf.Tensor],
                          weights: Sequence[float], num_docs: int, depth: int) -> tf.Tensor:
  """fusion.weighted_score_fusion in the graph: rows int32 [B, depth] from rankings int [B, R_i] (rows of a
  num_docs corpus, best first; negative ids are padding) and their scores float [B, R_i]. Per question,
  each ranking's scores are z-normalised over its own rows, a row it lacks gets its lowest, and rows are
  ordered by the weighted sum (float64, ties to the smaller row, as fusion's). depth <= num_docs; rows
  that no ranking holds follow every row that one does (fusion's version writes -1 there)."""
  batch = tf.shape(rankings[0])[0]
  total = tf.zeros(tf.stack([batch, num_docs]), tf.float64)
  held = tf.zeros(tf.stack([batch, num_docs]), tf.bool)
  for ranking, score, weight in zip(rankings, scores, weights):
    ranking, score = tf.cast(ranking, tf.int32), tf.cast(score, tf.float64)
    valid = ranking >= 0
    count = tf.reduce_sum(tf.cast(valid, tf.float64), axis=1, keepdims=True)  # [B, 1]
    mean = tf.reduce_sum(tf.where(valid, score, 0.0), axis=1, keepdims=True) / tf.maximum(count, 1.0)
    variance = tf.reduce_sum(tf.where(valid, tf.square(score - mean), 0.0), axis=1,
                             keepdims=True) / tf.maximum(count, 1.0)
    std = tf.sqrt(variance)
    z = (score - mean) / tf.where(std > 0, std, 1.0)
    # A question this ranking holds nothing for adds 0 (fusion skips the ranking there).
    lowest = tf.where(count > 0, tf.reduce_min(tf.where(valid, z, float("inf")), axis=1, keepdims=True), 0.0)
    where = tf.where(valid)  # [M, 2]: (question, rank - 1)
    index = tf.stack([tf.cast(where[:, 0], tf.int32), tf.gather_nd(ranking, where)], 1)
    column = tf.tensor_scatter_nd_update(tf.broadcast_to(lowest, tf.shape(total)), index,
                                         tf.gather_nd(z, where))
    held = tf.tensor_scatter_nd_update(held, index, tf.ones(tf.shape(index)[:1], tf.bool))
    total += weight * column
  return tf.math.top_k(tf.where(held, total, float("-inf")), k=depth)[1]


def tokenized_documents(tokenizer,
                        titles: Sequence[str],
                        bodies: Sequence[str],
                        batch_size: int = 1024) -> list:
  """The wordpiece ids (int64 arrays) of each block's "title body", the text bm25/hybrid index
  (hybrid.block_texts), whole: not truncated to the reader's block length."""
  texts = hybrid.block_texts(titles, bodies)
  tokenize = tf.function(tokenizer.tokenize, autograph=False)
  documents = []
  for begin in range(0, len(texts), batch_size):
    pieces = tokenize(tf.constant(texts[begin:begin + batch_size], tf.string))
    documents.extend(np.split(pieces.flat_values.numpy(), pieces.row_splits.numpy()[1:-1]))
  return documents


def build(tokenizer,
          titles: Sequence[str],
          bodies: Sequence[str],
          k1: float = bm25.DEFAULT_K1,
          b: float = bm25.DEFAULT_B,
          stem: bool = True,
          stopwords: bool = True) -> WordpieceBm25:
  """The WordpieceBm25 of a corpus's blocks with the run's tokenizer (realm_tf.tokenization.Tokenizer)."""
  index = WordpieceBm25(tokenized_documents(tokenizer, titles, bodies),
                        term_map(tokenizer.vocab, stopwords=stopwords, stem=stem), k1, b)
  index.parameters.update(stemmed=stem, stopwords="bm25s's English list" if stopwords else None)
  return index


def question_pieces(questions: Sequence[str], tokenizer) -> list:
  """Host helper: each question's wordpiece ids, as the graph sees them (no [CLS]/[SEP])."""
  pieces = tokenizer.tokenize(tf.constant(list(questions), tf.string))
  return [np.asarray(row, np.int64) for row in pieces.to_list()]


def retrieve_rows(retriever: str,
                  sparse: InGraphBm25,
                  question_ids: tf.Tensor,
                  question_lengths: tf.Tensor,
                  dense_fn,
                  depth: int,
                  fusion_depth: int,
                  bm25_weight: Optional[float] = None) -> tf.Tensor:
  """The rows int32 [B, depth] retriever ("bm25" or "hybrid", hybrid.py's names) returns, best first.

  question_ids int [B, L] (0-padded wordpieces) and question_lengths [B]: the questions, as the sparse
  side reads them. dense_fn(d) gives the dense tower's top d rows int [B, d] and their scores [B, d]; the
  hybrid fuses its and BM25's top fusion_depth (hybrid.FUSION_DEPTH capped at the corpus, as
  hybrid.candidate_rows does) by reciprocal rank fusion, or with bm25_weight by the weighted sum of
  z-normalised scores (hybrid.fuse's two ways; BM25's documents that match no query term left out, as
  hybrid.candidate_rows leaves them out).
  """
  if retriever == hybrid.BM25:
    return sparse.search(question_ids, question_lengths, depth)[0]
  if retriever != hybrid.HYBRID:
    raise ValueError(f"retrieve_rows: retriever must be {hybrid.BM25!r} or {hybrid.HYBRID!r}, got "
                     f"{retriever!r} (the dense tower retrieves by itself)")
  fusion_depth = max(depth, fusion_depth)
  sparse_rows, sparse_scores = sparse.search(question_ids, question_lengths, fusion_depth)
  # As hybrid.unmatched_as_padding: a document matching no query term gets no BM25 rank.
  sparse_rows = tf.where(sparse_scores > 0, sparse_rows, -1)
  dense_rows, dense_scores = dense_fn(fusion_depth)
  if bm25_weight is None:
    return reciprocal_rank_fusion([sparse_rows, dense_rows], sparse.num_docs, depth)
  hybrid.check_bm25_weight(bm25_weight)
  return weighted_score_fusion([sparse_rows, dense_rows], [sparse_scores, dense_scores],
                               [bm25_weight, 1.0 - bm25_weight], sparse.num_docs, depth)
