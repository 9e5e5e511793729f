"""Embedding the whole retrieval corpus with the document tower, in corpus row order.

Row i of the result is document i of the corpus (sorted shard order), because the index maps rows back
to documents. Documents are grouped by packed length into padded lengths (length_buckets), so a short
document is not padded to candidate_seq_len. Compiled with XLA (TPUs), a few lengths and static-shaped
batches: a bucket's last partial batch is padded with copies of its first document and the padding
dropped afterwards (the original DocumentEmbedder padded the same way). Without XLA, shapes may vary:
a length every 8 wordpieces and no filled batches, so almost nothing is padding (as sentence-
transformers' length-sorted batches), under one traced function.
Under a distribution strategy the batches go through distribute_datasets_from_function, each global
batch split across the replicas in order; the rows come back with their embeddings. Several workers
(hosts) can each take a contiguous run of rows (--num_workers, --worker_index);
`merge_worker_embeddings` concatenates their outputs in worker order.
"""

import dataclasses
import os
import time
from typing import Callable, List, Optional

import numpy as np
import tensorflow as tf

from realm_tf import featurization
from realm_tf import io_utils
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import untuned

# Four padded lengths: on SQuAD's paragraphs (mean 155 of 288 wordpieces) about half of a fully padded
# batch is padding; four static shapes keep XLA's compilation to a handful of programs.
DEFAULT_LENGTH_BUCKETS = 4
# Without XLA: a padded length every this many wordpieces. On 1,000 SQuAD dev paragraphs at 256, 78% of
# the tokens of 4 filled buckets are real, 97% here (sentence-transformers' sorted batches: 98%).
DYNAMIC_BUCKET_WIDTH = 8


