r"""SQuAD-open exact match of a full open-QA system: a retriever's top passages read by a MiniLM span reader.

Why: bench/squad_open_bench.py and squad_open_orqa_bench.py measure retrieval alone; issue 8 also asks
for the end-to-end number users compare open-QA systems by, exact match of the predicted answer, on the
same 10,570 dev questions and 20,963 paragraphs.

  .venv/bin/python bench/squad_open_qa_bench.py          # reader 1,200 steps, 10,570 questions x 3 retrievers
  .venv/bin/python bench/squad_open_qa_bench.py --steps=20 --num_eval_questions=64   # a smoke run

The system (DrQA's retriever-reader pipeline, with ORQA's reader):
  retrievers  bm25    BM25 over paragraph bodies (realm_tf/retrieval/bm25.py),
              minilm  all-MiniLM-L6-v2 zero-shot (squad_open_bench's cached vectors, exact search), and
              hybrid  the two fused by reciprocal rank fusion of their top 1,000 (squad_open_bench's row)
  reader      realm_tf's SpanReader (ORQA's span head: every span of <= 10 wordpieces scored from its
              start and end states) over [CLS] question [SEP] paragraph [SEP], --seq_len wordpieces, its
              BERT initialised from all-MiniLM-L6-v2 (the only pre-trained encoder that can be had here)
  training    SQuAD v1.1 train questions (the dev articles are held out), each read with its gold
              paragraph and BM25's best-ranked other paragraph; the loss is ORQA's reader loss,
              -log of the probability mass on every occurrence of an answer in either paragraph, one
              softmax over both paragraphs' spans (shared normalisation, so that span scores compare
              across paragraphs at prediction time, as they must when the top passages are read together)
  prediction  the best-scoring span over the retriever's top k paragraphs (k = 1 and --read_k), sliced
              from the original text (orqa_features.extract_answers); no retriever score is added
              (BM25's and MiniLM's scales differ)
Metrics: exact match and token F1 (SQuAD's answer normalisation, evaluation.exact_match / f1_score)
against all gold answers, the reader's oracle (an answer occurs in the paragraphs read) and the reader's
EM with the gold paragraph given (reading comprehension, an upper bound for the retriever).
Prints a table and writes JSON (machine, settings, timings, loss curve) to --output. --reader_dir keeps
the trained reader, so that other retrievers can be read with it without training again.
"""

import os
import time
from typing import Dict, List, Sequence

from absl import app
from absl import flags
import numpy as np
import tf_keras

from bench import loss_curve
from bench import minilm_lib
from bench import open_qa_lib
from bench import throughput_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_RETRIEVERS = flags.DEFINE_list(
    "retrievers", ["bm25", "minilm", "hybrid"],
    "Retrievers to read from: bm25, minilm, hybrid (the two fused as in "
    "squad_open_bench).")
