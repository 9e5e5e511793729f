"""ORQA fine-tuning and evaluation (bin/train_orqa, bin/eval_orqa): open-domain QA on a frozen index.

A run's model dir:
  realm_config.json   the retriever and reader BERTs, vocab, projection (share_embedders false: ORQA keeps
                      a trainable query tower and a frozen document tower)
  orqa_config.json    reader length, beams, span width, the retrieval corpus (realm_tf.modeling.orqa)
  frozen_index/       the block embeddings, a saved brute-force MIPS index (realm_tf.retrieval.index):
                      made ONCE at the start, either by embedding --retrieval_corpus_path with the
                      document tower of --retriever_checkpoint or copied from --index_dir, and reused
                      when the run restarts (it never changes during fine-tuning; bin/update_index
                      replaces it, with a corpus derived from this one: frozen_index_corpus)
  ckpt-N              the shared training loop's checkpoints (model + optimizer; the index is not in them)
  best/ckpt-S         the model at the dev evaluation with the best accuracy so far
  best_metric.json    which checkpoint that is, its step and its dev metrics; written atomically AFTER
                      best/ckpt-S is complete, so a reader following it never sees a partial checkpoint
  eval/               bin/eval_orqa's metrics and predictions

Dev evaluation runs every eval_every_steps (and at the end) with the original's PREDICT setting (the
reader reads the top reader_beam blocks) and selects on the official string accuracy (exact match after
ORQA's normalization, regex match for CuratedTREC-style answers), not on the original's token-level
exact_match, so that the selected checkpoint is the one with the best reported number.
Recall@k is "an answer string occurs in one of the top-k blocks' text" (the raw, case-sensitive test of
the original's retriever_correct, on the block body that the reader reads).
"""

import dataclasses
import gc
import json
import logging
import os
import re
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import evaluation
from realm_tf import io_utils
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import orqa_features
from realm_tf.data import qa as qa_lib
from realm_tf.modeling import bert_conversion
from realm_tf.modeling import checkpoints
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import orqa as orqa_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.modeling import released_checkpoints
from realm_tf.retrieval import corpus_embedding
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import index_update
from realm_tf.retrieval import published_index
from realm_tf.training import loop
from realm_tf.training import optimization

FROZEN_INDEX_DIR = "frozen_index"
BEST_DIR = "best"
BEST_METRIC_NAME = "best_metric.json"
SUMMARY_NAME = "train_summary.json"
SELECTION_METRIC = "accuracy"
DEFAULT_RECALL_KS = (1, 5, 20, 100)


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
  adam_bias_correction: bool = False
  eval_every_steps: int = 1000
  eval_batch_size: int = 32
  max_eval_examples: Optional[int] = None
  embed_batch_size: int = 128
  skip_invalid: bool = False
  seed: int = 0


def frozen_index_dir(model_dir: str) -> str:
  return os.path.join(model_dir, FROZEN_INDEX_DIR)


# ---------------------------------------------------------------------------------------------------------
# Configuration, retriever warm start and the frozen index.


def _write_configs(config: realm_config_lib.RealmConfig, orqa: orqa_lib.OrqaConfig,
                   model_dir: str) -> None:
  """Writes the run's configs, or checks that a restarted run uses the ones it was started with."""
  config.save_or_check(model_dir)
  orqa.save_or_check(model_dir)


_WORD_EMBEDDINGS = re.compile(r"(^|/)(retriever/(doc|query)_embedder|embedder)/encoder/_embedding_layer/"
                              r"embeddings/\.ATTRIBUTES/VARIABLE_VALUE$")


