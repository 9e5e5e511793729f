r"""FiD-KD on real text: SQuAD-open with all-MiniLM-L6-v2 as the retriever and as the reader's encoder.

Issue 19, the SQuAD half: from zero-shot all-MiniLM-L6-v2, does distilling a Fusion-in-Decoder reader's
cross-attention raise the retriever's recall of the SQuAD dev questions over the 2,067 dev paragraphs,
round after round? What runs, each step resumable from what it left under --work_dir:
  1. the data: SQuAD v1.1 train paragraphs drawn with --seed (--train_paragraphs of them) and their
     questions are the training set; they join the 2,067 dev paragraphs in the retrieval corpus Z (a
     training question's answer must be findable: the dev paragraphs hold none of the train articles).
     Acceptance (bin/train_fid_kd --keep_better_retriever) uses --selection_questions dev questions drawn
     with --seed, searched over Z;
  2. bin/train_fid_kd as a user runs it: MiniLM as the initial retriever (--retriever_checkpoint of the
     Hugging Face directory, no projection, mean pooling, scores 20 x cosine: its zero-shot space) and as
     the reader's encoder (--reader_init_checkpoint: a BERT encoder with a small decoder cross-attending
     over all passages is a Fusion-in-Decoder too); round 0 reads MiniLM's own top n passages;
  3. every round's retriever (the one the round ended with: distilled if accepted, else the previous)
     evaluated like the anchors: the 10,570 dev questions, exact search over the 2,067 dev paragraphs
     (title + paragraph as the retriever embeds documents), answer and gold recall@1/5/20/100, beside
     bench/squad_open_bench.py's BM25 / MiniLM zero-shot / hybrid rows; a table, JSON and a PNG.

  .venv/bin/python bench/squad_open_fid_kd_bench.py                     # the defaults (hours a round)
  .venv/bin/python bench/squad_open_fid_kd_bench.py --iterations=3      # continue the same run a round
  .venv/bin/python bench/squad_open_fid_kd_bench.py --train_paragraphs=20 --eval_questions=200 \
      --work_dir=/tmp/fid_smoke --train_fid_kd_flags=--reader_steps=4,--retriever_steps=4,\
--reader_single_passage_steps=0 --output=/tmp/fid_smoke.json --plot=      # a smoke run (minutes)

Learning check (printed): after 2 or more rounds, the answer recall@5 of the last round's retriever is
above the start's. The training questions are SQuAD train questions only; no dev
question trains anything (the selection questions choose between retrievers, as a dev set does).
"""

import json
import os
import sys
import time
from typing import Dict, List

from absl import app
from absl import flags

from bench import minilm_lib
from bench import squad_open_fid_kd_data
from realm_tf import demo_pipeline
from realm_tf import io_utils

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WORK_DIR = flags.DEFINE_string("work_dir", os.path.join(_REPO, ".bench_cache", "squad_open_fid_kd"),
                                "Where the run is written and resumed from.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results",
                                                     "squad_open_fid_kd_bench.json"), "JSON results.")
_PLOT = flags.DEFINE_string("plot", os.path.join(_REPO, "docs", "squad_open_fid_kd_recall.png"),
                            "PNG of recall@1/5/20 per round ('' for none).")
_ITERATIONS = flags.DEFINE_integer("iterations", 2, "FiD-KD rounds.")
_TRAIN_PARAGRAPHS = flags.DEFINE_integer(
    "train_paragraphs", 400, "SQuAD train paragraphs drawn (about 4.4 questions each): their questions "
    "train, the paragraphs join Z.")
_SELECTION_QUESTIONS = flags.DEFINE_integer("selection_questions", 1000,
                                            "Dev questions that decide a round's acceptance.")
_EVAL_QUESTIONS = flags.DEFINE_integer("eval_questions", 0, "Dev questions evaluated (0: all 10,570).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the drawn paragraphs and selection questions.")
# bin/train_fid_kd's flags for a MiniLM-sized reader and retriever; --train_fid_kd_flags overrides any.
# Sized by the CPU: on the 2-core machine (beside a REALM run) a reader step on 10 passages of 192
# wordpieces at batch 8 took ~40 s and a retriever step (8 questions, their 10 passages re-embedded
# with gradients) ~36 s, so the paper's sizes would take days a round; 5 passages of 160 wordpieces
# (most SQuAD paragraphs fit) cut a step to about a third.
_FID_KD_DEFAULTS = {
    "projection_size": 0,
    "embedder_pooling": "mean",
    "cosine_score_scale": 20.0,
    "initial_passages": "dense",
    "num_passages": 5,
    "query_seq_len": 48,
    "candidate_seq_len": 160,
    "passage_seq_len": 160,
    "answer_seq_len": 16,
    # The encoder reads from the first step; the decoder (2 layers at MiniLM's width) emits through
    # MiniLM's word embeddings and copies through its last cross-attention. Measured on this data
    # (docs/experiments/benchmarks_notebook.md): a 128-wide decoder with its own embeddings, or shared
    # embeddings without the copy path, stayed at 6-8.5 nats a token; with the copy path the loss was
    # ~3 by step 110. Answer substitution (testdata's device for a reader from scratch) changed nothing
    # here, so it is off.
    "reader_hidden_size": 384,
    "reader_num_heads": 6,
    "reader_decoder_layers": 2,
    "reader_intermediate_size": 1024,
    "reader_share_embeddings": True,
    "reader_copy_attention": True,
    "reader_answer_substitution_rate": 0,
    "reader_single_passage_steps": 300,
    "reader_steps": 100,
    "reader_batch_size": 8,
    "reader_learning_rate": 2e-4,
    # BERT fine-tuning rates for the pre-trained towers (1e-3, testdata's, is for its tiny retriever).
    "retriever_steps": 100,
    "retriever_batch_size": 8,
    "retriever_learning_rate": 2e-5,
    "selection_metric": "answer_recall@5",
    "recall_ks": "1,5,20",
    "embed_batch_size": 64,
}
_EXTRA = flags.DEFINE_list("train_fid_kd_flags", [],
                           "More bin/train_fid_kd flags, e.g. --num_passages=20 (override the bench's).")

