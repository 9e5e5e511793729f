"""Tests of realm_tf.retrieval.corpus_embedding: row order, padding, replicas and workers.

The two-replica tests need the CPU split into two logical devices before TensorFlow initializes, so this
module does it at import (as realm_tf/training/distribute_test.py does). Bazel runs this file alone, where
that always works; under a pytest run of many files another module may have initialized TensorFlow
first, and then those tests skip with the reason.
"""

import json
import os
from unittest import mock

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import featurization
from realm_tf import tokenization
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import untuned
from realm_tf.modeling import bert
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.retrieval import corpus_embedding
from realm_tf.training import distribute

try:
  distribute.configure_logical_cpus(2)
  _SPLIT_ERROR = None
except RuntimeError as e:  # TensorFlow was initialized by an earlier test module (pytest only).
  _SPLIT_ERROR = str(e)

_TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata")
_VOCAB = os.path.join(_TESTDATA, "vocab.txt")
_NUM_DOCS = 37
_C = 32
_D = 16


def _token_features(inputs):
  """A deterministic embedding of BERT inputs that depends on every position: int32 [b, C] x3 ->
  float32 [b, _D]. Column j < C sums token ids times mask times (j + 1) weights, so two different
  documents (or the same document in another row order) cannot give the same row."""
  token_ids, mask, segment_ids = (tf.cast(x, tf.float32) for x in inputs)
  positions = tf.range(1, tf.shape(token_ids)[-1] + 1, dtype=tf.float32)
  weights = tf.stack([positions**(j % 4) * (1.0 + j) for j in range(_D)], axis=1)  # [C, D]
  values = token_ids * mask + 1000.0 * segment_ids
  return tf.matmul(values, weights / tf.reduce_sum(weights, axis=0, keepdims=True))


class CorpusEmbeddingTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    directory = os.path.join(tf.compat.v1.test.get_temp_dir(), "corpus_embedding_test")
    tf.io.gfile.makedirs(directory)
    documents = []
    for doc in corpus_lib.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")):
      documents.append(doc)
      if len(documents) == _NUM_DOCS:
        break
    cls.tokenizer = tokenization.Tokenizer(_VOCAB)
    cls.prefix = os.path.join(directory, "blocks")
    stats = corpus_lib.write_corpus(lambda: documents, cls.tokenizer, cls.prefix, num_shards=3)
    assert stats.num_shards == 3 and stats.num_documents == _NUM_DOCS, stats
    cls.featurizer = featurization.Featurizer.from_tokenizer(cls.tokenizer,
                                                             query_seq_len=16,
                                                             candidate_seq_len=_C,
                                                             max_masks=4)
    cls.documents = list(corpus_lib.read_corpus(cls.prefix))
    # The documents read back in corpus order, featurized in one batch outside the embedding
    # pipeline: row i of the reference is document i.
    inputs = cls.featurizer.candidate_inputs(
        tf.ragged.constant([d["title_token_ids"] for d in cls.documents], tf.int64),
        tf.ragged.constant([d["body_token_ids"] for d in cls.documents], tf.int64))
    cls.candidates = tuple(tf.cast(x, tf.int32) for x in (inputs.token_ids, inputs.mask, inputs.segment_ids))
    cls.expected = _token_features(cls.candidates).numpy()

  def _embed(self, embed_fn=_token_features, **kwargs):
    kwargs.setdefault("log", lambda message: None)
    return corpus_embedding.embed_corpus(embed_fn, self.prefix, self.featurizer, **kwargs)

  def _require_two_cpus(self):
    if _SPLIT_ERROR:
      self.skipTest(_SPLIT_ERROR)

  def _mirrored(self):
    self._require_two_cpus()
    strategy = distribute.get_strategy("mirrored", num_cpu_devices=2)
    self.assertEqual(strategy.num_replicas_in_sync, 2)
    return strategy

  def test_corpus_spans_three_shards_in_document_order(self):
    manifest = corpus_lib.read_manifest(self.prefix)
    self.assertEqual([s["num_documents"] for s in manifest["shards"]], [12, 12, 13])
    with open(os.path.join(_TESTDATA, "corpus.jsonl")) as f:
      first_ids = [json.loads(line)["id"] for line in f][:_NUM_DOCS]
    self.assertEqual([d["doc_id"] for d in self.documents], first_ids)
    self.assertLen({row.tobytes() for row in self.expected}, _NUM_DOCS)  # every row distinct

  def test_its_pipeline_runs_untuned(self):
    # An autotuned iterator's deletion, at the end of a pass, could stall up to a minute.
    with mock.patch.object(untuned, "untuned", wraps=untuned.untuned) as untune:
      self._embed(batch_size=5)
    self.assertEqual(untune.call_count, 1)

  def test_row_i_is_document_i_and_the_last_batch_is_padded_then_trimmed(self):
    seen_shapes = []

    def recording(inputs):
      seen_shapes.append([x.shape.as_list() for x in inputs])  # at trace time: the static shapes
      return _token_features(inputs)

    for batch_size in (5, 64):  # 37 = 7 * 5 + 2; a single batch larger than the corpus
      with self.subTest(batch_size=batch_size):
        seen_shapes.clear()
        messages = []
        embeddings = self._embed(recording, batch_size=batch_size, log=messages.append, log_every_seconds=0)
        # Progress after every batch; the padding is never counted.
        counts = [int(m.split()[1].split("/")[0]) for m in messages]
        self.assertEqual(counts,
                         [min(n, _NUM_DOCS) for n in range(batch_size, _NUM_DOCS + batch_size, batch_size)])
        self.assertIn(f"embedded {_NUM_DOCS}/{_NUM_DOCS} documents", messages[-1])
        self.assertEqual(embeddings.dtype, np.float32)
        self.assertEqual(embeddings.shape, (_NUM_DOCS, _D))
        self.assertAllClose(embeddings, self.expected, rtol=1e-6)
        self.assertNotEmpty(seen_shapes)
        for shapes in seen_shapes:
          self.assertEqual(shapes, [[batch_size, _C]] * 3)

  def test_retriever_embedder_rows_match_direct_embedding(self):
    tf_keras.utils.set_random_seed(0)
    config = bert.tiny_config(self.tokenizer.vocab_size, hidden_size=32, num_layers=1, intermediate_size=64)
    model = embedder_lib.RetrieverEmbedder(config, _D)
    embed_fn = lambda inputs: model(inputs, training=False)
    embeddings = self._embed(embed_fn, batch_size=8)
    direct = embed_fn(self.candidates).numpy()
    self.assertAllClose(embeddings, direct, atol=1e-5)

  def test_mirrored_over_two_replicas_equals_single_device(self):
    strategy = self._mirrored()
    embeddings = self._embed(batch_size=8, strategy=strategy)
    self.assertAllClose(embeddings, self.expected, rtol=1e-6)

  def test_mirrored_retriever_embedder_equals_single_device(self):
    strategy = self._mirrored()
    config = bert.tiny_config(self.tokenizer.vocab_size, hidden_size=32, num_layers=1, intermediate_size=64)
    tf_keras.utils.set_random_seed(1)
    single = embedder_lib.build_retriever(config, _D)
    with strategy.scope():
      mirrored = embedder_lib.build_retriever(config, _D)
    mirrored.set_weights(single.get_weights())
    want = single.embed_documents(self.candidates, training=False).numpy()
    got = self._embed(lambda x: mirrored.embed_documents(x, training=False), batch_size=6, strategy=strategy)
    self.assertEqual(got.shape, (_NUM_DOCS, _D))
    self.assertAllClose(got, want, atol=1e-5)

  def test_length_buckets(self):
    self.assertEqual(corpus_embedding.length_buckets(288, 4), [72, 144, 216, 288])
    self.assertEqual(corpus_embedding.length_buckets(128, 3), [48, 88, 128])
    self.assertEqual(corpus_embedding.length_buckets(32, 1), [32])
    self.assertEqual(corpus_embedding.length_buckets(10, 8), [8, 10])  # never more than the lengths
    with self.assertRaisesRegex(ValueError, "num_length_buckets must be at least 1"):
      corpus_embedding.length_buckets(32, 0)

  def _candidates(self, featurizer):
    """Every document packed and padded to featurizer.candidate_seq_len, in one batch (row i = document
    i), outside the embedding pipeline."""
    inputs = featurizer.candidate_inputs(
        tf.ragged.constant([d["title_token_ids"] for d in self.documents], tf.int64),
        tf.ragged.constant([d["body_token_ids"] for d in self.documents], tf.int64))
    return tuple(tf.cast(x, tf.int32) for x in (inputs.token_ids, inputs.mask, inputs.segment_ids))

  def _towers(self, config, pooling, seed):
    """The same retriever weights on one device and, unless the CPU could not be split, mirrored over two
    replicas: [(strategy name, strategy, retriever)], and the padded path's rows (every document padded
    to the full length, one direct call: the padded path equals it, test_retriever_embedder_rows_match_
    direct_embedding and the mirrored tests)."""
    tf_keras.utils.set_random_seed(seed)
    single = embedder_lib.build_retriever(config, _D, pooling=pooling)
    towers = [("default", tf.distribute.get_strategy(), single)]
    if not _SPLIT_ERROR:
      strategy = distribute.get_strategy("mirrored", num_cpu_devices=2)
      with strategy.scope():
        mirrored = embedder_lib.build_retriever(config, _D, pooling=pooling)
      mirrored.set_weights(single.get_weights())
      towers.append(("mirrored", strategy, mirrored))
    return towers

  def test_length_buckets_embed_as_the_padded_path_for_both_poolings_and_replicas(self):
    # At 128 wordpieces the testdata documents (81 on average) fall in several buckets.
    featurizer = featurization.Featurizer.from_tokenizer(self.tokenizer,
                                                         query_seq_len=16,
                                                         candidate_seq_len=128,
                                                         max_masks=4)
    candidates = self._candidates(featurizer)
    # One layer: the masking that makes buckets equal the padded path is each layer's own, and every
    # bucket's XLA program is compiled per pooling and replica.
    config = bert.tiny_config(self.tokenizer.vocab_size, hidden_size=32, num_layers=1, intermediate_size=64)
    for pooling in (embedder_lib.POOLER, "mean"):
      towers = self._towers(config, pooling, seed=2)
      padded = towers[0][2].embed_documents(candidates, training=False).numpy()
      for name, strategy, retriever in towers:
        with self.subTest(pooling=pooling, strategy=name):
          shapes = []

          def embed_fn(inputs, retriever=retriever, shapes=shapes):
            shapes.append(inputs[0].shape.as_list())  # at trace time
            return retriever.embed_documents(inputs, training=False)

          bucketed = corpus_embedding.embed_corpus(embed_fn,
                                                   self.prefix,
                                                   featurizer,
                                                   batch_size=6,
                                                   strategy=strategy,
                                                   log=lambda _: None,
                                                   num_length_buckets=4)
          self.assertEqual(bucketed.shape, (_NUM_DOCS, _D))
          self.assertAllClose(bucketed, padded, atol=2e-5)
          lengths = sorted({s[1] for s in shapes})
          self.assertGreater(len(lengths), 1, shapes)  # the documents did spread over buckets
          self.assertContainsSubset(lengths, [32, 64, 96, 128])
          per_replica = 6 // strategy.num_replicas_in_sync
          self.assertTrue(all(s[0] == per_replica for s in shapes), shapes)

  def test_without_xla_batches_fit_their_documents_and_trace_for_any_shape(self):
    # The non-XLA path: a length every 8 wordpieces, partial batches not filled up to batch_size (only
    # to a multiple of the replicas), one shape-generic trace; the same vectors as the padded path.
    featurizer = featurization.Featurizer.from_tokenizer(self.tokenizer,
                                                         query_seq_len=16,
                                                         candidate_seq_len=128,
                                                         max_masks=4)
    config = bert.tiny_config(self.tokenizer.vocab_size, hidden_size=32, num_layers=1, intermediate_size=64)
    self.assertEqual(corpus_embedding.default_length_buckets(128, jit_compile=False), 16)
    self.assertEqual(corpus_embedding.default_length_buckets(128, jit_compile=True), 4)
    towers = self._towers(config, "mean", seed=5)
    padded = towers[0][2].embed_documents(self._candidates(featurizer), training=False).numpy()
    for name, strategy, retriever in towers:
      with self.subTest(strategy=name):
        run_shapes = []  # each replica batch's shape, recorded when it runs

        def record(token_ids, run_shapes=run_shapes):
          run_shapes.append(list(token_ids.shape))
          return 0

        def embed_fn(inputs, retriever=retriever, record=record):
          with tf.control_dependencies([tf.py_function(record, [inputs[0]], tf.int32)]):
            return tf.identity(retriever.embed_documents(inputs, training=False))

        embedder = corpus_embedding.CorpusEmbedder(embed_fn,
                                                   featurizer,
                                                   batch_size=6,
                                                   strategy=strategy,
                                                   jit_compile=False)
        got = embedder(self.prefix, log=lambda _: None)
        self.assertAllClose(got, padded, atol=2e-5)
        # Lengths are multiples of 8 below the padded 128; the slots computed barely exceed the
        # documents (only a multiple of the replicas is filled), far below filling every bucket.
        lengths = {s[1] for s in run_shapes}
        self.assertGreater(len(lengths), 2, run_shapes)
        self.assertTrue(all(length % 8 == 0 and length < 128 for length in lengths), lengths)
        slots = sum(s[0] for s in run_shapes)
        self.assertGreaterEqual(slots, _NUM_DOCS)
        self.assertLess(slots, _NUM_DOCS + len(lengths) * strategy.num_replicas_in_sync, run_shapes)
        traced = embedder.tracing_count
        self.assertLessEqual(traced, 3)  # a first shape, then generic lengths, then batch sizes
        self.assertLess(traced, len(lengths))  # not once per length
        embedder(self.prefix, log=lambda _: None)
        self.assertEqual(embedder.tracing_count, traced)

  def test_one_embedder_compiles_once_and_follows_weights_restored_in_place(self):
    # The refresher's case: one CorpusEmbedder for the process, a new checkpoint restored into the same
    # tower before each refresh.
    tf_keras.utils.set_random_seed(3)
    config = bert.tiny_config(self.tokenizer.vocab_size, hidden_size=32, num_layers=1, intermediate_size=64)
    retriever = embedder_lib.build_retriever(config, _D, pooling="mean")
    embedder = corpus_embedding.CorpusEmbedder(lambda x: retriever.embed_documents(x, training=False),
                                               self.featurizer,
                                               batch_size=8)
    first = embedder(self.prefix, log=lambda _: None)
    traced = embedder.tracing_count
    self.assertGreaterEqual(traced, 1)
    retriever.set_weights([w + 0.01 * np.ones_like(w) for w in retriever.get_weights()])
    second = embedder(self.prefix, log=lambda _: None)
    self.assertEqual(embedder.tracing_count, traced)  # no new trace, so no new compilation
    self.assertGreater(np.max(np.abs(second - first)), 1e-3)  # the new weights were used
    self.assertAllClose(second, retriever.embed_documents(self.candidates, training=False).numpy(), atol=2e-5)
    self.assertEqual(embedder.pipelines_built, 1)  # the second pass read the first's pipeline again

    # A corpus rewritten at a prefix the embedder has read (other documents, so another manifest) is
    # read anew, not from the earlier pipeline.
    prefix = os.path.join(self.create_tempdir().full_path, "blocks")
    for documents in (self.documents[:3], self.documents[5:9]):
      for name in tf.io.gfile.glob(prefix + "*"):
        tf.io.gfile.remove(name)
      corpus_lib.write_corpus(
          lambda: [corpus_lib.Document(d["title"], d["body"], d["doc_id"]) for d in documents],  # pylint: disable=cell-var-from-loop
          self.tokenizer,
          prefix,
          num_shards=1)
      got = embedder(prefix, log=lambda _: None)
      rows = [self.documents.index(d) for d in documents]
      self.assertAllClose(got, second[rows], atol=2e-5)
    self.assertEqual(embedder.pipelines_built, 3)

  def test_mixed_bfloat16_tower_embeds_close_to_float32(self):
    config = bert.tiny_config(self.tokenizer.vocab_size, hidden_size=32, num_layers=2, intermediate_size=64)
    tf_keras.utils.set_random_seed(4)
    full = embedder_lib.build_retriever(config, _D, pooling="mean")
    want = full.embed_documents(self.candidates, training=False).numpy()
    try:
      tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
      half = embedder_lib.build_retriever(config, _D, pooling="mean")
      half.embed_documents(tuple(x[:1] for x in self.candidates), training=False)  # builds it
    finally:
      tf_keras.mixed_precision.set_global_policy("float32")
    half.set_weights(full.get_weights())
    for jit_compile in (False, True):
      with self.subTest(jit_compile=jit_compile):
        got = self._embed(lambda x: half.embed_documents(x, training=False),
                          batch_size=8,
                          jit_compile=jit_compile)
        self.assertEqual(got.dtype, np.float32)
        self.assertGreater(np.max(np.abs(got - want)), 1e-4)  # computed in bfloat16 ...
        cosine = np.sum(got * want, -1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1))
        self.assertGreater(cosine.min(), 0.99)  # ... and close to float32

  def test_batch_size_not_divisible_by_replicas(self):
    strategy = self._mirrored()
    with self.assertRaisesRegex(ValueError, "batch_size 7 is not divisible by the 2 replicas"):
      self._embed(batch_size=7, strategy=strategy)

  def test_worker_rows_partition_is_contiguous_and_complete(self):
    for num_docs, num_workers in ((37, 3), (37, 1), (10, 4), (2, 3), (0, 2)):
      with self.subTest(num_docs=num_docs, num_workers=num_workers):
        parts = [corpus_embedding.worker_rows(num_docs, num_workers, w) for w in range(num_workers)]
        self.assertEqual([r for part in parts for r in part], list(range(num_docs)))
        for part in parts:
          self.assertEqual(part.step, 1)
          self.assertIn(len(part), (num_docs // num_workers, -(-num_docs // num_workers)))
    self.assertEqual(corpus_embedding.worker_rows(37, 3, 0), range(0, 12))
    self.assertEqual(corpus_embedding.worker_rows(37, 3, 2), range(24, 37))
    for bad in (-1, 3):
      with self.assertRaisesRegex(ValueError, r"--worker_index must be in \[0, 3\)"):
        corpus_embedding.worker_rows(37, 3, bad)

  def test_workers_embed_their_rows_and_merge_to_the_single_worker_result(self):
    output_dir = os.path.join(self.get_temp_dir(), "shards")
    paths = []
    for worker in range(3):
      rows = corpus_embedding.worker_rows(_NUM_DOCS, 3, worker)
      part = self._embed(batch_size=5, num_workers=3, worker_index=worker)
      self.assertAllClose(part, self.expected[rows.start:rows.stop], rtol=1e-6)
      paths.append(corpus_embedding.save_worker_embeddings(part, output_dir, 3, worker))
    self.assertEqual(sorted(os.listdir(output_dir)), [os.path.basename(p) for p in paths])
    merged = corpus_embedding.merge_worker_embeddings(output_dir, 3)
    self.assertEqual(merged.dtype, np.float32)
    self.assertAllClose(merged, self.expected, rtol=1e-6)

  def test_merge_with_a_missing_worker_names_it(self):
    output_dir = os.path.join(self.get_temp_dir(), "missing")
    for worker in (0, 2):
      corpus_embedding.save_worker_embeddings(np.full([4, _D], worker, np.float32), output_dir, 3, worker)
    with self.assertRaises(FileNotFoundError) as cm:
      corpus_embedding.merge_worker_embeddings(output_dir, 3)
    message = str(cm.exception)
    self.assertIn(corpus_embedding.worker_embeddings_path(output_dir, 3, 1), message)
    self.assertIn("1 of 3 workers", message)
    self.assertNotIn(corpus_embedding.worker_embeddings_path(output_dir, 3, 0), message)

  def test_more_workers_than_documents(self):
    # A worker without rows writes an empty part; the merge still equals the single-worker result.
    output_dir = os.path.join(self.get_temp_dir(), "many_workers")
    num_workers = _NUM_DOCS + 3
    for worker in range(num_workers):
      rows = corpus_embedding.worker_rows(_NUM_DOCS, num_workers, worker)
      part = (self.expected[rows.start:rows.stop]
              if len(rows) else self._embed(batch_size=4, num_workers=num_workers, worker_index=worker))
      corpus_embedding.save_worker_embeddings(part, output_dir, num_workers, worker)
    self.assertAllClose(corpus_embedding.merge_worker_embeddings(output_dir, num_workers), self.expected)

  def test_saved_embeddings_are_plain_npy(self):
    output_dir = os.path.join(self.get_temp_dir(), "npy")
    path = corpus_embedding.save_worker_embeddings(self.expected, output_dir, 1, 0)
    self.assertEqual(path, os.path.join(output_dir, "embeddings-00000-of-00001.npy"))
    self.assertAllEqual(np.load(path, allow_pickle=False), self.expected)
    self.assertEqual(os.listdir(output_dir), ["embeddings-00000-of-00001.npy"])  # no temporary left

  def test_progress_message(self):
    progress = corpus_embedding.EmbeddingProgress(done=50, total=150, seconds=10.0)
    self.assertEqual(progress.docs_per_second, 5.0)
    self.assertEqual(str(progress), "embedded 50/150 documents, 5.0 docs/s, ETA 20 s")
    self.assertEqual(corpus_embedding.EmbeddingProgress(0, 10, 0.0).docs_per_second, 0.0)


if __name__ == "__main__":
  tf.test.main()
