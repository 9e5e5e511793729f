"""The FiD-KD iterative loop (bin/train_fid_kd): distil a FiD reader's cross-attention into the retriever.

Izacard & Grave, "Distilling Knowledge from Reader to Retriever" (ICLR 2021); facebookresearch/FiD runs
the steps by hand (write scores, train_retriever.py, generate_passage_embeddings.py, passage_retrieval.py);
here one process runs them all, for --iterations rounds:

  1. embed the corpus with the current retriever's document tower (the refreshed index; exact search)
     and retrieve the top n passages of every training and dev question (iteration 0 may use BM25
     passages instead, as the paper starts from BM25);
  2. train a FRESHLY INITIALIZED reader on the training questions (re-initialized every iteration, as in
     the paper, whose reader restarts from pre-trained T5: a BERT encoder is re-loaded from
     reader_init_checkpoint every iteration): first for reader_single_passage_steps on each question's
     highest-ranked answer-bearing passage alone, then for reader_steps on its n passages, with answers
     substituted (realm_tf.data.answer_substitution) so that it must read rather than memorize; measure
     its exact match on the dev questions;
  3. compute the reader's cross-attention score of each retrieved training passage (on the original
     passages; realm_tf.modeling.fid_reader.SCORE_AGGREGATIONS) and how often it ranks the gold passage
     first;
  4. train the retriever on those passages with the KL loss (realm_tf.modeling.fid_distillation) for
     retriever_steps (only on the questions whose passages hold an answer, with
     distill_answer_bearing_only);
  5. measure the distilled retriever's recall@k on the dev questions (re-embedding the corpus) and, with
     keep_better_retriever, keep it only if its selection_metric (e.g. gold_recall@5) is not below the
     round's start; otherwise the next round starts from the retriever this round started from (model
     selection on dev recall: FiD-KD's rounds can lower recall, see keep_better_retriever).

A run's model dir:
  realm_config.json, fid_config.json   the retriever / tokenizer and reader configurations (checked on resume)
  initial_retriever/ckpt-0             the retriever iteration 0 starts from (--retriever_checkpoint or a
                                       seeded fresh one), so that a resumed run starts from the same weights
  iteration_<i>/reader_1_passage_train/, reader_train/, retriever_train/
                                       the shared loop's model dirs of the iteration's three training
                                       phases (checkpoints with optimizer state, TensorBoard train/):
                                       a run stopped mid-phase resumes the phase there
  iteration_<i>/reader/ckpt-S          the reader of iteration i (tf.train.Checkpoint(model=reader))
  iteration_<i>/scores.jsonl           per training question: retrieved rows, doc ids, retriever and
                                       reader scores
  iteration_<i>/retriever/ckpt-S       the distilled retriever (model/retriever/ layout: usable as
                                       --retriever_checkpoint of bin/train_orqa, bin/train_realm, ...)
  iteration_<i>/metrics.json           recall before / after, reader dev exact match, teacher and retriever
                                       gold top-1, training summaries, whether the distilled retriever was
                                       accepted and which retriever the round ended with
                                       ("retriever_after", relative to MODEL_DIR: iteration_<i>/retriever or,
                                       if rejected, the round's start); written LAST and atomically: its
                                       presence marks the iteration done, and a restarted run skips it
                                       (resuming from its retriever_after)
  fid_kd_summary.json                  all iterations' metrics

Scale: the corpus (realm_tf.data.corpus_table.CorpusTable, plus every document's packed candidate
inputs) and the questions are held in host memory and the index is exact, which suits testdata- and
SQuAD-sized corpora, not a 21M-passage Wikipedia.
"""

import dataclasses
import itertools
import json
import os
import time
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import tensorflow as tf
import tf_keras

from realm_tf import evaluation
from realm_tf import io_utils
from realm_tf import retriever_eval
from realm_tf.checkpoints import fid_warm_start
from realm_tf.data import answer_substitution
from realm_tf.data import corpus_table
from realm_tf.data import fid_features
from realm_tf.data import qa as qa_lib
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import fid_distillation
from realm_tf.modeling import fid_reader
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import bm25
from realm_tf.retrieval import corpus_embedding
from realm_tf.runs import warm_start
from realm_tf.training import loop
from realm_tf.training import optimization
from realm_tf.training import task as task_lib

INITIAL_RETRIEVER_DIR = "initial_retriever"
METRICS_NAME = "metrics.json"
SCORES_NAME = "scores.jsonl"
SUMMARY_NAME = "fid_kd_summary.json"
INITIAL_PASSAGES = ("dense", "bm25")