def load_retriever_checkpoint(config: realm_config_lib.RealmConfig, checkpoint: Optional[str],
                              flag: str = "--retriever_checkpoint") -> embedder_lib.Retriever:
  """A Retriever with the checkpoint's weights (any layout checkpoints.restore_retriever reads), or
  freshly initialized without one. Built shared or with two towers as the checkpoint was saved, so
  that each tower gets its own weights (a REALM or converted checkpoint holds one shared tower, an
  ORQA one two).

  Raises ValueError naming the flag and the checkpoint when it does not fit the configuration.
  """
  separate = False
  resolved = None
  if checkpoint:
    resolved = checkpoints.resolve_checkpoint(checkpoint)
    shapes = dict(tf.train.list_variables(resolved))
    separate = any("/query_embedder/" in name for name in shapes)
    # Checked before building anything: a vocab of another size is the commonest misfit.
    rows = [shape[0] for name, shape in shapes.items() if _WORD_EMBEDDINGS.search(name)]
    if rows and rows[0] != config.retriever_bert.vocab_size:
      raise ValueError(
          f"{flag}={checkpoint} has {rows[0]} word embeddings but this run's retriever BERT has "
          f"vocab_size {config.retriever_bert.vocab_size} (from --bert_config; its presets count the "
          f"tokens of --vocab_path={config.vocab_path}): pass the --vocab_path and --bert_config the "
          "checkpoint was trained with")
  retriever = embedder_lib.build_retriever(
      config.retriever_bert, config.projection_size, config.embedder_layer_norm_epsilon,
      config.embedder_dropout_rate, share_embedders=not separate, pooling=config.embedder_pooling)
  if resolved:
    error = None
    tf_logger = tf.get_logger()
    level = tf_logger.level
    try:
      # A read that fails half-way leaves deferred restores whose garbage collection logs a warning per
      # unmatched checkpoint value (hundreds for a full ORQA/REALM checkpoint), after the error below.
      # They say nothing the error does not: collect them now, quietly.
      tf_logger.setLevel(logging.ERROR)
      try:
        checkpoints.restore_retriever(retriever, resolved)
      except ValueError as e:
        error = str(e)
      if error is not None:
        gc.collect()
    finally:
      tf_logger.setLevel(level)
    if error is not None:
      raise ValueError(
          f"{flag}={checkpoint} does not fit this run's retriever (hidden_size "
          f"{config.retriever_bert.hidden_size}, {config.retriever_bert.num_layers} layers, projection "
          f"{config.projection_size}): {error}. Pass the --bert_config and --projection_size the "
          "checkpoint was trained with (its model dir's realm_config.json names them)")
  return retriever


def check_index_corpus(recorded: Optional[str], index_path: str, corpus_prefix: str, fix: str) -> None:
  """Stops when an index records the fingerprint of another corpus than corpus_prefix (row i of the index
  would not be document i: a corpus of the same size, shuffled or edited, passes every shape check).
  Indexes written before fingerprints were recorded pass."""
  if recorded is None:
    return
  expected = corpus_lib.fingerprint(corpus_prefix)
  if recorded != expected:
    raise ValueError(f"{index_path} embeds another corpus (fingerprint {recorded[:16]}) than "
                     f"{corpus_prefix} (fingerprint {expected[:16]}): its rows would point at other "
                     f"documents. {fix}")


def _read_index_dir(index_dir: str, corpus_prefix: str) -> Tuple[np.ndarray, Dict]:
  """Embeddings and provenance of --index_dir: a published MODEL_DIR/index/<step> or a saved MIPS
  index directory (e.g. bin/convert_checkpoint's mips/)."""
  fix = ("Pass --index_dir of an index built from this corpus, or omit it to embed the corpus with "
         "--retriever_checkpoint's document tower")
  if tf.io.gfile.exists(os.path.join(index_dir, published_index.PUBLISHED_NAME)):
    record = published_index.verify_published(index_dir)
    check_index_corpus(record.get("corpus_fingerprint"), index_dir, corpus_prefix, fix)
    mips = index_lib.load_index(os.path.join(index_dir, published_index.MIPS_DIR), verify=False)
    return np.asarray(mips.embeddings), {"index_dir": index_dir, "index_step": record.get("step"),
                                         "index_corpus": record.get("corpus_prefix")}
  if tf.io.gfile.exists(os.path.join(index_dir, index_lib.MANIFEST_NAME)):
    mips = index_lib.load_index(index_dir)
    check_index_corpus(mips.manifest.get("extra", {}).get("corpus_fingerprint"), index_dir,
                       corpus_prefix, fix)
    return np.asarray(mips.embeddings), {"index_dir": index_dir, "index_step": mips.step}
  raise FileNotFoundError(f"--index_dir={index_dir} is neither a published index (no "
                          f"{published_index.PUBLISHED_NAME}) nor a saved MIPS index (no "
                          f"{index_lib.MANIFEST_NAME}); pass MODEL_DIR/index/<step> of a REALM run")


def _updated_corpus_of(index_dir: str, corpus_prefix: str) -> Optional[str]:
  """The corpus a published --index_dir embeds when bin/update_index derived it from corpus_prefix."""
  if not tf.io.gfile.exists(os.path.join(index_dir, published_index.PUBLISHED_NAME)):
    return None
  found = published_index.verify_published(index_dir).get("corpus_prefix")
  if (found and os.path.abspath(found) != os.path.abspath(corpus_prefix)
      and tf.io.gfile.exists(found + corpus_lib.MANIFEST_SUFFIX)
      and corpus_lib.descends_from(found, corpus_prefix)):
    return found
  return None


