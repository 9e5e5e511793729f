"""In-step retrieval gives what the host pipeline gives (issue 42, item 3): on testdata, for one seed, the
same candidate rows, the same features and the same REALM loss as RetrievalState.retrieve +
realm_input.assemble_candidates, in one replica and in two (MirroredStrategy over 2 logical CPUs)."""

import copy
import os

import numpy as np
import tensorflow as tf

from realm_tf.data import corpus
from realm_tf.data import corpus_table
from realm_tf.data import pretraining
from realm_tf.retrieval import published_index
from realm_tf.retrieval import refresher
from realm_tf.tasks import in_step_retrieval
from realm_tf.tasks import realm_input
from realm_tf.tasks import realm_trainer
from realm_tf.testing import tiny_inputs
from realm_tf.training import distribute
from realm_tf.training import loop

_TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata")
_BATCH = 4  # 2 per replica under the two-replica strategy
_NUM_BATCHES = 2


class InStepRetrievalTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # Before any TensorFlow op: the logical CPUs cannot be split once the runtime is up.
    distribute.configure_logical_cpus(2)
    root = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), f"in_step_retrieval_test_{os.getpid()}")
    cls.config = tiny_inputs.small_realm_config()
    cls.root = root
    model_dir = os.path.join(root, "model")
    cls.config.save(model_dir)
    cls.tokenizer = cls.config.tokenizer()
    cls.featurizer = cls.config.featurizer(cls.tokenizer)
    corpus_prefix = cls.corpus_prefix = os.path.join(root, "corpus", "blocks")
    corpus.write_corpus(lambda: corpus.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")), cls.tokenizer,
                        corpus_prefix, 2)
    pretraining_prefix = cls.pretraining_prefix = os.path.join(root, "pretraining", "sentences")
    pretraining.write_pretraining_corpus(
        lambda: pretraining.read_raw_documents(os.path.join(_TESTDATA, "pretraining.jsonl")),
        pretraining_prefix, 2)
    refresher.bootstrap(cls.config,
                        None,
                        refresher.RefresherOptions(model_dir=model_dir,
                                                   corpus_prefix=corpus_prefix,
                                                   index_implementation="brute_force"),
                        log=lambda _: None)
    cls.table = corpus_table.CorpusTable.load(corpus_prefix)
    cls.state = realm_input.RetrievalState(published_index.IndexWatcher(model_dir, log=lambda _: None),
                                           cls.table,
                                           cls.config.num_candidates,
                                           check_every_batches=10**9,
                                           log=lambda _: None,
                                           expected_dim=cls.config.projection_size)
    cls.state.ensure_index()
    # The bootstrap index's untrained towers score every document within 1e-5 of the others, with exact
    # ties, and tied rows may come in either order on the two paths. Random document embeddings under
    # the same stale query tower have no ties (test_testdata_has_no_ties_among_the_scores_searched).
    bootstrap = cls.state.index
    embeddings = np.random.default_rng(0).normal(
        size=[cls.table.num_docs, cls.config.projection_size]).astype(np.float32)
    cls.bootstrap = bootstrap
    cls.random_mips = type(bootstrap.mips).build(embeddings)
    cls.state.index = bootstrap._replace(mips=cls.random_mips)
    queries = realm_input.query_features(pretraining.pretraining_dataset(pretraining_prefix),
                                         cls.tokenizer,
                                         cls.featurizer,
                                         seed=5)
    cls.query_batches = list(queries.batch(_BATCH, drop_remainder=True).take(_NUM_BATCHES))
    cls.host_rows, cls.host_features = [], []
    for batch in cls.query_batches:
      rows, title_values, title_lengths, body_values, body_lengths = cls.state.retrieve(
          batch["query_token_ids"], batch["query_mask"], batch["query_segment_ids"], batch["own_fingerprint"])
      cls.host_rows.append(rows)
      features = {k: v for k, v in batch.items() if k not in ("own_fingerprint", "status")}
      features.update(
          realm_input.assemble_candidates(cls.featurizer, _BATCH, cls.config.num_candidates,
                                          batch["query_token_ids"], batch["query_mask"],
                                          tf.RaggedTensor.from_row_lengths(title_values, title_lengths),
                                          tf.RaggedTensor.from_row_lengths(body_values, body_lengths)))
      cls.host_features.append(features)
    cls.retrieval = in_step_retrieval.InStepRetrieval(cls.state.index, cls.table, cls.featurizer,
                                                      cls.config.num_candidates)
    cls.model = realm_trainer.build_model(cls.config)

  def _loss(self, features):
    out = self.model.compute_loss(features, training=False)
    return out.loss_sum / out.loss_weight

  def test_testdata_has_no_ties_among_the_scores_searched(self):
    """Rows tied in score could come in either order on the two paths; testdata has none near the
    cut, so the tests below compare rows exactly."""
    k = min(self.table.num_docs, self.config.num_candidates - 1 + realm_input.SEARCH_MARGIN)
    embeddings = np.asarray(self.state.index.mips.embeddings)
    for batch in self.query_batches:
      queries = self.state.index.embed_queries(batch["query_token_ids"], batch["query_mask"],
                                               batch["query_segment_ids"])
      scores = -np.sort(-(queries @ embeddings.T), axis=1)[:, :k + 1]
      self.assertTrue(np.all(np.diff(scores, axis=1) < 0), msg=scores)

  def test_one_replica_same_rows_features_and_loss(self):
    # The host side and the rows run eagerly: tracing them costs more than running them on testdata.
    rows_fn = lambda b: self.retrieval.candidate_rows(b["query_token_ids"], b["query_mask"], b[
        "query_segment_ids"], b["own_fingerprint"])
    step = tf.function(lambda b: (lambda f: (f, self._loss(f)))(self.retrieval.candidate_features(b)))
    host_loss = self._loss
    for batch, rows, expected in zip(self.query_batches, self.host_rows, self.host_features):
      self.assertAllEqual(rows, rows_fn(batch))
      features, loss = step(batch)
      self.assertEqual(set(expected), set(features))
      for key in expected:
        self.assertAllEqual(expected[key], features[key], msg=key)
      self.assertAllClose(host_loss(expected), loss, rtol=1e-5, atol=0)

  def test_two_replicas_same_features_and_loss(self):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
      model = realm_trainer.build_model(self.config)
    model.set_weights(self.model.get_weights())
    half = _BATCH // 2

    def step(batch):
      features = self.retrieval.candidate_features(batch)
      out = model.compute_loss(features, training=False)
      return features, out.loss_sum / out.loss_weight

    def host_loss(features):
      out = model.compute_loss(features, training=False)
      return out.loss_sum / out.loss_weight

    run = tf.function(lambda b: strategy.run(step, args=(b,)))
    run_host = lambda f: strategy.run(host_loss, args=(f,))  # eager: tracing costs more on testdata
    for batch, expected in zip(self.query_batches, self.host_features):
      # Replica r gets examples [r * half, (r + 1) * half), as the distributed dataset would split them.
      split = lambda source: strategy.experimental_distribute_values_from_function(
          lambda ctx: {
              k: v[ctx.replica_id_in_sync_group * half:(ctx.replica_id_in_sync_group + 1) * half]
              for k, v in source.items()
          })
      features, losses = run(split(batch))
      expected_losses = run_host(split(expected))
      per_replica = lambda values: strategy.experimental_local_results(values)
      for r in range(2):
        for key in expected:
          self.assertAllEqual(expected[key][r * half:(r + 1) * half],
                              per_replica(features[key])[r],
                              msg=f"replica {r}: {key}")
        self.assertAllClose(per_replica(expected_losses)[r], per_replica(losses)[r], rtol=1e-5, atol=0)

  def test_swap_loads_the_newer_index(self):
    """After a swap to an index whose embeddings are reversed in row order, the in-step rows are the
    host path's rows over that index."""
    loaded = self.state.index
    newer = loaded._replace(mips=type(loaded.mips).build(np.asarray(loaded.mips.embeddings)[::-1].copy()),
                            step=loaded.step + 1)
    retrieval = in_step_retrieval.InStepRetrieval(loaded, self.table, self.featurizer,
                                                  self.config.num_candidates)
    retrieval.swap(newer)
    self.assertEqual(retrieval.step, loaded.step + 1)
    host = realm_input.RetrievalState(self.state.watcher,
                                      self.table,
                                      self.config.num_candidates,
                                      check_every_batches=10**9,
                                      log=lambda _: None)
    host.index = newer
    for batch, before in zip(self.query_batches, self.host_rows):
      expected = host.retrieve(batch["query_token_ids"], batch["query_mask"], batch["query_segment_ids"],
                               batch["own_fingerprint"])[0]
      self.assertFalse(np.array_equal(expected, before))
      self.assertAllEqual(
          expected,
          retrieval.candidate_rows(batch["query_token_ids"], batch["query_mask"], batch["query_segment_ids"],
                                   batch["own_fingerprint"]))

  def _host_and_in_step_rows(self, loaded, table):
    """(host rows, in-step rows) of every query batch over `loaded` and `table`."""
    host = realm_input.RetrievalState(self.state.watcher,
                                      table,
                                      self.config.num_candidates,
                                      check_every_batches=10**9,
                                      log=lambda _: None)
    host.index = loaded
    retrieval = in_step_retrieval.InStepRetrieval(self.state.index, self.table, self.featurizer,
                                                  self.config.num_candidates)
    retrieval.swap(loaded, table)
    rows = tf.function(retrieval.candidate_rows)
    for batch in self.query_batches:
      inputs = (batch["query_token_ids"], batch["query_mask"], batch["query_segment_ids"],
                batch["own_fingerprint"])
      yield host.retrieve(*inputs)[0], rows(*inputs).numpy()

  def test_an_alias_of_the_own_document_is_excluded(self):
    """A query whose own document bin/update_index replaced (corpus.aliases: old fingerprint -> the
    newest text's) does not retrieve the replacement; here the first query's top candidate is made its
    own document's replacement."""
    table = copy.copy(self.table)
    batch = self.query_batches[0]
    table.aliases = {int(batch["own_fingerprint"][0]): int(self.table.fingerprints[self.host_rows[0][0, 0]])}
    for b, (expected, actual) in enumerate(self._host_and_in_step_rows(self.state.index, table)):
      if b == 0:
        self.assertNotIn(self.host_rows[0][0, 0], expected[0])
      self.assertAllEqual(expected, actual)

  def test_short_rows_take_further_documents_as_the_host_does(self):
    """A corpus in which all but 6 rows share one fingerprint leaves fewer than N-1 distinct documents
    in the top k: both paths then fill with the first further rows whose fingerprint is unseen."""
    table = copy.copy(self.table)
    table.fingerprints = self.table.fingerprints.copy()
    table.fingerprints[:-6] = table.fingerprints[0]
    filled = False
    for expected, actual in self._host_and_in_step_rows(self.state.index, table):
      self.assertAllEqual(expected, actual)
      filled |= bool(np.any(expected >= self.table.num_docs - 6))
    self.assertTrue(filled)

  def test_swap_assigns_the_newer_query_tower(self):
    """The stale tower's weights come from the swapped-in index: a tower with changed weights embeds
    the queries in the step as its SavedModel does."""
    loaded = self.state.index
    tower = tf.saved_model.load(os.path.join(loaded.path, published_index.QUERY_EMBEDDER_DIR))
    for variable in tower.embed.concrete_functions[0].variables:
      variable.assign(variable * 1.5 + 0.01)
    newer = loaded._replace(query_embedder=tower, step=loaded.step + 1)
    retrieval = in_step_retrieval.InStepRetrieval(loaded, self.table, self.featurizer,
                                                  self.config.num_candidates)
    batch = self.query_batches[0]
    inputs = (batch["query_token_ids"], batch["query_mask"], batch["query_segment_ids"])
    before = retrieval.query_embedder.embed(*inputs)["embeddings"].numpy()
    retrieval.swap(newer)
    after = retrieval.query_embedder.embed(*inputs)["embeddings"].numpy()
    self.assertNotAllClose(before, after)
    self.assertAllEqual(newer.embed_queries(*inputs), after)

  def _train(self, name, retrieval):
    """realm_trainer.train for 3 steps from one seed, retrieving from the fixture's index (its random
    document embeddings, the bootstrap's query tower and corpus record) published at step 0."""
    model_dir = os.path.join(self.root, name)
    bootstrap = self.bootstrap
    record = {
        k: v
        for k, v in bootstrap.record.items()
        if k not in ("step", "num_docs", "dim", "published_unix_time")
    }
    published_index.publish_index(model_dir,
                                  0,
                                  self.random_mips,
                                  os.path.join(bootstrap.path, published_index.QUERY_EMBEDDER_DIR),
                                  info=record)
    options = realm_trainer.RealmTrainerOptions(config=self.config,
                                                loop=loop.LoopOptions(model_dir=model_dir,
                                                                      num_train_steps=3,
                                                                      save_checkpoints_steps=3,
                                                                      jit_compile=False),
                                                pretraining_corpus_path=self.pretraining_prefix,
                                                retrieval_corpus_path=self.corpus_prefix,
                                                batch_size=_BATCH,
                                                learning_rate=1e-3,
                                                index_implementation="brute_force",
                                                retrieval=retrieval,
                                                seed=3)
    summary = realm_trainer.train(options, tf.distribute.get_strategy(), log=lambda _: None)
    checkpoint = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
    weights = {
        name: checkpoint.get_tensor(name)
        for name, _ in tf.train.list_variables(tf.train.latest_checkpoint(model_dir))
        if name.startswith("model/") and "OPTIMIZER_SLOT" not in name
    }
    return summary, weights

  def test_in_step_trains_as_the_host_path(self):
    """realm_trainer.train with --retrieval=in_step trains as the host path does: the same first loss
    and the same weights after the first steps."""
    host, host_weights = self._train("host_run", realm_trainer.HOST)
    in_step, in_step_weights = self._train("in_step_run", realm_trainer.IN_STEP)
    self.assertAllClose(host["first_loss"], in_step["first_loss"], rtol=1e-5, atol=0)
    self.assertAllClose(host["final"]["loss"], in_step["final"]["loss"], rtol=1e-4, atol=0)
    self.assertEqual(host["indexes_used"], in_step["indexes_used"])
    self.assertEqual(set(host_weights), set(in_step_weights))
    self.assertGreater(len(host_weights), 10)
    for name, value in host_weights.items():
      self.assertAllClose(value, in_step_weights[name], rtol=1e-4, atol=1e-6, msg=name)

  def test_an_unknown_retrieval_is_refused(self):
    fixture_config = tiny_inputs.small_realm_config()
    options = realm_trainer.RealmTrainerOptions(config=fixture_config,
                                                loop=loop.LoopOptions(model_dir=self.get_temp_dir(),
                                                                      num_train_steps=1),
                                                pretraining_corpus_path="unused",
                                                retrieval_corpus_path="unused",
                                                retrieval="device")
    with self.assertRaisesRegex(ValueError, r"--retrieval='device': choose one of host, in_step"):
      realm_trainer.train(options, tf.distribute.get_strategy(), log=lambda _: None)


if __name__ == "__main__":
  tf.test.main()
