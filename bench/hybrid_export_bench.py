r"""An exported hybrid's recall against the Python hybrid's on SQuAD-open: what BM25 over wordpieces in
the graph (realm_tf/retrieval/sparse_in_graph.py) costs against bm25s's stemmed word analysis.

Why: bin/export_saved_model --retriever=hybrid puts BM25 into the open_qa SavedModel as postings over the
run's WordPiece ids, so that it runs in a process without the corpus files and (the _token_ids twin)
with core TensorFlow ops only. bm25s (realm_tf/retrieval/bm25.py), which bin/eval_orqa's hybrid uses,
analyses words in Python. Issue 41 asks the exported hybrid's recall to equal the Python hybrid's within
0.5 points at each k, or the difference explained.

  .venv/bin/python bench/hybrid_export_bench.py --squad_dir=data/squad   # ~15 min on 2 cores; ~3 with the MiniLM vectors cached

Task: the 10,570 SQuAD v1.1 dev questions against the 2,067 dev paragraphs (--corpus=dev) or all 20,963
(--corpus=all); recall = answer string in the top k (realm_tf/data/squad_open.py's convention). Rows:
  python bm25s      hybrid.build_bm25 (bm25s over "title body"), as bin/eval_orqa --retriever=bm25
  in-graph bm25     sparse_in_graph over the MiniLM vocab's wordpieces of "title body", run from a
                    SavedModel loaded back (the export's InGraphBm25 and retrieve_rows)
  python hybrid     hybrid.candidate_rows("hybrid"): RRF (k 60) of bm25s's and the dense tower's top 1,000
  exported hybrid   the same fusion in the graph (sparse_in_graph.retrieve_rows, as open_qa's signature
                    runs it) of the in-graph BM25 and the same dense top 1,000, from the loaded SavedModel
The dense tower is all-MiniLM-L6-v2 zero-shot over paragraph bodies (bench/minilm_lib.py), its vectors
cached in --cache_dir/embeddings (shared with bench/squad_open_bench.py). The SavedModel here carries the
index, the BM25 postings and the fusion, and takes query vectors from the host, so that it can return 20
rows; open_qa's signature returns the reader beam's K and reads them.
"""

import json
import os
import platform
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

from bench import minilm_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CORPUS = flags.DEFINE_enum("corpus", "dev", ["dev", "all"], "dev: the 2,067 dev paragraphs; all: 20,963.")
_NO_STEM = flags.DEFINE_bool("also_unstemmed", True,
                             "Also measure the in-graph BM25 without the vocab-level stemmer.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "hybrid_export_bench.json"),
                              "Where to write the JSON results.")
_KS = (1, 5, 20)
_BATCH = 256
_log = minilm_lib.log


def _machine():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model = ""
  if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
  return {
      "platform": platform.platform(),
      "cpu_model": model,
      "cpus_available": len(os.sched_getaffinity(0)),
      "tensorflow": tf.__version__,
      "load_average_at_start": list(os.getloadavg())
  }


def _embeddings(embedder, name, texts):
  from realm_tf.retrieval import embedding_cache  # pylint: disable=g-import-not-at-top
  directory, text_embedder = embedder

  def compute(texts):
    _log(f"embedding {len(texts)} {name} with MiniLM (cached afterwards)")
    return text_embedder.embed(texts, log=_log)

  model_id = minilm_lib.model_id(minilm_lib.weights_sha256(directory), minilm_lib.CACHED_SEQ_LENGTH)
  array, info = embedding_cache.cached_embeddings(os.path.join(minilm_lib.CACHE_DIR.value, "embeddings"),
                                                  minilm_lib.EMBEDDINGS_PREFIX + name, model_id, texts,
                                                  compute)
  _log(f"{name}: {array.shape} ({'cached' if info['cached'] else 'computed'})")
  return array


