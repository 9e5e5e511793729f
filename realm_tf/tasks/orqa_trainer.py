"""ORQA fine-tuning (bin/train_orqa): a trainable query tower and span reader on a frozen index.

A run's model dir:
  realm_config.json   the retriever and reader BERTs, vocab, projection (share_embedders false: ORQA keeps
                      a trainable query tower and a frozen document tower)
  orqa_config.json    reader length, beams, span width, the retrieval corpus (realm_tf.modeling.orqa)
  frozen_index/       the block embeddings, made once at the start and reused when the run restarts
                      (realm_tf.runs.frozen_index)
  ckpt-N              the shared training loop's checkpoints (model + optimizer; the index is not in them)
  best/ckpt-S         the model at the dev evaluation with the best accuracy so far, and
  best_metric.json    which checkpoint that is (realm_tf.runs.best_checkpoint)
  eval/               bin/eval_orqa's metrics and predictions (realm_tf.runs.orqa_evaluation)
  train_candidates.npz  with --retriever=bm25|hybrid: each training question's rows, searched once
                      (realm_tf.runs.train_candidates)

--retriever=bm25|hybrid trains on what bin/eval_orqa --retriever=bm25|hybrid reads: the reader reads the
top reader_beam of that retriever's rows, and the retriever loss is over its top retriever_beam rows,
scored by the query tower (which so learns to rank them). The dev evaluation reads the same retriever's
rows, so the best checkpoint is the best for it.

Dev evaluation runs every eval_every_steps (and at the end) with the original's PREDICT setting and
selects on the official string accuracy (exact match after ORQA's normalization, regex match for
CuratedTREC-style answers), not on the original's token-level exact_match, so that the selected
checkpoint is the one with the best reported number.
"""

import dataclasses
import os
import time
from typing import Callable, Dict, List, Optional

import tensorflow as tf
import tf_keras

from realm_tf import io_utils
from realm_tf import retriever_eval
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import corpus_table
from realm_tf.data import orqa_features
from realm_tf.data import qa as qa_lib
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import orqa as orqa_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import hybrid
from realm_tf.retrieval import index_format
from realm_tf.runs import best_checkpoint
from realm_tf.runs import frozen_index
from realm_tf.runs import orqa_evaluation
from realm_tf.runs import orqa_model
from realm_tf.runs import train_candidates
from realm_tf.runs import warm_start as warm_start_lib
from realm_tf.tasks import orqa_dev_evaluator
from realm_tf.training import loop
from realm_tf.training import optimization
from realm_tf.training import task as task_lib

SUMMARY_NAME = "train_summary.json"


@dataclasses.dataclass(frozen=True)
class OrqaTrainerOptions:
  """What bin/train_orqa's flags set (see there for meanings)."""
  config: realm_config_lib.RealmConfig
  orqa: orqa_lib.OrqaConfig
  loop: loop.LoopOptions
  train_path: str
  dev_path: Optional[str] = None
  retriever_checkpoint: Optional[str] = None
  index_dir: Optional[str] = None
  reader_checkpoint: Optional[str] = None
  batch_size: int = 8
  learning_rate: float = 1e-5
  # The query tower's peak rate (the same schedule); None: learning_rate, as the original.
  retriever_learning_rate: Optional[float] = None
  adam_bias_correction: bool = False
  eval_every_steps: int = 1000
  eval_batch_size: int = 32
  max_eval_examples: Optional[int] = None
  embed_batch_size: int = 128
  skip_invalid: bool = False
  seed: int = 0
  retriever: str = hybrid.DENSE
  hybrid_bm25_weight: Optional[float] = None


# The query tower's variables, and only they: orqa/query_embedder/... (the frozen document tower is not
# trained; the reader is orqa/reader/...), with or without a replica's /replica_N suffix.
QUERY_TOWER_VARIABLES = f"/{embedder_lib.QUERY_TOWER_NAME}/"


def query_tower_multipliers(options: OrqaTrainerOptions):
  """create_optimizer's learning_rate_multipliers for options.retriever_learning_rate: the query tower at
  that peak rate on the reader's schedule."""
  if options.retriever_learning_rate is None:
    return ()
  if options.learning_rate <= 0:
    raise ValueError(f"retriever_learning_rate={options.retriever_learning_rate} needs learning_rate > 0 "
                     f"(got {options.learning_rate}): the query tower's rate is a factor of its schedule")
  return ((QUERY_TOWER_VARIABLES, options.retriever_learning_rate / options.learning_rate),)


def _write_configs(config: realm_config_lib.RealmConfig, orqa: orqa_lib.OrqaConfig, model_dir: str) -> None:
  """Writes the run's configs, or checks that a restarted run uses the ones it was started with."""
  config.save_or_check(model_dir)
  orqa.save_or_check(model_dir)


