r"""Benchmark of the MIPS indexes: exact brute force (tf.matmul + top_k) against ScaNN.

Why: the refresher rebuilds the index at every refresh and the trainer's input pipeline searches it for
every example, so build time, queries/s, recall against exact search, and the bytes per document on
disk and in memory decide which index (and which ScaNN parameters) pre-training can afford.

  python bench/index_bench.py                          # 100k and 1M x 128, synthetic data
  python bench/index_bench.py --sizes=20000            # a quick run
  python bench/index_bench.py --embeddings_npy=E.npy   # real document embeddings as well
  python bench/index_bench.py --datasets= --embeddings_npy=E.npy --queries_npy=Q.npy \
      --replicate_to=100000,1000000                    # real embeddings, also replicated with noise

For each data set and size: build time, median search time of a batch of --num_queries queries top-k
over --runs runs (after one warm-up), recall@k of ScaNN (float32 re-scoring, and the compressed index's
int8 re-scoring) against exact search, bytes per document of the
saved directory, and resident memory per document of the loaded index and the time to verify and load it
(measured in a fresh process, so it is what a trainer pays), and the 1-minute load average of the
machine (timings on a shared machine mean little without it). Synthetic data sets:
  clustered         N/100 Gaussian clusters (sigma 0.3 around N(0, I) centres), queries near documents
                    (neighbourhoods of ~100 documents): the main synthetic number.
  coarse_clustered  N/1000 clusters: the top-k is decided by small differences inside big clusters,
                    which AH quantization blurs (a hard case).
  gaussian          isotropic N(0, I): no structure at all, the worst case for any tree or quantizer.
Real embeddings (--embeddings_npy, float32 [N, D]): --num_queries random rows are held out as queries
(with --queries_npy, --num_queries random rows of that file are used instead) and the rest are indexed.
--replicate_to grows them to larger N for the index's sake (a real corpus of that size is not at hand):
the documents are repeated, and every copy but the first gets isotropic Gaussian noise whose expected
norm is --replicate_noise times the median distance from a real document to its nearest other real
document (then rescaled to the original's norm), so a copy is a new point in its original's
neighbourhood, usually nearer to it than any other real document, not an exact duplicate.
Prints a table and writes JSON (with a machine description) to --output.
"""

import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata

from absl import app
from absl import flags
import numpy as np

_SIZES = flags.DEFINE_list("sizes", ["100000", "1000000"], "Numbers of documents (synthetic data).")
_DIM = flags.DEFINE_integer("dim", 128, "Embedding dimension (synthetic data).")
_DATASETS = flags.DEFINE_list("datasets", ["clustered", "coarse_clustered", "gaussian"],
                              "Synthetic data sets: clustered, coarse_clustered, gaussian.")
_EMBEDDINGS_NPY = flags.DEFINE_string("embeddings_npy", None,
                                      "Optional float32 [N, D] .npy of real document embeddings.")
_QUERIES_NPY = flags.DEFINE_string("queries_npy", None,
                                   "Optional float32 [B, D] .npy of real query embeddings.")
_REPLICATE_TO = flags.DEFINE_list(
    "replicate_to", [], "With --embeddings_npy: also bench the real documents replicated with noise to "
    "these numbers of documents.")
_REPLICATE_NOISE = flags.DEFINE_float(
    "replicate_noise", 0.5, "Expected noise norm of a replicated copy, as a fraction of the median "
    "nearest-neighbour distance among the real documents.")
_PCA_DIMS = flags.DEFINE_integer(
    "pca_dims", None, "Project the real embeddings (and queries) onto their top principal components "
    "first, e.g. 128 for MiniLM's 384-d vectors at REALM's and ORQA's index dimension D=128.")