def _saved_retriever(sparse, doc_vectors, path):
  """Saves and loads back a SavedModel retrieving as open_qa's signature does: (query vectors, question
  wordpieces) -> the top 20 of the in-graph BM25 and of the hybrid."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import hybrid  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import sparse_in_graph  # pylint: disable=g-import-not-at-top
  depth, fusion_depth = max(_KS), min(hybrid.FUSION_DEPTH, len(doc_vectors))

  class Retriever(tf.Module):

    def __init__(self):
      super().__init__()
      self.sparse = sparse_in_graph.InGraphBm25(sparse)
      self.embeddings = tf.Variable(doc_vectors, trainable=False)

    @tf.function(input_signature=[
        tf.TensorSpec([None, doc_vectors.shape[1]], tf.float32),
        tf.TensorSpec([None, None], tf.int32),
        tf.TensorSpec([None], tf.int32)
    ],
                 autograph=False)
    def retrieve(self, queries, ids, lengths):

      def dense_rows(d):  # OrqaModel.retrieve's exact search: rows and scores
        scores, rows = tf.math.top_k(tf.matmul(queries, self.embeddings, transpose_b=True), k=d)
        return rows, scores

      return {
          "bm25":
              sparse_in_graph.retrieve_rows(hybrid.BM25, self.sparse, ids, lengths, dense_rows, depth,
                                            fusion_depth),
          "hybrid":
              sparse_in_graph.retrieve_rows(hybrid.HYBRID, self.sparse, ids, lengths, dense_rows, depth,
                                            fusion_depth)
      }

  module = Retriever()
  tf.saved_model.save(module, path, signatures={"serving_default": module.retrieve})
  return tf.saved_model.load(path).signatures["serving_default"]


def _run_saved(signature, query_vectors, pieces):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  out = {"bm25": [], "hybrid": []}
  for begin in range(0, len(pieces), _BATCH):
    batch = pieces[begin:begin + _BATCH]
    width = max(1, max(len(p) for p in batch))
    ids = np.array([list(p) + [0] * (width - len(p)) for p in batch], np.int32)
    result = signature(queries=tf.constant(query_vectors[begin:begin + _BATCH]),
                       ids=tf.constant(ids),
                       lengths=tf.constant([len(p) for p in batch], tf.int32))
    for key in out:
      out[key].append(result[key].numpy())
  return {key: np.concatenate(value) for key, value in out.items()}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  from realm_tf import evaluation  # pylint: disable=g-import-not-at-top
  from realm_tf import io_utils  # pylint: disable=g-import-not-at-top
  from realm_tf.data import squad_open  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import hybrid  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import index as index_lib  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import sparse_in_graph  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import text_embedder  # pylint: disable=g-import-not-at-top
  machine = _machine()
  full = squad_open.load_squad_open(*minilm_lib.squad_paths("bench/hybrid_export_bench.py"))
  data = full if _CORPUS.value == "all" else full.dev_corpus()
  titles, bodies = [d.title for d in data.documents], [d.body for d in data.documents]
  questions = [q.question for q in data.questions]
  _log(f"{len(bodies)} paragraphs, {len(questions)} questions")

  directory = minilm_lib.minilm_directory(minilm_lib.CACHE_DIR.value, minilm_lib.MINILM_DIR.value)
  model, tokenizer = minilm_lib.load(directory)
  embedder = (directory,
              text_embedder.TextEmbedder(model, tokenizer, max_seq_length=minilm_lib.CACHED_SEQ_LENGTH))
  doc_vectors = _embeddings(embedder, "paragraphs" if _CORPUS.value == "all" else "paragraphs_dev", bodies)
  query_vectors = _embeddings(embedder, "questions", questions)
  dense_index = index_lib.build_index(doc_vectors, implementation="brute_force")

  def dense_fn(depth):
    return dense_index.search(query_vectors, depth)

  recall_inputs = data.recall_inputs()
  rows, timings = {}, {}

  def measure(name, fn):
    start = time.perf_counter()
    rows[name] = fn()
    timings[name] = time.perf_counter() - start
    recall = evaluation.rankings_recall(rows[name][:, :max(_KS)], ks=_KS, **recall_inputs)
    _log(f"{name:<34} " + "  ".join(f"@{k} {recall[f'answer_recall@{k}']:.1f}" for k in _KS) +
         f"   ({timings[name]:.0f} s)")
    return recall

  results = {}
  sparse = hybrid.build_bm25(titles, bodies)
  results["python bm25s"] = measure("python bm25s", lambda: sparse.search(questions, max(_KS))[0])
  results["python hybrid"] = measure(
      "python hybrid",
      lambda: hybrid.candidate_rows(hybrid.HYBRID, questions, max(_KS), dense_fn, sparse)["rows"])
  pieces = sparse_in_graph.question_pieces(questions, tokenizer)
  variants = [("", True)] + ([(" unstemmed", False)] if _NO_STEM.value else [])
  parameters = {}
  with tempfile.TemporaryDirectory() as tmp:
    for suffix, stem in variants:
      start = time.perf_counter()
      wordpiece = sparse_in_graph.build(tokenizer, titles, bodies, stem=stem)
      parameters["in-graph bm25" + suffix] = dict(wordpiece.parameters, build_s=time.perf_counter() - start)
      signature = _saved_retriever(wordpiece, doc_vectors, os.path.join(tmp, "retriever" + suffix.strip()))
      saved = {}
      results["in-graph wordpiece bm25" + suffix] = measure(
          "in-graph wordpiece bm25" + suffix,
          lambda: saved.setdefault("rows", _run_saved(signature, query_vectors, pieces))["bm25"])
      results["exported hybrid" + suffix] = measure("exported hybrid" + suffix,
                                                    lambda: saved["rows"]["hybrid"])
  differences = {
      f"answer_recall@{k}": {
          "bm25":
              results["in-graph wordpiece bm25"][f"answer_recall@{k}"] -
              results["python bm25s"][f"answer_recall@{k}"],
          "hybrid":
              results["exported hybrid"][f"answer_recall@{k}"] -
              results["python hybrid"][f"answer_recall@{k}"]
      } for k in _KS
  }
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  io_utils.write_json_atomic(
      _OUTPUT.value,
      {
          "benchmark": "hybrid_export_bench",
          "command": " ".join([os.path.relpath(sys.argv[0], _REPO)] + sys.argv[1:]),
          "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "machine": dict(machine, load_average_at_end=list(os.getloadavg())),
          "corpus": _CORPUS.value,
          "num_docs": len(bodies),
          "num_questions": len(questions),
          "dense": "all-MiniLM-L6-v2 zero-shot over paragraph bodies, exact inner product",
          "fusion": {
              "method": "reciprocal rank fusion",
              "k": 60,
              "depth_per_ranking": min(hybrid.FUSION_DEPTH, len(bodies))
          },
          "bm25s_parameters": sparse.parameters,
          "in_graph_parameters": parameters,
          "recall": results,
          "exported_minus_python": differences,
          "seconds": timings,
          # One call of the saved model returns both of its rankings.
          "seconds_note": "in-graph wordpiece bm25's seconds include the exported hybrid's (one call, "
                          "10,570 questions in batches of 256, after loading the SavedModel)"
      })
  print(json.dumps(differences, indent=1))
  _log(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