@dataclasses.dataclass(frozen=True)
class FidKdOptions:
  """What bin/train_fid_kd's flags set (see there for meanings)."""
  config: realm_config_lib.RealmConfig
  fid: fid_reader.FidConfig
  model_dir: str
  retrieval_corpus_path: str
  train_path: str
  dev_path: str
  retriever_checkpoint: Optional[str] = None
  initial_passages: str = "bm25"
  iterations: int = 2
  num_passages: int = 3
  reader_steps: int = 2500
  retriever_steps: int = 500
  reader_batch_size: int = 32
  retriever_batch_size: int = 8
  reader_learning_rate: float = 2e-3
  retriever_learning_rate: float = 1e-3
  reader_temperature: float = 0.1
  retriever_temperature: float = 1.0
  reader_answer_substitution_rate: float = 1.0
  reader_single_passage_steps: int = 1500
  reader_score_aggregation: str = "attention_mass"
  distill_answer_bearing_only: bool = True
  recall_ks: Tuple[int, ...] = (1, 5, 20)
  max_train_examples: Optional[int] = None
  max_eval_examples: Optional[int] = None
  embed_batch_size: int = 128
  predict_batch_size: int = 32
  jit_compile: bool = False
  seed: int = 0
  keep_better_retriever: bool = True
  reader_init_checkpoint: Optional[str] = None
  selection_metric: str = "gold_recall@5"


def iteration_dir(model_dir: str, iteration: int) -> str:
  return os.path.join(model_dir, f"iteration_{iteration}")


def _retriever_subdir(iteration: int) -> str:
  """Where iteration i's distilled retriever is saved, relative to the model dir."""
  return f"iteration_{iteration}/retriever"


def check_selection_metric(options: "FidKdOptions") -> None:
  """--selection_metric must name a recall that retriever_eval.retriever_recall reports for --recall_ks."""
  kind, _, k = options.selection_metric.partition("_recall@")
  if kind not in ("gold", "answer") or not k.isdigit() or int(k) not in options.recall_ks:
    raise ValueError(
        f"--selection_metric={options.selection_metric!r} must be gold_recall@K or answer_recall@K with K one "
        f"of --recall_ks={','.join(map(str, options.recall_ks))} (what retriever_eval reports per round)")


# ---------------------------------------------------------------------------------------------------------
# Retrieval.


def embed_corpus(retriever: embedder_lib.Retriever, options: FidKdOptions) -> np.ndarray:
  """float32 [num_docs, D], the document tower over the corpus (the refreshed index's rows); with XLA
  when the run's steps use it (--jit_compile), as the other trainers embed their corpora."""
  return corpus_embedding.embed_corpus(lambda inputs: retriever.embed_documents(inputs, training=False),
                                       options.retrieval_corpus_path,
                                       options.config.featurizer(),
                                       batch_size=options.embed_batch_size,
                                       jit_compile=options.jit_compile,
                                       log=lambda _: None)


# ---------------------------------------------------------------------------------------------------------
# Training pieces.

Features = Dict[str, np.ndarray]


def _batches(features: Union[Features, Callable[[int], Features]], batch_size: int,
             seed: int) -> tf.data.Dataset:
  """Endless shuffled batches; features may be a function of the epoch (0, 1, ...), so that an
  augmentation draws anew every epoch while only one epoch is held in memory."""
  make_epoch = features if callable(features) else lambda _: features
  first = make_epoch(0)
  count = len(next(iter(first.values())))
  if count < batch_size:
    raise ValueError(f"fid_kd: {count} training examples cannot fill a batch of {batch_size}; lower the "
                     "batch size or pass more training questions")

  def epochs():
    for epoch in itertools.count():
      arrays = first if epoch == 0 else make_epoch(epoch)
      order = np.random.default_rng([seed, epoch]).permutation(count)
      yield {k: v[order] for k, v in arrays.items()}

  signature = {k: tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype)) for k, v in first.items()}
  return (tf.data.Dataset.from_generator(epochs,
                                         output_signature=signature).unbatch().batch(batch_size,
                                                                                     drop_remainder=True))