def prepare_frozen_index(options: OrqaTrainerOptions, strategy: tf.distribute.Strategy,
                         retriever_fn: Callable[[], embedder_lib.Retriever],
                         log: Callable[[str], None] = print) -> np.ndarray:
  """The run's block embeddings float32 [N, D]: reused from MODEL_DIR/frozen_index/ when a restarted run
  made them already, else taken from --index_dir or embedded with the document tower, then saved there."""
  model_dir = options.loop.model_dir
  directory = frozen_index_dir(model_dir)
  corpus_prefix = options.orqa.retrieval_corpus_path
  num_docs = corpus_lib.read_manifest(corpus_prefix)["num_documents"]
  if tf.io.gfile.exists(os.path.join(directory, index_lib.MANIFEST_NAME)):
    embeddings = load_frozen_index(model_dir, frozen_index_corpus(model_dir, corpus_prefix))
    log(f"reusing the frozen index {directory} ({embeddings.shape[0]} blocks)")
    return embeddings
  if options.index_dir:
    followed = _updated_corpus_of(options.index_dir, corpus_prefix)
    if followed:
      log(f"--index_dir={options.index_dir} embeds {followed}, which bin/update_index derived from "
          f"{corpus_prefix}: training on that corpus")
      corpus_prefix = followed
      num_docs = corpus_lib.read_manifest(corpus_prefix)["num_documents"]
    embeddings, provenance = _read_index_dir(options.index_dir, corpus_prefix)
    if followed:
      provenance["corpus_update"] = {"base_corpus": options.orqa.retrieval_corpus_path}
    log(f"frozen index from {options.index_dir}")
  else:
    started = time.time()
    retriever = retriever_fn()
    embeddings = corpus_embedding.embed_corpus(
        lambda inputs: retriever.embed_documents(inputs, training=False), corpus_prefix,
        options.config.featurizer(), batch_size=options.embed_batch_size, strategy=strategy, log=log)
    provenance = {"retriever_checkpoint": options.retriever_checkpoint,
                  "embed_seconds": time.time() - started}
    log(f"embedded {embeddings.shape[0]} blocks with the document tower in "
        f"{time.time() - started:.1f} s")
  if embeddings.shape != (num_docs, options.config.projection_size):
    raise ValueError(f"the index has shape {embeddings.shape} but corpus {corpus_prefix} has {num_docs} "
                     f"documents and projection_size is {options.config.projection_size}; the index "
                     "must embed exactly this corpus, row for row, with this retriever")
  index_lib.build_index(embeddings, implementation="brute_force").save(
      directory, extra=dict(provenance, corpus_prefix=corpus_prefix,
                            corpus_fingerprint=corpus_lib.fingerprint(corpus_prefix)))
  return embeddings


def frozen_index_corpus(model_dir: str, corpus_prefix: str) -> str:
  """The corpus MODEL_DIR/frozen_index embeds: the run's corpus_prefix (orqa_config.json), or the corpus
  bin/update_index derived from it and recorded in the frozen index (update_frozen_index). The run's
  configuration keeps naming the corpus it was started on; the frozen index, replaced in one rename,
  is what says which rows it holds, so there is no second file to keep in step."""
  directory = frozen_index_dir(model_dir)
  if not tf.io.gfile.exists(os.path.join(directory, index_lib.MANIFEST_NAME)):
    return corpus_prefix
  extra = index_lib.read_manifest(directory).get("extra", {})
  found = extra.get("corpus_prefix")
  if (extra.get("corpus_update") and found
      and os.path.abspath(found) != os.path.abspath(corpus_prefix)
      and tf.io.gfile.exists(found + corpus_lib.MANIFEST_SUFFIX)
      and corpus_lib.descends_from(found, corpus_prefix)):
    return found
  return corpus_prefix


def update_frozen_index(model_dir: str, change: index_update.ChangeSet, on_existing: str = "error",
                        output_corpus_prefix: Optional[str] = None, batch_size: int = 128,
                        log: Callable[[str], None] = print) -> str:
  """bin/update_index on an ORQA run: applies a change set (realm_tf.retrieval.index_update) to
  MODEL_DIR/frozen_index with the run's frozen document tower (restored from its best or latest
  checkpoint; ORQA never trains it), and saves the new frozen index in its place. eval_orqa,
  export_saved_model and a resumed train_orqa then read the derived corpus (frozen_index_corpus).
  Returns the derived corpus prefix."""
  trained = load_trained(model_dir)
  corpus_prefix = trained.orqa.retrieval_corpus_path
  directory = frozen_index_dir(model_dir)
  mips = index_lib.load_index(directory)
  retriever = trained.model.retriever
  result = index_update.update_corpus(
      corpus_prefix, np.asarray(mips.embeddings), change, on_existing, trained.tokenizer,
      trained.featurizer, lambda: lambda inputs: retriever.embed_documents(inputs, training=False),
      output_corpus_prefix, batch_size, log)
  extra = dict(mips.manifest.get("extra", {}), corpus_prefix=result.corpus_prefix,
               corpus_fingerprint=corpus_lib.fingerprint(result.corpus_prefix),
               corpus_update=dict(result.summary, base_corpus=corpus_prefix,
                                  checkpoint=trained.checkpoint))
  # save() renames the complete new directory into place (the old one is moved aside for the
  # instant between two renames, then deleted).
  index_lib.build_index(result.embeddings, implementation="brute_force").save(
      directory, step=mips.step, extra=extra, overwrite=True)
  log(f"replaced {directory}: {result.embeddings.shape[0]} blocks of {result.corpus_prefix}")
  return result.corpus_prefix


