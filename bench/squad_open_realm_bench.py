r"""REALM on real text: SQuAD-open with an all-MiniLM-L6-v2 retriever and an MLM-adapted MiniLM reader.

Issue 18. What runs, each step resumable from what it left under --work_dir:
  1. the corpus: the SQuAD-open paragraphs (--corpus=dev: the 2,067 dev paragraphs; all: 20,963) as
     JSONL, tokenized with MiniLM's vocab by bin/generate_retrieval_corpus (Z), and REALM's pre-training
     corpus made from the same paragraphs by bin/generate_pretraining_corpus (X: their sentences with
     salient spans; the sentence's own paragraph is excluded from its candidates by the trainer);
  2. the reader: all-MiniLM-L6-v2 given a masked-LM head by bin/train_mlm on the SQuAD v1.1 paragraph
     texts (train + dev, no questions; --mlm_steps), or --reader_init_checkpoint;
  3. the retriever: all-MiniLM-L6-v2 itself, no projection (--projection_size=0), mean pooling, scores
     = 20 x cosine (--cosine_score_scale, sentence-transformers' own scale): its zero-shot space intact;
  4. REALM with the real processes (bin/train_realm + bin/refresh_doc_embeds, the original objective),
     every index kept;
  5. answer and gold recall@1/5/20/100 of the 10,570 dev questions with each published index (exact
     search over its embeddings, questions embedded by the query tower of the same step), beside the
     anchor rows, and a PNG of recall@5 per index step; beside it, REALM's own task with the same indexes:
     of a fixed sample of its pre-training sentences (a salient span masked as in training), the share
     whose top k (own paragraph excluded) hold a paragraph containing the span (--cloze_queries); and the
     dev questions asked the same way: their own paragraph dropped from the ranking, the share of those
     whose answer another paragraph holds that find such a paragraph in their top k;
  6. REALM + ORQA (--orqa_steps): bench/squad_open_orqa_bench.py from the last REALM checkpoint (its
     document tower embeds all 20,963 paragraphs as a fixed index, its query tower trains on SQuAD train
     questions), beside that bench's all-MiniLM-L6-v2 + ORQA row.

  .venv/bin/python bench/squad_open_realm_bench.py                       # dev corpus, the defaults
  .venv/bin/python bench/squad_open_realm_bench.py --realm_steps=400     # continue the same run further

The pre-training text is the corpus the questions were written from (no question is seen; REALM
pre-trains with Wikipedia as its corpus too).
"""

import json
import os
import subprocess
import sys
import time
from typing import Dict, List

from absl import app
from absl import flags
import numpy as np

from bench import minilm_lib
from realm_tf import demo_pipeline
from realm_tf import io_utils

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WORK_DIR = flags.DEFINE_string("work_dir", os.path.join(_REPO, ".bench_cache", "squad_open_realm"),
                                "Where the run is written and resumed from.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results",
                                                     "squad_open_realm_bench.json"), "JSON results.")
_PLOT = flags.DEFINE_string("plot", os.path.join(_REPO, "docs", "squad_open_realm_recall.png"),
                            "PNG of recall@5 per index step ('' for none).")
_CORPUS = flags.DEFINE_enum("corpus", "dev", ["dev", "all"],
                            "dev: the 2,067 dev paragraphs; all: the 20,963 train + dev paragraphs.")
_PARAGRAPHS_TSV = flags.DEFINE_string(
    "mlm_input_path", None, "Text bin/train_mlm adapts the reader on (default: "
    "squad-v1.1-paragraphs.tsv beside --squad_dir's files, train + dev paragraphs, no questions).")
_MLM_STEPS = flags.DEFINE_integer("mlm_steps", 2000, "bin/train_mlm steps of batch 32 x 128 for the reader.")
# MiniLM's masked-LM head starts untrained: at bin/train_mlm's default 1e-4 held-out accuracy was 26% after
# 300 steps; 2e-4 with a short warm-up adapts faster (measured in
# docs/experiments/benchmarks_notebook.md).
_MLM_LR = flags.DEFINE_float("mlm_learning_rate", 2e-4, "bin/train_mlm's peak learning rate.")
_MLM_WARMUP = flags.DEFINE_integer("mlm_warmup_steps", 100, "bin/train_mlm's warm-up steps.")
_READER_INIT = flags.DEFINE_string(
    "reader_init_checkpoint", None, "An existing BERT with a masked-LM head for the reader (skips "
    "--mlm_steps).")