@task_lib.register("fid_kd_phase")
class FidKdPhase(task_lib.Task):
  """One training phase of a FiD-KD round (the reader's, on one or many passages, or the retriever's
  distillation) as a Task: a model the round has built and warm-started already, trained on the
  round's arrays with BERT's AdamW (10% warmup, linear decay). after_step keeps every loop's metrics in
  self.history, from which train_model summarizes the phase."""

  def __init__(self, model, features: Union[Features, Callable[[int], Features]], steps: int, batch_size: int,
               learning_rate: float, seed: int):
    self.model = model
    self.features = features
    self.steps, self.batch_size, self.learning_rate, self.seed = steps, batch_size, learning_rate, seed
    self.history: List[Dict[str, float]] = []

  def build_model(self):
    return self.model

  def create_optimizer(self):
    return optimization.create_optimizer(self.learning_rate,
                                         self.steps,
                                         num_warmup_steps=max(self.steps // 10, 0),
                                         weight_decay_rate=0.0)

  def build_inputs(self, batches_done: int) -> tf.data.Dataset:
    return _batches(self.features, self.batch_size, self.seed).skip(batches_done)

  def after_step(self, step: int, metrics: Dict[str, float]) -> Dict[str, float]:
    self.history.append(dict(metrics))
    return {}


def train_model(model,
                features: Union[Features, Callable[[int], Features]],
                steps: int,
                batch_size: int,
                learning_rate: float,
                seed: int,
                model_dir: str,
                jit_compile: bool = False,
                log: Callable[[str], None] = print,
                name: str = "model") -> Dict[str, float]:
  """Trains a compute_loss model for `steps` steps (a FidKdPhase) through the shared loop
  (realm_tf.training.loop): checkpoints in model_dir (a restarted run resumes the phase there), a stop on
  a non-finite loss, SIGTERM handling.

  features: arrays of the examples, or a function epoch -> arrays (see _batches).
  Returns {"steps", "seconds", "first_loss", "last_<metric>"} (the last ones averaged over the final 10%
  of the steps this process trained; first_loss None when the phase had finished before).
  """
  phase = FidKdPhase(model, features, steps, batch_size, learning_rate, seed)
  started = time.time()
  options = loop.LoopOptions(model_dir=model_dir,
                             num_train_steps=steps,
                             save_checkpoints_steps=steps,
                             keep_checkpoint_max=1,
                             log_every_steps=max(steps // 5, 1),
                             jit_compile=jit_compile,
                             global_batch_size=batch_size)
  loop.train(phase, options, tf.distribute.get_strategy(), log=lambda line: log(f"  {name} {line}"))
  history = phase.history
  result = {
      "steps": steps,
      "seconds": time.time() - started,
      "first_loss": history[0]["loss"] if history else None
  }
  tail = history[-max(steps // 10, 1):]
  for key in (history[-1] if history else {}):
    result["last_" + key] = float(np.mean([h[key] for h in tail]))
  return result


def reader_passage_scores(reader: fid_reader.FidReader,
                          features: fid_features.ReaderFeatures,
                          start_id: int,
                          batch_size: int,
                          aggregation: str = "pre_softmax") -> np.ndarray:
  """float32 [Q, n]: the reader's cross-attention score of every retrieved passage."""
  scores_fn = tf.function(lambda ids, mask: reader.passage_scores(ids, mask, start_id, aggregation),
                          autograph=False)
  out = [
      scores_fn(features.passage_ids[s:s + batch_size], features.passage_mask[s:s + batch_size]).numpy()
      for s in range(0, len(features.passage_ids), batch_size)
  ]
  return np.concatenate(out).astype(np.float32)


def reader_predictions(reader: fid_reader.FidReader, features: fid_features.ReaderFeatures, start_id: int,
                       batch_size: int) -> np.ndarray:
  """int32 [Q, T]: greedy answer ids."""
  decode_fn = tf.function(lambda ids, mask: reader.greedy_decode(ids, mask, start_id), autograph=False)
  out = [
      decode_fn(features.passage_ids[s:s + batch_size], features.passage_mask[s:s + batch_size]).numpy()
      for s in range(0, len(features.passage_ids), batch_size)
  ]
  return np.concatenate(out)


def _save(checkpoint: tf.train.Checkpoint, directory: str, step: int) -> str:
  manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1)
  return manager.save(checkpoint_number=step)


def save_retriever(retriever: embedder_lib.Retriever, directory: str, step: int) -> str:
  """model/retriever/ layout, as bin/train_realm's (training_state.restore_retriever)."""
  return _save(tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=retriever)), directory, step)


# ---------------------------------------------------------------------------------------------------------
# The loop.


class _Data:
  """The corpus and questions, featurized once for the whole run."""

  def __init__(self, options: FidKdOptions, log: Callable[[str], None]):
    config = options.config
    self.tokenizer = config.tokenizer()
    featurizer = config.featurizer(self.tokenizer)
    self.corpus = corpus_table.CorpusTable.load(options.retrieval_corpus_path)
    if self.corpus.num_docs < options.num_passages:
      raise ValueError(f"--retrieval_corpus_path={options.retrieval_corpus_path} holds "
                       f"{self.corpus.num_docs} documents, fewer than --num_passages={options.num_passages}")
    self.train = qa_lib.load_qa(options.train_path)[:options.max_train_examples]
    self.dev = qa_lib.load_qa(options.dev_path)[:options.max_eval_examples]
    if not self.train or not self.dev:
      raise ValueError(f"fid_kd: no questions in --train_path={options.train_path} or "
                       f"--dev_path={options.dev_path}")
    candidates = featurizer.candidate_inputs(*self.corpus.ragged_token_ids())
    self.candidates = [np.asarray(c) for c in candidates]  # 3 x int32 [num_docs, C]
    queries = featurizer.query_inputs(
        self.tokenizer.tokenize([e.question.encode("utf-8") for e in self.train]))
    self.train_queries = [np.asarray(q) for q in queries]  # 3 x int32 [num_train, Q]
    log(f"fid_kd: {self.corpus.num_docs} documents, {len(self.train)} training and {len(self.dev)} dev "
        "questions")

  def reader_examples(self, examples, rows, with_answers: bool) -> fid_features.TokenizedExamples:
    passages = [[(self.corpus.titles[r], self.corpus.bodies[r]) for r in row] for row in rows]
    answers = [e.answers[0] for e in examples] if with_answers else None
    return fid_features.tokenize_examples(self.tokenizer, [e.question for e in examples], passages, answers)


def _load_retriever(options: FidKdOptions, checkpoint: Optional[str], flag: str) -> embedder_lib.Retriever:
  return warm_start.load_retriever_checkpoint(options.config, checkpoint, flag=flag)


def _initial_retriever(options: FidKdOptions, log) -> embedder_lib.Retriever:
  """The retriever iteration 0 starts from, written once to MODEL_DIR/initial_retriever/."""
  directory = os.path.join(options.model_dir, INITIAL_RETRIEVER_DIR)
  if tf.train.latest_checkpoint(directory):
    return _load_retriever(options, directory, "MODEL_DIR/" + INITIAL_RETRIEVER_DIR)
  tf_keras.utils.set_random_seed(options.seed)
  retriever = _load_retriever(options, options.retriever_checkpoint, "--retriever_checkpoint")
  log(f"initial retriever: {options.retriever_checkpoint or 'untrained (seed %d)' % options.seed}; saved "
      f"to {save_retriever(retriever, directory, 0)}")
  return retriever


def _check_configs(options: FidKdOptions) -> None:
  options.config.save_or_check(options.model_dir)
  options.fid.save_or_check(options.model_dir)


def _read_json(path: str):
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


def run(options: FidKdOptions, log: Callable[[str], None] = print) -> List[Dict]:
  """Runs (or resumes) the loop; returns every iteration's metrics (also in fid_kd_summary.json)."""
  if options.initial_passages not in INITIAL_PASSAGES:
    raise ValueError(
        f"--initial_passages must be one of {INITIAL_PASSAGES}, got {options.initial_passages!r}")
  if options.reader_score_aggregation not in fid_reader.SCORE_AGGREGATIONS:
    raise ValueError(f"--reader_score_aggregation must be one of {sorted(fid_reader.SCORE_AGGREGATIONS)}, "
                     f"got {options.reader_score_aggregation!r}")
  if options.iterations < 1:
    raise ValueError(f"--iterations must be at least 1, got {options.iterations}")
  check_selection_metric(options)
  if options.reader_init_checkpoint and options.fid.encoder != "bert":
    raise ValueError(f"--reader_init_checkpoint={options.reader_init_checkpoint} warm-starts a BERT reader "
                     f"encoder, but the reader's encoder is {options.fid.encoder!r}")
  tf.io.gfile.makedirs(options.model_dir)
  _check_configs(options)
  data = _Data(options, log)
  retriever = _initial_retriever(options, log)
  start = INITIAL_RETRIEVER_DIR  # the retriever the next round starts from, relative to the model dir
  all_metrics: List[Dict] = []
  for iteration in range(options.iterations):
    directory = iteration_dir(options.model_dir, iteration)
    metrics_path = os.path.join(directory, METRICS_NAME)
    if tf.io.gfile.exists(metrics_path):
      metrics = _read_json(metrics_path)
      all_metrics.append(metrics)
      # The retriever the round ENDED with: its distilled one if accepted, else its start (runs written
      # before acceptance existed always continued from the distilled one).
      start = metrics.get("retriever_after", _retriever_subdir(iteration))
      retriever = _load_retriever(options, os.path.join(options.model_dir, start), f"MODEL_DIR/{start}")
      log(f"iteration {iteration}: done already ({metrics_path}); skipped, continuing from {start}")
      continue
    metrics = _run_iteration(options, data, retriever, iteration, start, log)
    all_metrics.append(metrics)
    start = metrics["retriever_after"]
  io_utils.write_json_atomic(os.path.join(options.model_dir, SUMMARY_NAME), all_metrics)
  return all_metrics


def _run_iteration(options: FidKdOptions, data: _Data, retriever: embedder_lib.Retriever, iteration: int,
                   start: str, log: Callable[[str], None]) -> Dict:
  """One round, in its six steps; start: the saved retriever (relative to the model dir) that `retriever`
  holds, restored into it if the distilled retriever is rejected."""
  started = time.time()
  directory = iteration_dir(options.model_dir, iteration)
  tf.io.gfile.makedirs(directory)
  metrics: Dict = {"iteration": iteration, "num_passages": options.num_passages}
  doc_embeddings, train_rows, dev_rows = _retrieve_passages(options, data, retriever, iteration, metrics, log)
  reader, train_examples, train_features = _train_reader(options, data, iteration, train_rows, dev_rows,
                                                         directory, metrics, log)
  scores = _teacher_scores(options, data, retriever, reader, doc_embeddings, train_rows, train_features,
                           directory, metrics, log)
  _distill_retriever(options, data, retriever, iteration, train_rows, train_examples, scores, directory,
                     metrics, log)
  metrics["recall_after"] = retriever_eval.retriever_recall(retriever,
                                                            options.config,
                                                            data.corpus,
                                                            data.dev,
                                                            _recall_ks(options, data),
                                                            doc_embeddings=embed_corpus(retriever, options))
  log(f"iteration {iteration}: dev recall of the distilled retriever {_recall_line(metrics['recall_after'])}")
  _select_retriever(options, retriever, iteration, start, metrics, log)
  metrics["seconds"] = time.time() - started
  log(f"iteration {iteration}: done in {metrics['seconds']:.0f} s")
  io_utils.write_json_atomic(os.path.join(directory, METRICS_NAME), metrics)
  return metrics


def _recall_ks(options: FidKdOptions, data: _Data) -> Tuple[int, ...]:
  return tuple(k for k in options.recall_ks if k <= data.corpus.num_docs)


def _retrieve_passages(options: FidKdOptions, data: _Data, retriever: embedder_lib.Retriever, iteration: int,
                       metrics: Dict, log: Callable[[str], None]):
  """Step 1: the index of the current retriever, its dev recall, and the top --num_passages rows of every
  training and dev question (BM25's in round 0 with --initial_passages=bm25)."""
  config, n = options.config, options.num_passages
  doc_embeddings = embed_corpus(retriever, options)
  metrics["recall_before"] = retriever_eval.retriever_recall(retriever,
                                                             config,
                                                             data.corpus,
                                                             data.dev,
                                                             _recall_ks(options, data),
                                                             doc_embeddings=doc_embeddings)
  if options.selection_metric not in metrics["recall_before"]:
    raise ValueError(f"--selection_metric={options.selection_metric} is not measured on --dev_path="
                     f"{options.dev_path} (reported: {_recall_line(metrics['recall_before'])}; gold recall "
                     "needs a doc_id per question, and K at most the corpus size); choose one of those")
  if iteration == 0 and options.initial_passages == "bm25":
    # Anserini's k1/b, as FiD's first reader read Pyserini's BM25 passages.
    index = bm25.Bm25Index(data.corpus.texts(), k1=0.9, b=0.4)
    train_rows, _ = index.search([e.question for e in data.train], n)
    dev_rows, _ = index.search([e.question for e in data.dev], n)
    metrics["passages"] = "bm25"
  else:
    train_rows, _ = retriever_eval.dense_top_k(retriever, config, doc_embeddings,
                                               [e.question for e in data.train], n)
    dev_rows, _ = retriever_eval.dense_top_k(retriever, config, doc_embeddings,
                                             [e.question for e in data.dev], n)
    metrics["passages"] = "dense"
  dev_gold = _gold_positions(data, data.dev, dev_rows)
  if dev_gold is not None:
    metrics["reader_passages_gold_recall"] = 100.0 * float(np.mean(dev_gold >= 0))
  log(f"iteration {iteration}: dev recall of the current retriever "
      f"{_recall_line(metrics['recall_before'])}; the reader reads {metrics['passages']} top {n} "
      f"(gold recall {metrics.get('reader_passages_gold_recall', float('nan')):.1f})")
  return doc_embeddings, train_rows, dev_rows


def _train_reader(options: FidKdOptions, data: _Data, iteration: int, train_rows: np.ndarray,
                  dev_rows: np.ndarray, directory: str, metrics: Dict, log: Callable[[str], None]):
  """Step 2: a fresh reader, trained on the retrieved passages (answers substituted, see
  answer_substitution.AnswerSubstitution), first on single answer-bearing passages; its dev exact match.
  Returns the reader, the training examples and their padded features."""
  n, tokenizer = options.num_passages, data.tokenizer
  tf_keras.utils.set_random_seed(options.seed + 1000 * (iteration + 1))
  reader = fid_reader.build_reader(options.fid)
  if options.fid.encoder == "bert" and options.reader_init_checkpoint:
    log(f"iteration {iteration}: reader encoder warm-started: " +
        fid_warm_start.load_encoder_weights(reader, options.reader_init_checkpoint).summary().splitlines()[0])
  train_examples = data.reader_examples(data.train, train_rows, with_answers=True)
  train_features = _pad(options, tokenizer, train_examples)
  if options.reader_single_passage_steps:
    metrics.update(_train_reader_on_single_passages(options, data, reader, train_examples, iteration, log))
  reader_epoch, substituted = _reader_epochs(options, data, train_examples, iteration, stream=0)
  metrics["reader_substituted_fraction"] = substituted / len(data.train)
  metrics["reader_training"] = train_model(reader, reader_epoch, options.reader_steps,
                                           options.reader_batch_size,
                                           options.reader_learning_rate, options.seed + iteration,
                                           os.path.join(directory, "reader_train"), options.jit_compile, log,
                                           f"reader ({n} passages)")
  reader_path = _save(tf.train.Checkpoint(model=reader), os.path.join(directory, "reader"),
                      options.reader_steps)
  metrics["reader_checkpoint"] = reader_path
  dev_features = _pad(options,
                      tokenizer,
                      data.reader_examples(data.dev, dev_rows, with_answers=False),
                      with_answers=False)
  predictions = reader_predictions(reader, dev_features, tokenizer.cls_id, options.predict_batch_size)
  matches = evaluation.wordpiece_exact_match(tokenizer, predictions, [e.answers for e in data.dev])
  metrics["reader_exact_match"] = 100.0 * float(np.mean(matches))
  log(f"iteration {iteration}: reader {reader_path}, dev exact match {metrics['reader_exact_match']:.1f}")
  return reader, train_examples, train_features


def _teacher_scores(options: FidKdOptions, data: _Data, retriever: embedder_lib.Retriever,
                    reader: fid_reader.FidReader, doc_embeddings: np.ndarray, train_rows: np.ndarray,
                    train_features, directory: str, metrics: Dict, log: Callable[[str], None]) -> np.ndarray:
  """Step 3: the reader's cross-attention scores of the (original) training passages [Q, n], written
  beside the retriever's scores to SCORES_NAME."""
  tokenizer = data.tokenizer
  scores = reader_passage_scores(reader, train_features, tokenizer.cls_id, options.predict_batch_size,
                                 options.reader_score_aggregation)
  query_emb = retriever_eval.embed_questions(retriever, options.config, [e.question for e in data.train])
  retriever_scores = np.einsum("qd,qnd->qn", query_emb, doc_embeddings[train_rows])
  # How often the teacher (and, for comparison, the retriever before KD) ranks the gold passage first.
  gold = _gold_positions(data, data.train, train_rows)
  if gold is not None and (gold >= 0).any():
    metrics["reader_gold_top1"] = _top1_percent(scores, gold)
    metrics["retriever_gold_top1"] = _top1_percent(retriever_scores, gold)
    log(f"iteration {metrics['iteration']}: of the training questions with the gold passage among their "
        f"{options.num_passages}, the reader's attention ranks it first for "
        f"{metrics['reader_gold_top1']:.1f}%, the retriever for {metrics['retriever_gold_top1']:.1f}%")
  io_utils.write_jsonl_atomic(os.path.join(directory, SCORES_NAME), ({
      "question":
          e.question,
      "answers":
          e.answers,
      "passages": [{
          "row": int(r),
          "doc_id": data.corpus.doc_ids[r],
          "retriever_score": float(rs),
          "reader_score": float(s)
      } for r, rs, s in zip(rows, r_scores, q_scores)]
  } for e, rows, r_scores, q_scores in zip(data.train, train_rows, retriever_scores, scores)))
  return scores


def _distill_retriever(options: FidKdOptions, data: _Data, retriever: embedder_lib.Retriever, iteration: int,
                       train_rows: np.ndarray, train_examples, scores: np.ndarray, directory: str,
                       metrics: Dict, log: Callable[[str], None]) -> None:
  """Step 4: the retriever under the KL loss on those passages, saved. With
  --distill_answer_bearing_only, of the questions whose passages hold an answer: for the others the
  reader's attention can only rank passages that are all irrelevant, and distilling that teaches the
  retriever noise."""
  distilled = np.arange(len(data.train))
  if options.distill_answer_bearing_only:
    bearing = answer_substitution.answer_passages(train_examples,
                                                  answer_substitution.continuation_ids(data.tokenizer),
                                                  options.fid.passage_seq_len)
    distilled = np.flatnonzero(np.asarray(bearing) >= 0)
  metrics["distilled_questions"] = len(distilled)
  q_ids, q_mask, q_segments = (q[distilled] for q in data.train_queries)
  c_ids, c_mask, c_segments = (c[train_rows[distilled]] for c in data.candidates)  # [Q, n, C]
  kd_features = {
      "query_token_ids": q_ids,
      "query_mask": q_mask,
      "query_segment_ids": q_segments,
      "candidate_token_ids": c_ids,
      "candidate_mask": c_mask,
      "candidate_segment_ids": c_segments,
      "reader_scores": scores[distilled]
  }
  if len(distilled) < options.retriever_batch_size:
    log(f"iteration {iteration}: only {len(distilled)} training questions have an answer-bearing passage, "
        f"fewer than a batch; the retriever is not trained this iteration")
    metrics["retriever_training"] = None
  else:
    model = fid_distillation.RetrieverDistillation(retriever, options.reader_temperature,
                                                   options.retriever_temperature)
    metrics["retriever_training"] = train_model(model, kd_features, options.retriever_steps,
                                                options.retriever_batch_size, options.retriever_learning_rate,
                                                options.seed + iteration,
                                                os.path.join(directory, "retriever_train"),
                                                options.jit_compile, log, "retriever")
  metrics["retriever_checkpoint"] = save_retriever(
      retriever, os.path.join(directory, "retriever"),
      options.retriever_steps if metrics["retriever_training"] else 0)


def _select_retriever(options: FidKdOptions, retriever: embedder_lib.Retriever, iteration: int, start: str,
                      metrics: Dict, log: Callable[[str], None]) -> None:
  """Step 6: model selection. Why: a round whose reader reads poor passages teaches a worse ranking
  (testdata, 3 passages: gold recall@5 10 -> 45 after round 0, then 16 after round 1); keeping the
  previous retriever lets a later round (a reader that reads better, more passages) improve on the best so
  far."""
  metric = options.selection_metric
  before, after = metrics["recall_before"][metric], metrics["recall_after"][metric]
  metrics["selection_metric"] = metric
  metrics["accepted"] = after >= before or not options.keep_better_retriever
  if metrics["accepted"]:
    metrics["retriever_after"] = _retriever_subdir(iteration)
    metrics["recall_end"] = metrics["recall_after"]
    note = "" if after >= before else " (below the start, but --nokeep_better_retriever)"
    log(f"iteration {iteration}: distilled retriever accepted, {metric} {before:.1f} -> {after:.1f}{note}")
  else:
    retriever.set_weights(
        _load_retriever(options, os.path.join(options.model_dir, start), f"MODEL_DIR/{start}").get_weights())
    metrics["retriever_after"] = start
    metrics["recall_end"] = metrics["recall_before"]
    log(f"iteration {iteration}: distilled retriever REJECTED: {metric} fell {before:.1f} -> {after:.1f}; "
        f"the next round starts from {start} again (--keep_better_retriever)")


def _train_reader_on_single_passages(options: FidKdOptions, data: _Data, reader: fid_reader.FidReader,
                                     examples: fid_features.TokenizedExamples, iteration: int,
                                     log: Callable[[str], None]) -> Dict:
  """The reader's first phase: each training question with only its highest-ranked answer-bearing
  passage (answer_substitution.single_passage_examples), for --reader_single_passage_steps.

  Why: the paper's reader starts from pretrained T5, which can already read. A reader trained from
  scratch on n passages at once did not learn to copy an answer on testdata (0% dev exact match after
  2,000 steps on 3 passages at batch 32, or 10,000 at batch 8: its attention spread over the passages'
  same-type spans gives no one answer a clear gradient, and it settled for the answers' prior); on one
  passage it learns to find and copy the answer (in about 1,000 steps), and then to choose among n.
  """
  single = answer_substitution.single_passage_examples(examples,
                                                       answer_substitution.continuation_ids(data.tokenizer),
                                                       options.fid.passage_seq_len)
  result: Dict = {"reader_single_passage_examples": len(single.pairs)}
  if len(single.pairs) < options.reader_batch_size:
    log(f"iteration {iteration}: only {len(single.pairs)} training questions have an answer-bearing "
        f"passage, fewer than a batch; no single-passage reader training")
    return result
  epochs, _ = _reader_epochs(options, data, single, iteration, stream=1)
  result["reader_single_passage_training"] = train_model(
      reader, epochs, options.reader_single_passage_steps, options.reader_batch_size,
      options.reader_learning_rate, options.seed + iteration,
      os.path.join(iteration_dir(options.model_dir, iteration),
                   "reader_1_passage_train"), options.jit_compile, log, "reader (1 passage)")
  return result


def _reader_epochs(options: FidKdOptions, data: _Data, examples: fid_features.TokenizedExamples,
                   iteration: int, stream: int) -> Tuple[Callable[[int], Features], int]:
  """(epoch -> reader training arrays, examples substituted in epoch 0).

  With --reader_answer_substitution_rate, every epoch substitutes answers anew (seeded by seed,
  iteration, stream and epoch, so a rerun trains on the same arrays).
  """
  rate = options.reader_answer_substitution_rate
  if rate == 0.0:
    features = _pad(options, data.tokenizer, examples)._asdict()
    return lambda _: features, 0
  substitution = answer_substitution.AnswerSubstitution(examples,
                                                        answer_substitution.continuation_ids(data.tokenizer),
                                                        data.tokenizer.unk_id)

  def substituted(epoch: int) -> Tuple[Features, int]:
    edited, count = substitution.substitute(rate,
                                            np.random.default_rng([options.seed, iteration, stream, epoch]))
    return _pad(options, data.tokenizer, edited)._asdict(), count

  first, count = substituted(0)
  return lambda epoch: first if epoch == 0 else substituted(epoch)[0], count


def _pad(options: FidKdOptions,
         tokenizer,
         examples: fid_features.TokenizedExamples,
         with_answers: bool = True) -> fid_features.ReaderFeatures:
  """The reader's padded features of `examples` at its passage and answer lengths."""
  return fid_features.pad_examples(tokenizer,
                                   examples,
                                   options.fid.passage_seq_len,
                                   options.fid.answer_seq_len,
                                   with_answers=with_answers)


def _gold_positions(data: _Data, examples, rows: np.ndarray) -> Optional[np.ndarray]:
  """int [Q]: the position of each question's gold document (metadata doc_id) in its rows, -1 where it is
  missing; None when the questions do not name their documents."""
  if not all("doc_id" in e.metadata for e in examples):
    return None
  positions = []
  for row, e in zip(rows, examples):
    hits = [i for i, r in enumerate(row) if data.corpus.doc_ids[r] == e.metadata["doc_id"]]
    positions.append(hits[0] if hits else -1)
  return np.asarray(positions, np.int64)


def _top1_percent(scores: np.ndarray, gold: np.ndarray) -> float:
  """% of the questions with a gold passage (gold >= 0; at least one) whose highest-scored passage is it."""
  present = gold >= 0
  return 100.0 * float(np.mean(np.argmax(scores[present], axis=1) == gold[present]))


def _recall_line(recall: Dict[str, float]) -> str:
  names = sorted((k for k in recall if k.startswith(("gold_", "answer_"))),
                 key=lambda k: (k.split("@")[0], int(k.split("@")[1])))
  return ", ".join(f"{k}={recall[k]:.1f}" for k in names)
