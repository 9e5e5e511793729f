r"""Which hybrid of BM25 and a dense tower to ship: reciprocal rank fusion or a tuned weighted score sum,
chosen on HELD-OUT TRAIN questions of SQuAD (never the dev questions the results report).

Why: realm_tf.retrieval.fusion offers both. Rank fusion needs nothing tuned; a weighted sum of
z-normalised scores (fusion.weighted_score_fusion) sees how far apart the scores are, not just their
order, but its weight must be chosen on labelled questions that are not the test set. This measures
both, retrieval only, on the questions bench/squad_open_e2e_bench.py holds out of training
(WORK/qa/heldout.jsonl: every 20th SQuAD train article's questions) over the 20,963 paragraphs:

  .venv/bin/python bench/squad_open_hybrid_tuning_bench.py --squad_dir=data/squad   # after the e2e
      bench's corpus, questions and frozen index exist (its first stages); minutes

Retrievers: BM25 over titles and bodies (hybrid.build_bm25, what bin/eval_orqa's bm25 is); the dense
tower of the e2e run at its start: all-MiniLM-L6-v2's query tower (zero-shot, mean pooling, 48
wordpieces) against the run's frozen index (MiniLM's document tower over title and body, 256 wordpieces);
each side's top 1,000 (hybrid.FUSION_DEPTH) fused by RRF and by weighted sums for each --weights value.
Answer recall@1/5/20/100 with answers and text normalised (the SQuAD-open benches' convention). Writes
--output JSON with the machine, the load and every row.
"""

import json
import os
import time

from absl import app
from absl import flags
import numpy as np

from bench import minilm_lib
from bench import throughput_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WORK_DIR = flags.DEFINE_string(
    "work_dir", os.path.join(_REPO, ".bench_cache", "squad_e2e"),
    "bench/squad_open_e2e_bench.py's work dir (corpus/, qa/, orqa/frozen_index).")
_WEIGHTS = flags.DEFINE_list("weights", ["0.3", "0.4", "0.5", "0.6", "0.7"],
                             "BM25 weights of the weighted score sum (the dense tower gets 1 minus it).")
_OUTPUT = flags.DEFINE_string("output",
                              os.path.join(_REPO, "bench", "results", "squad_open_hybrid_tuning.json"),
                              "Where to write the JSON results.")
_KS = (1, 5, 20, 100)
_log = minilm_lib.log


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  weights = [float(w) for w in _WEIGHTS.value]
  # pylint: disable=g-import-not-at-top (TensorFlow-heavy)
  from realm_tf import evaluation
  from realm_tf import io_utils
  from realm_tf.data import corpus_table
  from realm_tf.retrieval import brute_force_index
  from realm_tf.retrieval import hybrid
  from realm_tf.retrieval import text_embedder
  from realm_tf.runs import frozen_index
  # pylint: enable=g-import-not-at-top
  for w in weights:
    try:
      hybrid.check_bm25_weight(w, flag="--weights")
    except ValueError as e:
      raise app.UsageError(str(e)) from None
  machine = throughput_lib.machine()
  work = _WORK_DIR.value
  corpus = os.path.join(work, "corpus", "blocks")
  heldout_path = os.path.join(work, "qa", "heldout.jsonl")
  if not os.path.exists(heldout_path):
    raise app.UsageError(f"--work_dir: no {heldout_path}; run bench/squad_open_e2e_bench.py "
                         "--stop_after=questions first")
  blocks = corpus_table.CorpusTable.load(corpus)
  try:
    paragraphs = frozen_index.load_frozen_index(os.path.join(work, "orqa"), corpus)
  except (FileNotFoundError, ValueError) as e:
    raise app.UsageError(f"--work_dir: the e2e run's frozen index is not there yet ({e}); it is written "
                         "when bin/train_orqa starts training") from None
  paragraphs = paragraphs / np.linalg.norm(paragraphs, axis=1, keepdims=True)
  with open(heldout_path, encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  questions, answers = [r["question"] for r in records], [r["answer"] for r in records]
  bodies = list(blocks.bodies)

  started = time.time()
  directory = minilm_lib.minilm_directory(minilm_lib.CACHE_DIR.value, minilm_lib.MINILM_DIR.value)
  embedder, tokenizer = minilm_lib.load(directory)
  queries = text_embedder.TextEmbedder(embedder,
                                       tokenizer,
                                       max_seq_length=48,
                                       batch_size=64,
                                       jit_compile=False).embed(questions)
  depth = min(hybrid.FUSION_DEPTH, len(bodies))
  # Exact search; without doc ids the index returns row numbers, as the frozen index and BM25 count.
  dense_rows, dense_scores = brute_force_index.BruteForceIndex.build(paragraphs).search(queries, depth)
  sparse = hybrid.build_bm25(blocks.titles, blocks.bodies)
  sparse_rows, sparse_scores = sparse.search(questions, depth)
  _log(f"{len(questions)} held-out train questions ranked by both in {time.time() - started:.0f} s")

  rows = {
      "bm25 (title + body)": sparse_rows[:, :max(_KS)],
      "MiniLM zero-shot (the e2e run's step-0 dense tower)": dense_rows[:, :max(_KS)],
      "hybrid: reciprocal rank fusion, k = 60": hybrid.fuse(sparse_rows, dense_rows, max(_KS))
  }
  for w in weights:
    rows[f"hybrid: z-score sum, BM25 weight {w:g}"] = hybrid.fuse(sparse_rows,
                                                                  dense_rows,
                                                                  max(_KS),
                                                                  sparse_scores,
                                                                  dense_scores,
                                                                  bm25_weight=w)
  results = []
  for name, ranked in rows.items():
    hits = evaluation.answer_first_hits(ranked, bodies, answers, mode="normalized")
    recall = {f"answer_recall@{k}": 100.0 * float(np.mean((hits > 0) & (hits <= k))) for k in _KS}
    results.append({"retriever": name, "recall": recall, "answer_first_hits": hits.tolist()})
    print(f"{name:56s} " + " ".join(f"{recall[f'answer_recall@{k}']:5.1f}" for k in _KS), flush=True)
  rrf = next(r for r in results if "reciprocal" in r["retriever"])
  best = max(results[3:], key=lambda r: r["recall"]["answer_recall@5"])
  change = evaluation.paired_recall_change(best["answer_first_hits"], rrf["answer_first_hits"], _KS)
  print(f"best weighted ({best['retriever']}) against RRF, gained/lost and sign-test p at k = 1/5/20/100: " +
        "; ".join(f"+{c['gained']}/-{c['lost']} p {c['p_value']:.2g}" for c in change.values()))
  io_utils.write_json_atomic(
      _OUTPUT.value, {
          "benchmark": "squad_open_hybrid_tuning_bench",
          "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "machine": machine,
          "load_average_at_end": list(throughput_lib.load_average()),
          "settings": {
              "questions": heldout_path,
              "num_questions": len(questions),
              "corpus": f"{len(bodies)} SQuAD paragraphs",
              "depth_per_ranking": depth,
              "answer_match": "normalized",
              "weights": weights
          },
          "results": [{
              k: v for k, v in r.items() if k != "answer_first_hits"
          } for r in results],
          "best_weighted_against_rrf": {
              "retriever": best["retriever"],
              "paired": change
          },
          "seconds": time.time() - started,
      })
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