_REALM_STEPS = flags.DEFINE_integer("realm_steps", 200, "REALM steps.")
_BATCH = flags.DEFINE_integer("batch_size", 4, "REALM batch size.")
_CANDIDATES = flags.DEFINE_integer("num_candidates", 4,
                                   "Candidates per sentence, the null document included.")
_LR = flags.DEFINE_float("learning_rate", 3e-5, "REALM's peak learning rate (the paper's 3e-5).")
_QUERY_LEN = flags.DEFINE_integer("query_seq_len", 48, "Query (masked sentence) wordpieces.")
_CANDIDATE_LEN = flags.DEFINE_integer("candidate_seq_len", 192, "Document wordpieces (title + paragraph).")
_MAX_MASKS = flags.DEFINE_integer("max_masks", 10, "Masked wordpieces per sentence.")
_SCALE = flags.DEFINE_float("cosine_score_scale", 20.0, "Retrieval scores = this x cosine.")
_ACCUMULATION = flags.DEFINE_integer(
    "gradient_accumulation_steps", 1, "Parts each REALM batch is run in (bin/train_realm's flag): "
    "batch 8 is the most one pass fits in 24 GB here (batch 32 asks XLA for 49 GB).")
_SAVE_EVERY = flags.DEFINE_integer("save_checkpoints_steps", 50, "Checkpoint (and index) interval.")
_STALENESS = flags.DEFINE_integer("max_index_staleness_steps", 100, "The trainer waits beyond this.")
_ORQA_STEPS = flags.DEFINE_integer(
    "orqa_steps", 2000, "Then ORQA fine-tuning from the last REALM checkpoint "
    "(bench/squad_open_orqa_bench.py --init_retriever_checkpoint: fixed index of its document tower over "
    "all 20,963 paragraphs, its query tower trained on SQuAD train questions) for this many steps, beside "
    "that bench's all-MiniLM-L6-v2 + ORQA row; 0: none.")
_EVAL_QUESTIONS = flags.DEFINE_integer("eval_questions", 0, "Dev questions evaluated (0: all 10,570).")
_CLOZE_QUERIES = flags.DEFINE_integer(
    "cloze_queries", 1000, "Pre-training sentences (one salient span masked, as REALM trains) whose cloze "
    "recall is measured with each index: does REALM learn its own task? 0: none.")

_KS = (1, 5, 20, 100)


def _log(message: str) -> None:
  minilm_lib.log(message)


def _write_corpus(documents, path: str) -> None:
  if not os.path.exists(path):
    io_utils.write_jsonl_atomic(path, ({"id": d.doc_id, "title": d.title, "text": d.body} for d in documents))


def _prepare(work_dir: str, documents, vocab: str) -> Dict[str, str]:
  """The JSONL corpus, Z (retrieval corpus) and X (pre-training corpus); each made once."""
  paths = {
      "jsonl": os.path.join(work_dir, "corpus.jsonl"),
      "retrieval": os.path.join(work_dir, "corpus", "blocks"),
      "pretraining": os.path.join(work_dir, "pretraining", "sentences")
  }
  _write_corpus(documents, paths["jsonl"])
  if not os.path.exists(paths["retrieval"] + ".manifest.json"):
    _log(f"tokenizing {len(documents)} paragraphs with MiniLM's vocab (bin/generate_retrieval_corpus)")
    demo_pipeline.run_binary("generate_retrieval_corpus",
                             os.path.join(work_dir, "logs", "corpus.log"),
                             input_path=paths["jsonl"],
                             vocab_path=vocab,
                             output_prefix=paths["retrieval"],
                             num_output_shards=10)
  if not os.path.exists(paths["pretraining"] + ".manifest.json"):
    _log("splitting sentences, annotating salient spans (bin/generate_pretraining_corpus)")
    demo_pipeline.run_binary("generate_pretraining_corpus",
                             os.path.join(work_dir, "logs", "pretraining_corpus.log"),
                             input_path=paths["jsonl"],
                             output_prefix=paths["pretraining"],
                             num_output_shards=10)
  return paths