_STEPS = flags.DEFINE_integer("steps", 1200, "Reader training steps (1,200 x 8: 11% of an epoch).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 8, "Training questions per step (x 2 paragraphs).")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 192, "Reader wordpieces: [CLS] question [SEP] paragraph [SEP].")
_MAX_SPAN_WIDTH = flags.DEFINE_integer("max_span_width", 10, "Longest answer span, wordpieces (ORQA: 10).")
_READ_K = flags.DEFINE_integer("read_k", 3, "Paragraphs read per dev question (EM is also given at k=1).")
_NUM_EVAL_QUESTIONS = flags.DEFINE_integer("num_eval_questions", 0,
                                           "Dev questions to answer (the first N); 0: all 10,570.")
_EVAL_BATCH_SIZE = flags.DEFINE_integer("eval_batch_size", 16, "Dev questions per reader forward pass.")
_JIT_COMPILE = flags.DEFINE_bool("jit_compile", True, "Compile the reader's train step and forward pass "
                                 "with XLA.")
_LOG_EVERY = flags.DEFINE_integer("log_every", 50, "Steps between progress lines.")
_READER_DIR = flags.DEFINE_string(
    "reader_dir", None, "Where the trained reader is kept: if it holds one (trained with the same "
    "--steps, --batch_size, --learning_rate, --seq_len, --max_span_width, --seed), it is restored and "
    "not trained again (to answer with other --retrievers); else the reader trained here is saved there.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the question order, dropout and the span head.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "squad_open_qa_bench.json"),
                              "Where to write the JSON results.")

_log = minilm_lib.log


def train_reader(reader, featurize, bodies: List[str], train, pairs: np.ndarray, order: np.ndarray):
  """Trains reader in place (ORQA's reader loss, realm_tf.modeling.orqa_reader, through loop.train);
  returns (loss curve, timings)."""
  from realm_tf.modeling import orqa_reader  # pylint: disable=g-import-not-at-top
  from realm_tf.training import optimization  # pylint: disable=g-import-not-at-top
  model = orqa_reader.OrqaReader(reader)
  optimizer = optimization.create_optimizer(_LEARNING_RATE.value, _STEPS.value)
  batch = _BATCH_SIZE.value
  dataset_fn = open_qa_lib.training_dataset_fn(featurize, _SEQ_LEN.value, bodies, train, pairs, order, batch)
  curve = loss_curve.train(model, optimizer, dataset_fn, _STEPS.value, _LOG_EVERY.value, _JIT_COMPILE.value,
                           _log)
  median_step_s = float(np.median(curve.step_seconds))
  return curve.points, {
      "train_s": curve.seconds,
      "median_step_s": median_step_s,
      "questions_per_s": batch / median_step_s
  }


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  unknown = [r for r in _RETRIEVERS.value if r not in ("bm25", "minilm", "hybrid")]
  if unknown:
    raise app.UsageError(f"--retrievers: unknown {unknown}; choose from bm25, minilm, hybrid")
  from realm_tf import io_utils  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import bm25  # pylint: disable=g-import-not-at-top
  me = "bench/squad_open_qa_bench.py"
  machine = throughput_lib.machine()
  started = time.perf_counter()
  tf_keras.utils.set_random_seed(_SEED.value)
  full, train = minilm_lib.load_squad(me)
  bodies = [d.body for d in full.documents]
  dev = full.questions[:_NUM_EVAL_QUESTIONS.value or None]
  _log(f"{len(bodies)} paragraphs, {len(train)} train questions, answering {len(dev)} dev questions")

  rng = np.random.default_rng(_SEED.value)
  needed = _STEPS.value * _BATCH_SIZE.value
  order = np.concatenate([rng.permutation(len(train)) for _ in range(-(-needed // len(train)))])[:needed]
  start = time.perf_counter()
  index = bm25.Bm25Index(bodies)
  used = np.unique(order)
  train_rows = np.array([int(train[i].metadata["doc_id"]) - 1 for i in range(len(train))])
  mismatched = [i for i in used if full.documents[train_rows[i]].doc_id != train[i].metadata["doc_id"]]
  if mismatched:
    raise RuntimeError(
        f"--squad_dir: train question {train[mismatched[0]].metadata['id']}'s paragraph is not at "
        "its doc_id's row of the corpus; the train file changed between loads?")
  pairs = np.zeros([len(train), 2], np.int64)
  bm25_train, _ = index.search([train[i].question for i in used], 2)
  pairs[used] = open_qa_lib.training_paragraphs([train[i] for i in used], train_rows[used], bm25_train)
  retrieval_s = {"bm25_train_s": time.perf_counter() - start}
  _log(f"training paragraphs (gold + BM25's best other) for {len(used)} questions in "
       f"{retrieval_s['bm25_train_s']:.0f} s")

  directory = minilm_lib.minilm_directory(minilm_lib.CACHE_DIR.value, minilm_lib.MINILM_DIR.value)
  # Retrieval first (seconds): a missing embedding cache then stops the run before the reader trains.
  ks = sorted({1, _READ_K.value})
  start = time.perf_counter()
  rankings = _rankings(me, _RETRIEVERS.value, index, full, dev, directory, max(ks))
  retrieval_s["dev_retrieval_s"] = time.perf_counter() - start
  reader, tokenizer = open_qa_lib.build_reader(directory, _SEQ_LEN.value, _MAX_SPAN_WIDTH.value)
  featurize = open_qa_lib.make_featurizer(tokenizer, _SEQ_LEN.value)
  reader_settings = {
      "steps": _STEPS.value,
      "batch_size": _BATCH_SIZE.value,
      "learning_rate": _LEARNING_RATE.value,
      "seq_len": _SEQ_LEN.value,
      "max_span_width": _MAX_SPAN_WIDTH.value,
      "seed": _SEED.value
  }
  try:
    restored = bool(_READER_DIR.value) and open_qa_lib.restore_reader(reader, _READER_DIR.value,
                                                                      reader_settings)
  except ValueError as e:
    raise app.UsageError(f"{me}: --reader_dir: {e}") from None
  if restored:
    _log(f"reader restored from {_READER_DIR.value}, not trained again")
    curve, train_timing = [], {"restored_from": _READER_DIR.value}
  else:
    curve, train_timing = train_reader(reader, featurize, bodies, train, pairs, order)
    _log(f"reader trained: {_STEPS.value} steps in {train_timing['train_s']:.0f} s")
    if _READER_DIR.value:
      open_qa_lib.save_reader(reader, _READER_DIR.value, reader_settings)

  gold_rows = full.gold_rows()[:len(dev)]
  eval_args = {
      "max_span_width": _MAX_SPAN_WIDTH.value,
      "batch_size": _EVAL_BATCH_SIZE.value,
      "jit_compile": _JIT_COMPILE.value
  }
  results = {
      "gold paragraph":
          open_qa_lib.answer_questions(reader, featurize, bodies, dev, gold_rows[:, None], (1,), **eval_args)
  }
  _log(f"gold paragraph given: EM {results['gold paragraph']['per_k']['1']['exact_match']:.1f}")
  for name, rows in rankings.items():
    results[name] = open_qa_lib.answer_questions(reader, featurize, bodies, dev, rows, ks, **eval_args)
    _log(f"{name}: " + ", ".join(f"EM@{k} {results[name]['per_k'][str(k)]['exact_match']:.1f}" for k in ks))

  print(f"\nSQuAD-open, {len(dev)} dev questions, {len(bodies)} paragraphs; reader: MiniLM span reader, "
        f"{_STEPS.value} steps x {_BATCH_SIZE.value} questions")
  print(f"{'retriever':<36} {'k':>3} {'EM':>6} {'F1':>6} {'answer in read':>15}")
  for name, result in results.items():
    for k, m in result["per_k"].items():
      print(f"{name:<36} {k:>3} {m['exact_match']:6.1f} {m['f1']:6.1f} "
            f"{m['answer_in_read_paragraphs']:15.1f}")
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  io_utils.write_json_atomic(
      _OUTPUT.value, {
          "benchmark": "squad_open_qa_bench",
          "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "machine": machine,
          "load_average_at_end": list(throughput_lib.load_average()),
          "settings": {
              "corpus": f"all {len(bodies)} paragraphs (train + dev)",
              "dev_questions": len(dev),
              "retrievers": _RETRIEVERS.value,
              "read_k": _READ_K.value,
              "reader": "realm_tf SpanReader, BERT from all-MiniLM-L6-v2, fresh span head",
              "seq_len": _SEQ_LEN.value,
              "max_span_width": _MAX_SPAN_WIDTH.value,
              "span_hidden_size": open_qa_lib.SPAN_HIDDEN_SIZE,
              "steps": _STEPS.value,
              "batch_size": _BATCH_SIZE.value,
              "training_paragraphs": "gold + BM25's best other",
              "learning_rate": _LEARNING_RATE.value,
              "jit_compile": _JIT_COMPILE.value,
              "seed": _SEED.value,
              "training_questions_distinct": int(len(used))
          },
          "timing": dict(train_timing, **retrieval_s, total_s=time.perf_counter() - started),
          "loss_curve": curve,
          "results": results,
      })
  print(f"wrote {_OUTPUT.value}")


def _rankings(me: str, names: Sequence[str], index, full, dev, directory: str,
              depth: int) -> Dict[str, np.ndarray]:
  """{retriever: int64 [len(dev), depth] paragraph rows, best first}. BM25 and MiniLM search once each,
  as deep as the hybrid needs (squad_open_bench's hybrid: each one's top HYBRID_DEPTH, fused by reciprocal
  rank fusion)."""
  from realm_tf.retrieval import fusion  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import index as index_lib  # pylint: disable=g-import-not-at-top
  base_depth = max(depth, minilm_lib.HYBRID_DEPTH) if "hybrid" in names else depth
  base = {}
  if {"bm25", "hybrid"} & set(names):
    base["bm25"] = index.search([q.question for q in dev], base_depth)[0]
  if {"minilm", "hybrid"} & set(names):
    otherwise = ", or leave minilm and hybrid out of --retrievers"
    paragraphs, _ = minilm_lib.required_vectors(me, directory, "paragraphs", [d.body for d in full.documents],
                                                otherwise)
    questions, _ = minilm_lib.required_vectors(me, directory, "questions",
                                               [q.question for q in full.questions], otherwise)
    dense = index_lib.build_index(paragraphs, implementation="brute_force")
    base["minilm"] = dense.search(questions[:len(dev)], base_depth)[0]
  return {
      name: (fusion.reciprocal_rank_fusion([base["bm25"], base["minilm"]], depth)
             if name == "hybrid" else base[name][:, :depth]) for name in names
  }


if __name__ == "__main__":
  app.run(main)