def load_frozen_index(model_dir: str, corpus_prefix: str) -> np.ndarray:
  """MODEL_DIR/frozen_index's embeddings [N, D], after checking they embed corpus_prefix as it is now."""
  directory = frozen_index_dir(model_dir)
  mips = index_lib.load_index(directory)
  check_index_corpus(
      mips.manifest.get("extra", {}).get("corpus_fingerprint"), directory, corpus_prefix,
      "The corpus changed after bin/train_orqa embedded it: put back the corpus the run was trained "
      "on, or train again in a new --model_dir")
  return np.asarray(mips.embeddings)


def warm_start_reader(reader, checkpoint: str, flag: str = "--reader_checkpoint") -> str:
  """Initializes the span reader from --reader_checkpoint; returns what was loaded.

  A checkpoint holding a whole span reader under reader/ (bin/convert_checkpoint's orqa_from_realm
  output, or Checkpoint(reader=...)) restores the BERT and the span head; anything else is a BERT
  checkpoint for bert_conversion.load_bert_weights (TF1 Google BERT, Hugging Face, Model Garden TF2),
  which leaves the span head initialized.
  """
  try:
    resolved = checkpoints.resolve_checkpoint(checkpoint)
    names = [name for name, _ in tf.train.list_variables(resolved)]
  except (FileNotFoundError, ValueError, tf.errors.OpError):
    names = []  # not a TensorFlow checkpoint (e.g. safetensors): a BERT source
  if any(name.startswith("reader/") for name in names):
    try:
      status = tf.train.Checkpoint(reader=reader).read(resolved)
      status.expect_partial()
      status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
      raise ValueError(f"{flag}={checkpoint}: its reader/ does not fit this span reader "
                       f"(pass the --span_hidden_size and --bert_config it was trained with): {e}") from e
    return f"span reader (BERT and span head) restored from {resolved}"
  report = bert_conversion.load_bert_weights(reader.encoder, checkpoint, strict=False)
  return f"reader BERT warm-started: {report.summary()}"


def build_model(config: realm_config_lib.RealmConfig, orqa: orqa_lib.OrqaConfig,
                embeddings: np.ndarray, blocks: orqa_features.Blocks, tokenizer) -> orqa_lib.OrqaModel:
  """An OrqaModel with its variables created (call under the strategy's scope)."""
  model = orqa_lib.OrqaModel(config, orqa, embeddings, blocks.token_ids, blocks.lengths,
                             tokenizer.cls_id, tokenizer.sep_id)
  model.build_variables()
  return model


# ---------------------------------------------------------------------------------------------------------
# Prediction and evaluation.