def _reader(work_dir: str, minilm: str) -> str:
  """The MLM-adapted MiniLM (bin/train_mlm, resumable) or --reader_init_checkpoint."""
  if _READER_INIT.value:
    return _READER_INIT.value
  tsv = _PARAGRAPHS_TSV.value or os.path.join(minilm_lib.SQUAD_DIR.value, "squad-v1.1-paragraphs.tsv")
  mlm_dir = os.path.join(work_dir, "mlm")
  export = os.path.join(mlm_dir, "bert")
  done = _mlm_eval(export)
  if done and done.get("step") == _MLM_STEPS.value:
    # bin/train_mlm would only evaluate the finished export again (minutes).
    _log(f"reader: {export}, adapted for {done['step']} steps")
    return export
  _log(f"adapting MiniLM to masked LM for {_MLM_STEPS.value} steps (bin/train_mlm; resumes)")
  demo_pipeline.run_binary("train_mlm",
                           os.path.join(work_dir, "logs", "train_mlm.log"),
                           lambda line: "held-out masked-token accuracy" in line,
                           _log,
                           model_dir=mlm_dir,
                           input_path=os.path.realpath(tsv),
                           vocab_path=os.path.join(minilm, "vocab.txt"),
                           bert_config=os.path.join(minilm, "config.json"),
                           init_checkpoint=minilm,
                           num_train_steps=_MLM_STEPS.value,
                           save_checkpoints_steps=min(250, _MLM_STEPS.value),
                           log_every_steps=min(50, _MLM_STEPS.value),
                           learning_rate=_MLM_LR.value,
                           warmup_steps=_MLM_WARMUP.value)
  return os.path.join(mlm_dir, "bert")


def _mlm_eval(export: str):
  """bin/train_mlm's held-out evaluation of its export (eval.json), or None."""
  path = os.path.join(export, "eval.json")
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _open_index(index_path: str):
  """The index published at index_path (its step's query tower) and exact search over its embeddings."""
  # pylint: disable=g-import-not-at-top (TF-heavy)
  from realm_tf.retrieval import index as index_lib
  from realm_tf.retrieval import published_index
  # pylint: enable=g-import-not-at-top
  loaded = published_index.load_published(index_path)
  exact = index_lib.build_index(np.asarray(loaded.mips.embeddings, np.float32), implementation="brute_force")
  return loaded, exact


def _question_rankings(loaded, exact, config, questions) -> np.ndarray:
  """int [len(questions), max(_KS) + 1]: each dev question's best rows with one published index (see
  _open_index); one row more than recall needs, so the own paragraph can be dropped."""
  from realm_tf import retriever_eval  # pylint: disable=g-import-not-at-top (TF-heavy)
  queries = retriever_eval.embed_questions_with(lambda inputs: loaded.embed_queries(*inputs), config,
                                                [q.question for q in questions])
  rows, _ = exact.search(queries, max(_KS) + 1)
  return np.asarray(rows)


def _first_hits(rows: np.ndarray, questions, squad) -> List[int]:
  """Per dev question the rank (1-based) of its first answer-bearing paragraph in rows' first max(_KS),
  0 if none: kept per index step, so that two steps are compared question by question
  (paired_recall_change)."""
  from realm_tf import evaluation  # pylint: disable=g-import-not-at-top (TF-heavy)
  inputs = squad.recall_inputs()
  return evaluation.answer_first_hits(rows[:, :max(_KS)],
                                      inputs["texts"], [q.answers for q in questions],
                                      mode=inputs["mode"]).tolist()


def _recall_of_index(rows: np.ndarray, first_hits: List[int], questions, squad) -> Dict[str, float]:
  """Answer and gold recall of the dev questions from their rankings (_question_rankings) and those
  rankings' _first_hits."""
  from realm_tf import evaluation  # pylint: disable=g-import-not-at-top (TF-heavy)
  inputs = squad.recall_inputs()
  inputs["answers"] = [q.answers for q in questions]
  inputs["gold_rows"] = inputs["gold_rows"][:len(questions)]
  return evaluation.rankings_recall(rows[:, :max(_KS)], ks=_KS, first_hits=first_hits, **inputs)


def _change_cells(change: Dict[str, Dict[str, float]]) -> str:
  """A paired_recall_change as table cells, one per k: +gained -lost and the sign test's p."""
  return " ".join(f"{'+%d -%d p %.2f' % (v['gained'], v['lost'], v['p_value']):>19}" for v in change.values())


