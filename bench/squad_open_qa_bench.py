r"""SQuAD-open exact match of a full open-QA system: a retriever's top passages read by a MiniLM span reader.

Why: bench/squad_open_bench.py and squad_open_orqa_bench.py measure retrieval alone; issue 8 also asks
for the end-to-end number users compare open-QA systems by, exact match of the predicted answer, on the
same 10,570 dev questions and 20,963 paragraphs.

  .venv/bin/python bench/squad_open_qa_bench.py          # reader 600 steps + 10,570 questions x 2 retrievers
  .venv/bin/python bench/squad_open_qa_bench.py --steps=20 --num_eval_questions=64   # a smoke run

The system (DrQA's retriever-reader pipeline, with ORQA's reader):
  retrievers  bm25    BM25 over paragraph bodies (realm_tf/retrieval/bm25.py, the best retriever here), and
              minilm  all-MiniLM-L6-v2 zero-shot (squad_open_bench's cached vectors, exact search)
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
Prints a table and writes JSON (machine, settings, timings, loss curve) to --output.
"""

import collections
import os
import sys
import time
from typing import Dict, List, Sequence

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tf_keras

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Runs as `python bench/squad_open_qa_bench.py` from the repository root as well as under Bazel.
sys.path.insert(0, _REPO)

from bench import minilm_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from bench import throughput_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf import evaluation  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.data import orqa_features  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.modeling import losses  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.modeling import reader as reader_lib  # pylint: disable=g-import-not-at-top,wrong-import-position

_SQUAD_DIR = flags.DEFINE_string(
    "squad_dir", os.path.join(os.path.dirname(_REPO), "shared", "data", "squad"),
    "Directory with train-v1.1.rebuilt.json and dev-v1.1.rebuilt.json.")
_CACHE_DIR = flags.DEFINE_string("cache_dir", os.path.join(_REPO, ".bench_cache"),
                                 "squad_open_bench's cache: the MiniLM weights and embeddings/.")
_MINILM_DIR = flags.DEFINE_string("minilm_dir", None, "A Hugging Face all-MiniLM-L6-v2 directory; "
                                  "default: the installed or fetched package (as squad_open_bench).")
_RETRIEVERS = flags.DEFINE_list("retrievers", ["bm25", "minilm"], "Retrievers to read from: bm25, minilm.")
_STEPS = flags.DEFINE_integer("steps", 600, "Reader training steps.")
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
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the question order, dropout and the span head.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "squad_open_qa_bench.json"),
                              "Where to write the JSON results.")

_SPAN_HIDDEN_SIZE = 256  # ORQA's
_log = minilm_lib.log


class ReaderTrainer(tf_keras.Model):
  """ORQA's reader loss over K paragraphs per question, one softmax over all their spans."""

  def __init__(self, reader: reader_lib.SpanReader, **kwargs):
    super().__init__(**kwargs)
    self.reader = reader

  def compute_loss(self, features, training=None) -> losses.LossOutput:
    output = self.reader(((features["token_ids"], features["mask"], features["segment_ids"]),
                          features["block_mask"], tf.zeros(tf.shape(features["token_ids"])[:2])),
                         training=training)
    correct = reader_lib.reader_correct(output.span_starts, output.span_ends, features["gold_starts"],
                                        features["gold_ends"])  # [B, K, S]
    batch = tf.shape(output.logits)[0]
    flat_logits = tf.reshape(output.logits, [batch, -1])
    flat_correct = tf.reshape(correct, [batch, -1])
    per_question = losses.marginal_log_loss(flat_logits, flat_correct)
    has_gold = tf.reduce_any(flat_correct, axis=-1)
    best = tf.argmax(flat_logits, axis=-1, output_type=tf.int32)
    count = tf.cast(batch, tf.float32)
    supervised = tf.reduce_sum(tf.cast(has_gold, tf.float32))
    return losses.LossOutput(
        # Questions whose answer was cut off by seq_len add 0 to the loss and are not counted.
        loss_sum=tf.reduce_sum(per_question), loss_weight=tf.maximum(supervised, 1.0),
        metrics={"has_gold_span": (supervised, count),
                 "exact_match": (tf.reduce_sum(tf.cast(tf.gather(flat_correct, best, batch_dims=1),
                                                       tf.float32)), count)})


