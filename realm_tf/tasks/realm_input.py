"""The REALM pre-training input pipeline (tf.data on the host), as the original's example generators.

For each example:
  1. sample one salient span that lies inside a sentence (seeded: stateless random of (seed, example
     number), so the stream is deterministic for a given index) and take that sentence as the query;
  2. mask every wordpiece wholly inside the span ([MASK], no 80/10/10), skipping spans that cover no
     wordpiece or would be truncated;
  3. embed the masked query with the STALE query tower of the newest published index and search the top
     candidates; drop the query's own document (same title and text) and duplicates; keep num_candidates-1;
  4. put the learned null document first and featurize candidates ([CLS] title [SEP] body [SEP]) and
     joint inputs ([CLS] query [SEP] body [SEP]).
Step 3 runs in Python (tf.py_function) because the index changes under a running pipeline: every
`check_every_batches` batches it looks for a newer published index and swaps it in (with its corpus, when
bin/update_index changed the documents; RetrievalState), and the candidates' token ids are read from the
corpus in the same call. The trainer reports its step; when the index in use is more than
`max_staleness_steps` behind, retrieval waits for the refresher (the REALM paper found a much staler index
costs about a quarter of the accuracy). Or, with fixed swaps (swap_every_steps), each step trains on the
index of a checkpoint step its number fixes, so which index chose a batch does not depend on timing.

The query's own document is recognized by a 64-bit fingerprint of "title <sep> text" computed in-graph on
both sides (realm_tf.data.corpus_table.document_fingerprint; the corpus stores the original's sha1 uid,
which TensorFlow cannot compute in-graph).
"""

import functools
import os
import threading
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import featurization
from realm_tf import tokenization
from realm_tf import traced_once
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus_table
from realm_tf.modeling import realm as realm_model
from realm_tf.retrieval import index_format
from realm_tf.retrieval import published_index

# How many more documents than kept the search returns, so that dropping the own document and
# duplicates still leaves num_candidates - 1 (in_step_retrieval searches with the same margin, so both
# paths keep the same rows).
SEARCH_MARGIN = 4


def needs_bootstrap(model_dir: str, log: Callable[[str], None] = print) -> bool:
  """Whether a trainer with --bootstrap_index must build the index of step 0: none is published, or the
  model dir has no checkpoint yet and every published index is unusable (which it then deletes, since
  publication never replaces an existing step and nothing else could publish one:
  RetrievalState.ensure_index refuses to wait for it). With a checkpoint, the refresher embeds it."""
  steps = published_index.published_steps(model_dir)
  if not steps:
    return True
  if training_state.latest_step(model_dir) is not None:
    return False
  unusable = {}
  for step in steps:
    path = os.path.join(published_index.index_root(model_dir), str(step))
    try:
      published_index.verify_published(path)
      return False
    except (index_format.CorruptIndexError, OSError, tf.errors.OpError) as e:
      unusable[path] = e
  for path, error in unusable.items():
    log(f"WARNING: deleting the unusable index {path} ({error}): no checkpoint exists yet, so the "
        "bootstrap index takes its place")
    tf.io.gfile.rmtree(path)
  return True


