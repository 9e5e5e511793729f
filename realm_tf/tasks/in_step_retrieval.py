"""REALM retrieval inside the compiled train step (issue 42), instead of the host pipeline's py_function.

realm_input.realm_dataset retrieves on the trainer's host: per batch, a tf.py_function embeds the masked
queries with the stale query tower of the published index, searches it, drops the own document and
duplicates, and reads the candidates' token ids. At pod scale the host cannot keep up. Here the same
work is graph ops over non-trainable variables that hold the index in use (its document embeddings,
its stale query tower, the corpus's token ids, fingerprints and aliases), so it runs inside the step
on the accelerator, and the host pipeline stops at realm_input.query_features (graph ops only, so it can
run under tf.data service).

Staleness stays the original's: the variables change only when `swap` loads a newer published index
between steps; the trainer's own retriever never scores documents here.

Search is exact (matmul + top_k, as BruteForceIndex). `top_k_of_shard` scores one slice of rows and
returns global row ids, and `merge_top_k` merges shards' tops, so the rows can be sharded across
replicas. With MirroredStrategy on few replicas every replica holds the whole index: a sharded search
needs an all-gather of every replica's queries and of the shard tops inside the step, which costs more
than scoring the whole corpus on one device until the corpus outgrows a device's memory.
"""

import os
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from realm_tf import featurization
from realm_tf.data import corpus_table
from realm_tf.modeling import realm as realm_model
from realm_tf.retrieval import published_index
from realm_tf.tasks import realm_input


def top_k_of_shard(queries: tf.Tensor, shard_embeddings: tf.Tensor, first_row: tf.Tensor, k: int):
  """Exact top-k of one slice of the corpus's rows: (scores float32 [B, k], global rows int32 [B, k]).

  queries: float32 [B, D]; shard_embeddings: float32 [R, D], the rows first_row .. first_row + R - 1."""
  scores = tf.matmul(queries, shard_embeddings, transpose_b=True)  # [B, R]
  top_scores, top_rows = tf.math.top_k(scores, k=k)
  return top_scores, top_rows + tf.cast(first_row, tf.int32)


def merge_top_k(shard_scores, shard_rows, k: int):
  """The top-k of several shards' tops (lists of [B, k_s] in shard order): (scores, rows) [B, k]. Ties
  keep the lower shard first, as one top_k over the whole corpus keeps the lower row."""
  scores = tf.concat(shard_scores, axis=1)
  rows = tf.concat(shard_rows, axis=1)
  top_scores, positions = tf.math.top_k(scores, k=k)
  return top_scores, tf.gather(rows, positions, batch_dims=1)


def _first_true(keep: tf.Tensor, count: int) -> tf.Tensor:
  """Positions int32 [B, count] of the first `count` True entries of each row of keep [B, L] (rows
  with fewer are padded with later False positions; callers fill those)."""
  length = tf.shape(keep)[1]
  positions = tf.range(length)[tf.newaxis, :]
  order = tf.where(keep, positions, positions + length)
  return tf.math.top_k(-order, k=count).indices