def build_reader(directory: str, seq_len: int, max_span_width: int):
  """(SpanReader with all-MiniLM-L6-v2's encoder weights and a fresh span head, tokenizer)."""
  from realm_tf.modeling import bert_conversion  # pylint: disable=g-import-not-at-top
  encoder, tokenizer = minilm_lib.load(directory)
  config = bert_conversion.config_from_source(os.path.join(directory, "config.json"))
  reader = reader_lib.SpanReader(config, seq_len=seq_len, span_hidden_size=_SPAN_HIDDEN_SIZE,
                                 max_span_width=max_span_width)
  dummy = tf.zeros([1, 1, seq_len], tf.int32)
  reader(((dummy, dummy, dummy), dummy, tf.zeros([1, 1])))
  reader.encoder.set_weights(encoder.get_weights())
  return reader, tokenizer


def make_featurizer(tokenizer, seq_len: int):
  """tf.function: (questions [B], paragraphs [B, K], answers ragged [B, (A)]) -> reader features."""

  @tf.function
  def featurize(questions, paragraphs, answers):
    f = orqa_features.reader_inputs_from_texts(tokenizer, questions, paragraphs, seq_len, answers=answers)
    return {"token_ids": f.inputs.token_ids, "mask": f.inputs.mask, "segment_ids": f.inputs.segment_ids,
            "block_mask": f.inputs.block_mask, "block_start": f.inputs.block_start,
            "gold_starts": f.gold_starts, "gold_ends": f.gold_ends,
            "retriever_correct": f.retriever_correct}

  return featurize


def _ragged(answers: Sequence[Sequence[str]]) -> tf.RaggedTensor:
  return tf.ragged.constant([list(a) for a in answers], dtype=tf.string)


def training_paragraphs(train, train_rows: np.ndarray, bm25_rows: np.ndarray) -> np.ndarray:
  """int64 [len(train), 2]: each question's gold paragraph row and BM25's best-ranked other row."""
  pairs = np.zeros([len(train), 2], np.int64)
  for i, gold in enumerate(train_rows):
    other = next(int(r) for r in bm25_rows[i] if r != gold)
    pairs[i] = (gold, other)
  return pairs


def train_reader(reader, featurize, bodies: List[str], train, pairs: np.ndarray, order: np.ndarray):
  """Trains reader in place; returns (loss curve, timings)."""
  from realm_tf.training import optimization  # pylint: disable=g-import-not-at-top
  from realm_tf.training import train_lib  # pylint: disable=g-import-not-at-top
  model = ReaderTrainer(reader)
  optimizer = optimization.create_optimizer(_LEARNING_RATE.value, _STEPS.value)
  step_fn = train_lib.TrainStep(model, optimizer, jit_compile=_JIT_COMPILE.value)
  batch = _BATCH_SIZE.value
  curve, window, step_seconds = [], collections.defaultdict(list), []
  start = last = time.perf_counter()
  for step in range(_STEPS.value):
    chosen = order[step * batch:(step + 1) * batch]
    features = featurize(tf.constant([train[i].question for i in chosen]),
                         tf.constant([[bodies[r] for r in pairs[i]] for i in chosen]),
                         _ragged([train[i].answers for i in chosen]))
    features = {k: v for k, v in features.items() if k not in ("block_start", "retriever_correct")}
    step_start = time.perf_counter()
    metrics = {k: float(v) for k, v in step_fn(features).items()}
    step_seconds.append(time.perf_counter() - step_start)
    if not np.isfinite(metrics["loss"]):
      raise RuntimeError(f"reader step {step + 1}: non-finite loss {metrics['loss']}")
    for k, v in metrics.items():
      window[k].append(v)
    if (step + 1) % _LOG_EVERY.value == 0 or step + 1 == _STEPS.value:
      now = time.perf_counter()
      point = {"step": step + 1, **{k: float(np.mean(v)) for k, v in window.items()},
               "seconds": now - start}
      curve.append(point)
      _log(f"reader step {step + 1}/{_STEPS.value}: loss {point['loss']:.3f}, train EM "
           f"{point['exact_match']:.3f}, has gold span {point['has_gold_span']:.3f}, "
           f"{len(window['loss']) * batch / (now - last):.2f} questions/s")
      window.clear()
      last = now
  train_s = time.perf_counter() - start
  return curve, {"train_s": train_s, "median_step_s": float(np.median(step_seconds)),
                 "questions_per_s": batch / float(np.median(step_seconds))}