@task_lib.register("orqa")
class OrqaTask(task_lib.Task):
  """ORQA's fine-tuning on question-answer pairs: retrieval from the frozen index, then the span reader;
  the dev evaluator (when there are dev questions) keeps the best checkpoint.

  Made by train() once the frozen index, the corpus and the examples are ready; train() reads
  first_loss, started and evaluator afterwards.
  """
  # The dev metrics go to MODEL_DIR/dev (the controller writes the evaluator's output), not again among
  # the training scalars.
  eval_name = "dev"

  def __init__(self,
               options: OrqaTrainerOptions,
               tokenizer,
               featurizer,
               train_examples: List[qa_lib.QAExample],
               dev_examples: List[qa_lib.QAExample],
               embeddings,
               blocks: corpus_table.CorpusTable,
               retriever_fn: Callable[[], embedder_lib.Retriever],
               log: Callable[[str], None] = print,
               candidate_rows=None,
               sparse_fn: Optional[Callable[[], object]] = None):
    # retriever_fn: the warm-start retriever, built once, only when needed (train() says why).
    # candidate_rows: int32 [len(train_examples), retriever_beam], the rows --retriever=bm25|hybrid
    # gives each training question (None: the dense tower searches in the step); sparse_fn: the
    # corpus's BM25 index (built once), for the dev evaluation's rows.
    self.options = options
    self.eval_every_steps = options.eval_every_steps
    self.tokenizer, self.featurizer = tokenizer, featurizer
    self.train_examples, self.dev_examples = train_examples, dev_examples
    self.embeddings, self.blocks = embeddings, blocks
    self.retriever_fn = retriever_fn
    self.log = log
    self.candidate_rows, self.sparse_fn = candidate_rows, sparse_fn
    self.evaluator: Optional[orqa_dev_evaluator.OrqaDevEvaluator] = None
    self.first_loss: Optional[float] = None
    self.started = time.time()

  def build_model(self):
    # Not seeded again here: train() seeded before the retriever's initialization, which comes first.
    options = self.options
    return orqa_model.build_model(options.config, options.orqa, self.embeddings, self.blocks, self.tokenizer)

  def create_optimizer(self):
    return optimization.create_optimizer(self.options.learning_rate,
                                         self.options.loop.num_train_steps,
                                         bias_correction=self.options.adam_bias_correction,
                                         learning_rate_multipliers=query_tower_multipliers(self.options))

  def build_inputs(self, batches_done: int) -> tf.data.Dataset:
    options, examples = self.options, self.train_examples
    return orqa_features.qa_dataset([e.question for e in examples], [e.answers for e in examples],
                                    self.tokenizer,
                                    self.featurizer,
                                    options.orqa.reader_seq_len,
                                    options.batch_size,
                                    options.orqa.max_num_answers,
                                    options.orqa.max_answer_len,
                                    seed=options.seed,
                                    skip_batches=batches_done,
                                    candidate_rows=self.candidate_rows)

  def initialize(self, model) -> None:
    orqa_lib.copy_retriever_weights(self.retriever_fn(), model.retriever)
    if self.options.reader_checkpoint:
      self.log(warm_start_lib.warm_start_reader(model.reader, self.options.reader_checkpoint))

  def build_evaluator(self, model, optimizer, strategy):
    if self.dev_examples:
      predictor = orqa_evaluation.OrqaPredictor(model, self.tokenizer, self.featurizer, self.blocks, strategy,
                                                self.options.eval_batch_size)
      self.evaluator = orqa_dev_evaluator.OrqaDevEvaluator(predictor,
                                                           self.dev_examples,
                                                           self.options.loop.model_dir,
                                                           optimizer.iterations,
                                                           self.log,
                                                           rows_fn=self._dev_rows_fn(predictor))
    # The run's clock (the summary's seconds) starts once everything is built.
    self.started = time.time()
    return self.evaluator

  def _dev_rows_fn(self, predictor: orqa_evaluation.OrqaPredictor):
    """What the dev evaluation reads with --retriever: None for the dense tower (the step searches);
    else features -> the retriever's rows of the dev questions, the dense side of the hybrid from the
    query tower being trained."""
    retriever = self.options.retriever
    if retriever == hybrid.DENSE:
      return None
    questions = [e.question for e in self.dev_examples]
    bm25_rows = []  # BM25's never change: searched once

    def rows_fn(features):
      if retriever == hybrid.BM25 and bm25_rows:
        return bm25_rows[0]
      rows = hybrid.candidate_rows(retriever,
                                   questions,
                                   predictor.num_retrieved,
                                   lambda d: predictor.retrieve(features, d),
                                   self.sparse_fn(),
                                   bm25_weight=self.options.hybrid_bm25_weight)["rows"]
      if retriever == hybrid.BM25:
        bm25_rows.append(rows)
      return rows

    return rows_fn

  def after_step(self, step: int, metrics: Dict[str, float]) -> Dict[str, float]:
    del step
    if self.first_loss is None:
      self.first_loss = metrics["loss"]
    return {}