class InStepRetrieval(tf.Module):
  """The index in use as variables, and REALM's candidate retrieval as graph ops over them.

  Args:
    loaded: the published index to start with (published_index.load_published), its corpus:
    corpus: the CorpusTable it embeds (same rows).
    featurizer: the run's featurizer (RealmConfig.featurizer): candidates are featurized by
      realm_input.assemble_candidates, so the model gets the features the host pipeline makes.
    num_candidates: N including the null document.
  """

  def __init__(self, loaded: published_index.LoadedIndex, corpus: corpus_table.CorpusTable,
               featurizer: featurization.Featurizer, num_candidates: int):
    super().__init__(name="in_step_retrieval")
    self.featurizer = featurizer
    self.num_candidates = num_candidates
    self.step = loaded.step
    embeddings = np.asarray(loaded.mips.embeddings, np.float32)
    self.dim = embeddings.shape[1]
    var = lambda value, shape, name: tf.Variable(value, trainable=False, shape=shape, name=name)
    # Shapes are left open along the rows: an index of an updated corpus has another number of rows.
    self.embeddings = var(embeddings, [None, self.dim], "doc_embeddings")
    titles, bodies = corpus.ragged_token_ids()
    self.title_values = var(titles.values, [None], "title_values")
    self.title_splits = var(titles.row_splits, [None], "title_row_splits")
    self.body_values = var(bodies.values, [None], "body_values")
    self.body_splits = var(bodies.row_splits, [None], "body_row_splits")
    self.fingerprints = var(corpus.fingerprints.astype(np.int64), [None], "fingerprints")
    keys, values = self._aliases(corpus)
    self.alias_keys = var(keys, [None], "alias_keys")
    self.alias_values = var(values, [None], "alias_values")
    self.corpus = corpus
    # The stale query tower is a private load of the published SavedModel (the tower the host path
    # calls): a swap assigns the newer tower's weights into its variables, which the traced step reads,
    # and must not change the LoadedIndex that others (a RetrievalState) hold.
    self.query_embedder = tf.saved_model.load(os.path.join(loaded.path, published_index.QUERY_EMBEDDER_DIR))
    self._tower_variables = self._variables_of(self.query_embedder)

  @staticmethod
  def _aliases(corpus: corpus_table.CorpusTable):
    items = sorted(corpus.aliases.items())
    return (np.asarray([k for k, _ in items],
                       np.int64).reshape([-1]), np.asarray([v for _, v in items], np.int64).reshape([-1]))

  @staticmethod
  def _variables_of(saved_model):
    """The tower's variables in its traced function's order (a published tower is a
    QueryEmbedderModule SavedModel: two towers of one configuration list them alike; names are not
    unique in a loaded SavedModel, so they are matched by position and shape)."""
    found = list(saved_model.embed.concrete_functions[0].variables)
    if not found:
      raise ValueError("the published query_embedder/ SavedModel has no variables; republish the index "
                       "with realm_tf.retrieval.published_index.publish_index")
    return found

  def swap(self,
           loaded: published_index.LoadedIndex,
           corpus: Optional[corpus_table.CorpusTable] = None) -> None:
    """Loads a newer published index (and its corpus, when bin/update_index changed the documents) into
    the variables. Call between steps, as RetrievalState swaps between batches."""
    embeddings = np.asarray(loaded.mips.embeddings, np.float32)
    if embeddings.shape[1] != self.dim:
      raise ValueError(f"{loaded.path}: {embeddings.shape[1]}-dimensional embeddings, but the index in "
                       f"use has {self.dim}; an index of another run's configuration cannot be swapped in")
    corpus = corpus or self.corpus
    if len(embeddings) != corpus.num_docs:
      raise ValueError(f"{loaded.path} holds {len(embeddings)} rows but the corpus {corpus.prefix} has "
                       f"{corpus.num_docs}; pass the corpus the index embeds")
    newer = self._variables_of(loaded.query_embedder)
    if [v.shape for v in newer] != [v.shape for v in self._tower_variables]:
      raise ValueError(f"{loaded.path}: its query tower has other variables than the index in use; an "
                       "index of another run's configuration cannot be swapped in")
    for variable, value in zip(self._tower_variables, newer):
      variable.assign(value)
    self.embeddings.assign(embeddings)
    if corpus is not self.corpus:
      titles, bodies = corpus.ragged_token_ids()
      for variable, value in ((self.title_values, titles.values), (self.title_splits, titles.row_splits),
                              (self.body_values, bodies.values), (self.body_splits, bodies.row_splits),
                              (self.fingerprints, corpus.fingerprints.astype(np.int64))):
        variable.assign(value)
      self.corpus = corpus
    keys, values = self._aliases(corpus)
    self.alias_keys.assign(keys)
    self.alias_values.assign(values)
    self.step = loaded.step

  def candidate_rows(self, query_token_ids: tf.Tensor, query_mask: tf.Tensor, query_segment_ids: tf.Tensor,
                     own_fingerprint: tf.Tensor) -> tf.Tensor:
    """int32 [B, N-1]: the rows RetrievalState.retrieve returns for the same queries and index."""
    wanted = self.num_candidates - 1
    k = min(self.corpus.num_docs, wanted + realm_input.SEARCH_MARGIN)
    queries = self.query_embedder.embed(tf.cast(query_token_ids, tf.int32), tf.cast(query_mask, tf.int32),
                                        tf.cast(query_segment_ids, tf.int32))["embeddings"]
    # One shard: every replica holds every row (see the module docstring).
    shard_scores, shard_rows = top_k_of_shard(queries, self.embeddings.read_value(), 0, k)
    _, top = merge_top_k([shard_scores], [shard_rows], k=k)
    fingerprints = tf.gather(self.fingerprints, top)  # [B, k]
    own = tf.cast(own_fingerprint, tf.int64)
    # corpus.excluded(own): the own fingerprint and its alias (the newest text of a replaced document).
    alias_hit = tf.equal(self.alias_keys[tf.newaxis, :], own[:, tf.newaxis])  # [B, A]
    alias = tf.where(tf.reduce_any(alias_hit, axis=1),
                     tf.reduce_sum(tf.where(alias_hit, self.alias_values[tf.newaxis, :], 0), axis=1), own)
    excluded = tf.stack([own, alias], axis=1)  # [B, 2]
    is_excluded = tf.reduce_any(tf.equal(fingerprints[:, :, tf.newaxis], excluded[:, tf.newaxis, :]), axis=2)
    # A duplicate of an earlier entry is dropped whether that one was kept or itself dropped: a dropped
    # earlier one was excluded or a duplicate of a kept one, so its copies are too (the host's `seen`).
    same = tf.equal(fingerprints[:, :, tf.newaxis], fingerprints[:, tf.newaxis, :])  # [B, k, k]
    earlier = tf.linalg.band_part(tf.ones([k, k], tf.bool), -1, 0) & ~tf.eye(k, dtype=tf.bool)
    duplicate = tf.reduce_any(same & earlier[tf.newaxis], axis=2)
    keep = ~is_excluded & ~duplicate
    rows = tf.gather(top, _first_true(keep, wanted), batch_dims=1)
    enough = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1) >= wanted

    def fill_short_rows():
      # Tiny corpora with duplicates: as the host, the short rows take the first further documents in
      # row order whose fingerprint is neither excluded nor kept (a full scan, so only on demand).
      kept_mask = tf.gather(keep, _first_true(keep, wanted), batch_dims=1)
      seen = tf.concat(
          [excluded, tf.where(kept_mask, tf.gather(self.fingerprints, rows), own[:, None])],
          axis=1)  # [B, 2 + wanted]
      unseen = ~tf.reduce_any(tf.equal(self.fingerprints[tf.newaxis, :, tf.newaxis], seen[:, tf.newaxis, :]),
                              axis=2)  # [B, num_docs]
      num_kept = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1, keepdims=True)
      extra = _first_true(unseen, wanted)  # rows in row order
      slot = tf.range(wanted)[tf.newaxis, :]
      from_extra = tf.gather(extra, tf.maximum(slot - num_kept, 0), batch_dims=1)
      return tf.where(slot < num_kept, rows, from_extra)

    return tf.cond(tf.reduce_all(enough), lambda: rows, fill_short_rows)

  def candidate_features(self, features: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The REALM features of a batch of realm_input.query_features (batched; own_fingerprint and
    status are dropped): the query and MLM features as given, and the null + retrieved candidate and
    joint inputs [B, N, ...], as realm_input.realm_dataset makes them. Graph-only: call inside the
    step (per replica)."""
    query = realm_model.QUERY
    rows = self.candidate_rows(features[query + "_token_ids"], features[query + "_mask"],
                               features[query + "_segment_ids"], features["own_fingerprint"])
    flat = tf.reshape(rows, [-1])
    titles = tf.gather(
        tf.RaggedTensor.from_row_splits(self.title_values.read_value(), self.title_splits.read_value()), flat)
    bodies = tf.gather(
        tf.RaggedTensor.from_row_splits(self.body_values.read_value(), self.body_splits.read_value()), flat)
    batch_size = features[query + "_token_ids"].shape[0]
    if batch_size is None:
      raise ValueError("in-step retrieval needs a static batch size: batch the query features with "
                       "drop_remainder=True")
    out = {k: v for k, v in features.items() if k not in ("own_fingerprint", "status")}
    out.update(
        realm_input.assemble_candidates(self.featurizer, batch_size, self.num_candidates,
                                        features[query + "_token_ids"], features[query + "_mask"], titles,
                                        bodies))
    return out