class RetrievalState:
  """The index the pipeline retrieves with, and the corpus it embeds; swapped for newer ones while
  training runs.

  An index of a corpus that bin/update_index derived from the trainer's (the watcher accepts those)
  comes with new rows: documents removed, replaced, appended. The trainer then loads the derived corpus
  (corpus_table.CorpusTable.load with previous=) and swaps the index and the corpus together, and
  retrieve() reads candidate rows and their token ids from one such pair: rows of one version are never
  read from another's table.

  Args:
    watcher: an IndexWatcher over the trainer's model dir.
    corpus: the CorpusTable the published indexes were built over (same rows).
    num_candidates: N including the null document.
    check_every_batches: look for a newer index this often.
    max_staleness_steps: wait for the refresher when the trainer step minus the index step exceeds it
      (None: never wait).
    log: logger.
    expected_dim: the model's retriever projection size; an index of another dimension (built by
      another run's configuration) is an error (None: not checked).
    swap_every_steps: fixed index swaps instead of the newest index (check_every_batches and
      max_staleness_steps then do not apply): the batch of step s retrieves with the index published
      from the checkpoint of step swap_every_steps * floor((s - 1) / swap_every_steps), waiting for it,
      whatever else is published. Which index a step trains on then no longer depends on how fast the
      refresher was, so two runs of one seed train on the same indexes (the demo's numbers repeat, and a
      run under faults compares with a clean one). When that index can no longer come (the refresher
      published a newer one instead: after a restart its newest checkpoint was a later one), the newer
      one is used and a warning says so.
  """

  def __init__(self,
               watcher: published_index.IndexWatcher,
               corpus: corpus_table.CorpusTable,
               num_candidates: int,
               check_every_batches: int = 10,
               max_staleness_steps: Optional[int] = None,
               wait_timeout_seconds: Optional[float] = None,
               log: Callable[[str], None] = print,
               expected_dim: Optional[int] = None,
               swap_every_steps: Optional[int] = None):
    self._check_size(corpus, num_candidates)
    if swap_every_steps is not None and swap_every_steps < 1:
      raise ValueError(f"swap_every_steps must be at least 1, got {swap_every_steps}")
    self.swap_every_steps = swap_every_steps
    self.watcher = watcher
    self.corpus = corpus
    self.num_candidates = num_candidates
    self.check_every_batches = check_every_batches
    self.max_staleness_steps = max_staleness_steps
    self.wait_timeout_seconds = wait_timeout_seconds
    self.expected_dim = expected_dim
    self.trainer_step = 0
    self.index: Optional[published_index.LoadedIndex] = None
    self.indexes_used = []
    # The first exception retrieve() raised: TensorFlow hands it to the trainer wrapped in a graph
    # execution error, and the trainer raises this instead (realm_trainer.train).
    self.error: Optional[BaseException] = None
    self._damaged_targets = set()
    self._batches = 0
    self._log = log
    self._lock = threading.Lock()
    self._closed = threading.Event()

  def close(self) -> None:
    """Ends every wait for an index now and for good (published_index.WaitCancelled): called when
    training finishes, so that batches being prepared ahead of a step that will never run do not keep
    the process from exiting."""
    self._closed.set()

  @staticmethod
  def _check_size(corpus: corpus_table.CorpusTable, num_candidates: int) -> None:
    if corpus.num_docs < num_candidates:
      raise ValueError(f"the corpus {corpus.prefix} has {corpus.num_docs} documents, fewer than "
                       f"num_candidates - 1 + 1 = {num_candidates} needed to fill every example")

  def _corpus_of(self, loaded: published_index.LoadedIndex) -> Optional[corpus_table.CorpusTable]:
    """The corpus table to use with `loaded`: the current one, or that of the corpus bin/update_index
    derived from it (loaded here); None when that corpus cannot be used (the watcher skips the index)."""
    prefix = loaded.record.get("corpus_prefix")
    if (self.watcher.corpus_prefix is None or not prefix or
        os.path.abspath(prefix) == os.path.abspath(self.corpus.prefix)):
      return self.corpus
    try:
      corpus = corpus_table.CorpusTable.load(prefix, previous=self.corpus)
      self._check_size(corpus, self.num_candidates)
    except (ValueError, OSError, tf.errors.OpError) as e:
      self.watcher.skip(
          loaded.step, f"index {loaded.path}: its updated corpus {prefix} cannot be "
          f"used ({str(e).splitlines()[0]}); training goes on with the index of step "
          f"{self.index.step if self.index else None}. Fix or remove the update and "
          "run bin/update_index again")
      return None
    self._log(f"index {loaded.path} embeds {prefix}, which bin/update_index derived from "
              f"{self.corpus.prefix}: retrieving from the updated corpus ({corpus.num_docs} documents, "
              f"{len(corpus.aliases)} replaced since the run began)")
    return corpus

  def _swap(self, loaded: published_index.LoadedIndex) -> bool:
    """Makes `loaded` (and its corpus) the index in use; False when it was skipped."""
    corpus = self._corpus_of(loaded)
    if corpus is None:
      return False
    if loaded.mips.num_docs != corpus.num_docs:
      raise ValueError(f"index {loaded.path} has {loaded.mips.num_docs} documents but the corpus "
                       f"{corpus.prefix} has {corpus.num_docs}; the refresher must use the trainer's "
                       "--retrieval_corpus_path")
    if self.expected_dim is not None and loaded.mips.dim != self.expected_dim:
      raise ValueError(f"index {loaded.path} has dimension {loaded.mips.dim} but the model's retriever "
                       f"projects to {self.expected_dim} (projection_size); the index was built with "
                       "another configuration: delete it, or train in a new --model_dir")
    if corpus is not self.corpus:
      self.watcher.follow(corpus.prefix)
      self.corpus = corpus
    self.index = loaded
    self.indexes_used.append(loaded.step)
    self._log(f"retrieving with the index of step {loaded.step} ({loaded.path})")
    return True

  def ensure_index(self) -> None:
    """Loads the first index, waiting for the refresher when none is published yet."""
    with self._lock:
      while self.index is None:
        loaded = self.watcher.load_newer(None)
        if loaded is None:
          self._refuse_unusable_bootstrap()
        loaded = loaded or self.watcher.wait_for_newer(
            None,
            timeout_seconds=self.wait_timeout_seconds,
            reason="no index yet (bootstrap one with bin/refresh_doc_embeds --once)",
            stop=self._closed)
        if loaded is None:
          raise TimeoutError(f"no index was published under {self.watcher.model_dir}")
        self._swap(loaded)

  def _refuse_unusable_bootstrap(self) -> None:
    """Ends a wait that nothing could end: every published index is unusable (corrupt, truncated) and the
    model dir has no checkpoint, so the refresher, which embeds checkpoints, will never publish one; only
    the trainer's bootstrap (step 0) could, and it already ran. Found by bench/fault_soak: the bootstrap
    index truncated between its publication and the pipeline's first read left the trainer and the
    refresher waiting for each other."""
    steps = published_index.published_steps(self.watcher.model_dir)
    if not steps or not all(self.watcher.is_skipped(step) for step in steps):
      return
    if training_state.latest_step(self.watcher.model_dir) is not None:
      return  # the refresher embeds the newest readable checkpoint whose index is missing or damaged
    paths = ", ".join(
        os.path.join(published_index.index_root(self.watcher.model_dir), str(step)) for step in steps)
    raise index_format.CorruptIndexError(
        f"every published index ({paths}) is unusable (see the warnings above) and "
        f"{self.watcher.model_dir} has no checkpoint yet, so no refresher can publish another: restart "
        "bin/train_realm with --bootstrap_index, which builds the index of step 0 again in place of the "
        "unusable ones (needs_bootstrap)")

  def _maybe_refresh(self) -> None:
    self._batches += 1
    if self._batches % self.check_every_batches == 0:
      newer = self.watcher.load_newer(self.index.step)
      if newer is not None:
        self._swap(newer)
    if self.max_staleness_steps is not None:
      while self.trainer_step - self.index.step > self.max_staleness_steps:
        newer = self.watcher.wait_for_newer(
            self.index.step,
            timeout_seconds=self.wait_timeout_seconds,
            reason=f"the index of step {self.index.step} is {self.trainer_step - self.index.step} "
            f"steps behind the trainer (--max_index_staleness_steps="
            f"{self.max_staleness_steps})",
            stop=self._closed)
        if newer is None:
          raise TimeoutError("the refresher published no newer index in time")
        self._swap(newer)

  def _unreadable_checkpoint(self, step: int) -> Optional[Dict]:
    """What the refresher recorded when it could not read the checkpoint of `step` (so it publishes no
    index of that step), or None."""
    return published_index.unreadable_checkpoint(self.watcher.model_dir, step)

  def _fixed_index(self, step: int) -> None:
    """Makes the index of step `step`'s fixed swap the one in use (swap_every_steps), waiting for it."""
    target = self.swap_every_steps * ((step - 1) // self.swap_every_steps)
    while self.index is None or self.index.step < target:
      loaded = self.watcher.load_newer(self.index.step if self.index else None, at_most=target)
      if loaded is not None and loaded.step == target:
        self._swap(loaded)
        continue
      unreadable = None if self.watcher.is_skipped(target) else self._unreadable_checkpoint(target)
      if (self.watcher.is_skipped(target) or unreadable) and (self.index is not None or loaded is not None):
        # The index of the target step is damaged, and the refresher, which has published it, will
        # not embed that checkpoint again; or the refresher could not read the checkpoint (damaged after
        # the trainer saved it) and will publish no index of its step. Waiting would deadlock (the
        # trainer cannot write the next checkpoint first): train on the newest usable index before it
        # until the next swap.
        if loaded is not None:
          self._swap(loaded)
        if target not in self._damaged_targets:
          self._damaged_targets.add(target)
          why = ("is unusable (see the warning above)" if unreadable is None else
                 f"will not be published (the refresher cannot read {unreadable.get('checkpoint')}: "
                 f"{unreadable.get('reason')})")
          self._log(f"WARNING: the index of step {target}, which step {step} trains on under "
                    f"--index_swap_steps={self.swap_every_steps}, {why}; training on the index of step "
                    f"{self.index.step} until the next swap: from here this run's indexes differ from "
                    "those of an uninterrupted run")
        return
      newest = self.watcher.newest_step()
      if newest is not None and newest > target:
        self._log(f"WARNING: the index of step {target}, which step {step} trains on under "
                  f"--index_swap_steps={self.swap_every_steps}, was not published (the refresher "
                  f"embedded a later checkpoint, as after a restart); using the index of step {newest}: "
                  "from here this run's indexes differ from those of an uninterrupted run")
        loaded = self.watcher.load_newer(self.index.step if self.index else None)
        if loaded is not None:  # else it failed to load and is skipped from now on: look again
          self._swap(loaded)
        continue
      if self.index is None:
        self._refuse_unusable_bootstrap()
      known = self.watcher.newest_step(at_most=target)
      # Given up on when the refresher records that it cannot read the target's checkpoint (then the
      # loop above falls back), as long as there is an index to fall back to: else only a newer one helps.
      fallback = self.index is not None or known is not None
      if self.watcher.wait_for_newer(
          known,
          timeout_seconds=self.wait_timeout_seconds,
          stop=self._closed,
          give_up=lambda: fallback and self._unreadable_checkpoint(target) is not None,
          reason=f"step {step} trains on the index of step {target} (--index_swap_steps="
          f"{self.swap_every_steps})") is None and not (fallback and self._unreadable_checkpoint(target)):
        raise TimeoutError(f"the refresher published no index of step {target} in time")

  def retrieve(self,
               token_ids: np.ndarray,
               mask: np.ndarray,
               segment_ids: np.ndarray,
               own_fingerprints: np.ndarray,
               step: Optional[int] = None):
    """Candidate rows int32 [B, N-1] (the top of the current index, own document and duplicates
    dropped) and their token ids from the same corpus version: title values, title lengths, body
    values, body lengths (int64, B * (N-1) rows). step: the trainer step the batch trains (needed for
    swap_every_steps)."""
    try:
      return self._retrieve(token_ids, mask, segment_ids, own_fingerprints, step)
    except Exception as e:  # pylint: disable=broad-except (recorded, then raised as it is)
      # The first cause: the waits that close() then cancels in batches prepared ahead come after it.
      if self.error is None and not isinstance(e, published_index.WaitCancelled):
        self.error = e
      raise

  def select_index(self, step: Optional[int]) -> Tuple[published_index.LoadedIndex, corpus_table.CorpusTable]:
    """The index (and its corpus) the batch of trainer step `step` retrieves with, swapped in (waiting
    for it) as the schedule says: the fixed swap of that step under swap_every_steps, else the newest
    index within the staleness bound. The host path calls it per batch; the in-step path
    (in_step_retrieval) once per loop, for the loop's first step."""
    if self.swap_every_steps is not None:
      if step is None:
        raise ValueError("the batch's step is needed under swap_every_steps")
      with self._lock:
        self._fixed_index(int(step))
    else:
      self.ensure_index()
    with self._lock:
      if self.swap_every_steps is None:
        self._maybe_refresh()
      return self.index, self.corpus

  def _retrieve(self, token_ids, mask, segment_ids, own_fingerprints, step):
    token_ids, mask, segment_ids, own_fingerprints = (
        np.asarray(t) for t in (token_ids, mask, segment_ids, own_fingerprints))
    index, corpus = self.select_index(step)
    queries = index.embed_queries(token_ids, mask, segment_ids)
    wanted = self.num_candidates - 1
    k = min(corpus.num_docs, wanted + SEARCH_MARGIN)
    ids, _ = index.mips.search(queries, k)
    rows = np.zeros([len(ids), wanted], np.int32)
    for b, (row_ids, own) in enumerate(zip(ids, own_fingerprints)):
      kept, seen = [], corpus.excluded(own)
      for doc in row_ids:
        fingerprint = int(corpus.fingerprints[doc])
        if fingerprint in seen:
          continue
        seen.add(fingerprint)
        kept.append(doc)
        if len(kept) == wanted:
          break
      if len(kept) < wanted:  # tiny corpora with duplicates: fall back to further documents
        extra = [d for d in range(corpus.num_docs) if corpus.fingerprints[d] not in seen]
        kept += extra[:wanted - len(kept)]
      rows[b] = kept
    return (rows,) + corpus.gather(rows.reshape([-1]))


def _select_span(example: Dict[str, tf.Tensor], seed: int, index: tf.Tensor):
  """Picks one salient span inside a sentence, uniformly among such spans (the original drops spans
  that cross sentences). Returns (sentence bytes, span start, span limit relative to it, found)."""
  sentence_starts = example["sentence_byte_start"]
  sentence_limits = example["sentence_byte_limit"]
  span_starts = example["span_byte_start"]
  span_limits = example["span_byte_limit"]
  inside = tf.logical_and(span_starts[tf.newaxis, :] >= sentence_starts[:, tf.newaxis],
                          span_limits[tf.newaxis, :] <= sentence_limits[:, tf.newaxis])  # [S, P]
  valid_spans = tf.where(tf.reduce_any(inside, axis=0))[:, 0]
  num_valid = tf.size(valid_spans)

  def pick():
    u = tf.random.stateless_uniform([], seed=tf.stack([tf.constant(seed, tf.int64), index]))
    choice = tf.minimum(tf.cast(u * tf.cast(num_valid, tf.float32), tf.int32), num_valid - 1)
    span = valid_spans[choice]
    sentence = tf.argmax(tf.cast(inside[:, span], tf.int32), output_type=tf.int64)  # first holder
    start, limit = sentence_starts[sentence], sentence_limits[sentence]
    return start, limit, span_starts[span] - start, span_limits[span] - start

  zero = tf.constant(0, tf.int64)
  start, limit, span_start, span_limit = tf.cond(num_valid > 0, pick, lambda: (zero,) * 4)
  return (tf.strings.substr(example["text"], start, limit - start), span_start, span_limit, num_valid > 0)


# No autograph in this file's dataset functions: none branches on tensors in Python, and converting the
# tokenizer and featurizer costs seconds at each pipeline build.
_no_autograph = tf.autograph.experimental.do_not_convert


def query_features(examples: tf.data.Dataset,
                   tokenizer: tokenization.Tokenizer,
                   featurizer: featurization.Featurizer,
                   seed: int = 0) -> tf.data.Dataset:
  """realm_dataset's front: from parsed pre-training documents (in the order given), one example per
  maskable salient span (steps 1-2 of the module docstring): query features, MLM targets, the own
  document's fingerprint and the masking status (OK only)."""
  examples = examples.enumerate().map(
      _no_autograph(lambda i, ex: (ex["title"], ex["text"]) + _select_span(ex, seed, i)[:4]))
  examples = examples.filter(_no_autograph(lambda title, text, sentence, s, e, ok: ok))
  return examples.batch(64).map(_masked_queries_function(tokenizer, featurizer)).unbatch().filter(
      _no_autograph(lambda f: tf.equal(f["status"], int(featurization.MaskingStatus.OK))))


# The pipeline's two featurizing functions, traced once per process for each vocabulary and featurizer
# setting (realm_tf.traced_once) and then called by every pipeline built with them.


def _masked_queries_function(tokenizer: tokenization.Tokenizer, featurizer: featurization.Featurizer):
  key = ("masked_queries", tuple(tokenizer.vocab), tokenizer.do_lower_case) + featurizer.settings()
  return traced_once.function(key, functools.partial(_build_masked_queries, tokenizer, featurizer))


def _build_masked_queries(tokenizer: tokenization.Tokenizer, featurizer: featurization.Featurizer):
  strings, integers = tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int64)

  @tf.function(
      input_signature=[strings, strings, strings, integers, integers,
                       tf.TensorSpec([None], tf.bool)],
      autograph=False)
  def mask(titles, texts, sentences, span_starts, span_limits, _):
    ids, starts, limits = tokenizer.tokenize_with_offsets(sentences)
    masked = featurizer.mask_salient_span(ids, starts, limits, span_starts, span_limits)
    query = featurizer.query_inputs(masked.token_ids)
    return {
        realm_model.QUERY + "_token_ids": query.token_ids,
        realm_model.QUERY + "_mask": query.mask,
        realm_model.QUERY + "_segment_ids": query.segment_ids,
        realm_model.MLM_POSITIONS: masked.mlm_positions,
        realm_model.MLM_TARGETS: masked.mlm_targets,
        realm_model.MLM_MASK: masked.mlm_mask,
        "own_fingerprint": corpus_table.document_fingerprint(titles, texts),
        "status": masked.status,
    }

  return mask