def train(options: OrqaTrainerOptions,
          strategy: tf.distribute.Strategy,
          log: Callable[[str], None] = print) -> Dict:
  """Fine-tunes ORQA to options.loop.num_train_steps; returns a summary of the run."""
  model_dir = options.loop.model_dir
  options.loop.check_between_loops("eval_every_steps", options.eval_every_steps, "dev evaluations")
  train_candidates.check_retriever(options.retriever, options.hybrid_bm25_weight)
  query_tower_multipliers(options)  # a bad rate fails now, not after the corpus is embedded
  if options.index_dir and not options.retriever_checkpoint:
    raise ValueError(f"--index_dir={options.index_dir} needs --retriever_checkpoint: the query tower must "
                     "start from the retriever whose document tower embedded that index")
  # Before anything is built: the corpus and a resumed run must have been made with this vocab.
  vocab_sha256 = corpus_lib.check_vocab(options.config.vocab_path, options.orqa.retrieval_corpus_path,
                                        realm_config_lib.RealmConfig.saved_vocab_sha256(model_dir),
                                        os.path.join(model_dir, realm_config_lib.CONFIG_NAME))
  config = dataclasses.replace(options.config, share_embedders=False, vocab_sha256=vocab_sha256)
  options = dataclasses.replace(options, config=config)
  retrievers: List[embedder_lib.Retriever] = []
  # --seed also fixes the initialization and dropout (mlm_trainer says why).
  tf_keras.utils.set_random_seed(options.seed)

  def retriever_fn() -> embedder_lib.Retriever:  # Built once, only when needed.
    if not retrievers:
      with strategy.scope():
        retrievers.append(warm_start_lib.load_retriever_checkpoint(config, options.retriever_checkpoint))
      log(f"retriever from {options.retriever_checkpoint or 'a fresh initialization (no checkpoint)'}")
    return retrievers[0]

  resuming = (tf.io.gfile.exists(
      os.path.join(frozen_index.frozen_index_dir(model_dir), index_format.MANIFEST_NAME)) and
              tf.train.latest_checkpoint(model_dir) is not None)
  if not resuming:
    # Before anything is written: a checkpoint that does not fit must not leave a model dir whose saved
    # configuration the corrected rerun would then have to match.
    retriever_fn()
  tf.io.gfile.makedirs(model_dir)
  _write_configs(config, options.orqa, model_dir)
  tokenizer = config.tokenizer()
  featurizer = config.featurizer(tokenizer)
  train_examples = orqa_evaluation.load_examples(options.train_path, options.skip_invalid, log)
  dev_examples = (orqa_evaluation.load_examples(options.dev_path, options.skip_invalid, log)
                  if options.dev_path else [])
  if options.max_eval_examples:
    dev_examples = dev_examples[:options.max_eval_examples]
  if any(e.answer_is_regex for e in train_examples):
    log("WARNING: regex answers are trained on as literal strings (the reader needs wordpieces); "
        "evaluation matches them as patterns")

  embeddings = frozen_index.prepare_frozen_index(model_dir,
                                                 options.orqa.retrieval_corpus_path,
                                                 featurizer,
                                                 config.embedding_dim,
                                                 strategy,
                                                 retriever_fn,
                                                 options.index_dir,
                                                 options.retriever_checkpoint,
                                                 options.embed_batch_size,
                                                 log,
                                                 jit_compile=options.loop.jit_compile)
  corpus_prefix = frozen_index.frozen_index_corpus(model_dir, options.orqa.retrieval_corpus_path)
  blocks = corpus_table.CorpusTable.load(corpus_prefix)
  sparse_indexes = []

  def sparse_fn():  # Built once, only when a search needs it.
    if not sparse_indexes:
      started = time.time()
      sparse_indexes.append(hybrid.build_bm25(blocks.titles, blocks.bodies))
      log(f"BM25 index of {sparse_indexes[0].num_docs} blocks in {time.time() - started:.1f} s")
    return sparse_indexes[0]

  candidate_rows = None
  if options.retriever != hybrid.DENSE:
    questions = [e.question for e in train_examples]
    candidate_rows = train_candidates.training_rows(
        model_dir,
        options.retriever,
        questions,
        min(options.orqa.retriever_beam_size, embeddings.shape[0]),
        corpus_prefix,
        sparse_fn,
        lambda d: retriever_eval.dense_top_k(retriever_fn(), config, embeddings, questions, d),
        options.hybrid_bm25_weight,
        log=log)
  task = OrqaTask(options, tokenizer, featurizer, train_examples, dev_examples, embeddings, blocks,
                  retriever_fn, log, candidate_rows, sparse_fn)
  final = loop.train(task, options.loop, strategy, log=log)
  evaluator = task.evaluator
  summary = {
      "first_loss": task.first_loss,
      "final": final,
      "dev_history": evaluator.history if evaluator else [],
      "best": evaluator.best if evaluator else best_checkpoint.read_best(model_dir),
      "seconds": time.time() - task.started
  }
  io_utils.write_json_atomic(os.path.join(model_dir, SUMMARY_NAME), summary)
  return summary