class OrqaPredictor:
  """Batched prediction under a strategy, with questions featurized by ONE traced function (tracing the
  tokenizer costs seconds; periodic dev evaluation reuses it).

  Args:
    model: an OrqaModel built under strategy's scope.
    tokenizer, featurizer: the run's (RealmConfig.tokenizer() / featurizer()).
    blocks: the corpus (bodies give the answer text, doc_ids the retrieved ids).
    strategy: the model's strategy; batch_size must divide over its replicas.
    num_retrieved: blocks retrieved per question (for recall@k); the reader reads the top reader_beam.
  """

  def __init__(self, model: orqa_lib.OrqaModel, tokenizer, featurizer, blocks: orqa_features.Blocks,
               strategy: Optional[tf.distribute.Strategy] = None, batch_size: int = 32,
               num_retrieved: int = max(DEFAULT_RECALL_KS)):
    self.model = model
    self.tokenizer = tokenizer
    self.blocks = blocks
    self.strategy = strategy or tf.distribute.get_strategy()
    if batch_size % self.strategy.num_replicas_in_sync:
      raise ValueError(f"eval batch size {batch_size} does not divide over "
                       f"{self.strategy.num_replicas_in_sync} replicas")
    self.batch_size = batch_size
    self.num_retrieved = num_retrieved
    reader_seq_len = model.orqa.reader_seq_len
    self._featurize = tf.function(
        lambda questions: orqa_features.question_features(tokenizer, featurizer, questions,
                                                           reader_seq_len),
        input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)

    @tf.function(autograph=False)
    def step(batch):
      per_replica = self.strategy.run(
          lambda f: model.predict_answers(f, num_retrieved=num_retrieved, training=False), args=(batch,))
      return tf.nest.map_structure(self.strategy.experimental_local_results, per_replica)

    self._step = step

  def featurize(self, questions: Sequence[str]) -> Dict[str, np.ndarray]:
    encoded = [q.encode("utf-8") for q in questions]
    return {k: v.numpy() for k, v in self._featurize(tf.constant(encoded, tf.string)).items()}

  def predict(self, features: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """predict_answers' outputs (numpy, in input order) plus "answer" (str) per question."""
    n = len(next(iter(features.values())))
    if n == 0:
      raise ValueError("no questions to predict")
    padded_n = -(-n // self.batch_size) * self.batch_size
    padded = {k: np.concatenate([v, np.repeat(v[:1], padded_n - n, axis=0)]) for k, v in features.items()}
    dataset = tf.data.Dataset.from_tensor_slices(padded).batch(self.batch_size, drop_remainder=True)
    parts: Dict[str, List[np.ndarray]] = {}
    for batch in self.strategy.experimental_distribute_dataset(dataset):
      for name, values in self._step(batch).items():
        parts.setdefault(name, []).extend(np.asarray(v) for v in values)
    outputs = {name: np.concatenate(values)[:n] for name, values in parts.items()}
    texts = orqa_lib.answer_texts(self.tokenizer, self.blocks.bodies, outputs)
    outputs["answer"] = np.array([t.decode("utf-8") for t in texts], object)
    return outputs


def evaluate(predictor: OrqaPredictor, examples: Sequence[qa_lib.QAExample],
             ks: Sequence[int] = DEFAULT_RECALL_KS,
             features: Optional[Dict[str, np.ndarray]] = None) -> Tuple[Dict[str, float], List[Dict]]:
  """Predicts every example and scores it.

  Returns:
    metrics: evaluation.evaluate_predictions' (accuracy, exact_match, f1, regex_match, counts) plus
      recall@k for each k (percentages);
    records: one per example, {question, prediction, score, retrieved_ids (doc_ids of the blocks the
      reader read, best first), predicted_id (doc_id of the answer's block)}.
  """
  if not examples:
    raise ValueError("no QA examples to evaluate")
  if features is None:
    features = predictor.featurize([e.question for e in examples])
  outputs = predictor.predict(features)
  blocks = predictor.blocks
  metrics = evaluation.evaluate_predictions(examples, list(outputs["answer"]))
  hits = [[evaluation.has_answer(blocks.bodies[row], example.answers, example.answer_is_regex)
           for row in rows] for rows, example in zip(outputs["block_rows"], examples)]
  metrics.update(evaluation.recall_at_k(hits, ks))
  reader_beam = predictor.model.reader_beam
  records = [{"question": example.question, "prediction": str(answer), "score": float(score),
              "retrieved_ids": [blocks.doc_ids[r] for r in rows[:reader_beam]],
              "predicted_id": blocks.doc_ids[predicted]}
             for example, answer, score, rows, predicted in zip(
                 examples, outputs["answer"], outputs["score"], outputs["block_rows"],
                 outputs["predicted_row"])]
  return metrics, records


def format_metrics(metrics: Dict[str, float]) -> str:
  """A two-column table of the metrics, percentages with two decimals."""
  width = max(len(k) for k in metrics)
  lines = [f"{'metric':<{width}}  value", f"{'-' * width}  -------"]
  for name in sorted(metrics):
    value = metrics[name]
    shown = str(value) if isinstance(value, int) or name.startswith("num_") else f"{value:.2f}"
    lines.append(f"{name:<{width}}  {shown}")
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# The best checkpoint.


def read_best(model_dir: str) -> Optional[Dict]:
  """MODEL_DIR/best_metric.json, or None before the first dev evaluation."""
  path = os.path.join(model_dir, BEST_METRIC_NAME)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}: unreadable ({e}); delete it to re-select on the next evaluation") from e


def save_best(model: orqa_lib.OrqaModel, model_dir: str, step: int, metrics: Dict[str, float]) -> Dict:
  """Writes best/ckpt-<step> (model weights), then points best_metric.json at it, then deletes the
  previous best checkpoint: at every moment best_metric.json names a complete checkpoint."""
  best_dir = os.path.join(model_dir, BEST_DIR)
  tf.io.gfile.makedirs(best_dir)
  previous = read_best(model_dir)
  name = f"ckpt-{step}"
  tf.train.Checkpoint(model=model).write(os.path.join(best_dir, name))
  record = {"step": int(step), "checkpoint": os.path.join(BEST_DIR, name), "metric": SELECTION_METRIC,
            "value": float(metrics[SELECTION_METRIC]), "metrics": metrics}
  io_utils.write_json_atomic(os.path.join(model_dir, BEST_METRIC_NAME), record)
  if previous and previous.get("checkpoint") != record["checkpoint"]:
    old = os.path.join(model_dir, previous["checkpoint"])
    for path in tf.io.gfile.glob(old + ".*"):
      tf.io.gfile.remove(path)
  return record


# ---------------------------------------------------------------------------------------------------------
# Training.


def _load_examples(path: str, skip_invalid: bool, log: Callable[[str], None]) -> List[qa_lib.QAExample]:
  skipped = qa_lib.SkipCounter() if skip_invalid else None
  examples = qa_lib.load_qa(path, skipped=skipped)
  if skipped is not None:
    log(f"{path}: {skipped.summary('QA records')}")
  if not examples:
    raise ValueError(f"{path} holds no QA examples")
  return examples


def train(options: OrqaTrainerOptions, strategy: tf.distribute.Strategy,
          log: Callable[[str], None] = print) -> Dict:
  """Fine-tunes ORQA to options.loop.num_train_steps; returns a summary of the run."""
  model_dir = options.loop.model_dir
  options.loop.check_between_loops("eval_every_steps", options.eval_every_steps, "dev evaluations")
  if options.index_dir and not options.retriever_checkpoint:
    raise ValueError(f"--index_dir={options.index_dir} needs --retriever_checkpoint: the query tower must "
                     "start from the retriever whose document tower embedded that index")
  # Before anything is built: the corpus and a resumed run must have been made with this vocab.
  vocab_sha256 = corpus_lib.check_vocab(
      options.config.vocab_path, options.orqa.retrieval_corpus_path,
      realm_config_lib.RealmConfig.saved_vocab_sha256(model_dir),
      os.path.join(model_dir, realm_config_lib.CONFIG_NAME))
  config = dataclasses.replace(options.config, share_embedders=False, vocab_sha256=vocab_sha256)
  options = dataclasses.replace(options, config=config)
  retrievers: List[embedder_lib.Retriever] = []

  def retriever_fn() -> embedder_lib.Retriever:  # Built once, only when needed.
    if not retrievers:
      with strategy.scope():
        retrievers.append(load_retriever_checkpoint(config, options.retriever_checkpoint))
      log(f"retriever from {options.retriever_checkpoint or 'a fresh initialization (no checkpoint)'}")
    return retrievers[0]

  resuming = (tf.io.gfile.exists(os.path.join(frozen_index_dir(model_dir), index_lib.MANIFEST_NAME))
              and tf.train.latest_checkpoint(model_dir) is not None)
  if not resuming:
    # Before anything is written: a checkpoint that does not fit must not leave a model dir whose saved
    # configuration the corrected rerun would then have to match.
    retriever_fn()
  tf.io.gfile.makedirs(model_dir)
  _write_configs(config, options.orqa, model_dir)
  tokenizer = config.tokenizer()
  featurizer = config.featurizer(tokenizer)
  train_examples = _load_examples(options.train_path, options.skip_invalid, log)
  dev_examples = _load_examples(options.dev_path, options.skip_invalid, log) if options.dev_path else []
  if options.max_eval_examples:
    dev_examples = dev_examples[:options.max_eval_examples]
  if any(e.answer_is_regex for e in train_examples):
    log("WARNING: regex answers are trained on as literal strings (the reader needs wordpieces); "
        "evaluation matches them as patterns")

  embeddings = prepare_frozen_index(options, strategy, retriever_fn, log)
  blocks = orqa_features.load_blocks(frozen_index_corpus(model_dir, options.orqa.retrieval_corpus_path),
                                     options.orqa.max_block_len)
  with strategy.scope():
    model = build_model(config, options.orqa, embeddings, blocks, tokenizer)
    optimizer = optimization.create_optimizer(options.learning_rate, options.loop.num_train_steps,
                                              bias_correction=options.adam_bias_correction)

  def warm_start():
    orqa_lib.copy_retriever_weights(retriever_fn(), model.retriever)
    if options.reader_checkpoint:
      log(warm_start_reader(model.reader, options.reader_checkpoint))

  def dataset_fn(batches_done: int) -> tf.data.Dataset:
    return orqa_features.qa_dataset(
        [e.question for e in train_examples], [e.answers for e in train_examples], tokenizer,
        featurizer, options.orqa.reader_seq_len, options.batch_size, options.orqa.max_num_answers,
        options.orqa.max_answer_len, seed=options.seed, skip_batches=batches_done)

  predictor = dev_features = None
  if dev_examples:
    predictor = OrqaPredictor(model, tokenizer, featurizer, blocks, strategy, options.eval_batch_size)
    dev_features = predictor.featurize([e.question for e in dev_examples])
  best = read_best(model_dir)
  dev_writer = tf.summary.create_file_writer(os.path.join(model_dir, "dev")) if predictor else None
  history: List[Dict] = []
  started = time.time()
  first_loss: List[float] = []

  def after_step(step: int, metrics: Dict[str, float]) -> Dict[str, float]:
    nonlocal best
    if not first_loss:
      first_loss.append(metrics["loss"])
    if predictor is None or not (step % options.eval_every_steps == 0
                                 or step >= options.loop.num_train_steps):
      return {}
    eval_started = time.time()
    dev_metrics, _ = evaluate(predictor, dev_examples, features=dev_features)
    history.append(dict(dev_metrics, step=step))
    shown = {f"dev_{k}": float(v) for k, v in dev_metrics.items() if not k.startswith("num_")}
    with dev_writer.as_default(step=step):
      for name, value in shown.items():
        tf.summary.scalar(name[len("dev_"):], value)
    dev_writer.flush()
    if best is None or dev_metrics[SELECTION_METRIC] > best["value"]:
      best = save_best(model, model_dir, step, dev_metrics)
      log(f"step {step}: new best dev {SELECTION_METRIC} {dev_metrics[SELECTION_METRIC]:.2f} -> "
          f"{best['checkpoint']}")
    log(f"step {step}: dev evaluation in {time.time() - eval_started:.1f} s: " +
        ", ".join(f"{k}={v:.2f}" for k, v in sorted(shown.items())))
    # Written once, to MODEL_DIR/dev (above), not again among the training scalars.
    return {}

  final = loop.train(model, optimizer, strategy, dataset_fn, options.loop, warm_start, after_step, log)
  summary = {"first_loss": first_loss[0] if first_loss else None, "final": final,
             "dev_history": history, "best": best, "seconds": time.time() - started}
  io_utils.write_json_atomic(os.path.join(model_dir, SUMMARY_NAME), summary)
  return summary


# ---------------------------------------------------------------------------------------------------------
# A trained model dir, for bin/eval_orqa and the exporters.


class TrainedOrqa(NamedTuple):
  model: orqa_lib.OrqaModel
  config: realm_config_lib.RealmConfig
  orqa: orqa_lib.OrqaConfig
  blocks: orqa_features.Blocks
  tokenizer: object
  featurizer: object
  checkpoint: str


def resolve_trained_checkpoint(model_dir: str, checkpoint: Optional[str] = None) -> str:
  """--checkpoint if given, else the best checkpoint (best_metric.json), else the latest one."""
  if checkpoint:
    return checkpoints.resolve_checkpoint(checkpoint)
  best = read_best(model_dir)
  if best is not None:
    return checkpoints.resolve_checkpoint(os.path.join(model_dir, best["checkpoint"]))
  latest = tf.train.latest_checkpoint(model_dir)
  if latest is None:
    raise FileNotFoundError(f"{model_dir} holds no checkpoint yet (no {BEST_METRIC_NAME}, no ckpt-N); "
                            "train with bin/train_orqa first or pass --checkpoint")
  return latest


def load_trained(model_dir: str, checkpoint: Optional[str] = None,
                 strategy: Optional[tf.distribute.Strategy] = None) -> TrainedOrqa:
  """Rebuilds a bin/train_orqa run's model from its model dir and restores a checkpoint into it."""
  config = realm_config_lib.RealmConfig.load(model_dir)
  orqa = orqa_lib.OrqaConfig.load(model_dir)
  corpus_lib.check_vocab(config.vocab_path, orqa.retrieval_corpus_path, config.vocab_sha256,
                         os.path.join(model_dir, realm_config_lib.CONFIG_NAME),
                         source=f"{model_dir}/{realm_config_lib.CONFIG_NAME}'s vocab_path")
  path = resolve_trained_checkpoint(model_dir, checkpoint)
  tokenizer = config.tokenizer()
  # After bin/update_index the frozen index embeds a corpus derived from the configured one.
  orqa = dataclasses.replace(orqa, retrieval_corpus_path=frozen_index_corpus(
      model_dir, orqa.retrieval_corpus_path))
  embeddings = load_frozen_index(model_dir, orqa.retrieval_corpus_path)
  blocks = orqa_features.load_blocks(orqa.retrieval_corpus_path, orqa.max_block_len)
  with (strategy or tf.distribute.get_strategy()).scope():
    model = build_model(config, orqa, embeddings, blocks, tokenizer)
  status = tf.train.Checkpoint(model=model).read(path)
  status.expect_partial()
  try:
    status.assert_existing_objects_matched()
  except AssertionError as e:
    raise ValueError(f"{path}: not a checkpoint of this ORQA model ({e})") from e
  return TrainedOrqa(model, config, orqa, blocks, tokenizer, config.featurizer(tokenizer), path)


def load_converted(model_dir: str, index_dir: str, checkpoint: Optional[str] = None,
                   strategy: Optional[tf.distribute.Strategy] = None) -> TrainedOrqa:
  """Google's released ORQA as bin/convert_checkpoint wrote it, for the exporters: model_dir holds the
  converted orqa_from_realm checkpoint (retriever + span reader; its configs state the sequence lengths),
  index_dir the converted block_emb (mips/ and blocks.jsonl, row i = block i).

  The block embeddings are the released ones; ORQA fine-tuned only the query side of its retriever, so
  the converted tower is the query tower (the model's document tower gets the same weights but did not
  embed the index). Block ids are the row numbers, as strings.
  """
  config, orqa = released_checkpoints.converted_orqa_configs(model_dir)
  mips, records = released_checkpoints.load_converted_index(index_dir)
  if mips.dim != config.projection_size:
    raise ValueError(f"--index_dir={index_dir} holds {mips.dim}-dimensional block embeddings but the "
                     f"retriever of --model_dir={model_dir} projects to {config.projection_size}; pass "
                     "the block_emb of the release this ORQA model was fine-tuned with")
  orqa = dataclasses.replace(orqa, retrieval_corpus_path=os.path.join(index_dir,
                                                                      released_checkpoints.BLOCKS_NAME))
  tokenizer = config.tokenizer()
  blocks = orqa_features.blocks_from_texts(
      tokenizer, [record.get("title", "") for record in records],
      # A released block is named by its row; bin/update_index gives every block of the index it writes
      # an "id" (released blocks keep their original row number), so ids survive removals.
      [record["text"] for record in records],
      [str(record.get("id", i)) for i, record in enumerate(records)], orqa.max_block_len)
  path = checkpoints.resolve_checkpoint(checkpoint or model_dir)
  flag = "--checkpoint" if checkpoint else "--model_dir"
  with (strategy or tf.distribute.get_strategy()).scope():
    model = build_model(config, orqa, np.asarray(mips.embeddings), blocks, tokenizer)
    orqa_lib.copy_retriever_weights(load_retriever_checkpoint(config, path, flag=flag),
                                    model.retriever)
    warm_start_reader(model.reader, path, flag=flag)
  return TrainedOrqa(model, config, orqa, blocks, tokenizer, config.featurizer(tokenizer), path)


def evaluate_model_dir(model_dir: str, qa_path: str, output_dir: Optional[str] = None,
                       checkpoint: Optional[str] = None, batch_size: int = 32,
                       ks: Sequence[int] = DEFAULT_RECALL_KS, skip_invalid: bool = False,
                       strategy: Optional[tf.distribute.Strategy] = None,
                       log: Callable[[str], None] = print) -> Dict:
  """bin/eval_orqa: evaluates a trained model dir on a QA file; writes
  OUTPUT_DIR/<name>.metrics.json and OUTPUT_DIR/<name>.predictions.jsonl atomically (OUTPUT_DIR defaults
  to MODEL_DIR/eval, <name> is the QA file's base name). Returns the metrics (with paths and checkpoint)."""
  trained = load_trained(model_dir, checkpoint, strategy)
  log(f"evaluating {trained.checkpoint} on {qa_path}")
  examples = _load_examples(qa_path, skip_invalid, log)
  predictor = OrqaPredictor(trained.model, trained.tokenizer, trained.featurizer, trained.blocks,
                            strategy, batch_size, num_retrieved=max(ks))
  started = time.time()
  metrics, records = evaluate(predictor, examples, ks)
  metrics["seconds"] = time.time() - started
  output_dir = output_dir or os.path.join(model_dir, "eval")
  tf.io.gfile.makedirs(output_dir)
  if qa_path.startswith(qa_lib.TFDS_PREFIX):
    name = qa_path.replace(":", "_").replace("/", "_")
  else:
    name = os.path.splitext(os.path.basename(qa_path.rstrip("/")))[0] or "qa"
  predictions_path = os.path.join(output_dir, f"{name}.predictions.jsonl")
  metrics_path = os.path.join(output_dir, f"{name}.metrics.json")
  evaluation.write_predictions_jsonl(predictions_path, records)
  result = dict(metrics, checkpoint=trained.checkpoint, qa_path=qa_path,
                predictions_path=predictions_path)
  io_utils.write_json_atomic(metrics_path, result)
  result["metrics_path"] = metrics_path
  return result