def _own_excluded_recall(rows: np.ndarray, questions, squad) -> Dict[str, float]:
  """The dev questions asked as REALM trains: their own (gold) paragraph dropped from the ranking. Of the
  questions whose answer some other paragraph holds too, the share (%) whose top k hold such a paragraph
  (answers matched as answer recall matches them). REALM's exclusion means its gradient never reaches a
  sentence's own paragraph, while a SQuAD question's best evidence is its own; this separates the two."""
  # pylint: disable=g-import-not-at-top (TF-heavy)
  from realm_tf import evaluation
  # pylint: enable=g-import-not-at-top
  inputs = squad.recall_inputs()
  gold = inputs["gold_rows"][:len(questions)]
  bodies = [evaluation.normalize_for_search(text) for text in inputs["texts"]]
  holders = {}  # normalised answer -> rows of the paragraphs holding it

  def held_elsewhere(question, own):
    for answer in question.answers:
      key = evaluation.normalize_for_search(answer)
      if key.strip() and key not in holders:
        holders[key] = {row for row, body in enumerate(bodies) if key in body}
      if key.strip() and holders[key] - {own}:
        return True
    return False

  keep = [i for i, (q, own) in enumerate(zip(questions, gold)) if held_elsewhere(q, own)]
  others = np.asarray([[r for r in rows[i] if r != gold[i]][:max(_KS)] for i in keep])
  recall = evaluation.rankings_recall(others,
                                      texts=inputs["texts"],
                                      answers=[questions[i].answers for i in keep],
                                      ks=_KS,
                                      mode=inputs["mode"])
  return {f"own_excluded_{name}": value for name, value in recall.items()}


def _cloze_queries(pretraining_prefix: str, documents, config) -> Dict[str, np.ndarray]:
  """A fixed sample of REALM's own training queries: --cloze_queries sentences of X, each with one salient
  span masked exactly as the trainer masks it, their paragraph's row and the span's text."""
  # pylint: disable=g-import-not-at-top (TF-heavy)
  from realm_tf import featurization
  from realm_tf.data import corpus as corpus_lib
  from realm_tf.data import pretraining
  # pylint: enable=g-import-not-at-top
  rows = {corpus_lib.document_uid(d.title, d.body): row for row, d in enumerate(documents)}
  rng = np.random.default_rng(0)
  sentences, spans, owners = [], [], []
  for doc in pretraining.read_pretraining_corpus(pretraining_prefix):
    text = doc.text.encode("utf-8")
    for start, limit in doc.sentences:
      inside = [(a - start, b - start) for a, b in doc.spans if a >= start and b <= limit]
      if inside:
        sentences.append(text[start:limit])
        spans.append(inside[rng.integers(len(inside))])
        owners.append(rows[doc.uid])
  chosen = np.sort(rng.permutation(len(sentences))[:_CLOZE_QUERIES.value])
  sentences = [sentences[i] for i in chosen]
  spans = [spans[i] for i in chosen]
  tokenizer = config.tokenizer()
  featurizer = config.featurizer(tokenizer)
  ids, starts, limits = tokenizer.tokenize_with_offsets(sentences)
  masked = featurizer.mask_salient_span(ids, starts, limits, [a for a, _ in spans], [b for _, b in spans])
  ok = masked.status.numpy() == featurization.MaskingStatus.OK
  query = featurizer.query_inputs(masked.token_ids)
  return {
      "inputs": tuple(np.asarray(t)[ok] for t in query),
      "owners": np.asarray(owners)[chosen][ok],
      "spans": [s[a:b].decode("utf-8").lower() for s, (a, b), keep in zip(sentences, spans, ok) if keep]
  }


def _cloze_recall_of_index(loaded, exact, cloze, bodies: List[str]) -> Dict[str, float]:
  """Of REALM's own queries, the share (%) whose top k, their own paragraph excluded as in training,
  hold a paragraph that contains the masked span (case-insensitive): what REALM's objective rewards."""
  queries = np.concatenate([
      np.asarray(loaded.embed_queries(*(t[i:i + 256]
                                        for t in cloze["inputs"])))
      for i in range(0, len(cloze["owners"]), 256)
  ])
  rows, _ = exact.search(queries, max(_KS) + 1)
  # Per query and rank (own paragraph dropped): does that paragraph hold the span?
  holds = np.asarray([[span in bodies[r]
                       for r in ranked
                       if r != owner][:max(_KS)]
                      for ranked, owner, span in zip(rows, cloze["owners"], cloze["spans"])])
  recall = {f"cloze_recall@{k}": 100.0 * float(np.mean(holds[:, :k].any(axis=1))) for k in _KS}
  recall["cloze_queries"] = len(cloze["owners"])
  return recall


