r"""SQuAD-open dev, question by question: does the weighted hybrid of BM25 and a trained query tower beat
BM25, and the best earlier hybrid, on the same questions, or only on average? (issue 41's sign tests)

Why: bench/squad_open_e2e_bench.py reports each retriever's recall and exact match over the 10,570 dev
questions; two averages a few points apart can still come from questions that swing both ways. This
ranks the same questions with every retriever, retrieval only (no reader: minutes, not the e2e
evaluations' half hours), and compares each row with BM25 and with the best earlier hybrid question by
question: per k, the questions only one finds an answer for, and the exact two-sided sign test of that
split (realm_tf.evaluation.paired_change). Exact match is compared the same way from bin/eval_orqa's
prediction files where the e2e bench wrote them.

  .venv/bin/python bench/squad_open_paired_bench.py --squad_dir=data/squad   # after the e2e bench's
      --train_retriever=bm25 run (its model dir, frozen index and evaluations); minutes

Rows, all over the e2e run's 20,963 paragraphs and the model dir's frozen index (all-MiniLM-L6-v2's
document tower over title and body):
  bm25                 BM25 over title and body (bin/eval_orqa --retriever=bm25)
  dense                the model dir's trained query tower (bin/eval_orqa --retriever=dense)
  hybrid               reciprocal rank fusion of the two (--retriever=hybrid)
  hybrid_wW            the weighted score sum (--retriever=hybrid --hybrid_bm25_weight=W)
  zero-shot dense      all-MiniLM-L6-v2's untrained query tower alone (the tower before training)
  zero-shot hybrid     RRF of BM25 and all-MiniLM-L6-v2's untrained query tower: the best row before
                       any trained tower (issue 41's table, recall@5 90.5)
  zero-shot hybrid_wW  the weighted score sum with the untrained tower: what training the tower adds
Every row is compared with bm25 and with each zero-shot row.
Recall is bin/eval_orqa's: an answer string in a paragraph's body (evaluation.has_answer, raw).
"""

import json
import os
import time
from typing import Callable, Dict, Optional, Sequence, Tuple

from absl import app
from absl import flags
import numpy as np

from bench import minilm_lib
from bench import throughput_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WORK_DIR = flags.DEFINE_string("work_dir", os.path.join(_REPO, ".bench_cache", "squad_e2e"),
                                "bench/squad_open_e2e_bench.py's work dir (corpus/, qa/dev.jsonl).")
_MODEL_DIR = flags.DEFINE_string(
    "model_dir", None, "The bin/train_orqa model dir whose best checkpoint's query tower is ranked "
    "(default WORK/orqa_bm25, the e2e bench's --train_retriever=bm25 run).")
_EVAL_DIR = flags.DEFINE_string(
    "eval_dir", None, "Where that run's bin/eval_orqa predictions are (default WORK/eval_bm25); exact "
    "match is compared for the retrievers that have a dev.<retriever>.predictions.jsonl there.")
_WEIGHT = flags.DEFINE_float(
    "hybrid_bm25_weight", 0.5, "BM25's weight in the weighted hybrid (chosen "
    "on held-out train questions by bench/squad_open_hybrid_tuning_bench.py).")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "squad_open_paired.json"),
                              "Where to write the JSON results.")
_KS = (1, 5, 20, 100)
ZERO_SHOT = "zero-shot hybrid"
_log = minilm_lib.log


def paired_rows(outcomes: Dict[str, Dict[str, np.ndarray]], baselines: Sequence[str]) -> Dict[str, Dict]:
  """Every row against each baseline row, question by question.

  outcomes: {row: {measure: bool [questions]}} (a measure is "recall@k" or "exact_match"); a row's
  measure is compared with a baseline's where both have it. Returns {row: {"versus " + baseline:
  {measure: paired_change}}} for each row other than the baseline itself.
  """
  # pylint: disable=g-import-not-at-top
  from realm_tf import evaluation
  result = {}
  for row, measures in outcomes.items():
    for baseline in baselines:
      if row == baseline:
        continue
      shared = [m for m in measures if m in outcomes[baseline]]
      result.setdefault(row, {})[f"versus {baseline}"] = {
          m: evaluation.paired_change(measures[m], outcomes[baseline][m]) for m in shared
      }
  return result