_NUM_QUERIES = flags.DEFINE_integer("num_queries", 64, "Queries per search batch.")
_K = flags.DEFINE_integer("k", 10, "Results per query.")
_RUNS = flags.DEFINE_integer("runs", 5, "Timed runs per measurement (the median is reported).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the synthetic data.")
_NUM_LEAVES = flags.DEFINE_integer("num_leaves", None, "ScaNN num_leaves (default: scales with N).")
_NUM_LEAVES_TO_SEARCH = flags.DEFINE_integer("num_leaves_to_search", None,
                                             "ScaNN num_leaves_to_search (default: 5% of leaves).")
_NUM_CANDIDATES = flags.DEFINE_integer("num_candidates", None,
                                       "ScaNN candidates re-scored exactly (default 100).")
_MEASURE_MEMORY = flags.DEFINE_bool("measure_memory", True,
                                    "Measure the loaded index's resident memory in a fresh process.")
_OUTPUT = flags.DEFINE_string(
    "output", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "index_bench.json"),
    "Where to write the JSON results.")
# Internal: the fresh-process memory probe runs this same script with this flag.
_PROBE = flags.DEFINE_string("probe_load", None, "(internal) load this index, print memory as JSON.")

# (name, implementation, build options): the compressed ScaNN index re-scores from int8 vectors.
_VARIANTS = (("brute_force", "brute_force", {}), ("scann", "scann", {}), ("scann_int8", "scann", {
    "rescoring": "int8"
}))


def _rss_bytes() -> int:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) * 1024
  raise RuntimeError("/proc/self/status has no VmRSS; the memory probe needs Linux")


def _probe_load(directory: str) -> None:
  """Prints {"rss_bytes", "load_s"} of loading directory (run in a fresh process)."""
  from realm_tf.retrieval import index as index_lib  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import scann_index  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.constant(0.0).numpy()  # runtime initialised before the baseline
  scann_index.ScannIndex.build(np.ones([2, 2], np.float32))  # ScaNN's library loaded before too
  gc.collect()
  before = _rss_bytes()
  start = time.perf_counter()
  index = index_lib.load_index(directory)
  load_s = time.perf_counter() - start
  index.search(np.zeros([1, index.dim], np.float32), 1)
  gc.collect()
  print(json.dumps({"rss_bytes": _rss_bytes() - before, "load_s": load_s}))


def _memory_of(directory: str) -> dict:
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TF_CPP_MIN_LOG_LEVEL="3")
  result = subprocess.run(
      [sys.executable, os.path.abspath(__file__), f"--probe_load={directory}"],
      env=env,
      capture_output=True,
      text=True,
      check=False)
  if result.returncode != 0:
    raise RuntimeError(f"bench/index_bench.py: the memory probe of {directory} failed:\n"
                       f"{result.stderr[-3000:]}")
  return json.loads(result.stdout.strip().splitlines()[-1])


def _dir_bytes(directory: str) -> int:
  return sum(
      os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(directory) for name in names)


