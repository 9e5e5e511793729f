r"""REALM's learning check on testdata: does pre-training raise the retriever's recall?

Issue 5: on testdata, where each question's answer lies in one known document, REALM pre-training must
raise the retriever's recall@5 above its starting point (ICT warm start, or an untrained retriever). This
runs the real processes (realm_tf.pipeline: bin/train_ict, then bin/train_realm beside
bin/refresh_doc_embeds) and measures the retriever's gold-document recall@1/5/20 on the 200 dev + test
questions before pre-training and at every REALM checkpoint, with exact search over the 300 documents
re-embedded by each checkpoint's document tower. Questions are never trained on: REALM only sees the
pre-training sentences with salient spans masked.

  .venv/bin/python bench/realm_learning_bench.py                 # ICT warm start, then REALM
  .venv/bin/python bench/realm_learning_bench.py --ict_steps=0   # from an untrained retriever

The defaults are what made the tiny from-scratch reader read and the retriever learn on this data
(docs/benchmarks.md): REALM pre-trains on the news items (--realm_pretraining=news), every masked span
is relabeled (--span_substitution_rate=1), the reader first reads only candidates that hold the span
(--reader_warmup_steps=4500 of 5500; 2500 of 3500 was too short in one of two runs), batch 32, 3 retrieved candidates plus the null document, peak
learning rate 1e-3, candidate scores scaled by 1/sqrt(64). --realm_pretraining=all
--span_substitution_rate=0 --reader_warmup_steps=0 --realm_steps=600 --learning_rate=1e-4 --batch_size=8
--num_candidates=8 --retrieval_score_scale=1 is the earlier configuration, which lowered recall.

Prints a table and writes JSON with the machine description to --output.
"""

import json
import os
import shutil
import tempfile
import time

from absl import app
from absl import flags
import tensorflow as tf

from realm_tf import io_utils
from realm_tf import pipeline
from realm_tf.data import synthetic

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results",
                                                     "realm_learning_bench.json"), "JSON results.")
_WORK_DIR = flags.DEFINE_string("work_dir", None, "Where runs are written (default: a temp dir, removed).")
_ICT_STEPS = flags.DEFINE_integer("ict_steps", 400, "ICT warm-start steps (0: untrained retriever).")
_INIT = flags.DEFINE_string("init_retriever_checkpoint", None,
                            "Start REALM from this retriever (e.g. an earlier run's ict/) instead of "
                            "training ICT here.")
_REALM_STEPS = flags.DEFINE_integer("realm_steps", 5500, "REALM pre-training steps.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every_steps", 100, "Checkpoint (and recall) interval.")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 1e-3,
                                    "REALM peak learning rate.")
_POOLING = flags.DEFINE_enum("embedder_pooling", pipeline.PipelineOptions.embedder_pooling,
                             ["pooler", "mean"], "Retriever pooling of ICT and REALM.")
_FREEZE = flags.DEFINE_integer("freeze_retriever_steps", pipeline.PipelineOptions.freeze_retriever_steps,
                               "REALM steps that train only the reader.")
_SUBSTITUTION = flags.DEFINE_float("span_substitution_rate", 1.0,
                                   "Share of REALM examples with their masked span relabeled at random.")