def _searched_once_per_depth(search: Callable[[int], Tuple[np.ndarray, np.ndarray]]):
  """search(depth) -> (rows, scores), run once per depth however many rows ask for it."""
  found = {}

  def at(depth: int):
    if depth not in found:
      found[depth] = search(depth)
    return found[depth]

  return at


class _Bm25SearchedOnce:
  """A Bm25Index whose search runs once per (questions, depth): hybrid.candidate_rows searches BM25 for
  each hybrid row, and every row here ranks the same questions."""

  def __init__(self, index):
    self._index = index
    self.num_docs = index.num_docs
    self._found = {}

  def search(self, queries: Sequence[str], k: int):
    key = (tuple(queries), k)
    if key not in self._found:
      self._found[key] = self._index.search(list(queries), k)
    return self._found[key]


def exact_matches(predictions_path: str, examples) -> Optional[np.ndarray]:
  """bool [questions]: bin/eval_orqa's prediction of each example an exact match (its predictions JSONL,
  one record per example in the QA file's order); None when the file is not there."""
  from realm_tf import evaluation  # pylint: disable=g-import-not-at-top
  if not os.path.exists(predictions_path):
    return None
  with open(predictions_path, encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  if [r["question"] for r in records] != [e.question for e in examples]:
    raise ValueError(f"{predictions_path}: its questions are not the QA file's, in its order; evaluate "
                     "the same QA file again with bin/eval_orqa")
  return np.array([evaluation.exact_match(r["prediction"], e.answers) for r, e in zip(records, examples)])


def _cell(change: Dict[str, float]) -> str:
  return f"+{change['gained']}/-{change['lost']} p {change['p_value']:.2g}"


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  # pylint: disable=g-import-not-at-top (TensorFlow-heavy)
  from realm_tf import evaluation
  from realm_tf import io_utils
  from realm_tf.data import qa
  from realm_tf.retrieval import brute_force_index
  from realm_tf.retrieval import hybrid
  from realm_tf.retrieval import text_embedder
  from realm_tf.runs import frozen_index
  from realm_tf.runs import orqa_evaluation
  from realm_tf.runs import orqa_model
  # pylint: enable=g-import-not-at-top
  try:
    hybrid.check_bm25_weight(_WEIGHT.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  work = _WORK_DIR.value
  model_dir = _MODEL_DIR.value or os.path.join(work, "orqa_bm25")
  eval_dir = _EVAL_DIR.value or os.path.join(work, "eval_bm25")
  dev_path = os.path.join(work, "qa", "dev.jsonl")
  for path, flag in ((dev_path, "--work_dir"), (os.path.join(model_dir,
                                                             "train_summary.json"), "--model_dir")):
    if not os.path.exists(path):
      raise app.UsageError(f"{flag}: no {path}; run bench/squad_open_e2e_bench.py --train_retriever=bm25 "
                           "first")
  machine = throughput_lib.machine()
  started = time.time()
  trained = orqa_model.load_trained(model_dir)
  blocks = trained.blocks
  examples = qa.load_qa(dev_path)
  questions = [e.question for e in examples]
  predictor = orqa_evaluation.OrqaPredictor(trained.model,
                                            trained.tokenizer,
                                            trained.featurizer,
                                            blocks,
                                            batch_size=64,
                                            num_retrieved=max(_KS))
  features = predictor.featurize(questions)
  trained_tower = _searched_once_per_depth(lambda depth: predictor.retrieve(features, depth))
  # Every hybrid row asks for BM25's same top FUSION_DEPTH of the same questions: searched once.
  sparse = _Bm25SearchedOnce(hybrid.build_bm25(blocks.titles, blocks.bodies))
  directory = minilm_lib.minilm_directory(minilm_lib.CACHE_DIR.value, minilm_lib.MINILM_DIR.value)
  embedder, tokenizer = minilm_lib.load(directory)
  zero_shot_queries = text_embedder.TextEmbedder(embedder,
                                                 tokenizer,
                                                 max_seq_length=trained.config.query_seq_len,
                                                 batch_size=64,
                                                 jit_compile=False).embed(questions)
  paragraphs = frozen_index.load_frozen_index(model_dir, trained.orqa.retrieval_corpus_path)
  paragraphs = paragraphs / np.linalg.norm(paragraphs, axis=1, keepdims=True)  # cosine, as it was trained
  exact = brute_force_index.BruteForceIndex.build(paragraphs)
  zero_shot_tower = _searched_once_per_depth(lambda depth: exact.search(zero_shot_queries, depth))

  def ranked(retriever, tower, bm25_weight=None):
    """bin/eval_orqa's rows for retriever (hybrid.candidate_rows), its dense side from tower."""
    return hybrid.candidate_rows(retriever, questions, max(_KS), tower, sparse,
                                 bm25_weight=bm25_weight)["rows"]

  weighted = hybrid.label(hybrid.HYBRID, _WEIGHT.value)
  rankings = {
      hybrid.BM25: ranked(hybrid.BM25, trained_tower),
      hybrid.DENSE: ranked(hybrid.DENSE, trained_tower),
      hybrid.HYBRID: ranked(hybrid.HYBRID, trained_tower),
      weighted: ranked(hybrid.HYBRID, trained_tower, _WEIGHT.value),
      "zero-shot dense": ranked(hybrid.DENSE, zero_shot_tower),
      ZERO_SHOT: ranked(hybrid.HYBRID, zero_shot_tower),
      f"zero-shot {weighted}": ranked(hybrid.HYBRID, zero_shot_tower, _WEIGHT.value),
  }
  _log(
      f"{len(questions)} dev questions ranked by {len(rankings)} retrievers in {time.time() - started:.0f} s")
  answers = [e.answers for e in examples]
  outcomes, recall = {}, {}
  for name, rows in rankings.items():
    hits = evaluation.answer_first_hits(rows, blocks.bodies, answers)
    outcomes[name] = {f"recall@{k}": (hits > 0) & (hits <= k) for k in _KS}
    recall[name] = {f"recall@{k}": 100.0 * float(np.mean(outcomes[name][f"recall@{k}"])) for k in _KS}
    found = exact_matches(
        os.path.join(eval_dir,
                     orqa_evaluation.output_name(dev_path, name) + ".predictions.jsonl"), examples)
    if found is not None:
      outcomes[name]["exact_match"] = found
      recall[name]["exact_match"] = 100.0 * float(np.mean(found))
  # bin/eval_orqa's own numbers for the rows it evaluated: the rankings here must be the ones it read.
  reported = {}
  for name in rankings:
    path = os.path.join(eval_dir, orqa_evaluation.output_name(dev_path, name) + ".metrics.json")
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        metrics = json.load(f)
      reported[name] = {k: metrics[k] for k in recall[name] if k in metrics}
  paired = paired_rows(outcomes, [hybrid.BM25, "zero-shot dense", ZERO_SHOT, f"zero-shot {weighted}"])

  measures = [f"recall@{k}" for k in _KS] + ["exact_match"]
  print(f"\n{len(questions)} SQuAD-open dev questions over {len(blocks.bodies)} paragraphs "
        f"(model {model_dir})")
  print(f"{'retriever':<22}" + "".join(f"{m:>13}" for m in measures) + "   bin/eval_orqa's")
  for name in rankings:
    print(f"{name:<22}" + "".join(f"{recall[name].get(m, float('nan')):13.2f}" for m in measures) + "   " +
          " ".join(f"{reported.get(name, {}).get(m, float('nan')):.2f}" for m in measures))
  for name, versus in paired.items():
    for baseline, changes in versus.items():
      print(f"{name:<22} {baseline:<28} " + "; ".join(f"{m} {_cell(c)}" for m, c in changes.items()))
  io_utils.write_json_atomic(
      _OUTPUT.value, {
          "benchmark": "squad_open_paired_bench",
          "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "machine": machine,
          "load_average_at_end": list(throughput_lib.load_average()),
          "settings": {
              "model_dir": model_dir,
              "checkpoint": trained.checkpoint,
              "questions": dev_path,
              "num_questions": len(questions),
              "num_paragraphs": len(blocks.bodies),
              "hybrid_bm25_weight": _WEIGHT.value,
              "answer_match": "raw (bin/eval_orqa's recall@k)"
          },
          "results": recall,
          "bin_eval_orqa_reported": reported,
          "paired": paired,
          "seconds": time.time() - started,
      })
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
