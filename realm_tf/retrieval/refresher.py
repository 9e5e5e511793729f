"""The index refresher: re-embeds the corpus from the trainer's checkpoints and publishes new indexes.

It polls the trainer's model dir for checkpoints (sleeping between looks, never a busy loop; when several
checkpoints arrived meanwhile it jumps to the newest; it says it is waiting once per wait), restores the
document tower of that step, embeds the whole corpus, builds the MIPS index, and publishes it with the
query tower of the same step (realm_tf.retrieval.published_index). It stops when the trainer's done marker
appears (after publishing the final checkpoint's index) or after max_refreshes.

With several workers (hosts), each embeds a contiguous run of the corpus and writes its rows; worker 0
waits for all of them, merges, builds and publishes.
"""

import contextlib
import dataclasses
import os
import shutil
import time
from typing import Callable, Iterator, Optional

import tensorflow as tf

from realm_tf import process_lock
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus as corpus_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import corpus_embedding
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import published_index


@dataclasses.dataclass(frozen=True)
class RefresherOptions:
  """Options of bin/refresh_doc_embeds (see its flags)."""
  model_dir: str
  corpus_prefix: str
  index_implementation: str = "scann"
  # ScaNN's re-scoring vectors: "float32", or "int8" for a compressed index (int8_rescoring.Int8Embeddings).
  index_rescoring: str = "float32"
  keep: int = 3
  batch_size: int = 128
  # None: corpus_embedding.default_length_buckets (4 with XLA, one every 8 wordpieces without).
  embed_length_buckets: Optional[int] = None
  # XLA for the embedding step; off is faster for a mixed_bfloat16 tower on CPUs (oneDNN's AMX kernels).
  embed_jit_compile: bool = True
  max_refreshes: Optional[int] = None
  poll_seconds: float = 5.0
  start_at_step: int = 0
  num_workers: int = 1
  worker_index: int = 0
  merge_timeout_seconds: float = 1800.0
  wait_for_lock: bool = False


def _one_refresher(options: RefresherOptions, log: Callable[[str], None]):
  """The model dir's refresher lock (realm_tf.process_lock), held for the refresher's life: a second
  refresher on the same model dir raises LockedError naming the first (or waits, wait_for_lock). Workers
  other than 0 only write their rows and do not take it; a remote model dir (gs://) cannot be flocked."""
  if options.worker_index != 0:
    return contextlib.nullcontext()
  if "://" in options.model_dir:
    log(f"WARNING: {options.model_dir} is not a local filesystem: nothing stops a second refresher on it")
    return contextlib.nullcontext()
  return process_lock.exclusive(os.path.join(options.model_dir, process_lock.LOCK_NAME),
                                "bin/refresh_doc_embeds",
                                wait=options.wait_for_lock,
                                poll_seconds=options.poll_seconds,
                                log=log)


def build_and_publish(config: realm_config_lib.RealmConfig,
                      retriever,
                      step: int,
                      options: RefresherOptions,
                      strategy: Optional[tf.distribute.Strategy] = None,
                      info: Optional[dict] = None,
                      log: Callable[[str], None] = print,
                      embedder: Optional[corpus_embedding.CorpusEmbedder] = None) -> Optional[str]:
  """Embeds the corpus with `retriever`'s document tower and publishes the index of `step`.

  embedder: the process's CorpusEmbedder of this retriever (corpus_embedder), so that a refresh reuses
  the programs compiled by the one before; a new one by default.
  Returns the published path, or None on a worker other than 0 (which only writes its rows).
  """
  embedder = embedder or corpus_embedder(config, retriever, options, strategy)
  start = time.time()
  embeddings = embedder(options.corpus_prefix,
                        num_workers=options.num_workers,
                        worker_index=options.worker_index,
                        log=log)
  embed_seconds = time.time() - start
  if options.num_workers > 1:
    shards_dir = os.path.join(published_index.index_root(options.model_dir), f".embeddings-{step}")
    corpus_embedding.save_worker_embeddings(embeddings, shards_dir, options.num_workers, options.worker_index)
    if options.worker_index != 0:
      return None
    # Workers pick checkpoints independently, so one may have moved on to a newer step: give up on this
    # step after merge_timeout_seconds (or when training is done) instead of waiting forever.
    deadline = time.time() + options.merge_timeout_seconds
    while True:
      try:
        embeddings = corpus_embedding.merge_worker_embeddings(shards_dir, options.num_workers)
        break
      except FileNotFoundError as e:
        if time.time() >= deadline or training_state.training_done(options.model_dir):
          log(f"WARNING: giving up on the index of step {step}: {e}")
          shutil.rmtree(shards_dir, ignore_errors=True)
          return None
        log(f"{e}; waiting")
        time.sleep(options.poll_seconds)
    shutil.rmtree(shards_dir, ignore_errors=True)
  start = time.time()
  mips = index_lib.build_index(embeddings,
                               implementation=options.index_implementation,
                               **index_build_options(options))
  build_seconds = time.time() - start
  record = dict(info or {},
                corpus_prefix=options.corpus_prefix,
                corpus_fingerprint=corpus_lib.fingerprint(options.corpus_prefix),
                embed_seconds=embed_seconds,
                build_seconds=build_seconds,
                implementation=options.index_implementation)
  path = published_index.publish_index(options.model_dir,
                                       step,
                                       mips,
                                       retriever.query_embedder,
                                       info=record,
                                       keep=options.keep,
                                       log=log)
  log(f"published index of step {step} at {path}: {mips.num_docs} documents, embedded in "
      f"{embed_seconds:.1f} s ({mips.num_docs / max(embed_seconds, 1e-9):.1f} docs/s), index built in "
      f"{build_seconds:.1f} s")
  return path


