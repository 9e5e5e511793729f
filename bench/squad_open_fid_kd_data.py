"""The data of bench/squad_open_fid_kd_bench.py and the rounds its run leaves, without flags (the SQuAD
benches' tests share one process, where absl takes a flag name once).

prepare: SQuAD train paragraphs drawn with a seed join the 2,067 dev paragraphs in the retrieval corpus Z,
their questions are the training set (the dev paragraphs hold no train article, so a training question's
answer must be findable), and dev questions drawn with the same seed decide a round's acceptance. The
draw is recorded in data/draw.json: a rerun resumes on it, and another draw in the same work dir is
refused, since the run there trained on the first.
round_retrievers: the retriever a bin/train_fid_kd run started from and the one each finished round
ended with (metrics.json's retriever_after: distilled if accepted, else the previous).
"""

import itertools
import json
import os
from typing import Callable, Dict, List

from absl import app
import numpy as np

from realm_tf import demo_pipeline
from realm_tf import io_utils


def _write_jsonl(path: str, records) -> None:
  if not os.path.exists(path):
    io_utils.write_jsonl_atomic(path, records)


def prepare(work_dir: str,
            full,
            train,
            vocab: str,
            train_paragraphs: int,
            selection_questions: int,
            seed: int,
            log: Callable[[str], None] = print) -> Dict[str, str]:
  """Writes (once) Z, its dev-only part, the training and selection questions under work_dir/data and
  tokenizes both corpora; returns their paths.

  Args:
    full: the SQuAD-open corpus (realm_tf.data.squad_open.SquadOpen: train then dev paragraphs).
    train: the SQuAD train questions, numbered as full numbers its paragraphs.
    vocab: the retriever's vocab (bin/generate_retrieval_corpus).
    train_paragraphs, selection_questions, seed: the draw (--train_paragraphs, ...).
  """
  draw = {"train_paragraphs": train_paragraphs, "selection_questions": selection_questions, "seed": seed}
  draw_path = os.path.join(work_dir, "data", "draw.json")
  if os.path.exists(draw_path):
    with open(draw_path, encoding="utf-8") as f:
      made = json.load(f)
    if made != draw:
      raise app.UsageError(
          f"{draw_path}: {work_dir} was prepared with {made} (the run there trained on that draw); pass "
          f"those flags to resume it, or a new --work_dir for {draw}")
  rng = np.random.default_rng(seed)
  drawn = rng.permutation(full.num_train_paragraphs)[:train_paragraphs]
  documents = [full.documents[i] for i in sorted(drawn.tolist())]
  chosen = {d.doc_id for d in documents}
  dev = full.dev_corpus()
  paths = {
      name: os.path.join(work_dir, "data", name)
      for name in ("corpus.jsonl", "dev_corpus.jsonl", "train.jsonl", "selection.jsonl")
  }
  paths.update(retrieval=os.path.join(work_dir, "data", "corpus", "blocks"),
               dev_retrieval=os.path.join(work_dir, "data", "dev_corpus", "blocks"))
  questions = [q for q in train if q.metadata["doc_id"] in chosen]
  if not questions:
    raise app.UsageError(f"--train_paragraphs={train_paragraphs}: the drawn paragraphs have no "
                         "questions; draw more")
  os.makedirs(os.path.join(work_dir, "data"), exist_ok=True)
  as_record = lambda d: {"id": d.doc_id, "title": d.title, "text": d.body}
  _write_jsonl(paths["corpus.jsonl"], (as_record(d) for d in documents + dev.documents))
  _write_jsonl(paths["dev_corpus.jsonl"], (as_record(d) for d in dev.documents))
  as_question = lambda q: {"question": q.question, "answers": q.answers, "doc_id": q.metadata["doc_id"]}
  _write_jsonl(paths["train.jsonl"], (as_question(q) for q in questions))
  selection = rng.permutation(len(dev.questions))[:selection_questions]
  _write_jsonl(paths["selection.jsonl"], (as_question(dev.questions[i]) for i in sorted(selection.tolist())))
  for corpus_jsonl, prefix in (("corpus.jsonl", "retrieval"), ("dev_corpus.jsonl", "dev_retrieval")):
    if not os.path.exists(paths[prefix] + ".manifest.json"):
      log(f"tokenizing {paths[corpus_jsonl]} with the vocab {vocab} (bin/generate_retrieval_corpus)")
      demo_pipeline.run_binary("generate_retrieval_corpus",
                               os.path.join(work_dir, "logs", f"{prefix}_corpus.log"),
                               input_path=paths[corpus_jsonl],
                               vocab_path=vocab,
                               output_prefix=paths[prefix],
                               num_output_shards=4)
  if not os.path.exists(draw_path):
    io_utils.write_json_atomic(draw_path, draw)
  log(f"Z: {len(documents)} train + {len(dev.documents)} dev paragraphs; {len(questions)} training "
      f"questions; {len(selection)} selection questions")
  return paths


def round_retrievers(model_dir: str) -> List[Dict]:
  """[{round, retriever (directory), metrics}]: "start", then each finished round (0, 1, ...)."""
  from realm_tf.tasks import fid_kd  # pylint: disable=g-import-not-at-top (TF-heavy)
  rounds = [{
      "round": "start",
      "retriever": os.path.join(model_dir, fid_kd.INITIAL_RETRIEVER_DIR),
      "metrics": None
  }]
  for iteration in itertools.count():
    path = os.path.join(fid_kd.iteration_dir(model_dir, iteration), fid_kd.METRICS_NAME)
    if not os.path.exists(path):
      return rounds
    with open(path, encoding="utf-8") as f:
      metrics = json.load(f)
    rounds.append({
        "round": iteration,
        "retriever": os.path.join(model_dir, metrics["retriever_after"]),
        "metrics": metrics
    })