def _assemble_function(featurizer: featurization.Featurizer, batch_size: int, num_candidates: int):
  queries = tf.TensorSpec([batch_size, featurizer.query_seq_len], tf.int32)
  ragged = tf.RaggedTensorSpec([None, None], tf.int64, row_splits_dtype=tf.int64)
  return traced_once.function(
      ("assemble", batch_size, num_candidates) + featurizer.settings(),
      lambda: tf.function(lambda query_token_ids, query_mask, titles, bodies: assemble_candidates(
          featurizer, batch_size, num_candidates, query_token_ids, query_mask, titles, bodies),
                          input_signature=[queries, queries, ragged, ragged],
                          autograph=False))


def assemble_candidates(featurizer: featurization.Featurizer, batch_size: int, num_candidates: int,
                        query_token_ids: tf.Tensor, query_mask: tf.Tensor, titles: tf.RaggedTensor,
                        bodies: tf.RaggedTensor):
  """realm_dataset's step 4: the candidate and joint BERT inputs [B, N, ...] of a batch, the null
  document first, from its packed queries and its candidates' title and body token ids
  (B * (N-1) rows)."""
  # One featurizer call for the null rows and the real rows together (null first, B rows, then B * (N-1)):
  # each call traces tensorflow_text's trimmer and combiner into thousands of graph ops, and a pipeline
  # build (every trainer start) paid for four of them here instead of two. Rows are featurized
  # independently, so the values are those of separate calls.
  with_null = lambda ids: tf.RaggedTensor.from_row_lengths(
      ids.values, tf.concat([tf.zeros([batch_size], tf.int64),
                             ids.row_lengths()], axis=0))
  candidates = featurizer.candidate_inputs(with_null(titles), with_null(bodies))
  query_lengths = tf.reduce_sum(query_mask, axis=1) - 2
  query_ids = tf.RaggedTensor.from_tensor(query_token_ids[:, 1:], lengths=query_lengths)
  query_rows = tf.concat([tf.range(batch_size), tf.repeat(tf.range(batch_size), num_candidates - 1)], axis=0)
  joint = featurizer.joint_inputs(tf.gather(query_ids, query_rows), with_null(bodies))
  out = {}
  for prefix, inputs in ((realm_model.CANDIDATE, candidates), (realm_model.JOINT, joint)):
    for field, values in zip(realm_model.BERT_FIELDS, inputs):
      null_values = values[:batch_size, tf.newaxis, :]
      values = tf.reshape(values[batch_size:], [batch_size, num_candidates - 1, -1])
      out[f"{prefix}_{field}"] = tf.concat([null_values, values], axis=1)
  return out