_KS = (1, 5, 20, 100)


def _log(message: str) -> None:
  minilm_lib.log(message)


def _recall(retriever_dir: str, model_dir: str, dev_prefix: str, squad) -> Dict[str, float]:
  """Recall of the retriever in retriever_dir on the dev questions over the dev paragraphs."""
  # pylint: disable=g-import-not-at-top (TF-heavy)
  from realm_tf import evaluation
  from realm_tf import retriever_eval
  from realm_tf.data import corpus_table
  from realm_tf.modeling import realm_config as realm_config_lib
  from realm_tf.retrieval import corpus_embedding
  from realm_tf.runs import warm_start
  # pylint: enable=g-import-not-at-top
  config = realm_config_lib.RealmConfig.load(model_dir)
  # Built with one tower or two as the round saved it, as bin/train_fid_kd loads its retrievers.
  retriever = warm_start.load_retriever_checkpoint(config, retriever_dir)
  table = corpus_table.CorpusTable.load(dev_prefix)
  if table.doc_ids[:] != [d.doc_id for d in squad.documents]:
    raise RuntimeError(f"{dev_prefix}: its rows are not the SQuAD-open dev paragraphs in order; delete it "
                       "and rerun")
  documents = corpus_embedding.embed_corpus(lambda inputs: retriever.embed_documents(inputs, training=False),
                                            dev_prefix,
                                            config.featurizer(),
                                            log=lambda _: None)
  rows, _ = retriever_eval.dense_top_k(retriever, config, documents, [q.question for q in squad.questions],
                                       max(_KS))
  return evaluation.rankings_recall(rows, ks=_KS, **squad.recall_inputs())


def _evaluate(model_dir: str, work_dir: str, dev_prefix: str, squad) -> List[Dict]:
  rows = []
  for entry in squad_open_fid_kd_data.round_retrievers(model_dir):
    cache = os.path.join(work_dir, "eval", f"round_{entry['round']}_{len(squad.questions)}.json")
    if os.path.exists(cache):
      with open(cache, encoding="utf-8") as f:
        recall = json.load(f)["recall"]
    else:
      started = time.time()
      recall = _recall(entry["retriever"], model_dir, dev_prefix, squad)
      os.makedirs(os.path.dirname(cache), exist_ok=True)
      io_utils.write_json_atomic(cache, {
          "recall": recall,
          "retriever": entry["retriever"],
          "eval_seconds": time.time() - started
      })
      _log(f"round {entry['round']}: " + ", ".join(f"{k} {v:.1f}" for k, v in recall.items() if "@" in k))
    metrics = entry["metrics"] or {}
    rows.append({
        "round": entry["round"],
        "retriever": os.path.relpath(entry["retriever"], model_dir),
        "recall": recall,
        "accepted": metrics.get("accepted"),
        "reader_exact_match": metrics.get("reader_exact_match"),
        "reader_gold_top1": metrics.get("reader_gold_top1"),
        "selection_recall_before": metrics.get("recall_before"),
        "selection_recall_after": metrics.get("recall_after"),
        "seconds": metrics.get("seconds")
    })
  return rows