def index_build_options(options: RefresherOptions) -> dict:
  """The build options of the published indexes (the compressed form is ScaNN's only)."""
  if options.index_implementation != "scann":
    if options.index_rescoring != "float32":
      raise ValueError(f"--index_rescoring={options.index_rescoring} needs --index_implementation=scann "
                       f"(the {options.index_implementation} index scores float32 vectors only)")
    return {}
  return {"rescoring": options.index_rescoring}


def corpus_embedder(config: realm_config_lib.RealmConfig,
                    retriever,
                    options: RefresherOptions,
                    strategy: Optional[tf.distribute.Strategy] = None) -> corpus_embedding.CorpusEmbedder:
  """The embedding of the corpus by retriever's document tower, compiled once for every refresh."""
  return corpus_embedding.CorpusEmbedder(lambda inputs: retriever.embed_documents(inputs, training=False),
                                         config.featurizer(),
                                         batch_size=options.batch_size,
                                         strategy=strategy,
                                         jit_compile=options.embed_jit_compile,
                                         num_length_buckets=options.embed_length_buckets)


def bootstrap(config: realm_config_lib.RealmConfig,
              init_checkpoint: Optional[str],
              options: RefresherOptions,
              strategy: Optional[tf.distribute.Strategy] = None,
              log: Callable[[str], None] = print) -> Optional[str]:
  """Publishes the index of step 0 from a warm-start checkpoint (ICT, converted, or a REALM run);
  without a checkpoint, from the freshly initialized retriever."""
  corpus_lib.check_vocab(config.vocab_path,
                         options.corpus_prefix,
                         config.vocab_sha256,
                         "the run's realm_config.json",
                         source="realm_config.json's vocab_path")
  with (strategy or tf.distribute.get_strategy()).scope():
    retriever = config.build_retriever()
  info = {"bootstrap": True}
  if init_checkpoint:
    info["checkpoint"] = training_state.restore_retriever(retriever, init_checkpoint)
  with _one_refresher(options, log):
    return build_and_publish(config, retriever, 0, options, strategy, info, log)


# How often an idle refresher looks at the index of the newest checkpoint (published_index.looks_damaged).
DAMAGE_LOOK_SECONDS = 30.0


def _new_checkpoints(options: RefresherOptions, log: Callable[[str], None]) -> Iterator[str]:
  """Yields each newest checkpoint once, polling every poll_seconds, until training is done.

  Not tf.train.checkpoints_iterator: that logs "Waiting for new checkpoint" on every poll (hundreds of
  lines per run, twice each through TensorFlow's and absl's loggers); this says it waits once per wait.
  Once the done marker is seen it looks once more, so the final checkpoint, written just before the
  marker, is still yielded. While it waits it looks at the newest checkpoint's index every
  DAMAGE_LOOK_SECONDS, and yields that checkpoint again when the index was damaged.
  """
  last = None
  waiting = False
  done_seen = False
  next_look = time.time() + DAMAGE_LOOK_SECONDS
  looked_again = set()
  while True:
    latest = tf.train.latest_checkpoint(options.model_dir)
    if latest is not None and latest != last:
      last, waiting = latest, False
      log(f"found new checkpoint {latest}")
      yield latest
      continue
    if last is not None and time.time() >= next_look:
      # The index of the newest checkpoint damaged after it was published (found by bench/fault_soak): a
      # trainer resumed from that checkpoint with no other usable index would wait for it for ever, and no
      # newer checkpoint comes. Once per damaged directory: embedding it again may fail in turn.
      next_look = time.time() + DAMAGE_LOOK_SECONDS
      step = training_state.checkpoint_step(last)
      path = os.path.join(published_index.index_root(options.model_dir), str(step))
      damaged = published_index.looks_damaged(options.model_dir, step) if os.path.isdir(path) else None
      try:
        identity = (step, os.stat(path).st_ino, os.stat(path).st_ctime_ns) if damaged else None
      except OSError:  # removed meanwhile (keep-K, or a bin/update_index)
        identity = None
      if identity is not None and identity not in looked_again:
        looked_again.add(identity)
        log(f"the index of step {step} is damaged ({damaged}): embedding {last} again")
        waiting = False
        yield last
        continue
    if training_state.training_done(options.model_dir):
      if done_seen:
        return
      done_seen = True
    elif not waiting:
      log(f"waiting for a checkpoint newer than {os.path.basename(last)} in {options.model_dir}"
          if last else f"waiting for the trainer's first checkpoint (ckpt-<step>) in {options.model_dir}")
      waiting = True
    time.sleep(options.poll_seconds)


