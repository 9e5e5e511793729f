r"""SQuAD-open recall of all-MiniLM-L6-v2 after ORQA fine-tuning of its question tower (issue 8).

Why: bench/squad_open_bench.py measures BM25 and MiniLM zero-shot on SQuAD-open; this adds the row ORQA
fine-tuning produces on the same questions, corpus and metrics, to show whether weak supervision from
answer strings alone lifts a dense retriever towards (or past) BM25 on a corpus that fits a CPU.

  .venv/bin/python bench/squad_open_orqa_bench.py                     # ~17 min on 2 busy cores
  .venv/bin/python bench/squad_open_orqa_bench.py --steps=20 --nozero_shot_eval   # a smoke run
  .venv/bin/python bench/squad_open_orqa_bench.py --init_retriever_checkpoint=<a REALM run> \
      --output=<its json>     # REALM + ORQA: the REALM run's towers instead of MiniLM's (issue 18)

ORQA fine-tuning, as in Lee et al. 2019: the document encoder and its index stay FIXED (here: the cached
MiniLM paragraph embeddings that squad_open_bench computes, 20,963 x 384, unit norm) and only the
question encoder trains, with ORQA's retriever loss: -log of the probability mass the softmax over
blocks puts on the blocks that contain an answer string. That is realm_tf.modeling.orqa_retriever's
OrqaRetriever, trained by realm_tf.training.loop.train. The corpus is small, so each training question is
scored exactly against ALL paragraphs (no top-k beam). The containing paragraphs are found with
realm_tf.answer_index (evaluation.has_answer(mode="normalized"), the test the recall metric uses);
training questions with none are skipped and counted.
  training data  the 87,599 SQuAD v1.1 train questions, shuffled (--seed); the dev questions never
                 train (the dev articles are held out of train, so dev paragraphs are unseen too).
                 NB: all-MiniLM-L6-v2's own training set already holds these 87,599 (question,
                 paragraph) pairs (its model card, "SQuAD2.0"), so the room for gains is small
  question tower all-MiniLM-L6-v2 (embedder.sentence_transformers_embedder: mean pooling, no projection,
                 L2-normalised), <= --max_question_len
                 wordpieces: the zero-shot embedder, so step 0 reproduces the zero-shot row
  scores         --scale x cosine, fixed at 50. all-MiniLM-L6-v2 was trained with scale 20 over
                 in-batch negatives; over 20,963 paragraphs that softmax is flat (positive mass ~0.3)
                 and the loss hardly separates the top ranks. 400-step pilots (lr 5e-5) gave answer
                 recall@1/5 60.3/83.0 at 20 and 61.3/83.5 at 50 (lr 2e-4 at 20: 58.8/82.2); they were
                 compared on dev, the only held-out set here. Not learned: a temperature would barely
                 move at BERT fine-tuning learning rates, and a fixed one keeps runs comparable
  optimizer      the project's BERT AdamW (training/optimization.py): warmup, linear decay to 0,
                 weight decay 0.01, global-norm clip 1.0; dropout on (training=True)
Evaluation: the 10,570 dev questions re-embedded by the tower, exact inner-product search over the fixed
paragraph embeddings, answer-string and gold-paragraph recall@1/5/20/100 (realm_tf.evaluation.rankings_recall),
at step 0 (zero-shot, must equal squad_open_bench's minilm row) and after the last step. Prints a table
with squad_open_bench's rows for reference and writes JSON (machine, hyperparameters, timings, skipped
questions, loss curve) to --output.
"""

import dataclasses
import hashlib
import os
import time
from typing import Callable, Dict, List, Sequence, Tuple

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tf_keras