def _realm_then_orqa(model_dir: str, work_dir: str):
  """bench/squad_open_orqa_bench.py started from REALM's last checkpoint (its results, cached per
  checkpoint and step count under work_dir), or None with --orqa_steps=0."""
  # pylint: disable=g-import-not-at-top
  from realm_tf.checkpoints import sources
  from realm_tf.checkpoints import training_state
  # pylint: enable=g-import-not-at-top
  if not _ORQA_STEPS.value:
    return None
  checkpoint = sources.resolve_checkpoint(model_dir)  # its latest
  step = training_state.checkpoint_step(checkpoint)
  output = os.path.join(work_dir, "orqa", f"from_step_{step}_{_ORQA_STEPS.value}_steps.json")
  if not os.path.exists(output):
    _log(f"ORQA fine-tuning from REALM's step {step} for {_ORQA_STEPS.value} steps "
         f"(bench/squad_open_orqa_bench.py; 20,963 paragraphs)")
    command = [
        sys.executable,
        os.path.join(_REPO, "bench", "squad_open_orqa_bench.py"), f"--init_retriever_checkpoint={checkpoint}",
        f"--steps={_ORQA_STEPS.value}", f"--output={output}", f"--squad_dir={minilm_lib.SQUAD_DIR.value}",
        f"--cache_dir={minilm_lib.CACHE_DIR.value}"
    ]
    if minilm_lib.MINILM_DIR.value:
      command.append(f"--minilm_dir={minilm_lib.MINILM_DIR.value}")
    log_path = os.path.join(work_dir, "logs", "orqa_from_realm.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log_file:
      if subprocess.run(command, stdout=log_file, stderr=subprocess.STDOUT, check=False).returncode:
        raise RuntimeError(f"bench/squad_open_orqa_bench.py failed; see {log_path}")
  with open(output, encoding="utf-8") as f:
    result = json.load(f)
  # The MiniLM + ORQA rows to compare with: that bench's committed result, same questions and settings;
  # question by question at each step (0: before ORQA) both runs evaluated and kept first hits at.
  def without_first_hits(record):
    return {
        k: (without_first_hits(v) if isinstance(v, dict) else v)
        for k, v in record.items()
        if k != "answer_first_hits"
    }

  evaluations = [without_first_hits(e) for e in result["evaluations"]]
  minilm_orqa = os.path.join(_REPO, "bench", "results", "squad_open_orqa_bench.json")
  if os.path.exists(minilm_orqa):
    from realm_tf import evaluation  # pylint: disable=g-import-not-at-top (TF-heavy)
    with open(minilm_orqa, encoding="utf-8") as f:
      minilm_runs = {e["step"]: e for e in json.load(f)["evaluations"]}
    last = minilm_runs[max(minilm_runs)]
    result["reference_rows"].append({
        "method": f"MiniLM + ORQA ({last['step']} steps)",
        "recall": last["recall"]
    })
    for ours, kept in zip(result["evaluations"], evaluations):
      theirs = minilm_runs.get(ours["step"], {})
      if "answer_first_hits" in theirs and "answer_first_hits" in ours:
        kept["versus_minilm"] = evaluation.paired_recall_change(ours["answer_first_hits"],
                                                                theirs["answer_first_hits"], _KS)
      if "dev_paragraphs" in theirs and "dev_paragraphs" in ours:
        kept["dev_paragraphs"]["versus_minilm"] = evaluation.paired_recall_change(
            ours["dev_paragraphs"]["answer_first_hits"], theirs["dev_paragraphs"]["answer_first_hits"], _KS)
  # The per-question ranks stay in the ORQA bench's own result file.
  return {
      "realm_checkpoint_step": step,
      "result": output,
      "steps": _ORQA_STEPS.value,
      "evaluations": evaluations,
      "reference_rows": result["reference_rows"]
  }


def _evaluate(model_dir: str, work_dir: str, squad) -> List[Dict]:
  """Recall per published index step, cached per step under work_dir/eval/."""
  # pylint: disable=g-import-not-at-top
  from realm_tf.data import corpus_table
  from realm_tf.modeling import realm_config as realm_config_lib
  from realm_tf.retrieval import published_index
  # pylint: enable=g-import-not-at-top
  config = realm_config_lib.RealmConfig.load(model_dir)
  questions = squad.questions[:_EVAL_QUESTIONS.value or None]
  table = corpus_table.CorpusTable.load(os.path.join(work_dir, "corpus", "blocks"))
  if table.doc_ids[:] != [d.doc_id for d in squad.documents]:
    raise RuntimeError(f"{work_dir}/corpus: its rows are not the SQuAD-open paragraphs in order; delete "
                       f"{work_dir} and rerun")
  rows, cloze = [], None
  bodies = [d.body.lower() for d in squad.documents]
  for step in published_index.published_steps(model_dir):
    index_path = os.path.join(published_index.index_root(model_dir), str(step))
    cache = os.path.join(work_dir, "eval", f"step_{step}_{len(questions)}.json")
    opened = None  # the index is loaded once per step, and only when something is not cached
    rankings = None
    if os.path.exists(cache):
      with open(cache, encoding="utf-8") as f:
        row = json.load(f)
    else:
      started = time.time()
      opened = _open_index(index_path)
      rankings = _question_rankings(*opened, config, questions)
      first_hits = _first_hits(rankings, questions, squad)
      recall = _recall_of_index(rankings, first_hits, questions, squad)
      row = {
          "step": step,
          "recall": recall,
          "eval_seconds": time.time() - started,
          "answer_first_hits": first_hits
      }
      _log(f"index step {step}: " + ", ".join(f"{k} {v:.1f}" for k, v in recall.items() if "@" in k))
    if "own_excluded" not in row or "answer_first_hits" not in row:  # new, or cached before these existed
      if rankings is None:
        opened = _open_index(index_path)
        rankings = _question_rankings(*opened, config, questions)
      row["own_excluded"] = _own_excluded_recall(rankings, questions, squad)
      if "answer_first_hits" not in row:
        row["answer_first_hits"] = _first_hits(rankings, questions, squad)
    _log(f"index step {step}, own paragraph excluded: " +
         ", ".join(f"{k} {v:.1f}" for k, v in row["own_excluded"].items() if "@" in k))
    if _CLOZE_QUERIES.value and row.get("cloze", {}).get("cloze_queries_requested") != _CLOZE_QUERIES.value:
      if cloze is None:
        cloze = _cloze_queries(os.path.join(work_dir, "pretraining", "sentences"), squad.documents, config)
      opened = opened or _open_index(index_path)
      row["cloze"] = dict(_cloze_recall_of_index(*opened, cloze, bodies),
                          cloze_queries_requested=_CLOZE_QUERIES.value)
      _log(f"index step {step}, REALM's own queries: " +
           ", ".join(f"{k} {v:.1f}" for k, v in row["cloze"].items() if "@" in k))
    if opened is not None:  # the row changed
      os.makedirs(os.path.dirname(cache), exist_ok=True)
      io_utils.write_json_atomic(cache, row)
    rows.append(row)
  from realm_tf import evaluation  # pylint: disable=g-import-not-at-top (TF-heavy)
  for row in rows[1:]:
    row["versus_start"] = evaluation.paired_recall_change(row["answer_first_hits"],
                                                          rows[0]["answer_first_hits"], _KS)
  return rows


def _plot(rows: List[Dict], references: List[Dict], path: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  cloze = all("cloze" in r for r in rows)
  figure, axes = pyplot.subplots(1, 2 if cloze else 1, figsize=(11.0 if cloze else 6.4, 4.0), squeeze=False)
  axis = axes[0][0]
  steps = [r["step"] for r in rows]
  for kind, style in (("answer", "o-"), ("gold", "s--")):
    axis.plot(steps, [r["recall"][f"{kind}_recall@5"] for r in rows], style, label=f"REALM, {kind} recall@5")
  for reference, color in zip(references, ("tab:red", "tab:gray", "tab:green", "tab:purple")):
    axis.axhline(reference["recall"]["answer_recall@5"],
                 color=color,
                 linestyle=":",
                 label=f"{reference['method_description']} (answer)")
  axis.set_xlabel("REALM step of the index")
  axis.set_ylabel("recall@5 of the 10,570 dev questions (%)")
  axis.legend(fontsize=7)
  axis.grid(alpha=0.3)
  if cloze:
    # REALM's own task on its own scale: whether the objective itself is learned.
    axis = axes[0][1]
    for k, style in ((1, "v-"), (5, "^-"), (20, "D-")):
      axis.plot(steps, [r["cloze"][f"cloze_recall@{k}"] for r in rows], style, label=f"cloze recall@{k}")
    axis.set_xlabel("REALM step of the index")
    axis.set_ylabel("masked span in a top-k paragraph (%)")
    axis.set_title(
        f"REALM's own queries ({rows[0]['cloze']['cloze_queries']} sentences; own paragraph "
        "excluded)",
        fontsize=9)
    axis.legend(fontsize=7)
    axis.grid(alpha=0.3)
  figure.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  figure.savefig(path, dpi=100)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  work_dir = _WORK_DIR.value
  os.makedirs(work_dir, exist_ok=True)
  started = time.time()
  minilm = minilm_lib.minilm_directory(minilm_lib.CACHE_DIR.value, minilm_lib.MINILM_DIR.value)
  full, _ = minilm_lib.load_squad("squad_open_realm_bench")
  squad = full.dev_corpus() if _CORPUS.value == "dev" else full
  paths = _prepare(work_dir, squad.documents, os.path.join(minilm, "vocab.txt"))
  reader = _reader(work_dir, minilm)
  model_dir = os.path.join(work_dir, "realm")
  _log(f"REALM for {_REALM_STEPS.value} steps (bin/train_realm + bin/refresh_doc_embeds; resumes)")
  summary = demo_pipeline.run_realm_processes(
      model_dir,
      os.path.join(work_dir, "logs"),
      dict(pretraining_corpus_path=paths["pretraining"],
           retrieval_corpus_path=paths["retrieval"],
           vocab_path=os.path.join(minilm, "vocab.txt"),
           bert_config=os.path.join(minilm, "config.json"),
           projection_size=0,
           embedder_pooling="mean",
           cosine_score_scale=_SCALE.value,
           query_seq_len=_QUERY_LEN.value,
           candidate_seq_len=_CANDIDATE_LEN.value,
           max_masks=_MAX_MASKS.value,
           num_candidates=_CANDIDATES.value,
           batch_size=_BATCH.value,
           learning_rate=_LR.value,
           num_train_steps=_REALM_STEPS.value,
           save_checkpoints_steps=_SAVE_EVERY.value,
           keep_checkpoint_max=2,
           log_every_steps=10,
           init_retriever_checkpoint=minilm,
           init_reader_checkpoint=reader,
           bootstrap_index=True,
           index_implementation="brute_force",
           check_index_every_batches=2,
           max_index_staleness_steps=_STALENESS.value,
           gradient_accumulation_steps=_ACCUMULATION.value),
      # Every index is kept: the evaluation reads each step's embeddings and query tower.
      dict(retrieval_corpus_path=paths["retrieval"],
           index_implementation="brute_force",
           poll_seconds=5,
           keep=1000),
      _log,
      refresher_timeout_s=1800)
  rows = _evaluate(model_dir, work_dir, squad)
  # The anchors: bench/squad_open_bench.py's measured rows of the same corpus and questions.
  references = minilm_lib.reference_rows(_CORPUS.value)
  header = " ".join(f"{'@' + str(k):>5}" for k in _KS)
  print(f"\n{'':46s} {'answer in top-k':^23}   {'gold paragraph in top-k':^23}")
  print(f"{'':46s} {header}   {header}")
  for reference in references:
    print(
        minilm_lib.recall_row(reference["method_description"] + " (squad_open_bench)", reference["recall"],
                              _KS, 46))
  for row in rows:
    label = ("start (MiniLM as REALM's retriever)"
             if row["step"] == 0 else f"REALM, index of step {row['step']}")
    print(minilm_lib.recall_row(label, row["recall"], _KS, 46))
  if any("cloze" in row for row in rows):
    print(
        f"\nREALM's own queries ({rows[0]['cloze']['cloze_queries']} pre-training sentences, a salient span "
        f"masked): a top-k paragraph, own excluded, holds the span")
    print(f"{'':46s} {header}")
    for row in rows:
      print(f"{'index of step ' + str(row['step']):46s} " +
            " ".join(f"{row['cloze'][f'cloze_recall@{k}']:5.1f}" for k in _KS))
  if len(rows) > 1:
    print("\nEach index against the start's, question by question: found in the top k now and not at the "
          "start (+), the reverse (-), and the sign test's two-sided p")
    print(f"{'':46s} " + " ".join(f"{'@' + str(k):>19}" for k in _KS))
    for row in rows[1:]:
      print(f"{'index of step ' + str(row['step']):46s} " + _change_cells(row["versus_start"]))
  if any("own_excluded" in row for row in rows):
    print(f"\nThe dev questions with their own paragraph excluded, as REALM trains "
          f"({int(rows[0]['own_excluded']['own_excluded_num_questions'])} whose answer another paragraph "
          f"holds): a top-k paragraph holds it")
    print(f"{'':46s} {header}")
    for row in rows:
      print(f"{'index of step ' + str(row['step']):46s} " +
            " ".join(f"{row['own_excluded'][f'own_excluded_answer_recall@{k}']:5.1f}" for k in _KS))
  orqa = _realm_then_orqa(model_dir, work_dir)
  if orqa:
    print("\nall 20,963 paragraphs (bench/squad_open_orqa_bench.py)")
    for reference in orqa["reference_rows"]:
      print(minilm_lib.recall_row(reference["method"], reference["recall"], _KS, 46))
    for evaluation in orqa["evaluations"]:
      label = f"REALM step {orqa['realm_checkpoint_step']}" + (f" + ORQA ({evaluation['step']} steps)"
                                                               if evaluation["step"] else " (before ORQA)")
      print(minilm_lib.recall_row(label, evaluation["recall"], _KS, 46))
      if "versus_minilm" in evaluation:
        print(f"{'  against MiniLM at that step, per question':46s} " +
              _change_cells(evaluation["versus_minilm"]))
    for evaluation in orqa["evaluations"]:
      if "dev_paragraphs" in evaluation:
        print(
            minilm_lib.recall_row(f"  the 2,067 dev paragraphs alone, step {evaluation['step']}",
                                  evaluation["dev_paragraphs"]["recall"], _KS, 46))
        if "versus_minilm" in evaluation["dev_paragraphs"]:
          print(f"{'  against MiniLM there, per question':46s} " +
                _change_cells(evaluation["dev_paragraphs"]["versus_minilm"]))
  if _PLOT.value and rows:
    _plot(rows, references, _PLOT.value)
  from bench import throughput_lib  # pylint: disable=g-import-not-at-top (describes the machine)
  result = {
      "benchmark": "squad_open_realm",
      "created": time.strftime("%Y-%m-%d"),
      "command": " ".join(["bench/squad_open_realm_bench.py"] + sys.argv[1:]),
      "corpus": _CORPUS.value,
      "num_documents": len(squad.documents),
      "num_questions": len(squad.questions[:_EVAL_QUESTIONS.value or None]),
      "reader": reader,
      "reader_mlm_held_out": _mlm_eval(reader),
      "realm": {
          name: flag.value
          for name, flag in (("realm_steps", _REALM_STEPS), ("batch_size", _BATCH),
                             ("num_candidates", _CANDIDATES), ("learning_rate", _LR),
                             ("query_seq_len", _QUERY_LEN), ("candidate_seq_len",
                                                             _CANDIDATE_LEN), ("max_masks", _MAX_MASKS),
                             ("cosine_score_scale", _SCALE), ("gradient_accumulation_steps", _ACCUMULATION))
      },
      "trainer_summary": summary,
      "reference_rows": [{
          "method": r["method"],
          "recall": r["recall"]
      } for r in references],
      "per_index_step": [
          # The per-question ranks stay in work_dir/eval's cache; the comparisons they give are kept.
          {
              k: v for k, v in row.items() if k != "answer_first_hits"
          } for row in rows
      ],
      "realm_then_orqa": orqa,
      "seconds_this_invocation": time.time() - started,
      "machine": throughput_lib.machine(),
  }
  io_utils.write_json_atomic(_OUTPUT.value, result)
  print(f"wrote {_OUTPUT.value}" + (f" and {_PLOT.value}" if _PLOT.value and rows else ""))


if __name__ == "__main__":
  app.run(main)