def _restore_newest_readable(retriever, newest: str, options: RefresherOptions,
                             log: Callable[[str], None]) -> Optional[str]:
  """Restores newest, or when it cannot be read (damaged, or deleted by the trainer's keep-K cleanup
  between the look and the read) the newest earlier checkpoint that is newer than every usable published
  index, so the trainer still gets a fresher index; returns the path restored, or None (then the
  refresher waits for the next checkpoint). Each checkpoint skipped is recorded (published_index.
  record_unreadable_checkpoint): no index of its step will come, and a trainer under fixed swaps waiting
  for one must not wait for it (it cannot write the newer checkpoint the refresher waits for)."""

  def restored(path: str) -> bool:
    try:
      training_state.restore_retriever(retriever, path)
      return True
    except (ValueError, FileNotFoundError) as e:
      reason = str(e).splitlines()[0][:500]
      log(f"WARNING: skipping {path}: {reason}")
      published_index.record_unreadable_checkpoint(options.model_dir, training_state.checkpoint_step(path),
                                                   path, reason)
      return False

  if restored(newest):
    return newest
  state = tf.train.get_checkpoint_state(options.model_dir)
  listed = list(state.all_model_checkpoint_paths) if state else []
  # Newer than the newest index that is usable: a checkpoint whose index was damaged is embedded again
  # (found by bench/fault_soak: the trainer, resumed from ckpt-20 after ckpt-26 was damaged, waited for
  # the damaged index of step 20, and the refresher for a checkpoint newer than ckpt-26).
  floor = options.start_at_step - 1
  for step in reversed(published_index.published_steps(options.model_dir)):
    if published_index.usable(options.model_dir, step) is None:
      floor = max(floor, step)
      break
  for path in reversed(listed):
    if floor < training_state.checkpoint_step(path) < training_state.checkpoint_step(newest) and restored(
        path):
      log(f"embedding {path} instead of the unreadable {os.path.basename(newest)}")
      return path
  return None


def run(options: RefresherOptions,
        strategy: Optional[tf.distribute.Strategy] = None,
        log: Callable[[str], None] = print) -> int:
  """The refresher loop; returns the number of indexes published (or, on workers > 0, embedded)."""
  with _one_refresher(options, log):
    return _run_locked(options, strategy, log)


def _run_locked(options: RefresherOptions, strategy: Optional[tf.distribute.Strategy],
                log: Callable[[str], None]) -> int:
  published_index.clean_temporary(options.model_dir, log)
  config_path = os.path.join(options.model_dir, realm_config_lib.CONFIG_NAME)
  announced = False
  while not tf.io.gfile.exists(config_path):
    if training_state.training_done(options.model_dir):
      log(f"{options.model_dir} is marked done and has no {realm_config_lib.CONFIG_NAME}; exiting")
      return 0
    if not announced:
      log(f"waiting for the trainer to write {config_path}")
      announced = True
    time.sleep(options.poll_seconds)
  config = realm_config_lib.RealmConfig.load(config_path)
  corpus_lib.check_vocab(config.vocab_path,
                         options.corpus_prefix,
                         config.vocab_sha256,
                         config_path,
                         source=f"{config_path}'s vocab_path")
  with (strategy or tf.distribute.get_strategy()).scope():
    retriever = config.build_retriever()
  # One for the process: checkpoints are restored into `retriever` in place, so the compiled programs
  # stay valid from one refresh to the next.
  embedder = corpus_embedder(config, retriever, options, strategy)

  refreshes = 0
  for checkpoint_path in _new_checkpoints(options, log):
    step = training_state.checkpoint_step(checkpoint_path)
    if step < options.start_at_step or (step in published_index.published_steps(options.model_dir) and
                                        published_index.usable(options.model_dir, step) is None):
      continue
    checkpoint_path = _restore_newest_readable(retriever, checkpoint_path, options, log)
    if checkpoint_path is None:
      continue
    step = training_state.checkpoint_step(checkpoint_path)
    damaged = published_index.usable(options.model_dir, step)
    if step in published_index.published_steps(options.model_dir) and damaged is not None:
      # Publication never replaces an index, and the trainer waits for this one when it resumed from
      # this checkpoint with no usable index to fall back to.
      published_index.remove_damaged(options.model_dir, step, damaged, log)
    # bin/update_index publishes an index of a corpus derived from this one: every refresh after it
    # embeds that corpus, or the next refresh would undo the update.
    followed = published_index.current_corpus(options.model_dir, options.corpus_prefix, log)
    if followed != options.corpus_prefix:
      options = dataclasses.replace(options, corpus_prefix=followed)
    build_and_publish(config, retriever, step, options, strategy, {"checkpoint": checkpoint_path}, log,
                      embedder)
    refreshes += 1
    if options.max_refreshes is not None and refreshes >= options.max_refreshes:
      log(f"published {refreshes} indexes (--max_refreshes); exiting")
      break
  else:
    log(f"training is done ({training_state.DONE_MARKER} in {options.model_dir}); exiting after "
        f"{refreshes} refreshes")
  return refreshes
