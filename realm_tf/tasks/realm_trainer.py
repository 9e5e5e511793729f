"""REALM pre-training: the trainer process (bin/train_realm).

It writes MODEL_DIR/realm_config.json (the refresher builds its retriever from it), restores or warm-starts
the RealmPretrainer, optionally publishes the bootstrap index itself, and trains with the shared loop on
batches from the retrieval-augmented input pipeline, while bin/refresh_doc_embeds publishes fresher
indexes beside it. At the end it writes the done marker, on which the refresher exits.

Index staleness: the input pipeline retrieves with the newest published index it has loaded (it looks
every --check_index_every_batches batches) and waits for the refresher when that index is more than
--max_index_staleness_steps behind the trainer's step. The trainer tells the pipeline its step between
loops (after_step), once per --steps_per_loop steps, and the pipeline prepares batches ahead of the step
that trains on them. So a batch trains on an index at most max_index_staleness_steps + steps_per_loop +
(the batches prefetched ahead: realm_input's 2 and the distributed dataset's per replica) steps older
than the step that trains on it.

Fixed index swaps (--index_swap_steps=K) replace that: the batch of step s trains on the index of the
checkpoint of step K * floor((s - 1) / K), and the pipeline waits for exactly that one, so a run's indexes
do not depend on how fast the refresher was (realm_input.RetrievalState's swap_every_steps). The trainer
then waits for each refresh, which a fast refresher beside a slow trainer makes short.

Where retrieval runs (--retrieval): "host", the input pipeline's tf.py_function on the trainer's host
(realm_input.realm_dataset: stale query embedding, search, candidate lookup per batch), or "in_step",
graph ops inside the train step over the index in use held as variables (in_step_retrieval: the host
only masks and featurizes queries, docs/pod_scale.md). Both choose the same candidates from the same
index for the same batch. In step, the index in use is chosen between loops, for the loop's first step:
a newer index reaches the step at the next loop boundary, and --index_swap_steps must be a multiple of
--steps_per_loop.
"""

import dataclasses
import os
import time
from typing import Callable, Dict, Optional

import tensorflow as tf
import tf_keras

from realm_tf import io_utils
from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import corpus_table
from realm_tf.data import pretraining
from realm_tf.modeling import realm as realm_model
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import published_index
from realm_tf.retrieval import refresher
from realm_tf.tasks import in_step_retrieval
from realm_tf.tasks import realm_input
from realm_tf.training import loop
from realm_tf.training import optimization
from realm_tf.training import task as task_lib

# Written at the end of a run: first loss, last metrics, the index steps trained on, seconds.
SUMMARY_NAME = "train_summary.json"
# --retrieval: on the host, in the input pipeline; or inside the train step (module docstring).
HOST, IN_STEP = "host", "in_step"
RETRIEVALS = (HOST, IN_STEP)


@dataclasses.dataclass(frozen=True)
class RealmTrainerOptions:
  """What bin/train_realm's flags set (see there for meanings)."""
  config: realm_config_lib.RealmConfig
  loop: loop.LoopOptions
  pretraining_corpus_path: str
  retrieval_corpus_path: str
  batch_size: int = 16
  learning_rate: float = 3e-5
  adam_bias_correction: bool = False
  init_retriever_checkpoint: Optional[str] = None
  init_reader_checkpoint: Optional[str] = None
  bootstrap_index: bool = False
  index_implementation: str = "scann"
  max_index_staleness_steps: Optional[int] = None
  check_index_every_batches: int = 10
  wait_for_index_seconds: Optional[float] = None
  index_swap_steps: Optional[int] = None
  retrieval: str = HOST
  seed: int = 0


def build_model(config: realm_config_lib.RealmConfig) -> realm_model.RealmPretrainer:
  """A RealmPretrainer with its variables created (so it can be restored into)."""
  model = realm_model.RealmPretrainer(config.retriever_bert,
                                      config.reader_bert,
                                      config.projection_size,
                                      config.embedder_layer_norm_epsilon,
                                      config.embedder_dropout_rate,
                                      config.share_embedders,
                                      pooling=config.embedder_pooling,
                                      cosine_score_scale=config.cosine_score_scale)
  q, c, m = config.query_seq_len, config.candidate_seq_len, config.max_masks
  dummy = {}
  for prefix, shape in ((realm_model.QUERY, [1, q]), (realm_model.CANDIDATE, [1, 2, c]), (realm_model.JOINT,
                                                                                          [1, 2, q + c])):
    for field in realm_model.BERT_FIELDS:
      dummy[f"{prefix}_{field}"] = tf.zeros(shape, tf.int32)
  dummy.update({
      realm_model.MLM_POSITIONS: tf.zeros([1, m], tf.int32),
      realm_model.MLM_TARGETS: tf.zeros([1, m], tf.int32),
      realm_model.MLM_MASK: tf.zeros([1, m], tf.float32)
  })
  model(dummy)
  return model