_WARMUP = flags.DEFINE_integer("reader_warmup_steps", 4500,
                               "REALM steps whose reader reads only the candidates holding the span.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 32, "REALM batch size.")
_NUM_CANDIDATES = flags.DEFINE_integer("num_candidates", 4,
                                       "REALM candidates per example, the null document included.")
_PRETRAINING = flags.DEFINE_enum(
    "realm_pretraining", "news", ["all", "news"],
    "What REALM pre-trains on: all of testdata/pretraining.jsonl (articles and news items), or the news "
    "items alone (the articles' own sentences find nothing in the other articles once their own is "
    "excluded; REALM likewise pre-trained on CC-News and retrieved from Wikipedia). ICT always uses all.")
_SCORE_SCALE = flags.DEFINE_float("retrieval_score_scale", 0.125,
                                  "Scale of q.d in REALM's candidate softmax.")

_KS = ("gold_recall@1", "gold_recall@5", "gold_recall@20")


def _write_news_items(testdata_dir: str, path: str) -> str:
  """The "Gazette" records of testdata/pretraining.jsonl (the news items), as their own JSONL file."""
  source = os.path.join(testdata_dir, "pretraining.jsonl")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(source, encoding="utf-8") as f, open(path, "w", encoding="utf-8") as out:
    kept = 0
    for line in f:
      if json.loads(line)["title"] == synthetic.NEWS_TITLE:
        out.write(line)
        kept += 1
  if not kept:
    raise ValueError(f"{source} has no {synthetic.NEWS_TITLE!r} records; regenerate testdata with "
                     "bin/generate_testdata.py")
  return path


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  work_dir = _WORK_DIR.value or tempfile.mkdtemp(prefix="realm_learning_")
  testdata_dir = pipeline.PipelineOptions.testdata_dir
  news = (_write_news_items(testdata_dir, os.path.join(work_dir, "news.jsonl"))
          if _PRETRAINING.value == "news" else None)
  options = pipeline.PipelineOptions(
      output_dir=work_dir, ict_steps=_ICT_STEPS.value, realm_steps=_REALM_STEPS.value,
      save_checkpoints_steps=_EVAL_EVERY.value, realm_learning_rate=_LEARNING_RATE.value,
      embedder_pooling=_POOLING.value, retrieval_score_scale=_SCORE_SCALE.value,
      freeze_retriever_steps=_FREEZE.value, span_substitution_rate=_SUBSTITUTION.value,
      reader_warmup_steps=_WARMUP.value, realm_pretraining_path=news, batch_size=_BATCH_SIZE.value,
      num_candidates=_NUM_CANDIDATES.value)
  from bench import throughput_lib  # pylint: disable=g-import-not-at-top (describes the machine)
  machine = throughput_lib.machine()
  qa_paths = [os.path.join(options.testdata_dir, f"qa.{split}.jsonl") for split in ("dev", "test")]
  started = time.time()
  try:
    paths = pipeline.prepare_corpora(options, echo=lambda _: None)
    init, ict_seconds = None, 0.0
    if _INIT.value:
      init = _INIT.value
    elif options.ict_steps > 0:
      ict_started = time.time()
      init = pipeline.run_ict(options, paths, echo=lambda _: None)
      ict_seconds = time.time() - ict_started
    realm_started = time.time()
    # keep_checkpoint_max is the trainer's default (5): every checkpoint of a 600-step run at 100 is
    # not kept, so the recall of the early ones is measured from what is left, newest last.
    summary = pipeline.run_realm(options, paths, init, echo=print)
    realm_seconds = time.time() - realm_started
    model_dir = summary["model_dir"]
    rows = [{"step": 0, "label": "ICT start" if init else "untrained start",
             **pipeline.retriever_recall(model_dir, init, paths["retrieval"], qa_paths)}]
    for checkpoint in tf.train.get_checkpoint_state(model_dir).all_model_checkpoint_paths:
      step = int(checkpoint.rsplit("-", 1)[-1])
      rows.append({"step": step, "label": "REALM",
                   **pipeline.retriever_recall(model_dir, checkpoint, paths["retrieval"], qa_paths)})
  finally:
    if _WORK_DIR.value is None:
      shutil.rmtree(work_dir, ignore_errors=True)
  print(f"\n{'retriever':16s} {'step':>5s} " + " ".join(f"{k.split('_', 1)[1]:>10s}" for k in _KS))
  for row in rows:
    print(f"{row['label']:16s} {row['step']:5d} " + " ".join(f"{row[k]:10.1f}" for k in _KS))
  start, end = rows[0]["gold_recall@5"], rows[-1]["gold_recall@5"]
  verdict = "raised" if end > start else "did not raise"
  print(f"REALM pre-training {verdict} recall@5: {start:.1f} -> {end:.1f} "
        f"({int(rows[0]['num_questions'])} questions, {options.realm_steps} steps, "
        f"{realm_seconds:.0f} s; ICT {options.ict_steps} steps, {ict_seconds:.0f} s)")
  result = {"machine": machine, "options": {k: v for k, v in vars(options).items()
                                            if k not in ("output_dir", "testdata_dir")},
            "rows": rows, "realm_final_metrics": summary["final"],
            "realm_first_loss": summary["first_loss"], "indexes_used": summary["indexes_used"],
            "ict_seconds": ict_seconds, "realm_seconds": realm_seconds,
            "total_seconds": time.time() - started}
  io_utils.write_json_atomic(_OUTPUT.value, result)
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