from bench import loss_curve
from bench import minilm_lib
from bench import throughput_lib
from realm_tf import evaluation
from realm_tf.data import orqa_features
from realm_tf.modeling import orqa_retriever

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_STEPS = flags.DEFINE_integer("steps", 2000, "Training steps (2000 x 32: 73% of an epoch).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 32, "Training questions per step.")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
_WARMUP_STEPS = flags.DEFINE_integer(
    "warmup_steps", None, "Linear warmup steps; default: the original "
    "BERT rule, max(100, steps // 10).")
_SCALE = flags.DEFINE_float("scale", 50.0, "Fixed inverse temperature: logits = scale x cosine.")
_MAX_QUESTION_LEN = flags.DEFINE_integer("max_question_len", 64,
                                         "Question wordpieces, [CLS] and [SEP] included.")
_EVAL_BATCH_SIZE = flags.DEFINE_integer("eval_batch_size", 64, "Questions per forward pass when embedding.")
# XLA made the training step SLOWER on the 2-core CPU machine (83 vs 120 questions/s, median steps of
# 120-step runs back to back), and recompiles for every new padded length; embedding gains from it.
_JIT_COMPILE = flags.DEFINE_bool("jit_compile", False, "Compile the training step with XLA.")
_EMBED_JIT_COMPILE = flags.DEFINE_bool("embed_jit_compile", True,
                                       "Compile the question-embedding pass (evaluation) with XLA.")
_ZERO_SHOT_EVAL = flags.DEFINE_bool("zero_shot_eval", True,
                                    "Evaluate at step 0 too (re-embeds the dev questions, ~1 min).")
_LOG_EVERY = flags.DEFINE_integer("log_every", 50, "Steps between progress lines (and loss-curve points).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the question order and of dropout.")
_INIT_RETRIEVER = flags.DEFINE_string(
    "init_retriever_checkpoint", None,
    "Start from this retriever checkpoint (a REALM model_dir or checkpoint of a projection-free, "
    "mean-pooled MiniLM-sized retriever, e.g. bench/squad_open_realm_bench.py's run; its "
    "realm_config.json in the model_dir) instead of all-MiniLM-L6-v2: its query tower is the question "
    "tower that trains, its document tower embeds the fixed paragraph index (cached under "
    "--cache_dir/embeddings). The REALM + ORQA row of issue 18.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "squad_open_orqa_bench.json"),
                              "Where to write the JSON results.")

_KS = (1, 5, 20, 100)
# Padded question lengths are multiples of this: few distinct shapes, so the training step's tf.function
# traces (and XLA, if on, compiles) few programs; 99.8% of SQuAD questions fit in 32 wordpieces
# (the longest has 63).
_LENGTH_BUCKET = 32
_log = minilm_lib.log


def positive_mask(rows: Sequence[np.ndarray], num_docs: int) -> np.ndarray:
  """float32 [len(rows), num_docs]: 1 at each question's answer-bearing paragraphs."""
  mask = np.zeros([len(rows), num_docs], np.float32)
  for i, r in enumerate(rows):
    mask[i, r] = 1.0
  return mask


def training_dataset_fn(question_embedder, token_ids: Sequence[np.ndarray], positives: Sequence[np.ndarray],
                        num_docs: int, batch_size: int) -> Callable[[int], tf.data.Dataset]:
  """loop.train's dataset_fn: batch i holds questions [i * batch_size, (i + 1) * batch_size) of token_ids
  (padded as question_embedder pads them for evaluation) with their answer-bearing paragraphs as
  OrqaRetriever's retriever_correct; batches are made on the host ahead of the step (prefetch)."""
  num_batches = len(token_ids) // batch_size
  query_ids, query_mask, query_segment_ids = orqa_features.QUERY_FIELDS
  spec = tf.TensorSpec([None, None], tf.int32)
  signature = {
      query_ids: spec,
      query_mask: spec,
      query_segment_ids: spec,
      orqa_retriever.RETRIEVER_CORRECT: tf.TensorSpec([None, num_docs], tf.float32)
  }

  def dataset_fn(start: int) -> tf.data.Dataset:

    def batches():
      for step in range(start, num_batches):
        rows = slice(step * batch_size, (step + 1) * batch_size)
        ids, mask = question_embedder.pad(token_ids[rows])
        yield {
            query_ids: ids,
            query_mask: mask,
            query_segment_ids: np.zeros_like(ids),
            orqa_retriever.RETRIEVER_CORRECT: positive_mask(positives[rows], num_docs)
        }

    return tf.data.Dataset.from_generator(batches, output_signature=signature).prefetch(2)

  return dataset_fn


def _ranked(index, queries, squad) -> Tuple[Dict, List[int]]:
  """(recall dict, first hits) of the questions' exact top max(_KS) rows of index over squad's corpus."""
  rows, _ = index.search(queries, max(_KS))
  inputs = squad.recall_inputs()
  first_hits = evaluation.answer_first_hits(rows, inputs["texts"], inputs["answers"], mode=inputs["mode"])
  recall = evaluation.rankings_recall(rows, ks=_KS, first_hits=first_hits, **inputs)
  return recall, first_hits.tolist()


def _evaluate(question_embedder, index, dev_index, full, label: str) -> Tuple[Dict, np.ndarray, float]:
  """(evaluation record, dev question embeddings, seconds): embed, exact search, score.

  The record holds the recall over all paragraphs and, under "dev_paragraphs", over the 2,067 dev
  paragraphs alone (the same vectors; a retriever whose document tower saw only the dev paragraphs, as
  REALM's in bench/squad_open_realm_bench.py, could gain over all of them by ranking dev paragraphs above
  train ones; without the train paragraphs that cannot help). "answer_first_hits" (per question the rank
  of its first answer-bearing paragraph, 0 if none) let another run of the same questions be compared with
  this one question by question (evaluation.paired_recall_change).
  """
  start = time.perf_counter()
  queries = question_embedder.embed([q.question for q in full.questions], log=_log)
  recall, first_hits = _ranked(index, queries, full)
  dev_recall, dev_first_hits = _ranked(dev_index, queries, full.dev_corpus())
  seconds = time.perf_counter() - start
  _log(f"{label}: answer recall@1/5/20/100 " + "/".join(f"{recall[f'answer_recall@{k}']:.1f}" for k in _KS) +
       ", gold " + "/".join(f"{recall[f'gold_recall@{k}']:.1f}" for k in _KS) +
       "; dev paragraphs alone: answer " + "/".join(f"{dev_recall[f'answer_recall@{k}']:.1f}" for k in _KS) +
       f" ({seconds:.0f} s)")
  record = {
      "recall": recall,
      "answer_first_hits": first_hits,
      "dev_paragraphs": {
          "recall": dev_recall,
          "answer_first_hits": dev_first_hits
      }
  }
  return record, queries, seconds


def _training_questions(train, answer_index, needed: int,
                        seed: int) -> Tuple[List[int], List[np.ndarray], int, int]:
  """(question indices, their answer-bearing rows, questions examined, skipped) for `needed` usable
  questions in a seeded shuffled order; the order starts over (newly shuffled) after each epoch."""
  rng = np.random.default_rng(seed)
  chosen, positives, examined, skipped = [], [], 0, 0
  known = {}
  while len(chosen) < needed:
    for i in rng.permutation(len(train)).tolist():
      if i not in known:
        examined += 1
        known[i] = answer_index.rows(train[i].answers)
        skipped += not len(known[i])
      if len(known[i]):
        chosen.append(i)
        positives.append(known[i])
        if len(chosen) == needed:
          break
    if not any(len(r) for r in known.values()):
      raise RuntimeError("no training question has an answer-bearing paragraph; check the data")
  return chosen, positives, examined, skipped


def _retriever_start(path: str, tokenizer, paragraphs: Sequence[str]):
  """(question tower, fixed paragraph vectors [N, D] unit norm, their cache metadata, the resolved
  checkpoint) of a REALM-trained retriever: the ORQA recipe (fixed document index, trained question
  tower) started from REALM, as in the paper's REALM -> Open-QA fine-tuning."""
  # pylint: disable=g-import-not-at-top (TF-heavy)
  from realm_tf.checkpoints import sources
  from realm_tf.modeling import embedder
  from realm_tf.modeling import realm_config as realm_config_lib
  from realm_tf.retrieval import embedding_cache
  from realm_tf.retrieval import text_embedder
  from realm_tf.runs import warm_start
  # pylint: enable=g-import-not-at-top
  model_dir = path if os.path.isdir(path) else os.path.dirname(path)
  try:
    config = realm_config_lib.RealmConfig.load(model_dir)
  except (FileNotFoundError, ValueError) as e:
    raise app.UsageError(f"--init_retriever_checkpoint={path}: {e}") from e
  if config.projection_size or config.embedder_pooling != embedder.MEAN:
    raise app.UsageError(
        f"--init_retriever_checkpoint={path}: its retriever has projection_size "
        f"{config.projection_size} and {config.embedder_pooling} pooling; this bench compares cosine "
        "retrievers of MiniLM's space (train REALM with --projection_size=0 --embedder_pooling=mean)")
  if config.retriever_bert.vocab_size != tokenizer.vocab_size:
    raise app.UsageError(f"--init_retriever_checkpoint={path}: its BERT has vocab_size "
                         f"{config.retriever_bert.vocab_size}, MiniLM's vocab {tokenizer.vocab_size}")
  # Scale 1: unit-norm towers, as the MiniLM start; --scale sets the softmax temperature here. Built
  # with one tower or two as the checkpoint holds them.
  try:
    retriever = warm_start.load_retriever_checkpoint(dataclasses.replace(config, cosine_score_scale=1.0),
                                                     path,
                                                     flag="--init_retriever_checkpoint")
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  resolved = sources.resolve_checkpoint(path)
  with open(resolved + ".index", "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  # The paragraph bodies at MiniLM's cached length, as the MiniLM index, so only the weights differ.
  model_id = (f"retriever document tower of {os.path.realpath(resolved)} (.index sha256 {digest}), mean "
              f"pooling, L2-normalised, max_seq_length {minilm_lib.CACHED_SEQ_LENGTH}")
  documents = text_embedder.TextEmbedder(retriever.doc_embedder,
                                         tokenizer,
                                         max_seq_length=minilm_lib.CACHED_SEQ_LENGTH,
                                         batch_size=_EVAL_BATCH_SIZE.value,
                                         jit_compile=_EMBED_JIT_COMPILE.value)
  _log(f"embedding {len(paragraphs)} paragraphs with the document tower of {resolved} (cached)")
  vectors, info = embedding_cache.cached_embeddings(os.path.join(minilm_lib.CACHE_DIR.value, "embeddings"),
                                                    "squad_open.retriever_start.paragraphs", model_id,
                                                    paragraphs,
                                                    lambda texts: documents.embed(texts, log=_log))
  # The fixed index is these vectors: training the query tower (the document tower too, when shared)
  # cannot move them.
  return retriever.query_embedder, vectors, info, resolved


def _format(name: str, recall: Dict, steps: int) -> str:
  answer = " ".join(f"{recall[f'answer_recall@{k}']:5.1f}" for k in _KS)
  gold = " ".join(f"{recall[f'gold_recall@{k}']:5.1f}" for k in _KS)
  return f"{name:<48} {steps:>5}  {answer}   {gold}"


def _check_flags():
  problems = []
  for name, value, minimum in (("--steps", _STEPS.value, 1), ("--batch_size", _BATCH_SIZE.value, 1),
                               ("--max_question_len", _MAX_QUESTION_LEN.value,
                                3), ("--eval_batch_size", _EVAL_BATCH_SIZE.value, 1), ("--log_every",
                                                                                       _LOG_EVERY.value, 1)):
    if value < minimum:
      problems.append(f"{name} must be >= {minimum}, got {value}")
  if _LEARNING_RATE.value <= 0 or _SCALE.value <= 0:
    problems.append("--learning_rate and --scale must be positive")
  if _WARMUP_STEPS.value is not None and _WARMUP_STEPS.value < 0:
    problems.append(f"--warmup_steps must be >= 0, got {_WARMUP_STEPS.value}")
  if problems:
    raise app.UsageError("; ".join(problems))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  _check_flags()
  from realm_tf import answer_index as answer_index_lib  # pylint: disable=g-import-not-at-top
  from realm_tf import io_utils  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import index as index_lib  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import text_embedder  # pylint: disable=g-import-not-at-top
  from realm_tf.training import optimization  # pylint: disable=g-import-not-at-top

  me = "bench/squad_open_orqa_bench.py"
  machine = throughput_lib.machine()
  started = time.perf_counter()
  tf_keras.utils.set_random_seed(_SEED.value)
  full, train = minilm_lib.load_squad(me)
  _log(f"loaded {len(full.documents)} paragraphs, {len(full.questions)} dev and {len(train)} train "
       "questions")

  directory = minilm_lib.minilm_directory(minilm_lib.CACHE_DIR.value, minilm_lib.MINILM_DIR.value)
  weights_sha256 = minilm_lib.weights_sha256(directory)
  embedder, tokenizer = minilm_lib.load(directory)
  start_checkpoint = None
  if _INIT_RETRIEVER.value:
    embedder, paragraph_emb, paragraph_info, start_checkpoint = _retriever_start(
        _INIT_RETRIEVER.value, tokenizer, [d.body for d in full.documents])
  else:
    paragraph_emb, paragraph_info = minilm_lib.required_vectors(me, directory, "paragraphs",
                                                                [d.body for d in full.documents])
  _log(f"fixed index: {paragraph_emb.shape} from {paragraph_info['path']}")
  question_embedder = text_embedder.TextEmbedder(embedder,
                                                 tokenizer,
                                                 max_seq_length=_MAX_QUESTION_LEN.value,
                                                 batch_size=_EVAL_BATCH_SIZE.value,
                                                 length_bucket=_LENGTH_BUCKET,
                                                 jit_compile=_EMBED_JIT_COMPILE.value)
  index = index_lib.build_index(paragraph_emb, implementation="brute_force")
  dev_index = index_lib.build_index(paragraph_emb[full.num_train_paragraphs:], implementation="brute_force")

  evaluations = []
  zero_shot_check = None
  if _ZERO_SHOT_EVAL.value:
    record, queries, seconds = _evaluate(
        question_embedder, index, dev_index, full,
        "step 0 (the retriever's start)" if start_checkpoint else "step 0 (zero-shot)")
    evaluations.append(dict(step=0, seconds=seconds, **record))
    reference = (None if start_checkpoint else minilm_lib.cached_vectors(
        directory, "questions", [q.question for q in full.questions]))
    if reference is not None:
      # Those cached vectors used CACHED_SEQ_LENGTH wordpieces; only questions longer than
      # max_question_len differ.
      differs = np.abs(reference[0] - queries).max(axis=1) > 1e-4
      zero_shot_check = {
          "cached_questions": reference[1]["path"],
          "max_abs_difference": float(np.abs(reference[0] - queries).max()),
          "questions_differing_by_more_than_1e-4": int(differs.sum())
      }
      _log(f"step-0 question vectors vs squad_open_bench's cache: {zero_shot_check}")

  start = time.perf_counter()
  answer_index = answer_index_lib.AnswerIndex([d.body for d in full.documents])
  needed = _STEPS.value * _BATCH_SIZE.value
  chosen, positives, examined, skipped = _training_questions(train, answer_index, needed, _SEED.value)
  # The evaluation embedder's own tokenization, so training sees questions as evaluation embeds them.
  token_ids = question_embedder.token_ids([train[i].question for i in chosen])
  mining_s = time.perf_counter() - start
  num_positives = np.array([len(r) for r in positives])
  _log(f"{len(chosen)} training questions in {mining_s:.0f} s: {examined} examined, {skipped} skipped "
       f"(no paragraph contains an answer); answer-bearing paragraphs per question: median "
       f"{np.median(num_positives):.0f}, mean {num_positives.mean():.1f}")

  # The query tower is the evaluation embedder itself: training moves the weights evaluation embeds with.
  model = orqa_retriever.OrqaRetriever(embedder, paragraph_emb, scale=_SCALE.value)
  optimizer = optimization.create_optimizer(_LEARNING_RATE.value,
                                            _STEPS.value,
                                            num_warmup_steps=_WARMUP_STEPS.value)
  warmup_steps = (optimization.num_warmup_steps(_STEPS.value)
                  if _WARMUP_STEPS.value is None else _WARMUP_STEPS.value)
  batch = _BATCH_SIZE.value
  dataset_fn = training_dataset_fn(question_embedder, token_ids, positives, len(full.documents), batch)
  model(next(iter(dataset_fn(0))))
  curve = loss_curve.train(
      model,
      optimizer,
      dataset_fn,
      _STEPS.value,
      _LOG_EVERY.value,
      _JIT_COMPILE.value,
      _log,
      point_extras=lambda step: {"learning_rate": optimization.learning_rate_at(optimizer, step)})
  step_seconds, train_s = curve.step_seconds, curve.seconds
  # The median leaves out the steps that (re)compile for a new padded length, and most of the load
  # spikes of a shared machine.
  steady_s = float(np.median(step_seconds))
  _log(f"trained {_STEPS.value} steps in {train_s:.0f} s ({len(chosen) / train_s:.1f} questions/s "
       f"overall; median step {steady_s:.3f} s, {batch / steady_s:.1f} questions/s; slowest step "
       f"{max(step_seconds):.1f} s)")

  record, _, eval_s = _evaluate(question_embedder, index, dev_index, full,
                                f"step {_STEPS.value} (ORQA fine-tuned)")
  evaluations.append(dict(step=_STEPS.value, seconds=eval_s, **record))

  print(f"\nSQuAD-open, {len(full.questions)} dev questions, all {len(full.documents)} paragraphs")
  print(f"{'':48} {'':5}  {'answer string in top-k':^23}   {'gold paragraph in top-k':^23}")
  print(f"{'method':<48} {'steps':>5}  " + " ".join(f"{'@' + str(k):>5}" for k in _KS) + "   " +
        " ".join(f"{'@' + str(k):>5}" for k in _KS))
  for row in minilm_lib.reference_rows("all"):
    print(_format(row["method_description"] + " (squad_open_bench)", row["recall"], 0))
  start_name = "REALM retriever" if start_checkpoint else "all-MiniLM-L6-v2"
  names = [
      f"{start_name} zero-shot (this script)" if e["step"] == 0 else f"{start_name} + ORQA question tower"
      for e in evaluations
  ]
  for name, e in zip(names, evaluations):
    print(_format(name, e["recall"], e["step"]))
  print(f"\nthe same question towers and vectors, the {len(full.documents) - full.num_train_paragraphs} dev "
        "paragraphs alone")
  for name, e in zip(names, evaluations):
    print(_format(name, e["dev_paragraphs"]["recall"], e["step"]))

  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  io_utils.write_json_atomic(
      _OUTPUT.value, {
          "benchmark":
              "squad_open_orqa_bench",
          "created":
              time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "machine":
              machine,
          "load_average_at_end":
              list(throughput_lib.load_average()),
          "settings": {
              "squad_dir": minilm_lib.SQUAD_DIR.value,
              "corpus": f"all {len(full.documents)} paragraphs (train + dev)",
              "dev_questions": len(full.questions),
              "train_questions": len(train),
              "ks": list(_KS),
              "answer_match": "lower-cased, whitespace-normalised substring of the paragraph body "
                              "(evaluation.has_answer mode=normalized), for training positives and recall",
              "model": "all-MiniLM-L6-v2",
              "weights_sha256": weights_sha256,
              "init_retriever_checkpoint": start_checkpoint,
              "paragraph_index": {
                  "path": paragraph_info["path"],
                  "model_id": paragraph_info["model_id"],
                  "fixed": True
              },
              "question_tower": "MiniLM BertEncoderV2, mean pooling over real tokens, L2-normalised",
              "loss": "ORQA retriever loss (losses.retriever_loss) over all paragraphs, mean per question",
              "steps": _STEPS.value,
              "batch_size": batch,
              "learning_rate": _LEARNING_RATE.value,
              "warmup_steps": warmup_steps,
              "schedule": "linear warmup, linear decay to 0 (BERT AdamW, weight "
                          "decay 0.01, global-norm clip 1.0)",
              "scale": _SCALE.value,
              "scale_learned": False,
              "max_question_len": _MAX_QUESTION_LEN.value,
              "length_bucket": _LENGTH_BUCKET,
              "dropout": "on while training",
              "jit_compile": _JIT_COMPILE.value,
              "embed_jit_compile": _EMBED_JIT_COMPILE.value,
              "seed": _SEED.value
          },
          "training_questions": {
              "used": len(chosen),
              "distinct": len(set(chosen)),
              "examined": examined,
              "skipped_no_answer_paragraph": skipped,
              "answer_paragraphs_per_question": {
                  "median": float(np.median(num_positives)),
                  "mean": float(num_positives.mean()),
                  "max": int(num_positives.max())
              }
          },
          "timing": {
              "mining_s": mining_s,
              "train_s": train_s,
              "first_step_s": step_seconds[0],
              "median_step_s": steady_s,
              "questions_per_s": batch / steady_s,
              "questions_per_s_overall": len(chosen) / train_s,
              "eval_s": [e["seconds"] for e in evaluations],
              "total_s": time.perf_counter() - started
          },
          "zero_shot_check":
              zero_shot_check,
          "evaluations":
              evaluations,
          "loss_curve":
              curve.points,
          "reference_rows": [{
              "method": r["method"],
              "recall": r["recall"]
          } for r in minilm_lib.reference_rows("all")],
      })
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