def default_length_buckets(candidate_seq_len: int, jit_compile: bool) -> int:
  """The number of padded lengths CorpusEmbedder uses unless told: few for XLA, fine without."""
  if jit_compile:
    return DEFAULT_LENGTH_BUCKETS
  return max(1, -(-candidate_seq_len // DYNAMIC_BUCKET_WIDTH))


def worker_rows(num_docs: int, num_workers: int, worker_index: int) -> range:
  """The contiguous rows [start, limit) that worker_index embeds."""
  if not 0 <= worker_index < num_workers:
    raise ValueError(f"--worker_index must be in [0, {num_workers}), got {worker_index}")
  return range(num_docs * worker_index // num_workers, num_docs * (worker_index + 1) // num_workers)


@dataclasses.dataclass
class EmbeddingProgress:
  done: int
  total: int
  seconds: float

  @property
  def docs_per_second(self) -> float:
    return self.done / self.seconds if self.seconds > 0 else 0.0

  def __str__(self) -> str:
    rate = self.docs_per_second
    eta = (self.total - self.done) / rate if rate > 0 else float("nan")
    return (f"embedded {self.done}/{self.total} documents, {rate:.1f} docs/s, "
            f"ETA {eta:.0f} s")


def candidate_dataset(corpus_prefix: str,
                      featurizer: featurization.Featurizer,
                      rows: Optional[range] = None) -> tf.data.Dataset:
  """The corpus as packed candidate inputs ([CLS] title [SEP] body [SEP]), one document per element."""
  dataset = corpus_lib.corpus_dataset(corpus_prefix)
  if rows is not None:
    dataset = dataset.skip(rows.start).take(len(rows))

  candidate_inputs = featurizer.candidate_inputs_function()

  @tf.autograph.experimental.do_not_convert
  def featurize(batch):
    return candidate_inputs(batch["title_token_ids"], batch["body_token_ids"])

  # Featurize in batches (ragged ops vectorize), then hand out single documents.
  return dataset.ragged_batch(256).map(featurize).unbatch()


class CorpusEmbedder:
  """The document tower's embedding of a corpus, compiled once and reused for every call.

  The refresher embeds the corpus again after every checkpoint with the same tower (restored in place),
  so it keeps one CorpusEmbedder for its whole life: the compiled program of each length bucket is built
  on the first refresh and reused by the next ones (a new tf.function per refresh recompiled every bucket,
  15-23 s of the MiniLM tower's first batch).

  Args:
    embed_fn: (token_ids, mask, segment_ids) int32 [b, C] -> float [b, D]; e.g. a RetrieverEmbedder
      called with training=False. Runs under `strategy` when one is given.
    featurizer: packs candidates to featurizer.candidate_seq_len.
    batch_size: global batch size (divisible by the number of replicas).
    strategy: distribution strategy for the embedding (default: none).
    jit_compile: compile embed_fn with XLA. The batches are then static-shaped, so it compiles once per
      bucket; without XLA a bucket's last batch is not filled up to batch_size (only to a multiple of the
      replicas) and the step is traced for varying shapes.
      On CPU a float32 batch of the MiniLM or BERT-base config then takes 14-20% less CPU time (1.1-1.2x
      the docs/s on a loaded 2-core machine; bench/hf_compare_bench.py). Under mixed_bfloat16 on a CPU
      with AMX, XLA's CPU backend is slower than TensorFlow's oneDNN kernels (bench/refresh_bench.py):
      turn it off there.
    num_length_buckets: documents are grouped by packed length into this many padded lengths (multiples
      of 8 up to candidate_seq_len; see length_buckets), each embedded at its own shape, so short
      documents are not padded to the longest; results returned in row order. Equal to unbucketed
      embedding for any tower that masks its padding (BERT attention, [CLS] pooler, masked mean); 1 pads
      every document to candidate_seq_len. Default (None): default_length_buckets, 4 with XLA (a handful
      of compiled programs), one every 8 wordpieces without.
  """

  def __init__(self,
               embed_fn: Callable,
               featurizer: featurization.Featurizer,
               batch_size: int = 256,
               strategy: Optional[tf.distribute.Strategy] = None,
               jit_compile: bool = True,
               num_length_buckets: Optional[int] = None):
    self._strategy = strategy or tf.distribute.get_strategy()
    if batch_size % self._strategy.num_replicas_in_sync:
      raise ValueError(f"batch_size {batch_size} is not divisible by the "
                       f"{self._strategy.num_replicas_in_sync} replicas")
    self._featurizer = featurizer
    self._batch_size = batch_size
    if num_length_buckets is None:
      num_length_buckets = default_length_buckets(featurizer.candidate_seq_len, jit_compile)
    self._lengths = length_buckets(featurizer.candidate_seq_len, num_length_buckets)
    # XLA needs every batch of a bucket at one shape; without it, a partial batch is only filled up to
    # a multiple of the replicas (each replica gets its share), which wastes nothing on one device.
    self._fill_to = batch_size if jit_compile else self._strategy.num_replicas_in_sync

    def embed(batch):
      embeddings = embed_fn((batch["token_ids"], batch["mask"], batch["segment_ids"]))
      return batch["row"], tf.cast(embeddings, tf.float32)

    # Compiled per replica, called inside strategy.run: outside TPUs XLA cannot span replicas (as
    # TrainStep). A plain function in between: handed to strategy.run itself, the compiled function
    # would run on the first replica's device with another replica's variables. XLA compiles once per
    # bucket length.
    compiled = tf.function(embed, jit_compile=True, autograph=False) if jit_compile else embed
    strategy = self._strategy

    # autograph=False here and in the dataset functions: nothing branches on tensors in Python, and
    # converting the tower's code would double each trace.
    # Without XLA the shapes vary with the bucket: reduce_retracing traces a shape-generic step after
    # the second shape instead of one per bucket.
    @tf.function(reduce_retracing=not jit_compile, autograph=False)
    def step(batch):
      per_replica = strategy.run(lambda b: compiled(b), args=(batch,))  # pylint: disable=unnecessary-lambda
      return strategy.experimental_local_results(per_replica)

    self._step = step
    # The last pass's distributed dataset and what it reads: the refresher embeds one corpus again after
    # every checkpoint, and building the pipeline traces the featurizer's and the bucketing's functions
    # (about a second each time, as much as embedding a small corpus). A tf.data pipeline can be iterated
    # again from its start, so the same corpus (corpus_lib.fingerprint: its manifest, which holds every
    # shard's checksum) reuses it.
    self._pipeline = None
    self._pipelines_built = 0

  @property
  def tracing_count(self) -> int:
    """How often the step was traced: once per bucket length for the life of this embedder (with XLA;
    without, at most three times: a first shape, then any length, then any batch size)."""
    return self._step.experimental_get_tracing_count()

  @property
  def pipelines_built(self) -> int:
    """How many input pipelines this embedder built: one per change of corpus (or of worker rows)."""
    return self._pipelines_built

  def __call__(self,
               corpus_prefix: str,
               num_workers: int = 1,
               worker_index: int = 0,
               log: Callable[[str], None] = print,
               log_every_seconds: float = 30.0) -> np.ndarray:
    """Embeds this worker's rows of the corpus: float32 [num_rows_of_this_worker, D], in row order."""
    num_docs = corpus_lib.read_manifest(corpus_prefix)["num_documents"]
    rows = worker_rows(num_docs, num_workers, worker_index)
    total = len(rows)
    if total == 0:
      return np.zeros([0, 0], np.float32)
    batch_size, fill_to = self._batch_size, self._fill_to
    static_batch = fill_to == batch_size
    lengths = tf.constant(self._lengths, tf.int64)

    @tf.autograph.experimental.do_not_convert
    def bucket_of(row, features):
      del row
      # The first (shortest) padded length that holds the document.
      return tf.argmax(tf.cast(lengths >= tf.reduce_sum(tf.cast(features["mask"], tf.int64)), tf.int64))

    @tf.autograph.experimental.do_not_convert
    def batches_of(bucket, window):
      return window.batch(batch_size).map(
          tf.autograph.experimental.do_not_convert(
              lambda row, features: _fill_batch(row, features, lengths[bucket], fill_to, static_batch)))

    # One pass over the corpus: each element is a [batch_size, L] batch of one bucket and the corpus
    # rows it holds (-1 for the padding that fills a bucket's last batch with copies of its first
    # document).
    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
      dataset = candidate_dataset(corpus_prefix, self._featurizer,
                                  rows).enumerate().group_by_window(bucket_of,
                                                                    batches_of,
                                                                    window_size=batch_size)
      # Untuned: an autotuned iterator's deletion, at the end of a pass, could stall up to a minute.
      return untuned.untuned(_per_replica_batches(dataset, context).prefetch(2))

    key = (corpus_prefix, corpus_lib.fingerprint(corpus_prefix), num_workers, worker_index)
    if self._pipeline is None or self._pipeline[0] != key:
      self._pipeline = (key, self._strategy.distribute_datasets_from_function(dataset_fn))
      self._pipelines_built += 1
    distributed = self._pipeline[1]

    embeddings = None
    embedded = 0
    start = time.time()
    last_log = start
    for batch in distributed:
      for batch_rows, values in self._step(batch):
        batch_rows, values = np.asarray(batch_rows), np.asarray(values, np.float32)
        real = batch_rows >= 0
        if embeddings is None:
          embeddings = np.zeros([total, values.shape[-1]], np.float32)
        embeddings[batch_rows[real]] = values[real]
        embedded += int(real.sum())
      now = time.time()
      if now - last_log >= log_every_seconds or embedded == total:
        log(str(EmbeddingProgress(embedded, total, now - start)))
        last_log = now
    return embeddings


def embed_corpus(embed_fn: Callable,
                 corpus_prefix: str,
                 featurizer: featurization.Featurizer,
                 batch_size: int = 256,
                 strategy: Optional[tf.distribute.Strategy] = None,
                 num_workers: int = 1,
                 worker_index: int = 0,
                 log: Callable[[str], None] = print,
                 log_every_seconds: float = 30.0,
                 jit_compile: bool = True,
                 num_length_buckets: Optional[int] = None) -> np.ndarray:
  """Embeds this worker's rows of the corpus once (see CorpusEmbedder for the arguments); a caller that
  embeds the same corpus again with the same tower keeps a CorpusEmbedder instead.

  Returns:
    float32 [num_rows_of_this_worker, D].
  """
  embedder = CorpusEmbedder(embed_fn, featurizer, batch_size, strategy, jit_compile, num_length_buckets)
  return embedder(corpus_prefix, num_workers, worker_index, log, log_every_seconds)


def length_buckets(max_len: int, num_buckets: int) -> List[int]:
  """The padded lengths of num_buckets equal steps up to max_len, rounded up to multiples of 8 (the
  last is max_len itself); e.g. 288 in 4 -> [72, 144, 216, 288]."""
  if num_buckets < 1:
    raise ValueError(f"num_length_buckets must be at least 1, got {num_buckets}")
  lengths = {min(max_len, -(-max_len * (i + 1) // num_buckets // 8) * 8) for i in range(num_buckets)}
  return sorted(lengths | {max_len})


def _fill_batch(row, features, length: tf.Tensor, fill_to: int, static_batch: bool):
  """A bucket's batch cut to its length and filled up to a multiple of fill_to with copies of its first
  document (row -1). fill_to = batch_size gives every batch of the bucket one shape (XLA compiles one
  program per bucket); fill_to = the number of replicas only lets every replica have its share."""
  missing = tf.math.floormod(-tf.shape(row)[0], fill_to)
  fill = lambda t: tf.concat([t, tf.repeat(t[:1], missing, axis=0)], axis=0)
  batch = {k: fill(v[:, :length]) for k, v in features.items()}
  batch["row"] = tf.concat([tf.cast(row, tf.int64), -tf.ones([missing], tf.int64)], axis=0)
  if not static_batch:
    return batch
  return {k: tf.ensure_shape(v, [fill_to] + v.shape.as_list()[1:]) for k, v in batch.items()}


def _per_replica_batches(dataset: tf.data.Dataset, context: tf.distribute.InputContext) -> tf.data.Dataset:
  """Each global batch (a multiple of the replicas long) cut into num_replicas_in_sync equal parts in
  order, as distribute_datasets_from_function wants them: on one host replica r takes part r, as
  experimental_distribute_dataset split a batch; each input pipeline (host) keeps every
  num_input_pipelines-th part. Every part carries its corpus rows, so the order of reassembly does not
  matter. One replica takes the batches as they are."""
  replicas = context.num_replicas_in_sync
  if replicas == 1:
    return dataset

  def split(value):
    # [B, ...] -> [replicas, B / replicas, ...], keeping the static sizes (XLA's batches are static).
    static = value.shape.as_list()
    sizes = [replicas, static[0] // replicas if static[0] is not None else -1]
    sizes += [d if d is not None else tf.shape(value)[i + 1] for i, d in enumerate(static[1:])]
    return tf.reshape(value, tf.stack(sizes))

  @tf.autograph.experimental.do_not_convert
  def parts(batch):
    return tf.data.Dataset.from_tensor_slices({k: split(v) for k, v in batch.items()})

  return dataset.flat_map(parts).shard(context.num_input_pipelines, context.input_pipeline_id)


def worker_embeddings_path(output_dir: str, num_workers: int, worker_index: int) -> str:
  return os.path.join(output_dir, f"embeddings-{worker_index:05d}-of-{num_workers:05d}.npy")


def save_worker_embeddings(embeddings: np.ndarray, output_dir: str, num_workers: int,
                           worker_index: int) -> str:
  """Writes one worker's rows atomically (no pickle) and returns the path."""
  tf.io.gfile.makedirs(output_dir)
  path = worker_embeddings_path(output_dir, num_workers, worker_index)
  with io_utils.atomic_write(path, "wb") as f:
    np.save(f, embeddings, allow_pickle=False)
  return path


def merge_worker_embeddings(output_dir: str, num_workers: int) -> np.ndarray:
  """Concatenates all workers' rows in worker order; a clear error names any missing worker."""
  paths = [worker_embeddings_path(output_dir, num_workers, w) for w in range(num_workers)]
  missing = [p for p in paths if not tf.io.gfile.exists(p)]
  if missing:
    raise FileNotFoundError(f"cannot merge: {len(missing)} of {num_workers} workers have not written "
                            f"their embeddings yet: {missing}")
  parts = []
  for path in paths:
    with tf.io.gfile.GFile(path, "rb") as f:
      parts.append(np.load(f, allow_pickle=False))
  # A worker without rows (more workers than documents) wrote a [0, 0] array: leave it out, its width
  # does not match the others'.
  return np.concatenate([p for p in parts if p.size] or parts, axis=0)
