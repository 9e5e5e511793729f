"""ORQA prediction and evaluation: batched answers under a strategy, exact match / F1 / recall@k, and
bin/eval_orqa's evaluation of a trained model dir.

Evaluation uses the original's PREDICT setting (the reader reads the top reader_beam blocks) and reports
the official string accuracy (exact match after ORQA's normalization, regex match for CuratedTREC-style
answers). Recall@k is "an answer string occurs in one of the top-k blocks' text" (the raw,
case-sensitive test of the original's retriever_correct, on the block body that the reader reads).

The reader reads what the chosen retriever returns (realm_tf.retrieval.hybrid): the model's dense tower
(in the graph), BM25, their hybrid, or each question's gold block; each is scored the same way.
"""

import os
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import evaluation
from realm_tf import io_utils
from realm_tf.data import corpus_table
from realm_tf.data import orqa_features
from realm_tf.data import qa as qa_lib
from realm_tf.data import untuned
from realm_tf.modeling import orqa as orqa_lib
from realm_tf.retrieval import hybrid
from realm_tf.runs import orqa_model

DEFAULT_RECALL_KS = (1, 5, 20, 100)


def load_examples(path: str, skip_invalid: bool, log: Callable[[str], None]) -> List[qa_lib.QAExample]:
  """The QA examples of path (qa.load_qa); skip_invalid counts and logs invalid records instead of
  stopping on the first. Raises ValueError when none is left."""
  skipped = qa_lib.SkipCounter() if skip_invalid else None
  examples = qa_lib.load_qa(path, skipped=skipped)
  if skipped is not None:
    log(f"{path}: {skipped.summary('QA records')}")
  if not examples:
    raise ValueError(f"{path} holds no QA examples")
  return examples