def answer_questions(reader, featurize, tokenizer, bodies: List[str], questions, rows: np.ndarray,
                     ks: Sequence[int], max_span_width: int, batch_size: int = 16,
                     jit_compile: bool = True) -> Dict:
  """Reads rows[:, :max(ks)] for each question; EM/F1 and oracle per k, and the predictions at max(ks).

  At each k the answer is the best span over the first k paragraphs' spans (reader logits compared
  across paragraphs, as the shared-normalisation training makes them comparable).
  """
  forward = tf.function(lambda inputs: reader(inputs, training=False).logits, jit_compile=jit_compile)
  span_starts, span_ends = reader_lib.span_candidates(reader.seq_len, max_span_width)
  read_k = max(ks)
  em = {k: [] for k in ks}
  f1 = {k: [] for k in ks}
  oracle = {k: [] for k in ks}
  predictions = []
  start = time.perf_counter()
  batch = batch_size
  for first in range(0, len(questions), batch):
    qs = questions[first:first + batch]
    texts = [[bodies[r] for r in rows[first + i, :read_k]] for i in range(len(qs))]
    f = featurize(tf.constant([q.question for q in qs]), tf.constant(texts), _ragged([q.answers for q in qs]))
    logits = forward(((f["token_ids"], f["mask"], f["segment_ids"]), f["block_mask"],
                      tf.zeros([len(qs), read_k]))).numpy()  # [B, K, S]
    correct = f["retriever_correct"].numpy()
    block_start = f["block_start"].numpy()
    for k in ks:
      flat = logits[:, :k].reshape(len(qs), -1)
      best = flat.argmax(axis=-1)
      block, span = best // logits.shape[2], best % logits.shape[2]
      starts = span_starts[span] - block_start[np.arange(len(qs)), block]
      ends = span_ends[span] - block_start[np.arange(len(qs)), block]
      block_texts = [texts[i][block[i]] for i in range(len(qs))]
      answers = orqa_features.extract_answers(tokenizer, tf.constant(block_texts), starts, ends).numpy()
      for i, q in enumerate(qs):
        text = answers[i].decode("utf-8")
        em[k].append(evaluation.exact_match(text, q.answers))
        f1[k].append(evaluation.f1_score(text, q.answers))
        oracle[k].append(bool(correct[i, :k].any()))
        if k == read_k:
          predictions.append(text)
    if (first // batch) % 100 == 0:
      done = first + len(qs)
      _log(f"  answered {done}/{len(questions)}: EM@{read_k} so far {100 * np.mean(em[read_k]):.1f} "
           f"({done / (time.perf_counter() - start):.1f} questions/s)")
  seconds = time.perf_counter() - start
  return {"per_k": {str(k): {"exact_match": 100 * float(np.mean(em[k])),
                             "f1": 100 * float(np.mean(f1[k])),
                             "answer_in_read_paragraphs": 100 * float(np.mean(oracle[k]))} for k in ks},
          "seconds": seconds, "questions_per_s": len(questions) / seconds,
          "predictions_sample": [{"question": q.question, "answers": q.answers, "prediction": p}
                                 for q, p in list(zip(questions, predictions))[:20]]}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  unknown = [r for r in _RETRIEVERS.value if r not in ("bm25", "minilm")]
  if unknown:
    raise app.UsageError(f"--retrievers: unknown {unknown}; choose from bm25, minilm")
  from realm_tf import io_utils  # pylint: disable=g-import-not-at-top
  from realm_tf.data import qa  # pylint: disable=g-import-not-at-top
  from realm_tf.data import squad_open  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import bm25  # pylint: disable=g-import-not-at-top
  me = "bench/squad_open_qa_bench.py"
  paths = [os.path.join(_SQUAD_DIR.value, n) for n in (squad_open.TRAIN_FILE, squad_open.DEV_FILE)]
  missing = [p for p in paths if not os.path.exists(p)]
  if missing:
    raise app.UsageError(f"{me}: {missing} not found; point --squad_dir at the SQuAD v1.1 directory "
                         "(../shared/data/squad)")
  machine = throughput_lib.machine()
  started = time.perf_counter()
  tf_keras.utils.set_random_seed(_SEED.value)
  full = squad_open.load_squad_open(*paths)
  train = qa.load_squad(paths[0], first_paragraph_id=1)
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
    raise RuntimeError(f"{paths[0]}: question {train[mismatched[0]].metadata['id']}'s paragraph is not at "
                       "its doc_id's row of the corpus; the train file changed between loads?")
  pairs = np.zeros([len(train), 2], np.int64)
  bm25_train, _ = index.search([train[i].question for i in used], 2)
  pairs[used] = training_paragraphs([train[i] for i in used], train_rows[used], bm25_train)
  retrieval_s = {"bm25_train_s": time.perf_counter() - start}
  _log(f"training paragraphs (gold + BM25's best other) for {len(used)} questions in "
       f"{retrieval_s['bm25_train_s']:.0f} s")

  directory = minilm_lib.minilm_directory(_CACHE_DIR.value, _MINILM_DIR.value)
  reader, tokenizer = build_reader(directory, _SEQ_LEN.value, _MAX_SPAN_WIDTH.value)
  featurize = make_featurizer(tokenizer, _SEQ_LEN.value)
  curve, train_timing = train_reader(reader, featurize, bodies, train, pairs, order)
  _log(f"reader trained: {_STEPS.value} steps in {train_timing['train_s']:.0f} s")

  gold_rows = full.gold_rows()[:len(dev)]
  eval_args = {"max_span_width": _MAX_SPAN_WIDTH.value, "batch_size": _EVAL_BATCH_SIZE.value,
               "jit_compile": _JIT_COMPILE.value}
  results = {"gold paragraph": answer_questions(reader, featurize, tokenizer, bodies, dev,
                                                gold_rows[:, None], (1,), **eval_args)}
  _log(f"gold paragraph given: EM {results['gold paragraph']['per_k']['1']['exact_match']:.1f}")
  ks = sorted({1, _READ_K.value})
  for name in _RETRIEVERS.value:
    start = time.perf_counter()
    if name == "bm25":
      rows, _ = index.search([q.question for q in dev], max(ks))
    else:
      from realm_tf.retrieval import embedding_cache  # pylint: disable=g-import-not-at-top
      weights = minilm_lib.weights_sha256(directory)
      vectors = {}
      for kind, texts in (("paragraphs", bodies), ("questions", [q.question for q in full.questions])):
        vectors[kind], _ = embedding_cache.cached_embeddings(
            os.path.join(_CACHE_DIR.value, "embeddings"), minilm_lib.EMBEDDINGS_PREFIX + kind,
            minilm_lib.model_id(weights, 256), texts, _refuse)
      scores = vectors["questions"][:len(dev)] @ vectors["paragraphs"].T
      rows = np.argsort(-scores, axis=1)[:, :max(ks)]
    retrieval_s[f"{name}_dev_s"] = time.perf_counter() - start
    results[name] = answer_questions(reader, featurize, tokenizer, bodies, dev, rows, ks, **eval_args)
    _log(f"{name}: " + ", ".join(f"EM@{k} {results[name]['per_k'][str(k)]['exact_match']:.1f}"
                                  for k in ks))

  print(f"\nSQuAD-open, {len(dev)} dev questions, {len(bodies)} paragraphs; reader: MiniLM span reader, "
        f"{_STEPS.value} steps x {_BATCH_SIZE.value} questions")
  print(f"{'retriever':<36} {'k':>3} {'EM':>6} {'F1':>6} {'answer in read':>15}")
  for name, result in results.items():
    for k, m in result["per_k"].items():
      print(f"{name:<36} {k:>3} {m['exact_match']:6.1f} {m['f1']:6.1f} "
            f"{m['answer_in_read_paragraphs']:15.1f}")
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  io_utils.write_json_atomic(_OUTPUT.value, {
      "benchmark": "squad_open_qa_bench",
      "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
      "machine": machine,
      "load_average_at_end": list(throughput_lib.load_average()),
      "settings": {"corpus": f"all {len(bodies)} paragraphs (train + dev)", "dev_questions": len(dev),
                   "retrievers": _RETRIEVERS.value, "read_k": _READ_K.value,
                   "reader": "realm_tf SpanReader, BERT from all-MiniLM-L6-v2, fresh span head",
                   "seq_len": _SEQ_LEN.value, "max_span_width": _MAX_SPAN_WIDTH.value,
                   "span_hidden_size": _SPAN_HIDDEN_SIZE, "steps": _STEPS.value,
                   "batch_size": _BATCH_SIZE.value, "training_paragraphs": "gold + BM25's best other",
                   "learning_rate": _LEARNING_RATE.value, "jit_compile": _JIT_COMPILE.value,
                   "seed": _SEED.value, "training_questions_distinct": int(len(used))},
      "timing": dict(train_timing, **retrieval_s, total_s=time.perf_counter() - started),
      "loss_curve": curve,
      "results": results,
  })
  print(f"wrote {_OUTPUT.value}")


def _refuse(texts):
  raise app.UsageError(f"bench/squad_open_qa_bench.py: the cached MiniLM embeddings of {len(texts)} texts "
                       "are missing; run `.venv/bin/python bench/squad_open_bench.py --corpora=all "
                       "--methods=minilm` first (~20 min), or leave minilm out of --retrievers")


if __name__ == "__main__":
  app.run(main)
