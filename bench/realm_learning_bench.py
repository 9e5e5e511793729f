r"""REALM's learning check on testdata: does pre-training raise the retriever's recall, seed after seed?

Runs the demo's configuration (realm_tf/demo_pipeline.PipelineOptions defaults: a tiny BERT pre-trained by
bin/train_mlm on testdata/bert_pretraining.jsonl as the reader's warm start, ICT warm start of the
retriever, then REALM on the news items with the original objective, trainer and refresher as separate processes) once per
seed, each seed drawing its own BERT pre-training, ICT and REALM streams. For each it measures the
retriever's gold-document recall@1/5/20 on the 200 dev + test questions at the ICT start and at every
REALM checkpoint (exact search over the 300 documents, re-embedded by each checkpoint's document tower).
Questions are never trained on: REALM sees only pre-training sentences with a salient span masked.
At the last checkpoint it also measures the questions' recall with one tower put back to the ICT start's
(ICT query tower with REALM's document tower, and the reverse), since the two towers can move it apart.

  .venv/bin/python bench/realm_learning_bench.py                        # seeds 0, 1, 2
  .venv/bin/python bench/realm_learning_bench.py --seeds=3 --realm_steps=600 --output=/tmp/r.json

Resumable: each seed's run lives under --work_dir/seed_<s>/ and its measured rows in result.json there; a
seed with a result.json is not run again (delete it to rerun). Options of PipelineOptions can be set with
--set=name=value (repeatable), e.g. --set=realm_learning_rate=1e-5.
Prints tables and writes JSON (machine, options, per-seed rows and towers, smallest gain) to --output.
"""

import dataclasses
import json
import os
import time

from absl import app
from absl import flags
import tensorflow as tf

from realm_tf import demo_pipeline
from realm_tf import io_utils

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "realm_learning_bench.json"),
                              "JSON results.")
_WORK_DIR = flags.DEFINE_string("work_dir", os.path.join(_REPO, ".bench_cache", "realm_learning"),
                                "Where each seed's run and result.json are kept (resumable).")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds; each runs BERT pre-training, ICT and REALM.")
_REALM_STEPS = flags.DEFINE_integer("realm_steps", demo_pipeline.PipelineOptions.realm_steps,
                                    "REALM pre-training steps.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every_steps", demo_pipeline.PipelineOptions.save_checkpoints_steps,
                                   "Checkpoint (and recall) interval.")
_SET = flags.DEFINE_multi_string("set", [], "name=value overrides of realm_tf/demo_pipeline.PipelineOptions.")

_KS = ("gold_recall@1", "gold_recall@5", "gold_recall@20")


def _options(seed: int, output_dir: str) -> demo_pipeline.PipelineOptions:
  fields = {f.name: f for f in dataclasses.fields(demo_pipeline.PipelineOptions)}
  values = dict(
      output_dir=output_dir,
      seed=seed,
      realm_steps=_REALM_STEPS.value,
      save_checkpoints_steps=_EVAL_EVERY.value,
      orqa_steps=0,
      keep_checkpoint_max=1000,
      # Every checkpoint is measured, so keep them all; an index swap at each.
      index_swap_steps=_EVAL_EVERY.value)
  for item in _SET.value:
    name, _, value = item.partition("=")
    if name not in fields:
      raise app.UsageError(f"--set={item}: PipelineOptions has no field {name!r}; fields: {sorted(fields)}")
    default = getattr(demo_pipeline.PipelineOptions, name, None)
    values[name] = value if default is None or isinstance(default, str) else type(default)(value)
  return demo_pipeline.PipelineOptions(**values)


def _run_seed(seed: int) -> dict:
  """One seed's rows (start, then each REALM checkpoint); cached in its result.json."""
  seed_dir = os.path.join(_WORK_DIR.value, f"seed_{seed}")
  result_path = os.path.join(seed_dir, "result.json")
  if os.path.exists(result_path):
    with open(result_path) as f:
      print(f"seed {seed}: measured before, read from {result_path}")
      return json.load(f)
  options = _options(seed, seed_dir)
  echo = lambda line: print(f"  [seed {seed}] {line}", flush=True)
  qa_paths = demo_pipeline.question_paths(options.testdata_dir)
  started = time.time()
  paths = demo_pipeline.prepare_corpora(options, echo)
  reader = demo_pipeline.run_mlm(options, paths, echo) if options.mlm_steps > 0 else None
  mlm_seconds = time.time() - started
  init = (demo_pipeline.run_ict(options, paths, reader if options.ict_from_bert else None, echo)
          if options.ict_steps > 0 else None)
  ict_seconds = time.time() - started - mlm_seconds
  realm_started = time.time()
  summary = demo_pipeline.run_realm(options, paths, init, reader, echo)
  realm_seconds = time.time() - realm_started
  model_dir = summary["model_dir"]
  rows = [{
      "step": 0,
      "label": "ICT start" if init else "untrained start",
      **demo_pipeline.retriever_recall(model_dir, init, paths["retrieval"], qa_paths)
  }]
  for checkpoint in tf.train.get_checkpoint_state(model_dir).all_model_checkpoint_paths:
    rows.append({
        "step": int(checkpoint.rsplit("-", 1)[-1]),
        "label": "REALM",
        **demo_pipeline.retriever_recall(model_dir, checkpoint, paths["retrieval"], qa_paths)
    })
  mlm_eval = {}
  if reader:
    with open(os.path.join(reader, "eval.json")) as f:
      mlm_eval = json.load(f)
  result = {
      "seed": seed,
      "rows": rows,
      "realm_first_loss": summary["first_loss"],
      "realm_final_metrics": summary["final"],
      "indexes_used": summary["indexes_used"],
      "reader_mlm_eval": mlm_eval,
      "mlm_seconds": mlm_seconds,
      "ict_seconds": ict_seconds,
      "realm_seconds": realm_seconds,
      "options": {
          k: v for k, v in vars(options).items() if k not in ("output_dir", "testdata_dir")
      }
  }
  io_utils.write_json_atomic(result_path, result)
  return result