class OrqaPredictor:
  """Batched prediction under a strategy, with questions featurized by ONE traced function (tracing the
  tokenizer costs seconds; periodic dev evaluation reuses it).

  Args:
    model: an OrqaModel built under strategy's scope.
    tokenizer, featurizer: the run's (RealmConfig.tokenizer() / featurizer()).
    blocks: the corpus (bodies give the answer text, doc_ids the retrieved ids).
    strategy: the model's strategy; batch_size must divide over its replicas. Predictions come back from
      this host's replicas only: evaluate on one host.
    num_retrieved: blocks retrieved per question (for recall@k); the reader reads the top reader_beam.
    jit_compile: compile each replica's prediction and search with XLA. It pays on large evaluations
      only: 14% less time per batch of 16 SQuAD-open questions (MiniLM reader over 3 x 256 wordpieces,
      AMD EPYC 2 cores: 2.69 -> 2.31 s), while compiling costs seconds a process (bin/orqa_binaries_test,
      a few questions per run: 54 -> 64 CPU s).
  """

  def __init__(self,
               model: orqa_lib.OrqaModel,
               tokenizer,
               featurizer,
               blocks: corpus_table.CorpusTable,
               strategy: Optional[tf.distribute.Strategy] = None,
               batch_size: int = 32,
               num_retrieved: int = max(DEFAULT_RECALL_KS),
               jit_compile: bool = False):
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
        lambda questions: orqa_features.question_features(tokenizer, featurizer, questions, reader_seq_len),
        input_signature=[tf.TensorSpec([None], tf.string)],
        autograph=False)

    def replica_fn(fn):
      return tf.function(fn, jit_compile=True, autograph=False) if jit_compile else fn

    predict_replica = replica_fn(lambda f: model.predict_answers(
        f, num_retrieved=num_retrieved, training=False, block_rows=f.get(orqa_features.CANDIDATE_ROWS)))

    @tf.function(autograph=False)
    def step(batch):
      per_replica = self.strategy.run(predict_replica, args=(batch,))
      return tf.nest.map_structure(self.strategy.experimental_local_results, per_replica)

    @tf.function(autograph=False)
    def search(batch, depth):  # traced once per depth
      per_replica = self.strategy.run(replica_fn(
          lambda f: dict(zip(("block_rows", "retriever_logits"), model.retrieve(f, depth, training=False)))),
                                      args=(batch,))
      return tf.nest.map_structure(self.strategy.experimental_local_results, per_replica)

    self._step = step
    self._search = search

  def featurize(self, questions: Sequence[str]) -> Dict[str, np.ndarray]:
    encoded = [q.encode("utf-8") for q in questions]
    return {k: v.numpy() for k, v in self._featurize(tf.constant(encoded, tf.string)).items()}

  def predict(self,
              features: Dict[str, np.ndarray],
              block_rows: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
    """predict_answers' outputs (numpy, in input order) plus "answer" (str) per question.

    block_rows: int [n, R] corpus rows of another retriever (realm_tf.retrieval.hybrid), best first,
    read instead of the dense search's.
    """
    if block_rows is not None:
      features = dict(features, **{orqa_features.CANDIDATE_ROWS: np.asarray(block_rows, np.int32)})
    outputs = self._run(self._step, features)
    texts = orqa_lib.answer_texts(self.tokenizer, self.blocks.bodies, outputs)
    outputs["answer"] = np.array([t.decode("utf-8") for t in texts], object)
    return outputs

  def retrieve(self, features: Dict[str, np.ndarray], depth: int) -> Tuple[np.ndarray, np.ndarray]:
    """The dense tower's top depth corpus rows int32 [n, depth], best first, and their scores (no
    reading)."""
    outputs = self._run(lambda batch: self._search(batch, depth), features)
    return outputs["block_rows"], outputs["retriever_logits"]

  def _run(self, step, features: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """step over features in batches under the strategy; its outputs concatenated in input order."""
    n = len(next(iter(features.values())))
    if n == 0:
      raise ValueError("no questions to predict")
    padded_n = -(-n // self.batch_size) * self.batch_size
    padded = {k: np.concatenate([v, np.repeat(v[:1], padded_n - n, axis=0)]) for k, v in features.items()}

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
      # Per-replica batches in input order: the replicas of one input pipeline take consecutive
      # batches, so their local results, concatenated in replica order, keep the questions' order.
      per_replica = context.get_per_replica_batch_size(self.batch_size)
      # Untuned: an autotuned iterator's deletion, after a pass over 10,570 questions, could stall up to
      # a minute.
      return untuned.untuned(
          tf.data.Dataset.from_tensor_slices(padded).batch(per_replica, drop_remainder=True).shard(
              context.num_input_pipelines, context.input_pipeline_id))

    parts: Dict[str, List[np.ndarray]] = {}
    for batch in self.strategy.distribute_datasets_from_function(dataset_fn):
      for name, values in step(batch).items():
        parts.setdefault(name, []).extend(np.asarray(v) for v in values)
    return {name: np.concatenate(values)[:n] for name, values in parts.items()}


def evaluate(predictor: OrqaPredictor,
             examples: Sequence[qa_lib.QAExample],
             ks: Sequence[int] = DEFAULT_RECALL_KS,
             features: Optional[Dict[str, np.ndarray]] = None,
             block_rows: Optional[np.ndarray] = None) -> Tuple[Dict[str, float], List[Dict]]:
  """Predicts every example and scores it; block_rows: another retriever's rows (OrqaPredictor.predict).

  Returns:
    metrics: evaluation.evaluate_predictions' (accuracy, exact_match, f1, regex_match, counts) plus
      recall@k (has_answer's raw test) and normalized_recall@k (its normalized one) for each k
      (percentages);
    records: one per example, {question, prediction, score, retrieved_ids (doc_ids of the blocks the
      reader read, best first), predicted_id (doc_id of the answer's block)}.
  """
  if not examples:
    raise ValueError("no QA examples to evaluate")
  if features is None:
    features = predictor.featurize([e.question for e in examples])
  # Without rows, the one-argument call: predictors that only know the dense search (tests' scripted
  # ones) still fit.
  outputs = (predictor.predict(features) if block_rows is None else predictor.predict(features, block_rows))
  blocks = predictor.blocks
  metrics = evaluation.evaluate_predictions(examples, list(outputs["answer"]))
  hits = [[
      evaluation.has_answer(blocks.bodies[row], example.answers, example.answer_is_regex) for row in rows
  ] for rows, example in zip(outputs["block_rows"], examples)]
  metrics.update(evaluation.recall_at_k(hits, ks))
  # The same cut-offs with answers and text lower-cased and whitespace-collapsed: the convention of the
  # SQuAD-open benches' recall (docs/results.md), so that the binaries' numbers compare with theirs. Lazy:
  # each question's rows are searched up to its first hit only.
  normalized = evaluation.recall_at_k(
      ((evaluation.has_answer(blocks.bodies[row], example.answers, example.answer_is_regex, mode="normalized")
        for row in rows)
       for rows, example in zip(outputs["block_rows"], examples)), ks)
  metrics.update({f"normalized_{name}": value for name, value in normalized.items()})
  reader_beam = predictor.model.reader_beam
  records = [{
      "question": example.question,
      "prediction": str(answer),
      "score": float(score),
      "retrieved_ids": [blocks.doc_ids[r] for r in rows[:reader_beam]],
      "predicted_id": blocks.doc_ids[predicted]
  } for example, answer, score, rows, predicted in zip(examples, outputs["answer"], outputs["score"],
                                                       outputs["block_rows"], outputs["predicted_row"])]
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


def output_name(qa_path: str, retriever: str = hybrid.DENSE) -> str:
  """<name> of bin/eval_orqa's <name>.metrics.json and <name>.predictions.jsonl: the QA file's base name,
  with ".<retriever>" after it for a retriever other than the dense tower (whose names predate the
  others)."""
  if qa_path.startswith(qa_lib.TFDS_PREFIX):
    name = qa_path.replace(":", "_").replace("/", "_")
  else:
    name = os.path.splitext(os.path.basename(qa_path.rstrip("/")))[0] or "qa"
  return name if retriever == hybrid.DENSE else f"{name}.{retriever}"


def evaluate_retrievers(model_dir: str,
                        qa_path: str,
                        retrievers: Sequence[str] = (hybrid.DENSE,),
                        output_dir: Optional[str] = None,
                        checkpoint: Optional[str] = None,
                        batch_size: int = 32,
                        ks: Sequence[int] = DEFAULT_RECALL_KS,
                        skip_invalid: bool = False,
                        strategy: Optional[tf.distribute.Strategy] = None,
                        log: Callable[[str], None] = print,
                        hybrid_bm25_weight: Optional[float] = None,
                        jit_compile: bool = False,
                        reader_beam_size: Optional[int] = None) -> Dict[str, Dict]:
  """bin/eval_orqa: evaluates a trained model dir on a QA file, the reader reading what each retriever
  returns (realm_tf.retrieval.hybrid.RETRIEVERS; the hybrid fuses by reciprocal rank fusion, or by
  hybrid_bm25_weight's weighted score sum); for each writes OUTPUT_DIR/<name>.metrics.json and
  OUTPUT_DIR/<name>.predictions.jsonl atomically (OUTPUT_DIR defaults to MODEL_DIR/eval, <name> is
  output_name's of the retriever's hybrid.label). Returns {label: its metrics (with paths, checkpoint and
  retriever)}, in order. jit_compile: OrqaPredictor's. reader_beam_size: blocks the reader reads instead
  of the run's (<name> then ends in .reader_beamN, so that the run's own evaluation is kept)."""
  hybrid.check_retrievers(retrievers)
  hybrid.check_bm25_weight(hybrid_bm25_weight)
  trained = orqa_model.load_trained(model_dir, checkpoint, strategy, reader_beam_size)
  log(f"evaluating {trained.checkpoint} on {qa_path} with retrievers {', '.join(retrievers)}, the reader "
      f"reading the top {trained.model.reader_beam} blocks")
  examples = load_examples(qa_path, skip_invalid, log)
  depth = max(max(ks), trained.model.reader_beam)
  predictor = OrqaPredictor(trained.model,
                            trained.tokenizer,
                            trained.featurizer,
                            trained.blocks,
                            strategy,
                            batch_size,
                            num_retrieved=depth,
                            jit_compile=jit_compile)
  features = predictor.featurize([e.question for e in examples])
  blocks = trained.blocks
  sparse = None
  if {hybrid.BM25, hybrid.HYBRID} & set(retrievers):
    started = time.time()
    sparse = hybrid.build_bm25(blocks.titles, blocks.bodies)
    log(f"BM25 index of {sparse.num_docs} blocks in {time.time() - started:.1f} s")
  output_dir = output_dir or os.path.join(model_dir, "eval")
  tf.io.gfile.makedirs(output_dir)
  results = {}
  for retriever in retrievers:
    started = time.time()
    block_rows = None
    if retriever != hybrid.DENSE:  # the dense tower's rows come from the prediction step itself
      block_rows = hybrid.candidate_rows(retriever, [e.question for e in examples],
                                         depth,
                                         lambda d: predictor.retrieve(features, d),
                                         sparse,
                                         question_doc_ids=[e.metadata.get("doc_id") for e in examples],
                                         corpus_doc_ids=blocks.doc_ids,
                                         source=qa_path,
                                         bm25_weight=hybrid_bm25_weight)["rows"]
    metrics, records = evaluate(predictor, examples, ks, features=features, block_rows=block_rows)
    metrics["seconds"] = time.time() - started
    retriever_label = hybrid.label(retriever, hybrid_bm25_weight)
    name = output_name(qa_path, retriever_label)
    if reader_beam_size is not None:
      name += f".reader_beam{reader_beam_size}"
    predictions_path = os.path.join(output_dir, f"{name}.predictions.jsonl")
    metrics_path = os.path.join(output_dir, f"{name}.metrics.json")
    evaluation.write_predictions_jsonl(predictions_path, records)
    result = dict(metrics,
                  checkpoint=trained.checkpoint,
                  qa_path=qa_path,
                  retriever=retriever_label,
                  reader_beam_size=trained.model.reader_beam,
                  predictions_path=predictions_path)
    if retriever == hybrid.HYBRID:
      result["hybrid_bm25_weight"] = hybrid_bm25_weight  # None: reciprocal rank fusion
    io_utils.write_json_atomic(metrics_path, result)
    result["metrics_path"] = metrics_path
    log(f"{retriever_label}: exact match {metrics['exact_match']:.2f} in {metrics['seconds']:.0f} s")
    results[retriever_label] = result
  return results


def evaluate_model_dir(model_dir: str,
                       qa_path: str,
                       output_dir: Optional[str] = None,
                       checkpoint: Optional[str] = None,
                       batch_size: int = 32,
                       ks: Sequence[int] = DEFAULT_RECALL_KS,
                       skip_invalid: bool = False,
                       strategy: Optional[tf.distribute.Strategy] = None,
                       log: Callable[[str], None] = print,
                       retriever: str = hybrid.DENSE) -> Dict:
  """evaluate_retrievers with one retriever (the dense tower by default); returns its metrics."""
  return evaluate_retrievers(model_dir, qa_path, [retriever], output_dir, checkpoint, batch_size, ks,
                             skip_invalid, strategy, log)[retriever]


def format_retriever_table(results: Dict[str, Dict], ks: Sequence[int]) -> str:
  """One row per retriever: exact match, F1 and recall@k (percentages)."""
  columns = ["exact_match", "f1"] + [f"recall@{k}" for k in ks]
  width = max(len("retriever"), *(len(r) for r in results))
  lines = [
      f"{'retriever':<{width}}  " + "  ".join(f"{c:>11}" for c in columns),
      f"{'-' * width}  " + "  ".join("-" * 11 for _ in columns)
  ]
  for retriever, metrics in results.items():
    lines.append(f"{retriever:<{width}}  " + "  ".join(f"{metrics[c]:11.2f}" for c in columns))
  return "\n".join(lines)