def _synthetic(name: str, num: int, dim: int, num_queries: int, seed: int):
  """(documents [num, dim], queries [num_queries, dim]) float32."""
  rng = np.random.default_rng(seed)
  if name == "gaussian":
    docs = rng.standard_normal(size=(num, dim), dtype=np.float32)
    return docs, rng.standard_normal(size=(num_queries, dim), dtype=np.float32)
  per_cluster = {"clustered": 100, "coarse_clustered": 1000}.get(name)
  if per_cluster is None:
    raise app.UsageError(f"--datasets: unknown data set {name!r}; choose from clustered, "
                         "coarse_clustered, gaussian")
  centres = rng.standard_normal(size=(max(1, num // per_cluster), dim), dtype=np.float32)
  docs = centres[rng.integers(0, centres.shape[0], size=num)]
  docs += 0.3 * rng.standard_normal(size=(num, dim), dtype=np.float32)
  queries = docs[rng.integers(0, num, size=num_queries)]
  queries = queries + 0.3 * rng.standard_normal(size=queries.shape, dtype=np.float32)
  return docs, queries


def _pca_components(docs: np.ndarray, dims: int) -> np.ndarray:
  """[D, dims]: the documents' top principal components (fitted on the centred documents)."""
  if not 0 < dims <= docs.shape[1]:
    raise app.UsageError(f"--pca_dims={dims} must be in [1, {docs.shape[1]}]")
  _, _, vt = np.linalg.svd(docs - docs.mean(axis=0), full_matrices=False)
  return vt[:dims].T


def _real(num_queries: int, seed: int):
  path = _EMBEDDINGS_NPY.value
  docs = np.load(path, allow_pickle=False)
  if docs.ndim != 2 or docs.dtype != np.float32:
    raise app.UsageError(f"{path}: expected float32 [N, D], got {docs.dtype} {docs.shape}")
  queries = None
  if _QUERIES_NPY.value:
    queries = np.load(_QUERIES_NPY.value, allow_pickle=False)
    if queries.ndim != 2 or queries.shape[1] != docs.shape[1]:
      raise app.UsageError(f"{_QUERIES_NPY.value}: expected [B, {docs.shape[1]}], got {queries.shape}")
  if _PCA_DIMS.value:
    # Centred for the fit only: inner products of the projections keep the ranking signal of the
    # components, as a learned D x 128 projection head would.
    components = _pca_components(docs, _PCA_DIMS.value)
    docs = np.ascontiguousarray(docs @ components, np.float32)
    if queries is not None:
      queries = np.ascontiguousarray(queries @ components, np.float32)
  if queries is not None:
    # A random sample: the file's first rows are often one topic (SQuAD dev questions come by article).
    rows = np.random.default_rng(seed).choice(queries.shape[0],
                                              min(num_queries, queries.shape[0]),
                                              replace=False)
    return docs, np.asarray(queries[np.sort(rows)], np.float32)
  held_out = np.zeros(docs.shape[0], bool)
  held_out[np.random.default_rng(seed).choice(docs.shape[0], num_queries, replace=False)] = True
  return np.ascontiguousarray(docs[~held_out]), docs[held_out]


def _median_nn_distance(docs: np.ndarray, seed: int, sample: int = 2000) -> float:
  """Median Euclidean distance from a sample of documents to their nearest other document."""
  rng = np.random.default_rng(seed)
  rows = rng.choice(docs.shape[0], min(sample, docs.shape[0]), replace=False)
  norms = np.sum(docs.astype(np.float64)**2, axis=1)
  distances = norms[rows, None] + norms[None, :] - 2.0 * (docs[rows].astype(np.float64) @ docs.T)
  distances[np.arange(rows.size), rows] = np.inf  # not itself
  return float(np.median(np.sqrt(np.maximum(distances.min(axis=1), 0.0))))


def _replicated(docs: np.ndarray, size: int, noise_fraction: float, seed: int):
  """(documents [size, D] float32, noise sigma per dimension): docs repeated, copies perturbed."""
  if size < docs.shape[0]:
    raise app.UsageError(f"--replicate_to={size} is below the {docs.shape[0]} real documents")
  rng = np.random.default_rng(seed)
  sigma = noise_fraction * _median_nn_distance(docs, seed) / np.sqrt(docs.shape[1])
  out = np.empty([size, docs.shape[1]], np.float32)
  out[:docs.shape[0]] = docs
  norms = np.linalg.norm(docs, axis=1, keepdims=True)
  for start in range(docs.shape[0], size, docs.shape[0]):
    end = min(size, start + docs.shape[0])
    copy = docs[:end -
                start] + sigma * rng.standard_normal(size=(end - start, docs.shape[1]), dtype=np.float32)
    # Back to the original's norm: MIPS over unit vectors stays cosine search, and no copy wins a
    # query only because the noise made it longer.
    copy *= norms[:end - start] / np.maximum(np.linalg.norm(copy, axis=1, keepdims=True), 1e-12)
    out[start:end] = copy
  return out, float(sigma)


def _median_search_s(index, queries, k, runs, **search_options):
  index.search(queries, k, **search_options)  # warm-up
  times = []
  for _ in range(runs):
    start = time.perf_counter()
    index.search(queries, k, **search_options)
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def _machine():
  model = ""
  if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo") as f:
      model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
  mem = ""
  if os.path.exists("/proc/meminfo"):
    with open("/proc/meminfo") as f:
      mem = f.readline().split(":", 1)[1].strip()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return {
      "platform": platform.platform(),
      "cpu_model": model,
      "cpu_count": os.cpu_count(),
      "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
      "memory": mem,
      "python": platform.python_version(),
      "numpy": np.__version__,
      "tensorflow": tf.__version__,
      "scann": metadata.version("scann"),
      "load_average_at_start": list(os.getloadavg()),
      "note": "ScaNN searches single-threaded (search_batched); TensorFlow uses every core",
  }


def _bench_one(dataset, docs, queries, k, runs, scann_options, workdir):
  from realm_tf.retrieval import brute_force_index  # pylint: disable=g-import-not-at-top
  from realm_tf.retrieval import index as index_lib  # pylint: disable=g-import-not-at-top
  rows, exact_ids = [], None
  for variant, implementation, variant_options in _VARIANTS:
    options = dict(scann_options, **variant_options) if implementation == "scann" else {}
    gc.collect()
    start = time.perf_counter()
    index = index_lib.build_index(docs, implementation=implementation, **options)
    build_s = time.perf_counter() - start
    search_s = _median_search_s(index, queries, k, runs)
    ids, _ = index.search(queries, k)
    if exact_ids is None:
      exact_ids = ids  # brute force runs first
    directory = os.path.join(workdir, f"{dataset}-{docs.shape[0]}-{variant}")
    start = time.perf_counter()
    index.save(directory, step=0)
    save_s = time.perf_counter() - start
    row = {
        "dataset": dataset,
        "num_docs": int(docs.shape[0]),
        "dim": int(docs.shape[1]),
        "implementation": variant,
        "parameters": index.parameters,
        "num_queries": int(queries.shape[0]),
        "k": k,
        "build_s": build_s,
        "search_ms": 1000 * search_s,
        "queries_per_s": queries.shape[0] / search_s,
        f"recall_at_{k}": index_lib.recall_at_k(ids, exact_ids, k),
        "save_s": save_s,
        "disk_bytes_per_doc": _dir_bytes(directory) / docs.shape[0],
        # Timings on a shared machine are only as good as its load: recorded beside them.
        "load_average_1min": os.getloadavg()[0],
    }
    if implementation == "scann" and index.parameters["mode"] == "tree_ah":
      # The recall/speed trade-off at a few settings of the search-time knobs.
      sweep = []
      leaves = index.parameters["num_leaves_to_search"]
      for searched, candidates in ((max(1, leaves // 2), 100), (leaves, 50), (leaves, 200), (leaves, 300),
                                   (2 * leaves, 100), (2 * leaves, 200)):
        searched = min(searched, index.parameters["num_leaves"])
        sweep_ids, _ = index.search(queries, k, num_leaves_to_search=searched, num_candidates=candidates)
        sweep.append({
            "num_leaves_to_search":
                searched,
            "num_candidates":
                candidates,
            "search_ms":
                1000 * _median_search_s(
                    index, queries, k, runs, num_leaves_to_search=searched, num_candidates=candidates),
            f"recall_at_{k}":
                index_lib.recall_at_k(sweep_ids, exact_ids, k)
        })
      row["sweep"] = sweep
    if variant_options.get("rescoring") == "int8":
      # The ceiling the int8 vectors set, whatever ScaNN's candidates: exact search over them.
      int8_ids, _ = brute_force_index.BruteForceIndex.build(index.embeddings).search(queries, k)
      row[f"exact_int8_recall_at_{k}"] = index_lib.recall_at_k(int8_ids, exact_ids, k)
    del index
    gc.collect()
    if _MEASURE_MEMORY.value:
      probe = _memory_of(directory)
      row["memory_bytes_per_doc"] = probe["rss_bytes"] / docs.shape[0]
      row["load_s"] = probe["load_s"]
    shutil.rmtree(directory)
    rows.append(row)
    print(_format_row(row, k), flush=True)
  return rows


_HEADER = (f"{'dataset':<24} {'N':>8} {'D':>4} {'index':<11} {'build s':>8} {'ms/batch':>9} "
           f"{'queries/s':>10} {'recall':>7} {'disk B/doc':>10} {'mem B/doc':>10} {'load s':>7} "
           f"{'sys load':>8}")


def _format_row(row, k) -> str:

  def num(key, fmt):
    return format(row[key], fmt) if key in row else "-".rjust(int(fmt.split(".")[0]))

  return (f"{row['dataset'][:24]:<24} {row['num_docs']:>8} {row['dim']:>4} {row['implementation']:<11} "
          f"{num('build_s', '8.2f')} {num('search_ms', '9.2f')} {num('queries_per_s', '10.0f')} "
          f"{num(f'recall_at_{k}', '7.3f')} {num('disk_bytes_per_doc', '10.0f')} "
          f"{num('memory_bytes_per_doc', '10.0f')} {num('load_s', '7.2f')} "
          f"{num('load_average_1min', '8.1f')}")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if _PROBE.value:
    _probe_load(_PROBE.value)
    return
  from realm_tf import io_utils  # pylint: disable=g-import-not-at-top
  sizes = [int(s) for s in _SIZES.value]
  k, runs, num_queries = _K.value, _RUNS.value, _NUM_QUERIES.value
  scann_options = {
      name: flag.value
      for name, flag in (("num_leaves", _NUM_LEAVES), ("num_leaves_to_search", _NUM_LEAVES_TO_SEARCH),
                         ("num_candidates", _NUM_CANDIDATES))
      if flag.value is not None
  }
  machine = _machine()
  print(f"{machine['cpu_model']}, {machine['cpus_available']} CPUs, {machine['memory']}, load "
        f"{machine['load_average_at_start'][0]:.1f}; {num_queries} queries, top-{k}, median of {runs} "
        "runs")
  print(_HEADER)
  results = []
  workdir = tempfile.mkdtemp(prefix="index_bench-")
  try:
    for dataset in _DATASETS.value:
      for size in sizes:
        docs, queries = _synthetic(dataset, size, _DIM.value, num_queries, _SEED.value)
        results += _bench_one(dataset, docs, queries, k, runs, scann_options, workdir)
        del docs, queries
    if _EMBEDDINGS_NPY.value:
      docs, queries = _real(num_queries, _SEED.value)
      name = "file:" + os.path.basename(_EMBEDDINGS_NPY.value)
      if _PCA_DIMS.value:
        name += f" PCA-{_PCA_DIMS.value}"
      results += _bench_one(name, docs, queries, k, runs, scann_options, workdir)
      for size in (int(s) for s in _REPLICATE_TO.value):
        replicated, sigma = _replicated(docs, size, _REPLICATE_NOISE.value, _SEED.value)
        rows = _bench_one(f"{name} replicated", replicated, queries, k, runs, scann_options, workdir)
        for row in rows:
          row.update(replicated_from=int(docs.shape[0]),
                     noise_sigma_per_dim=sigma,
                     replicate_noise=_REPLICATE_NOISE.value)
        results += rows
        del replicated
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
  io_utils.write_json_atomic(
      _OUTPUT.value, {
          "benchmark": "index_bench",
          "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "machine": machine,
          "settings": {
              "sizes": sizes,
              "datasets": _DATASETS.value,
              "embeddings_npy": _EMBEDDINGS_NPY.value,
              "queries_npy": _QUERIES_NPY.value,
              "pca_dims": _PCA_DIMS.value,
              "replicate_to": _REPLICATE_TO.value,
              "replicate_noise": _REPLICATE_NOISE.value,
              "num_queries": num_queries,
              "k": k,
              "runs": runs,
              "scann_options": scann_options
          },
          "results": results,
      })
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