def query_batches(pretraining_examples: tf.data.Dataset,
                  tokenizer: tokenization.Tokenizer,
                  featurizer: featurization.Featurizer,
                  batch_size: int,
                  seed: int = 0,
                  shuffle_buffer: int = 10000,
                  skip_batches: int = 0) -> tf.data.Dataset:
  """The batches of masked queries (query_features, graph ops only) that realm_dataset retrieves for,
  in its order; the in-step path feeds them to the step as they are (realm_dataset says what the
  arguments mean)."""
  examples = pretraining_examples.repeat().shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
  queries = query_features(examples, tokenizer, featurizer, seed)
  return queries.batch(batch_size, drop_remainder=True).skip(skip_batches)


def realm_dataset(pretraining_examples: tf.data.Dataset,
                  tokenizer: tokenization.Tokenizer,
                  featurizer: featurization.Featurizer,
                  state: RetrievalState,
                  batch_size: int,
                  seed: int = 0,
                  shuffle_buffer: int = 10000,
                  skip_batches: int = 0) -> tf.data.Dataset:
  """Batches of REALM features (see realm_tf.modeling.realm); state.index says which index chose them.

  Args:
    pretraining_examples: parsed pre-training documents (realm_tf.data.pretraining), in row order.
    tokenizer, featurizer: as the run's RealmConfig builds them.
    state: the RetrievalState shared with the trainer.
    batch_size: examples per batch (drop_remainder: static shapes).
    seed: the example stream is a function of the seed (and of the index used for retrieval).
    skip_batches: batches to skip, so a resumed run continues the same stream where it stopped.
  """
  num_candidates = state.num_candidates
  # Numbered by the trainer step that will train on each batch (state.swap_every_steps needs it).
  batches = query_batches(pretraining_examples, tokenizer, featurizer, batch_size, seed, shuffle_buffer,
                          skip_batches).enumerate(start=skip_batches + 1)

  @_no_autograph
  def retrieve(step, features):
    rows, title_values, title_lengths, body_values, body_lengths = tf.py_function(
        state.retrieve, [
            features["query_token_ids"], features["query_mask"], features["query_segment_ids"],
            features["own_fingerprint"], step
        ], [tf.int32, tf.int64, tf.int64, tf.int64, tf.int64])
    rows.set_shape([batch_size, num_candidates - 1])
    lengths_shape = [batch_size * (num_candidates - 1)]
    title_lengths.set_shape(lengths_shape)
    body_lengths.set_shape(lengths_shape)
    # The token ids come out of the same call as the rows: the corpus in use changes under a running
    # pipeline (bin/update_index), so a table captured in the graph would go stale.
    titles = tf.RaggedTensor.from_row_lengths(tf.reshape(title_values, [-1]), title_lengths)
    bodies = tf.RaggedTensor.from_row_lengths(tf.reshape(body_values, [-1]), body_lengths)
    return features, titles, bodies

  assemble_batch = _assemble_function(featurizer, batch_size, num_candidates)

  @_no_autograph
  def assemble(features, titles, bodies):
    out = {k: v for k, v in features.items() if k not in ("own_fingerprint", "status")}
    out.update(assemble_batch(features["query_token_ids"], features["query_mask"], titles, bodies))
    return out

  return batches.map(retrieve).map(assemble).prefetch(2)