def _add_towers(result: dict, seed_dir: str) -> dict:
  """Adds result["towers"]: the questions' recall at the last checkpoint with one tower swapped for the
  ICT start's (the query tower of one, the document tower of the other), which says whether REALM's
  query tower or its document tower moved the recall. Computed for cached results that lack it."""
  if "towers" in result or result["rows"][0]["label"] != "ICT start":
    return result
  options = _options(result["seed"], seed_dir)
  data = os.path.join(seed_dir, "data")
  corpus, init = os.path.join(data, "corpus", "blocks"), os.path.join(seed_dir, "ict")
  qa_paths = demo_pipeline.question_paths(options.testdata_dir)
  model_dir = os.path.join(seed_dir, "realm")
  last = tf.train.latest_checkpoint(model_dir)
  result["towers"] = [{
      "query": "ICT start",
      "documents": "REALM",
      **demo_pipeline.retriever_recall(model_dir, init, corpus, qa_paths, doc_checkpoint=last)
  }, {
      "query": "REALM",
      "documents": "ICT start",
      **demo_pipeline.retriever_recall(model_dir, last, corpus, qa_paths, doc_checkpoint=init)
  }]
  io_utils.write_json_atomic(os.path.join(seed_dir, "result.json"), result)
  return result


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  from bench import throughput_lib  # pylint: disable=g-import-not-at-top (describes the machine)
  machine = throughput_lib.machine()
  started = time.time()
  results = [
      _add_towers(_run_seed(int(seed)), os.path.join(_WORK_DIR.value, f"seed_{seed}"))
      for seed in _SEEDS.value
  ]
  print(f"\n{'seed':>4s} {'retriever':16s} {'step':>5s} " +
        " ".join(f"{k.split('_', 1)[1]:>10s}" for k in _KS))
  gains = []
  for result in results:
    for row in result["rows"]:
      print(f"{result['seed']:4d} {row['label']:16s} {row['step']:5d} " +
            " ".join(f"{row[k]:10.1f}" for k in _KS))
    start, end = result["rows"][0]["gold_recall@5"], result["rows"][-1]["gold_recall@5"]
    gains.append(end - start)
    print(
        f"seed {result['seed']}: recall@5 {start:.1f} -> {end:.1f} ({end - start:+.1f}); reader BERT "
        f"held-out masked-token accuracy {result['reader_mlm_eval'].get('masked_lm_accuracy', float('nan')):.3f}"
    )
  print(f"smallest recall@5 gain over {len(gains)} seeds: {min(gains):+.1f} points "
        f"({'every seed gained' if min(gains) > 0 else 'not every seed gained'})")
  # Which tower moved the recall: the last checkpoint with one tower put back to the ICT start's.
  print(f"\n{'seed':>4s} {'query tower':12s} {'document tower':15s} " +
        " ".join(f"{k.split('_', 1)[1]:>10s}" for k in _KS))
  document_gains = []
  for result in results:
    start, end = result["rows"][0], result["rows"][-1]
    towers = [("ICT start", "ICT start", start)] + [
        (t["query"], t["documents"], t) for t in result.get("towers", [])
    ] + [("REALM", "REALM", end)]
    for query, documents, row in towers:
      print(f"{result['seed']:4d} {query:12s} {documents:15s} " + " ".join(f"{row[k]:10.1f}" for k in _KS))
    document_gains += [
        t["gold_recall@5"] - start["gold_recall@5"]
        for t in result.get("towers", [])
        if t["query"] == "ICT start"
    ]
  if document_gains:
    print(f"recall@5 gain from REALM's document tower alone (ICT query tower): " +
          ", ".join(f"{g:+.1f}" for g in document_gains))
  io_utils.write_json_atomic(
      _OUTPUT.value, {
          "machine": machine,
          "seeds": results,
          "recall@5_gains": gains,
          "smallest_gain": min(gains),
          "document_tower_recall@5_gains": document_gains,
          "every_seed_gained": min(gains) > 0,
          "total_seconds": time.time() - started
      })
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