@task_lib.register("realm")
class RealmTask(task_lib.Task):
  """REALM's masked LM through retrieval, on batches the retrieval-augmented input pipeline makes with the
  newest published index (module docstring: index staleness and fixed swaps).

  Its host hook tells the pipeline the trainer's step and logs the index trained on; stop_input ends the
  pipeline's waits for an index. train() reads first_loss, started and state's indexes afterwards.
  """

  def __init__(self,
               options: RealmTrainerOptions,
               strategy: tf.distribute.Strategy,
               log: Callable[[str], None] = print):
    # strategy: the bootstrap index (initialize) embeds with the trainer's devices.
    self.options = options
    self.strategy = strategy
    self.log = log
    config = options.config
    self.tokenizer = config.tokenizer()
    self.featurizer = config.featurizer(self.tokenizer)
    model_dir = options.loop.model_dir
    if options.bootstrap_index:
      # A trainer killed while it published its bootstrap index left the temporary directory behind; the
      # refresher removes such leftovers only when it starts, which may be long before (or never after).
      # Every start, not only initialize's: a resumed run restores instead.
      published_index.clean_temporary(model_dir, log, worker_rows=False)
    # After bin/update_index the indexes embed a corpus derived from --retrieval_corpus_path; a
    # (re)started trainer reads that one, so the index rows and the documents it featurizes agree. An
    # update published while this process runs is swapped in live, corpus and index together
    # (realm_input.RetrievalState).
    corpus_prefix = published_index.current_corpus(model_dir, options.retrieval_corpus_path, log)
    watcher = published_index.IndexWatcher(model_dir, log, corpus_prefix=corpus_prefix)
    corpus = corpus_table.CorpusTable.load(corpus_prefix)
    self.state = realm_input.RetrievalState(watcher,
                                            corpus,
                                            config.num_candidates,
                                            options.check_index_every_batches,
                                            options.max_index_staleness_steps,
                                            options.wait_for_index_seconds,
                                            log,
                                            expected_dim=config.embedding_dim,
                                            swap_every_steps=options.index_swap_steps)
    # The in-step path's index in use (build_inputs makes it), and the LoadedIndex it holds.
    self.retrieval: Optional[in_step_retrieval.InStepRetrieval] = None
    self._retrieval_index: Optional[published_index.LoadedIndex] = None
    self.started = time.time()
    self.first_loss: Optional[float] = None
    # The first step this process trained (later than 1 after a resume).
    self._first_step: Optional[int] = None

  def build_model(self) -> realm_model.RealmPretrainer:
    # --seed also fixes the initialization and dropout (mlm_trainer says why).
    tf_keras.utils.set_random_seed(self.options.seed)
    return build_model(self.options.config)

  def create_optimizer(self):
    optimizer = optimization.create_optimizer(self.options.learning_rate,
                                              self.options.loop.num_train_steps,
                                              bias_correction=self.options.adam_bias_correction)
    # The run's clock (examples_per_second, the summary's seconds) starts once the model is built.
    self.started = time.time()
    return optimizer

  def build_inputs(self, batches_done: int) -> tf.data.Dataset:
    options = self.options
    if options.retrieval == IN_STEP:
      self._use_index_of_step(batches_done + 1)
      return realm_input.query_batches(pretraining.pretraining_dataset(options.pretraining_corpus_path),
                                       self.tokenizer,
                                       self.featurizer,
                                       options.batch_size,
                                       seed=options.seed,
                                       skip_batches=batches_done)
    return realm_input.realm_dataset(pretraining.pretraining_dataset(options.pretraining_corpus_path),
                                     self.tokenizer,
                                     self.featurizer,
                                     self.state,
                                     options.batch_size,
                                     seed=options.seed,
                                     skip_batches=batches_done)

  def initialize(self, model: realm_model.RealmPretrainer) -> None:
    options, log = self.options, self.log
    if options.init_retriever_checkpoint:
      path = training_state.restore_retriever(model.retriever, options.init_retriever_checkpoint)
      log(f"retriever warm-started from {path}")
    if options.init_reader_checkpoint:
      report = bert_mapping.load_bert_weights(model.encoder.encoder,
                                              options.init_reader_checkpoint,
                                              masked_lm=model.encoder.masked_lm,
                                              strict=False)
      log(f"knowledge-augmented encoder warm-started: {report.summary()}")
    model_dir = options.loop.model_dir
    if options.bootstrap_index and realm_input.needs_bootstrap(model_dir, log):
      log("no index published yet: building the bootstrap index (step 0) from the warm-start weights")
      refresher.build_and_publish(
          options.config,
          model.retriever,
          0,
          # The trainer's one XLA switch covers its bootstrap embedding too (XLA compiles the embedder
          # once per length bucket: seconds a --nojit_compile run on a CPU does not want to pay).
          refresher.RefresherOptions(model_dir=model_dir,
                                     corpus_prefix=options.retrieval_corpus_path,
                                     index_implementation=options.index_implementation,
                                     embed_jit_compile=options.loop.jit_compile),
          self.strategy,
          {"bootstrap": True},
          log)

  def _use_index_of_step(self, step: int) -> None:
    """In step: the index the schedule gives the loop that starts at `step` (waiting for it), loaded into
    the step's variables when it is not the one they hold."""
    loaded, corpus = self.state.select_index(step)
    if self.retrieval is None:
      self.retrieval = in_step_retrieval.InStepRetrieval(loaded, corpus, self.featurizer,
                                                         self.options.config.num_candidates)
    elif loaded is not self._retrieval_index:
      self.retrieval.swap(loaded, corpus)
    self._retrieval_index = loaded

  def step_features(self, features: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    if self.options.retrieval != IN_STEP:
      return features  # the host pipeline made the candidates already
    return self.retrieval.candidate_features(features)

  def after_step(self, step: int, metrics: Dict[str, float]) -> Dict[str, float]:
    # Once per loop: the staleness bound includes the loop length (module docstring).
    self.state.trainer_step = step
    if self.first_loss is None:
      self.first_loss = metrics["loss"]
      self._first_step = step
    index = self.state.index
    if self.options.retrieval == IN_STEP and step < self.options.loop.num_train_steps:
      self._use_index_of_step(step + 1)  # after reading the index this loop trained on
    published = index.record.get("published_unix_time", time.time()) if index else time.time()
    return {
        "index_step":
            float(index.step) if index else -1.0,
        "index_staleness_steps":
            float(step - index.step) if index else -1.0,
        "index_staleness_minutes": (time.time() - published) / 60.0,
        # Examples this process trained on, not those of the run before a resume.
        "examples_per_second": (
            (step - self._first_step + 1) * self.options.batch_size / max(time.time() - self.started, 1e-9)),
    }

  def stop_input(self) -> None:
    # Batches prepared ahead of steps that will not run may be waiting for an index: closing the state
    # ends those waits before the loop tears the pipeline down.
    self.state.close()


def train(options: RealmTrainerOptions,
          strategy: tf.distribute.Strategy,
          log: Callable[[str], None] = print) -> Dict:
  """Runs REALM pre-training to options.loop.num_train_steps; returns a summary of the run."""
  config = options.config
  model_dir = options.loop.model_dir
  staleness, every = options.max_index_staleness_steps, options.loop.save_checkpoints_steps
  if staleness is not None and staleness < every:
    # The refresher can only publish indexes of saved checkpoints: the trainer would wait for one that
    # is not written until it trains further, which it cannot while it waits.
    raise ValueError(
        f"--max_index_staleness_steps={staleness} is below --save_checkpoints_steps={every}: "
        "the refresher embeds saved checkpoints, so the trainer would wait forever for an index; "
        "make --max_index_staleness_steps at least --save_checkpoints_steps")
  if options.retrieval not in RETRIEVALS:
    raise ValueError(f"--retrieval={options.retrieval!r}: choose one of {', '.join(RETRIEVALS)}")
  swap = options.index_swap_steps
  if swap is not None and options.retrieval == IN_STEP:
    # In step the index in use changes between loops only (module docstring).
    options.loop.check_between_loops("index_swap_steps", swap, "index swaps with --retrieval=in_step")
  if swap is not None:
    if staleness is not None:
      raise ValueError("--index_swap_steps and --max_index_staleness_steps are alternatives (fixed swaps "
                       "bound the staleness by --index_swap_steps already): give one of them")
    if swap < 1 or swap % every:
      # The refresher can only publish indexes of saved checkpoints: a swap step without a checkpoint
      # would wait forever.
      raise ValueError(f"--index_swap_steps={swap} must be a positive multiple of "
                       f"--save_checkpoints_steps={every}: each swap trains on the index of the "
                       "checkpoint saved at that step")
  # Before anything is built: the corpus and a resumed run must have been made with this vocab.
  config = dataclasses.replace(config,
                               vocab_sha256=corpus_lib.check_vocab(
                                   config.vocab_path, options.retrieval_corpus_path,
                                   realm_config_lib.RealmConfig.saved_vocab_sha256(model_dir),
                                   os.path.join(model_dir, realm_config_lib.CONFIG_NAME)))
  tf.io.gfile.makedirs(model_dir)
  config.save_or_check(model_dir)
  task = RealmTask(dataclasses.replace(options, config=config), strategy, log)
  try:
    final = loop.train(task, options.loop, strategy, log=log)
  except tf.errors.OpError:
    if task.state.error is None:
      raise
    # The input pipeline's own error (NoRefresherError, a missing index, a corpus the index does not
    # match) reaches TensorFlow's graph-execution wrapper first, whose last line is not it: the user
    # reads it as itself, on the last line.
    raise task.state.error from None
  summary = {
      "first_loss": task.first_loss,
      "final": final,
      "indexes_used": sorted(set(task.state.indexes_used)),
      "seconds": time.time() - task.started
  }
  io_utils.write_json_atomic(os.path.join(model_dir, SUMMARY_NAME), summary)
  training_state.write_done_marker(model_dir)
  log(f"wrote {training_state.DONE_MARKER}; indexes trained on: {summary['indexes_used']}")
  return summary