def _plot(rows: List[Dict], references: List[Dict], path: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  figure, axis = pyplot.subplots(figsize=(6.4, 4.0))
  x = list(range(len(rows)))
  for k, style in ((1, "v-"), (5, "o-"), (20, "^-")):
    axis.plot(x, [r["recall"][f"answer_recall@{k}"] for r in rows], style, label=f"FiD-KD, recall@{k}")
  for reference, color in zip(references, ("tab:red", "tab:gray", "tab:green")):
    axis.axhline(reference["recall"]["answer_recall@5"],
                 color=color,
                 linestyle=":",
                 label=f"{reference['method_description']} @5")
  axis.set_xticks(x, ["start"] + [f"round {r['round']}" for r in rows[1:]])
  axis.set_ylabel("answer recall of the 10,570 dev questions (%)")
  axis.legend(fontsize=7)
  axis.grid(alpha=0.3)
  figure.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  figure.savefig(path, dpi=100)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if _TRAIN_PARAGRAPHS.value < 1 or _SELECTION_QUESTIONS.value < 1 or _ITERATIONS.value < 1:
    raise app.UsageError("--train_paragraphs, --selection_questions and --iterations must be >= 1")
  work_dir = _WORK_DIR.value
  os.makedirs(work_dir, exist_ok=True)
  started = time.time()
  minilm = minilm_lib.minilm_directory(minilm_lib.CACHE_DIR.value, minilm_lib.MINILM_DIR.value)
  full, train = minilm_lib.load_squad("squad_open_fid_kd_bench")
  paths = squad_open_fid_kd_data.prepare(work_dir, full, train, os.path.join(minilm, "vocab.txt"),
                                         _TRAIN_PARAGRAPHS.value, _SELECTION_QUESTIONS.value, _SEED.value,
                                         _log)
  dev = full.dev_corpus()
  squad = type(dev)(dev.documents, dev.questions[:_EVAL_QUESTIONS.value or None], 0)
  model_dir = os.path.join(work_dir, "fid_kd")
  command = dict(_FID_KD_DEFAULTS,
                 model_dir=model_dir,
                 vocab_path=os.path.join(minilm, "vocab.txt"),
                 bert_config=os.path.join(minilm, "config.json"),
                 retriever_checkpoint=minilm,
                 reader_init_checkpoint=minilm,
                 retrieval_corpus_path=paths["retrieval"],
                 train_path=paths["train.jsonl"],
                 dev_path=paths["selection.jsonl"],
                 iterations=_ITERATIONS.value,
                 seed=_SEED.value)
  for flag in _EXTRA.value:
    name, equals, value = flag.lstrip("-").partition("=")
    command[name] = value if equals else True  # a bare --flag is absl's --flag=true
  _log(f"bin/train_fid_kd for {_ITERATIONS.value} rounds (resumes; log {work_dir}/logs/train_fid_kd.log)")
  demo_pipeline.run_binary("train_fid_kd", os.path.join(work_dir, "logs", "train_fid_kd.log"),
                           lambda line: "fid_kd.py" in line and ("iteration " in line or "step " in line),
                           _log, **command)
  rows = _evaluate(model_dir, work_dir, paths["dev_retrieval"], squad)
  references = minilm_lib.reference_rows("dev")
  header = " ".join(f"{'@' + str(k):>5}" for k in _KS)
  print(f"\n{'':48s} {'answer in top-k':^23}   {'gold paragraph in top-k':^23}")
  print(f"{'':48s} {header}   {header}")
  for reference in references:
    print(
        minilm_lib.recall_row(reference["method_description"] + " (squad_open_bench)", reference["recall"],
                              _KS, 48))
  for row in rows:
    label = ("start (MiniLM as the retriever)" if row["round"] == "start" else
             f"round {row['round']} ({'accepted' if row['accepted'] else 'REJECTED, kept the previous'})")
    reader = ("" if row["reader_exact_match"] is None else f"   reader EM {row['reader_exact_match']:.1f}")
    print(minilm_lib.recall_row(label, row["recall"], _KS, 48) + reader)
  ends = [r["recall"]["answer_recall@5"] for r in rows]
  passed = len(ends) > 2 and ends[-1] > ends[0]
  print(f"learning check: answer recall@5 {' -> '.join(f'{e:.1f}' for e in ends)}: "
        f"{'passed' if passed else 'not passed'} (asks 2+ rounds, the last above the start)")
  if _PLOT.value and rows:
    _plot(rows, references, _PLOT.value)
  from bench import throughput_lib  # pylint: disable=g-import-not-at-top (describes the machine)
  io_utils.write_json_atomic(
      _OUTPUT.value, {
          "benchmark": "squad_open_fid_kd",
          "created": time.strftime("%Y-%m-%d"),
          "command": " ".join(["bench/squad_open_fid_kd_bench.py"] + sys.argv[1:]),
          "train_fid_kd_flags": {
              k: v for k, v in command.items()
          },
          "train_paragraphs": _TRAIN_PARAGRAPHS.value,
          "selection_questions": _SELECTION_QUESTIONS.value,
          "num_eval_questions": len(squad.questions),
          "num_dev_paragraphs": len(squad.documents),
          "reference_rows": [{
              "method": r["method"],
              "recall": r["recall"]
          } for r in references],
          "rounds": rows,
          "learning_check": {
              "answer_recall@5": ends,
              "passed": passed
          },
          "seconds_this_invocation": time.time() - started,
          "machine": throughput_lib.machine()
      })
  print(f"wrote {_OUTPUT.value}" + (f" and {_PLOT.value}" if _PLOT.value and rows else ""))


if __name__ == "__main__":
  app.run(main)
