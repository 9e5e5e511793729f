r"""What this host's REALM input pipeline supplies against what a trainer consumes (issue 42).

REALM's input pipeline (realm_tf/tasks/realm_input.py) runs on the trainer's host: per example it
masks a salient span of a sentence, embeds the masked query with the STALE query tower of the
published index (LoadedIndex.embed_queries, a SavedModel), searches the MIPS index, drops the
query's own document and duplicates and reads the candidates' token ids (RetrievalState.retrieve,
CorpusTable.gather), and packs the candidate and joint BERT inputs. This bench measures examples per
second (and per core) of that pipeline on this CPU, where the time goes, the trainer's step time at
the same configuration (so the input-bound share of a step is a number), and how many host cores
would keep one accelerator fed.

  .venv/bin/python bench/input_pipeline_bench.py                 # both (~12 min on 2 cores)
  .venv/bin/python bench/input_pipeline_bench.py --configs=demo  # about a minute
  .venv/bin/python bench/input_pipeline_bench.py --configs=paper --paper_index_rows=1000000

Configurations:
  demo   bin/demo_pipeline.PipelineOptions' sizes: the tiny BERT preset, Q=32, C=128, N=8 candidates
         (with the null document), D=64, batch 32, testdata's 300-document corpus and REALM
         statements (the news items the demo pre-trains on); the index published by
         refresher.bootstrap (brute_force), as realm_input_test's setUpClass does.
  paper  REALM's: BERT-base query tower (random weights; published by publish_index as the
         SavedModel the pipeline loads), Q=96, N=8 candidates of C=288, D=128; indexes of
         --paper_index_rows random float32 rows and a synthetic corpus table of as many rows (random
         wordpiece ids).

Components, each timed alone by calling what the pipeline calls (per example, wall and process CPU):
  query featurization  span choice, tokenization, masking, packing, own-document fingerprint: the
                       front of realm_dataset rebuilt in tf.data from the functions it maps
                       (realm_input._select_span, Tokenizer.tokenize_with_offsets,
                       Featurizer.mask_salient_span and query_inputs,
                       corpus_table.document_fingerprint); its shuffle is left out;
  query embedding      LoadedIndex.embed_queries;
  search               MipsIndex.search with retrieve's k (N - 1 + 4);
  candidate lookup     RetrievalState.retrieve with its query tower and index replaced by stubs that
                       return what the real ones returned: what remains is retrieve's own work, the
                       own-document/duplicate filter and CorpusTable.gather (gather also alone);
  candidate featurization  realm_dataset's `assemble` (a closure there): the same Featurizer calls
                       in the same order, in a tf.function as tf.data traces them.
The demo's whole pipeline is also timed through realm_input.realm_dataset itself (end to end).

Per core: the examples one core supplies per second, 1 / (process CPU seconds per example): the
pipeline's threads are counted wherever they ran. Host cores to keep an accelerator fed: accelerator
examples/s x CPU seconds per example (--accelerator_examples_per_second; the issue's anchor, one
H200 in bf16 PyTorch, about 3.8 s per step of 512 examples).

Simulated at the paper configuration (the JSON says which number is which): index embeddings are
random; indexes above --max_resident_rows are not built, their search time is scaled linearly in
rows from the largest built one (brute force scores every row; ScaNN's defaults search 10% of the
leaves, so the rows it scores grow with the index); ScaNN is built up to --scann_max_build_rows and
scaled above; the corpus table holds the token ids of --paper_corpus_stored_rows rows and the other
rows reuse them (RaggedRows' row starts point into the stored rows: a gather reads as many bytes
from as far apart). The trainer's step is measured at --paper_train_batch_size examples and scaled
linearly to 512.
"""

import dataclasses
import gc
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tf_keras

from bench import throughput_lib
from realm_tf import demo_pipeline
from realm_tf import io_utils
from realm_tf import tokenization
from realm_tf.config import flags_util
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import corpus_table
from realm_tf.data import pretraining
from realm_tf.data import synthetic
from realm_tf.modeling import bert
from realm_tf.modeling import realm as realm_model
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import brute_force_index
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import mips_index
from realm_tf.retrieval import published_index
from realm_tf.retrieval import refresher
from realm_tf.tasks import in_step_retrieval
from realm_tf.tasks import realm_input
from realm_tf.tasks import realm_trainer
from realm_tf.training import optimization
from realm_tf.training import train_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RESULTS = os.path.join(_REPO, "bench", "results")
PAPER_ROWS = 13353718  # Wikipedia's blocks in REALM's and ORQA's index

COMPONENTS = ("query_featurization", "query_embedding", "search", "candidate_lookup",
              "candidate_featurization")
COMPONENT_LABELS = {
    "query_featurization": "query featurization",
    "query_embedding": "query embedding",
    "search": "search",
    "candidate_lookup": "candidate lookup (filter + gather)",
    "candidate_featurization": "candidate featurization"
}

_CONFIGS = flags.DEFINE_list("configs", ["demo", "paper"], "Configurations: demo, paper.")
_PAPER_INDEX_ROWS = flags.DEFINE_list("paper_index_rows", ["1000000", str(PAPER_ROWS)],
                                      "Index sizes (rows) at the paper configuration.")
_QUERIES = flags.DEFINE_integer(
    "queries", 64, "Examples timed per component at the paper configuration (one retrieval batch "
    "of --paper_batch_size by default).")
_DEMO_QUERIES = flags.DEFINE_integer("demo_queries", 512, "Examples timed per component at the demo.")
_DEMO_E2E_BATCHES = flags.DEFINE_integer("demo_e2e_batches", 30,
                                         "realm_dataset batches timed end to end at the demo.")
_DEMO_BATCH = flags.DEFINE_integer(
    "demo_batch_size", None, "The demo configuration's REALM batch (its pipeline batches and train step); "
    "default: bin/demo's.")
_PAPER_BATCH = flags.DEFINE_integer(
    "paper_batch_size", 64, "Examples per retrieval call at the paper configuration (a host's "
    "share of the 512 of a step on 8 hosts; also the brute-force index's query batch).")
_IMPLEMENTATIONS = flags.DEFINE_list(
    "search_implementations", ["brute_force", "scann"],
    "MIPS implementations timed (the totals' retrieve() stubs answer as brute_force).")
_MAX_RESIDENT = flags.DEFINE_integer(
    "max_resident_rows", 14000000, "Paper indexes above this many rows are not built: their search "
    "is scaled from the largest built one (float32 brute force holds 512 bytes a row).")
_SCANN_MAX_BUILD = flags.DEFINE_integer(
    "scann_max_build_rows", 1000000, "ScaNN indexes above this many rows are scaled, not built (a "
    "build takes about a minute per million rows here, and holds a second float32 copy).")
_STORED_ROWS = flags.DEFINE_integer("paper_corpus_stored_rows", 1000000,
                                    "Distinct rows of token ids in the paper's synthetic corpus table.")
_PAPER_BERT = flags.DEFINE_enum("paper_bert", "bert_base", ["bert_base", "tiny"],
                                "BERT of the paper configuration (tiny: for tests).")
_DEMO_JIT = flags.DEFINE_boolean("demo_jit_compile", True,
                                 "XLA for the demo's train step and bootstrap embedding, as bin/demo.")
_TRAIN_STEPS = flags.DEFINE_integer("train_steps", 5, "Demo train steps timed (after one warm-up).")
_PAPER_TRAIN_BATCH = flags.DEFINE_integer("paper_train_batch_size", 2,
                                          "Examples in the paper configuration's timed train step.")
_PAPER_TRAIN_STEPS = flags.DEFINE_integer("paper_train_steps", 2,
                                          "Paper train steps timed (after one warm-up).")
_PAPER_JIT = flags.DEFINE_boolean(
    "paper_jit_compile", False, "XLA for the paper's train step (off: on this CPU BERT-base steps "
    "ran faster without it and compiled in a third of the time; "
    "bench/results/train_step_bench.json).")
_ACCEL_EX_S = flags.DEFINE_float("accelerator_examples_per_second", 136.0,
                                 "Examples/s one accelerator trains at the paper configuration.")
_ACCEL_STEP_S = flags.DEFINE_float("accelerator_step_seconds", 3.8,
                                   "Seconds per step of --accelerator_batch_size (for the table).")
_ACCEL_BATCH = flags.DEFINE_integer("accelerator_batch_size", 512, "REALM's batch.")
_MIN_SECONDS = flags.DEFINE_float("min_seconds", 1.0, "Each timing runs at least this long.")
_WORK_DIR = flags.DEFINE_string("work_dir", None, "Scratch directory (default: a temporary one, removed).")
_OUTPUT_JSON = flags.DEFINE_string("output_json", os.path.join(_RESULTS, "input_pipeline_bench.json"),
                                   "Where to write the JSON results.")
_OUTPUT_PNG = flags.DEFINE_string("output_png", os.path.join(_RESULTS, "input_pipeline_bench.png"),
                                  "Where to write the plot ('' for none).")


@dataclasses.dataclass(frozen=True)
class Options:
  """What the flags set; the test builds a small one."""
  configs: Sequence[str] = ("demo", "paper")
  paper_index_rows: Sequence[int] = (1000000, PAPER_ROWS)
  queries: int = 64
  demo_queries: int = 512
  demo_e2e_batches: int = 30
  demo_batch_size: Optional[int] = None  # None: the demo's REALM batch
  paper_batch_size: int = 64
  implementations: Sequence[str] = ("brute_force", "scann")
  max_resident_rows: int = 14000000
  scann_max_build_rows: int = 1000000
  paper_corpus_stored_rows: int = 1000000
  paper_bert: str = "bert_base"
  demo_jit_compile: bool = True
  train_steps: int = 5
  paper_train_batch_size: int = 2
  paper_train_steps: int = 2
  paper_jit_compile: bool = False
  accelerator_examples_per_second: float = 136.0
  accelerator_step_seconds: float = 3.8
  accelerator_batch_size: int = 512
  min_seconds: float = 1.0
  work_dir: Optional[str] = None
  output_json: str = os.path.join(_RESULTS, "input_pipeline_bench.json")
  output_png: str = os.path.join(_RESULTS, "input_pipeline_bench.png")
  testdata_dir: str = os.path.join(_REPO, "testdata")


def _quiet(_):
  pass


_START = time.time()


def _progress(message: str) -> None:
  print(f"[{time.time() - _START:7.1f} s] {message}", flush=True)


def _peak_rss_mib() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# Each timing runs at least this long: this machine's process CPU clock advances in scheduler ticks
# (a millisecond call read 0.0 CPU seconds), so short timings need many calls.
MIN_SECONDS = [1.0]


def _timed(fn: Callable[[], object], calls: int, examples_per_call: int, warmup: int = 1) -> Dict:
  """Wall and process CPU seconds of at least `calls` calls of fn (more until MIN_SECONDS have
  passed) after `warmup` untimed ones (the first traces or compiles), per example. fn returns only
  once its work is done (numpy results or tf.data batches)."""
  for _ in range(warmup):
    fn()
  with throughput_lib.collector_paused():
    wall, cpu = time.perf_counter(), time.process_time()
    done = 0
    while done < calls or time.perf_counter() - wall < MIN_SECONDS[0]:
      fn()
      done += 1
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
  calls = done
  examples = calls * examples_per_call
  return {
      "examples": examples,
      "calls": calls,
      "wall_s": wall,
      "cpu_s": cpu,
      "wall_s_per_example": wall / examples,
      "cpu_s_per_example": cpu / examples,
      "load_average_1min": throughput_lib.load_average()[0]
  }


def _calls(examples: int, batch_size: int) -> int:
  return max(1, math.ceil(examples / batch_size))


# --------------------------------------------------------------------------------------------------
# The pipeline's pieces, called as realm_input calls them.


def query_feature_dataset(pretraining_prefix: str,
                          tokenizer: tokenization.Tokenizer,
                          featurizer,
                          seed: int = 0) -> tf.data.Dataset:
  """realm_dataset's front (realm_input.query_features) without its shuffle: query features one
  example at a time, as they reach its retrieval map."""
  return realm_input.query_features(
      pretraining.pretraining_dataset(pretraining_prefix).repeat(), tokenizer, featurizer, seed)


def candidate_featurizer(featurizer, batch_size: int, num_candidates: int):
  """realm_dataset's assemble step (realm_input.assemble_candidates), traced once as tf.data traces
  it. Takes the query features and retrieve()'s token ids; returns the candidate and joint
  features."""

  # The shapes tf.data gives realm_dataset's assemble (retrieve's set_shape), so that one trace
  # serves every batch, as there: a tf.function traced on concrete shapes would retrace per batch.
  q = featurizer.query_seq_len
  lengths = tf.TensorSpec([batch_size * (num_candidates - 1)], tf.int64)
  values = tf.TensorSpec([None], tf.int64)

  @tf.function(autograph=False,
               input_signature=[
                   tf.TensorSpec([batch_size, q], tf.int32),
                   tf.TensorSpec([batch_size, q], tf.int32), values, lengths, values, lengths
               ])
  def assemble(query_token_ids, query_mask, title_values, title_lengths, body_values, body_lengths):
    titles = tf.RaggedTensor.from_row_lengths(tf.reshape(title_values, [-1]), title_lengths)
    bodies = tf.RaggedTensor.from_row_lengths(tf.reshape(body_values, [-1]), body_lengths)
    return realm_input.assemble_candidates(featurizer, batch_size, num_candidates, query_token_ids,
                                           query_mask, titles, bodies)

  return assemble


class _CachedTower:
  """A query tower that returns fixed embeddings (what the real one returned), so that timing
  RetrievalState.retrieve with it leaves retrieve's own work."""

  def __init__(self, embeddings: np.ndarray):
    self._embeddings = tf.constant(embeddings)

  def embed(self, token_ids, mask, segment_ids):
    del token_ids, mask, segment_ids
    return {"embeddings": self._embeddings}


class _CachedMips:
  """A MIPS index that returns fixed results (what the real one returned)."""

  def __init__(self, mips: mips_index.MipsIndex, ids: np.ndarray, scores: np.ndarray):
    self.num_docs, self.dim = mips.num_docs, mips.dim
    self._result = (ids, scores)

  def search(self, queries, k):
    del queries, k
    return self._result


def _search_k(state: realm_input.RetrievalState) -> int:
  """retrieve()'s k: num_candidates - 1 wanted, 4 spare for the own document and duplicates."""
  return min(state.corpus.num_docs, state.num_candidates - 1 + 4)


def _query_batches(dataset: tf.data.Dataset, batch_size: int, count: int) -> List[Dict[str, np.ndarray]]:
  return [{
      k: v.numpy() for k, v in batch.items()
  } for batch in dataset.batch(batch_size, drop_remainder=True).take(count)]


def _cycled(fn: Callable[[int], object], count: int) -> Callable[[], object]:
  """A no-argument call of fn(i) for i = 0, 1, ..., count - 1, 0, ... (prepared batches in turn)."""
  position = [-1]

  def call():
    position[0] = (position[0] + 1) % count
    return fn(position[0])

  return call


def _inputs(queries: List[Dict]):
  return [(q["query_token_ids"], q["query_mask"], q["query_segment_ids"]) for q in queries]


def _query_embedding(loaded: published_index.LoadedIndex, queries: List[Dict]):
  """(timing, the embeddings of each batch) of LoadedIndex.embed_queries over the prepared batches;
  the pass that computes the embeddings is the warm-up."""
  inputs = _inputs(queries)
  batch_size = len(inputs[0][0])
  _progress(f"  query embedding: {len(inputs)} x {batch_size} queries")
  embeddings = [loaded.embed_queries(*x) for x in inputs]
  timing = _timed(_cycled(lambda i: loaded.embed_queries(*inputs[i]), len(inputs)),
                  len(inputs),
                  batch_size,
                  warmup=0)
  return timing, embeddings


def _retrieval_components(state: realm_input.RetrievalState, loaded: published_index.LoadedIndex,
                          searches: Dict[str, mips_index.MipsIndex], queries: List[Dict],
                          embeddings: List[np.ndarray], own_fingerprints: List[np.ndarray], assemble,
                          with_retrieve: bool) -> Dict:
  """Times each index's search, retrieve's own work (stubs for tower and index), gather and
  candidate featurization over the prepared query batches; returns {name: timing}, and under
  "_retrieved" retrieve()'s outputs. Each first pass, whose answers the next step needs, is the
  warm-up."""
  batch_size = len(own_fingerprints[0])
  calls = len(queries)
  inputs = _inputs(queries)
  results = {}
  k = _search_k(state)
  found = {}
  for name, mips in searches.items():
    _progress(f"  search ({name}, {mips.num_docs:,d} rows): {calls} x {batch_size} queries, k={k}")
    found[name] = [mips.search(e, k) for e in embeddings]
    results[f"search/{name}"] = _timed(_cycled(lambda i, m=mips: m.search(embeddings[i], k), calls),
                                       calls,
                                       batch_size,
                                       warmup=0)
  # retrieve() with its tower and index answering from cache (the pipeline's own index: brute force,
  # else the first one timed): its filter and gather, in its own code.
  pipeline_index = "brute_force" if "brute_force" in found else next(iter(found))
  stubbed = [
      loaded._replace(query_embedder=_CachedTower(e), mips=_CachedMips(loaded.mips, *f))
      for e, f in zip(embeddings, found[pipeline_index])
  ]
  real_index = state.index

  def stubbed_retrieve(i):
    state.index = stubbed[i]
    return state.retrieve(*inputs[i], own_fingerprints[i])

  _progress("  candidate lookup: RetrievalState.retrieve with cached tower and index answers")
  retrieved = [stubbed_retrieve(i) for i in range(calls)]
  results["candidate_lookup"] = _timed(_cycled(stubbed_retrieve, calls), calls, batch_size, warmup=0)
  state.index = real_index
  rows = [r[0].reshape([-1]) for r in retrieved]
  results["candidate_lookup/gather_only"] = _timed(_cycled(lambda i: state.corpus.gather(rows[i]), calls),
                                                   calls, batch_size)
  if with_retrieve:
    _progress("  RetrievalState.retrieve whole (embedding, search, filter, gather)")
    results["retrieve_whole"] = _timed(
        _cycled(lambda i: state.retrieve(*inputs[i], own_fingerprints[i]), calls), calls, batch_size)

  def featurize(i):
    out = assemble(queries[i]["query_token_ids"], queries[i]["query_mask"], *retrieved[i][1:])
    return out[realm_model.JOINT + "_token_ids"].numpy()

  _progress("  candidate featurization (assemble's Featurizer calls)")
  results["candidate_featurization"] = _timed(_cycled(featurize, calls), calls, batch_size)
  results["_retrieved"] = retrieved
  return results


def _query_featurization(dataset: tf.data.Dataset, batch_size: int, examples: int) -> Dict:
  iterator = iter(dataset.batch(batch_size, drop_remainder=True))
  _progress(f"  query featurization: {examples} examples through realm_dataset's front")
  return _timed(lambda: next(iterator)["query_token_ids"].numpy(), _calls(examples, batch_size), batch_size)


def _train_step_timing(config: realm_config_lib.RealmConfig,
                       features: Dict[str, tf.Tensor],
                       jit_compile: bool,
                       steps: int,
                       features_fn: Optional[Callable] = None) -> Dict:
  """realm_trainer.build_model + the project's AdamW + train_lib.TrainStep, as bin/train_realm runs
  them; first step (traces/compiles) and the median of `steps` more. features_fn: the in-step
  retrieval (RealmTask.step_features with --retrieval=in_step), features then being query batches."""
  tf_keras.utils.set_random_seed(0)
  model = realm_trainer.build_model(config)
  optimizer = optimization.create_optimizer(3e-5, num_train_steps=1000)
  step = train_lib.TrainStep(model, optimizer, jit_compile=jit_compile, features_fn=features_fn)
  batch = int(features[realm_model.QUERY + "_token_ids"].shape[0])

  def one():
    wall, cpu = time.perf_counter(), time.process_time()
    loss = float(step(features)["loss"])  # float() waits for the step
    if not np.isfinite(loss):
      raise RuntimeError(f"the REALM train step gave a non-finite loss {loss}")
    return time.perf_counter() - wall, time.process_time() - cpu

  first_wall, _ = one()
  with throughput_lib.collector_paused():
    runs = [one() for _ in range(steps)]
  walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
  median = statistics.median(walls)
  return {
      "batch_size": batch,
      "jit_compile": jit_compile,
      "first_step_s": first_wall,
      "median_step_s": median,
      "median_step_cpu_s": statistics.median(cpus),
      "step_times_s": walls,
      "step_cpu_s": cpus,
      "examples_per_second": batch / median,
      "wall_s_per_example": median / batch,
      "cpu_s_per_example": statistics.median(cpus) / batch,
      "load_average_1min": throughput_lib.load_average()[0]
  }


# --------------------------------------------------------------------------------------------------
# Configurations.


def _demo_settings(options: Options) -> Dict:
  demo = demo_pipeline.PipelineOptions(output_dir="unused", testdata_dir=options.testdata_dir)
  return {
      "bert": demo.realm_bert_config,
      "query_seq_len": demo.query_seq_len,
      "candidate_seq_len": demo.candidate_seq_len,
      "num_candidates": demo.num_candidates,
      "projection_size": demo.projection_size,
      "max_masks": demo.max_masks,
      "embedder_pooling": demo.embedder_pooling,
      "batch_size": options.demo_batch_size or demo.realm_batch_size,
      "realm_pretraining": demo.realm_pretraining,
      "seed": demo.seed
  }


def run_demo(options: Options, work_dir: str) -> Dict:
  """The demo's sizes on testdata: components, realm_dataset end to end, the REALM train step."""
  settings = _demo_settings(options)
  vocab = os.path.join(options.testdata_dir, "vocab.txt")
  bert_config = flags_util.bert_config(settings["bert"], vocab)
  config = realm_config_lib.RealmConfig(
      retriever_bert=bert_config,
      reader_bert=bert_config,
      vocab_path=vocab,
      # 1e-3: the demo's REALM starts from its ICT retriever, whose embedder uses it.
      projection_size=settings["projection_size"],
      embedder_layer_norm_epsilon=1e-3,
      embedder_pooling=settings["embedder_pooling"],
      query_seq_len=settings["query_seq_len"],
      candidate_seq_len=settings["candidate_seq_len"],
      max_masks=settings["max_masks"],
      num_candidates=settings["num_candidates"])
  batch_size = settings["batch_size"]
  root = os.path.join(work_dir, "demo")
  model_dir = os.path.join(root, "model")
  config.save(model_dir)
  tokenizer = config.tokenizer()
  featurizer = config.featurizer(tokenizer)
  _progress("demo: writing testdata's corpus and REALM statements, bootstrapping the index")
  corpus_prefix = os.path.join(root, "corpus", "blocks")
  corpus_lib.write_corpus(
      lambda: corpus_lib.read_documents(os.path.join(options.testdata_dir, "corpus.jsonl")), tokenizer,
      corpus_prefix, 2)
  raw = os.path.join(options.testdata_dir, "pretraining.jsonl")
  if settings["realm_pretraining"] == "news":
    raw = os.path.join(root, "news.jsonl")
    synthetic.write_news_items(os.path.join(options.testdata_dir, "pretraining.jsonl"), raw)
  pretraining_prefix = os.path.join(root, "pretraining", "sentences")
  pretraining.write_pretraining_corpus(lambda: pretraining.read_raw_documents(raw), pretraining_prefix, 2)
  refresher.bootstrap(config,
                      None,
                      refresher.RefresherOptions(model_dir=model_dir,
                                                 corpus_prefix=corpus_prefix,
                                                 index_implementation="brute_force",
                                                 embed_jit_compile=options.demo_jit_compile),
                      log=_quiet)
  table = corpus_table.CorpusTable.load(corpus_prefix)

  def new_state():
    return realm_input.RetrievalState(published_index.IndexWatcher(model_dir,
                                                                   log=_quiet,
                                                                   corpus_prefix=corpus_prefix),
                                      table,
                                      config.num_candidates,
                                      log=_quiet,
                                      expected_dim=config.embedding_dim)

  # End to end through realm_dataset itself, as bin/train_realm builds it.
  state = new_state()
  dataset = realm_input.realm_dataset(pretraining.pretraining_dataset(pretraining_prefix),
                                      tokenizer,
                                      featurizer,
                                      state,
                                      batch_size,
                                      seed=settings["seed"])
  iterator = iter(dataset)
  _progress(f"demo: realm_dataset end to end, {options.demo_e2e_batches} batches of {batch_size}")
  batches = []
  end_to_end = _timed(lambda: batches.append(next(iterator)), options.demo_e2e_batches, batch_size, warmup=2)
  end_to_end["examples_per_second"] = 1 / end_to_end["wall_s_per_example"]
  pipeline_batch = batches[-1]
  del iterator, dataset

  # Components, with the same published index and corpus.
  state = new_state()
  state.ensure_index()
  loaded = state.index
  searches = {}
  for name in options.implementations:
    searches[name] = (loaded.mips if name == loaded.mips.implementation else index_lib.build_index(
        np.asarray(loaded.mips.embeddings), implementation=name))
  front = query_feature_dataset(pretraining_prefix, tokenizer, featurizer, seed=settings["seed"])
  components = {"query_featurization": _query_featurization(front, batch_size, options.demo_queries)}
  calls = _calls(options.demo_queries, batch_size)
  queries = _query_batches(front, batch_size, calls)
  own = [q["own_fingerprint"] for q in queries]
  assemble = candidate_featurizer(featurizer, batch_size, config.num_candidates)
  components["query_embedding"], embeddings = _query_embedding(loaded, queries)
  parts = _retrieval_components(state,
                                loaded,
                                searches,
                                queries,
                                embeddings,
                                own,
                                assemble,
                                with_retrieve=True)
  retrieved = parts.pop("_retrieved")
  components.update(parts)
  # The bench's assemble must produce what the pipeline's does (a drift in realm_input shows here).
  mine = assemble(queries[0]["query_token_ids"], queries[0]["query_mask"], *retrieved[0][1:])
  expected = {
      k: tuple(v.shape)
      for k, v in pipeline_batch.items()
      if k.startswith((realm_model.CANDIDATE, realm_model.JOINT))
  }
  if {k: tuple(v.shape) for k, v in mine.items()} != expected:
    raise RuntimeError(f"the bench's candidate featurization gives {mine.keys()} shapes unlike "
                       f"realm_dataset's {expected}")

  _progress(f"demo: REALM train step, batch {batch_size}, XLA {options.demo_jit_compile}")
  train = _train_step_timing(config, pipeline_batch, options.demo_jit_compile, options.train_steps)
  # --retrieval=in_step: the same step fed query batches, retrieving inside it from the same index.
  _progress(f"demo: REALM train step with in-step retrieval, batch {batch_size}")
  retrieval = in_step_retrieval.InStepRetrieval(loaded, table, featurizer, config.num_candidates)
  in_step_batch = {k: tf.constant(v) for k, v in queries[0].items()}
  train_in_step = _train_step_timing(config,
                                     in_step_batch,
                                     options.demo_jit_compile,
                                     options.train_steps,
                                     features_fn=retrieval.candidate_features)
  return {
      "settings":
          dict(settings,
               corpus_rows=table.num_docs,
               index="refresher.bootstrap, "
               "brute_force (ScaNN: built from its embeddings)",
               retrieval_batch_size=batch_size),
      "components":
          components,
      "end_to_end":
          end_to_end,
      "train_step":
          train,
      "train_step_in_step":
          train_in_step,
      "index_rows": {
          "brute_force": table.num_docs
      }
  }


def _paper_config(options: Options, vocab: str) -> realm_config_lib.RealmConfig:
  if options.paper_bert == "bert_base":
    bert_config = bert.bert_base_config()
  else:  # tests: the tiny preset with room for the joint inputs (Q + C = 384)
    bert_config = bert.tiny_config(30522, max_position_embeddings=512)
  return realm_config_lib.RealmConfig(retriever_bert=bert_config,
                                      reader_bert=bert_config,
                                      vocab_path=vocab,
                                      projection_size=128,
                                      query_seq_len=96,
                                      candidate_seq_len=288,
                                      max_masks=10,
                                      num_candidates=8)


def _random_index(rows: int, dim: int, seed: int) -> brute_force_index.BruteForceIndex:
  """A brute-force index over `rows` random float32 rows, its blocks made in place by TensorFlow so
  that the rows are held once (BruteForceIndex.build would hold a numpy copy beside its tensors: 2 x
  6.8 GB at 13.35M rows). Same constructor arguments as its build's defaults."""
  block = 262144
  tf.random.set_seed(seed)
  with tf.device("/CPU:0"):
    blocks = [
        tf.random.uniform([min(block, rows - start), dim], -1.0, 1.0) for start in range(0, rows, block)
    ]
  return brute_force_index.BruteForceIndex(blocks,
                                           None,
                                           query_batch_size=64,
                                           doc_block_size=block,
                                           device="/CPU:0")


def _synthetic_table(rows: int, stored_rows: int, candidate_seq_len: int,
                     seed: int) -> corpus_table.CorpusTable:
  """A CorpusTable of `rows` documents with random wordpieces: titles of 2-10 and bodies of 250 to
  C - 3 wordpieces (Wikipedia blocks fill the candidate length). Only `stored_rows` rows of token
  ids are held; the others reuse them through the row starts (13.35M x 288 int32 would be 15 GB).
  Texts are empty: the pipeline reads token ids and fingerprints only."""
  rng = np.random.default_rng(seed)
  stored = min(rows, stored_rows)

  def ragged(low: int, high: int) -> corpus_table.RaggedRows:
    lengths = rng.integers(low, high + 1, stored).astype(np.int64)
    values = rng.integers(1000, 30522, int(lengths.sum()), dtype=np.int32)
    held = corpus_table.RaggedRows(values, lengths)
    if rows == stored:
      return held
    full = corpus_table.RaggedRows(values, np.resize(held.lengths, rows))
    full.starts = np.resize(held.starts, rows)  # rows past `stored` point at the stored ones
    return full

  empty = corpus_table.Texts(corpus_table.RaggedRows(np.zeros([0], np.uint8), np.zeros(rows, np.int64)))
  fingerprints = rng.integers(1, 2**62, rows, dtype=np.int64)
  return corpus_table.CorpusTable(f"synthetic ({rows} rows)", empty, empty, empty, ragged(2, 10),
                                  ragged(250, candidate_seq_len - 3), fingerprints, fingerprints)


def run_paper(options: Options, work_dir: str) -> Dict:
  """REALM's sizes: BERT-base query tower, Q=96, C=288, N=8, D=128, indexes of random rows."""
  vocab = os.path.join(options.testdata_dir, "vocab.txt")
  config = _paper_config(options, vocab)
  batch_size = options.paper_batch_size
  calls = _calls(options.queries, batch_size)
  root = os.path.join(work_dir, "paper")
  model_dir = os.path.join(root, "model")
  rng = np.random.default_rng(0)

  _progress(f"paper: publishing the {options.paper_bert} query tower (SavedModel), loading it back")
  retriever = config.build_retriever()
  small = index_lib.build_index(rng.normal(size=[16, config.embedding_dim]).astype(np.float32),
                                implementation="brute_force")
  started = time.perf_counter()
  published_index.publish_index(model_dir, 0, small, retriever.query_embedder, log=_quiet)
  publish_s = time.perf_counter() - started
  del retriever
  started = time.perf_counter()
  loaded = published_index.IndexWatcher(model_dir, log=_quiet).load_newer(None)
  load_s = time.perf_counter() - started

  # Query features: testdata's REALM statements through the front at Q=96 (the repository ships no
  # BERT-base vocabulary; the cost is per sentence, small beside the others). The tower reads
  # full-length random wordpieces: BERT's cost does not depend on padding or values.
  tokenizer = tokenization.Tokenizer(vocab)
  featurizer = config.featurizer(tokenizer)
  news = os.path.join(root, "news.jsonl")
  synthetic.write_news_items(os.path.join(options.testdata_dir, "pretraining.jsonl"), news)
  pretraining_prefix = os.path.join(root, "pretraining", "sentences")
  pretraining.write_pretraining_corpus(lambda: pretraining.read_raw_documents(news), pretraining_prefix, 2)
  front = query_feature_dataset(pretraining_prefix, tokenizer, featurizer)
  components = {
      "query_featurization":
          _query_featurization(front, batch_size, max(options.queries, options.demo_queries))
  }
  queries = _query_batches(front, batch_size, calls)
  for q in queries:
    q["query_token_ids"] = rng.integers(1000, 30522, q["query_token_ids"].shape).astype(np.int32)
    q["query_mask"] = np.ones_like(q["query_mask"])
  assemble = candidate_featurizer(featurizer, batch_size, config.num_candidates)

  # The tower does not depend on the index: embedded once, its answers searched in every index.
  components["query_embedding"], embeddings = _query_embedding(loaded, queries)
  per_rows = {}
  resident = sorted(r for r in options.paper_index_rows if r <= options.max_resident_rows)
  if not resident:
    raise ValueError(f"every --paper_index_rows is above --max_resident_rows="
                     f"{options.max_resident_rows}: nothing to scale from")
  for rows in resident:
    _progress(f"paper: index of {rows:,d} random rows")
    started = time.perf_counter()
    brute = _random_index(rows, config.embedding_dim, seed=rows % 1000)
    build = {"brute_force": time.perf_counter() - started}
    searches = {}
    for name in options.implementations:
      if name == "brute_force":
        searches[name] = brute
      elif rows <= options.scann_max_build_rows:
        _progress(f"  building ScaNN over {rows:,d} rows")
        started = time.perf_counter()
        searches[name] = index_lib.build_index(brute.embeddings, implementation=name)
        build[name] = time.perf_counter() - started
    table = _synthetic_table(rows, options.paper_corpus_stored_rows, config.candidate_seq_len, seed=1)
    state = realm_input.RetrievalState(published_index.IndexWatcher(model_dir, log=_quiet),
                                       table,
                                       config.num_candidates,
                                       check_every_batches=2**31,
                                       log=_quiet,
                                       expected_dim=config.embedding_dim)
    # The published tower with this index: retrieve() never looks for another (check_every_batches).
    state.index = loaded._replace(mips=brute)
    own = [table.fingerprints[rng.integers(0, rows, batch_size)] for _ in range(calls)]
    parts = _retrieval_components(state,
                                  state.index,
                                  searches,
                                  queries,
                                  embeddings,
                                  own,
                                  assemble,
                                  with_retrieve=False)
    retrieved = parts.pop("_retrieved")
    per_rows[rows] = {
        "components": parts,
        "build_s": build,
        "search_parameters": {
            n: m.parameters for n, m in searches.items()
        },
        "peak_rss_mib_so_far": _peak_rss_mib()
    }
    train_retrieved = retrieved[0]
    del state, searches, brute, table, parts
    gc.collect()

  # Lookup and featurization per index size are in per_rows; the totals take the largest built
  # index's (a gather from a larger table reads as many bytes).
  largest = per_rows[resident[-1]]["components"]
  for name in ("candidate_lookup", "candidate_lookup/gather_only", "candidate_featurization"):
    components[name] = largest[name]

  _progress(f"paper: REALM train step, batch {options.paper_train_batch_size}, "
            f"XLA {options.paper_jit_compile}")
  del loaded
  gc.collect()
  b = options.paper_train_batch_size
  candidates_per = config.num_candidates - 1
  title_values, title_lengths, body_values, body_lengths = train_retrieved[1:]
  # The first b examples' candidates: their token ids are the first b x (N - 1) rows' runs.
  title_end, body_end = int(title_lengths[:b * candidates_per].sum()), int(body_lengths[:b *
                                                                                        candidates_per].sum())
  query = {k: v[:b] for k, v in queries[0].items() if k not in ("own_fingerprint", "status")}
  out = candidate_featurizer(featurizer, b,
                             config.num_candidates)(query["query_token_ids"], query["query_mask"],
                                                    title_values[:title_end],
                                                    title_lengths[:b * candidates_per],
                                                    body_values[:body_end], body_lengths[:b * candidates_per])
  features = {k: tf.constant(v) for k, v in query.items()}
  features.update(out)
  train = _train_step_timing(config, features, options.paper_jit_compile, options.paper_train_steps)
  train["scaled_to_batch"] = options.accelerator_batch_size
  train["scaled_step_s"] = train["wall_s_per_example"] * options.accelerator_batch_size
  train["scaling"] = (f"linear in examples from batch {b} (the step's matmuls already fill the "
                      "cores at this batch: 16 reader sequences of 384 and 16 candidates of 288)")
  return {
      "settings": {
          "bert":
              options.paper_bert,
          "query_seq_len":
              config.query_seq_len,
          "candidate_seq_len":
              config.candidate_seq_len,
          "num_candidates":
              config.num_candidates,
          "projection_size":
              config.projection_size,
          "max_masks":
              config.max_masks,
          "retrieval_batch_size":
              batch_size,
          "query_tower_flops":
              throughput_lib.forward_flops(config.retriever_bert, config.query_seq_len),
          "publish_query_tower_s":
              publish_s,
          "load_published_index_s":
              load_s,
          "corpus_stored_rows":
              options.paper_corpus_stored_rows,
          "simulated": ("random index embeddings; synthetic corpus token ids (rows "
                        "past corpus_stored_rows reuse stored rows); query "
                        "featurization on testdata's REALM statements and vocabulary "
                        "at Q=96; the tower reads random full-length wordpieces")
      },
      "components": components,
      "indexes": per_rows,
      "train_step": train
  }


# --------------------------------------------------------------------------------------------------
# Totals, scaling and the report.


def _search_timing(config_result: Dict, name: str, rows: int) -> Optional[Dict]:
  """The search timing of `name` at `rows`: measured there, or scaled linearly in rows from the
  largest measured size below (None when nothing was measured)."""
  indexes = config_result.get("indexes")
  if indexes is None:  # demo: one index
    timing = config_result["components"].get(f"search/{name}")
    return dict(timing, source="measured") if timing else None
  measured = {
      r: v["components"][f"search/{name}"] for r, v in indexes.items() if f"search/{name}" in v["components"]
  }
  if rows in measured:
    return dict(measured[rows], source="measured", rows=rows)
  below = [r for r in measured if r < rows]
  if not below:
    return None
  base = max(below)
  factor = rows / base
  timing = measured[base]
  return {
      "wall_s_per_example": timing["wall_s_per_example"] * factor,
      "cpu_s_per_example": timing["cpu_s_per_example"] * factor,
      "rows": rows,
      "source": f"scaled linearly in rows from {base:,d} measured rows (x{factor:.2f})"
  }


def pipelines(name: str, result: Dict, options: Options) -> List[Dict]:
  """One row per (index size, search implementation): per-example seconds by component, totals,
  examples/s, per core, and what it means for a trainer."""
  rows_list = ([result["index_rows"]["brute_force"]] if name == "demo" else sorted(options.paper_index_rows))
  out = []
  for rows in rows_list:
    for implementation in options.implementations:
      search = _search_timing(result, implementation, rows)
      if search is None:
        continue
      # Lookup and candidate featurization as measured with this index size where it was built.
      own = result.get("indexes", {}).get(rows, {}).get("components", {})
      parts = {c: own.get(c, result["components"][c]) for c in COMPONENTS if c != "search"}
      parts["search"] = search
      wall = {c: parts[c]["wall_s_per_example"] for c in COMPONENTS}
      cpu = {c: parts[c]["cpu_s_per_example"] for c in COMPONENTS}
      total_wall, total_cpu = sum(wall.values()), sum(cpu.values())
      row = {
          "config": name,
          "index_rows": rows,
          "implementation": implementation,
          "search_source": search["source"],
          "wall_s_per_example": wall,
          "cpu_s_per_example": cpu,
          "total_wall_s_per_example": total_wall,
          "total_cpu_s_per_example": total_cpu,
          "examples_per_second": 1 / total_wall,
          "examples_per_second_per_core": 1 / total_cpu
      }
      train = result["train_step"]
      if name == "demo":
        # The demo's trainer and pipeline share this host's cores: a step waits for its batch unless
        # the pipeline runs ahead on spare cores, which 2 busy cores do not have.
        input_s = train["batch_size"] * total_wall
        row["train"] = {
            "batch_size": train["batch_size"],
            "step_s": train["median_step_s"],
            "input_s_per_step": input_s,
            "input_share_of_step": input_s / (input_s + train["median_step_s"])
        }
        row["end_to_end_examples_per_second"] = result["end_to_end"]["examples_per_second"]
      else:
        batch = options.accelerator_batch_size
        input_s = batch * total_wall
        accel_s = batch / options.accelerator_examples_per_second
        row["train"] = {
            "batch_size": batch,
            "cpu_step_s": train["scaled_step_s"],
            "cpu_step_source": train["scaling"],
            "input_s_per_step": input_s,
            "input_share_of_step": input_s / (input_s + train["scaled_step_s"]),
            "accelerator_step_s": accel_s,
            "input_s_per_accelerator_step_on_one_core": batch * total_cpu
        }
        row["host_cores_per_accelerator"] = options.accelerator_examples_per_second * total_cpu
        row["host_cores_per_accelerator_if_query_tower_on_accelerator"] = (
            options.accelerator_examples_per_second * (total_cpu - cpu["query_embedding"]))
      out.append(row)
  if name == "demo":
    # The pipeline itself (realm_dataset, brute force): one row without a split by component.
    e2e, train = result["end_to_end"], result["train_step"]
    input_s = train["batch_size"] * e2e["wall_s_per_example"]
    out.append({
        "config": name,
        "index_rows": rows_list[0],
        "implementation": "brute_force",
        "end_to_end": True,
        "search_source": "measured",
        "total_wall_s_per_example": e2e["wall_s_per_example"],
        "total_cpu_s_per_example": e2e["cpu_s_per_example"],
        "examples_per_second": 1 / e2e["wall_s_per_example"],
        "examples_per_second_per_core": 1 / e2e["cpu_s_per_example"],
        "train": {
            "batch_size": train["batch_size"],
            "step_s": train["median_step_s"],
            "input_s_per_step": input_s,
            "input_share_of_step": input_s / (input_s + train["median_step_s"])
        }
    })
  return out


def in_step_pipelines(name: str, result: Dict, rows: List[Dict], options: Options) -> List[Dict]:
  """The in-step path (--retrieval=in_step) beside each host-path row: the host keeps the query
  featurization alone; the stale query embedding, the search, the lookup and the candidate
  featurization run inside the step. The demo's step is measured with the retrieval in it; the paper's
  is the measured step plus those components' measured CPU seconds (they move into it)."""
  out = []
  for row in rows:
    if row.get("end_to_end"):
      continue
    cpu, wall = row["cpu_s_per_example"], row["wall_s_per_example"]
    moved = [c for c in COMPONENTS if c != "query_featurization"]
    host_cpu, host_wall = cpu["query_featurization"], wall["query_featurization"]
    entry = {
        "config": name,
        "index_rows": row["index_rows"],
        "implementation": row["implementation"],
        "search_source": row["search_source"],
        "host_cpu_s_per_example": host_cpu,
        "host_examples_per_second_per_core": 1 / host_cpu,
        "moved_into_step_cpu_s_per_example": sum(cpu[c] for c in moved),
    }
    if name == "demo":
      train = result["train_step_in_step"]
      input_s = train["batch_size"] * host_wall
      entry["train"] = {
          "batch_size": train["batch_size"],
          "step_s": train["median_step_s"],
          "step_source": "measured: TrainStep with InStepRetrieval.candidate_features",
          "host_path_step_s": result["train_step"]["median_step_s"],
          "input_s_per_step": input_s,
          "input_share_of_step": input_s / (input_s + train["median_step_s"])
      }
    else:
      batch = options.accelerator_batch_size
      step_s = row["train"]["cpu_step_s"] + batch * entry["moved_into_step_cpu_s_per_example"]
      input_s = batch * host_wall
      entry["train"] = {
          "batch_size": batch,
          "cpu_step_s": step_s,
          "step_source": "the measured step (scaled) + the moved components' CPU s x batch",
          "input_s_per_step": input_s,
          "input_share_of_step": input_s / (input_s + step_s)
      }
      entry["host_cores_per_accelerator"] = options.accelerator_examples_per_second * host_cpu
    out.append(entry)
  return out


def in_step_markdown_table(rows: List[Dict]) -> str:
  lines = [
      "| config | index rows | search | host CPU ms/ex (query feat) | ex/s per host core | "
      "moved into the step, CPU ms/ex | trainer step | input share | host cores per H200 |", "|" + "---|" * 9
  ]
  for r in rows:
    train = r["train"]
    step = (f"{train['step_s']:.2f} s (B={train['batch_size']}; host path {train['host_path_step_s']:.2f} s)"
            if r["config"] == "demo" else f"{train['cpu_step_s']:.0f} s here (B={train['batch_size']})")
    cores = f"{r['host_cores_per_accelerator']:.2f}" if "host_cores_per_accelerator" in r else "-"
    scaled = "" if r["search_source"] == "measured" else " (scaled)"
    lines.append(
        f"| {r['config']} | {r['index_rows']:,d} | {r['implementation']}{scaled} | "
        f"{r['host_cpu_s_per_example'] * 1e3:.3g} | {_rate(r['host_examples_per_second_per_core'])} | "
        f"{r['moved_into_step_cpu_s_per_example'] * 1e3:.3g} | {step} | "
        f"{train['input_share_of_step']:.3%} | {cores} |")
  return "\n".join(lines)


def _rate(value: float) -> str:
  return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def markdown_table(rows: List[Dict]) -> str:
  ms = lambda s: f"{s * 1e3:.3g}"
  header = ("| config | index rows | search | ex/s (host) | ex/s per core | "
            "CPU ms/ex: query feat | embed | search | lookup | cand feat | trainer step | "
            "input share | cores per H200 |")
  lines = [header, "|" + "---|" * 14]
  for r in rows:
    train = r["train"]
    if r.get("end_to_end"):
      lines.append(f"| {r['config']} | {r['index_rows']:,d} | realm_dataset end to end "
                   f"({r['implementation']}) | {_rate(r['examples_per_second'])} | "
                   f"{_rate(r['examples_per_second_per_core'])} | {ms(r['total_cpu_s_per_example'])} in all "
                   f"| | | | | {train['step_s']:.2f} s (B={train['batch_size']}) | "
                   f"{train['input_share_of_step']:.0%} | - |")
      continue
    cpu = r["cpu_s_per_example"]
    step = (f"{train['step_s']:.2f} s (B={train['batch_size']})" if r["config"] == "demo" else
            f"{train['cpu_step_s']:.0f} s here, {train['accelerator_step_s']:.2f} s H200 "
            f"(B={train['batch_size']})")
    cores = (f"{r['host_cores_per_accelerator']:.1f} "
             f"({r['host_cores_per_accelerator_if_query_tower_on_accelerator']:.2f} w/o embed)"
             if "host_cores_per_accelerator" in r else "-")
    scaled = "" if r["search_source"] == "measured" else " (scaled)"
    lines.append(f"| {r['config']} | {r['index_rows']:,d} | {r['implementation']}{scaled} | "
                 f"{_rate(r['examples_per_second'])} | {_rate(r['examples_per_second_per_core'])} | "
                 f"{ms(cpu['query_featurization'])} | {ms(cpu['query_embedding'])} | {ms(cpu['search'])} | "
                 f"{ms(cpu['candidate_lookup'])} | {ms(cpu['candidate_featurization'])} | {step} | "
                 f"{train['input_share_of_step']:.0%} | {cores} |")
  return "\n".join(lines)


def plot(rows: List[Dict], path: str) -> None:
  """Stacked bars of CPU milliseconds per example by component, one panel per configuration
  (linear axes: the configurations differ by orders of magnitude, and a log axis would misstate the
  stacks)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  rows = [r for r in rows if not r.get("end_to_end")]  # no split by component to draw
  configs = list(dict.fromkeys(r["config"] for r in rows))
  figure, panels = pyplot.subplots(
      1,
      len(configs),
      squeeze=False,
      figsize=(3.0 + 1.7 * len(rows), 5.5),
      gridspec_kw={"width_ratios": [sum(r["config"] == c for r in rows) for c in configs]})
  for axes, config in zip(panels[0], configs):
    mine = [r for r in rows if r["config"] == config]
    labels = [
        f"{r['index_rows']:,d} rows\n{r['implementation']}" +
        ("" if r["search_source"] == "measured" else "\n(search scaled)") for r in mine
    ]
    bottoms = np.zeros(len(mine))
    for component in COMPONENTS:
      values = np.array([r["cpu_s_per_example"][component] * 1e3 for r in mine])
      axes.bar(labels, values, bottom=bottoms, label=COMPONENT_LABELS[component])
      bottoms = bottoms + values
    for x, total in enumerate(bottoms):
      axes.annotate(f"{total:.3g} ms", (x, total), ha="center", va="bottom", fontsize=8)
    axes.set_ylim(top=1.1 * max(bottoms))  # room for the totals
    axes.set_title(config)
    axes.set_ylabel("CPU milliseconds per example (one core)")
    axes.tick_params(axis="x", labelsize=7)
  handles, names = panels[0][0].get_legend_handles_labels()
  figure.legend(handles, names, loc="lower center", ncol=3, fontsize=8)
  figure.suptitle("REALM input pipeline on this host, by component")
  figure.tight_layout(rect=(0, 0.08, 1, 1))
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  figure.savefig(path, dpi=120)
  pyplot.close(figure)


def _json_ready(value):
  """Dict keys as strings, numpy scalars as Python ones."""
  if isinstance(value, dict):
    return {str(k): _json_ready(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_json_ready(v) for v in value]
  if isinstance(value, np.generic):
    return value.item()
  return value


def run_bench(options: Options, command: str) -> Dict:
  MIN_SECONDS[0] = options.min_seconds
  machine = throughput_lib.machine()
  started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
  work_dir = options.work_dir or tempfile.mkdtemp(prefix="input_pipeline_bench_")
  peak_flops, peak_cpu_flops = throughput_lib.matmul_peak(size=1024, repeats=3)
  results = {
      "benchmark": "input_pipeline_bench",
      "command": command,
      "date": started,
      "machine": machine,
      "options": dataclasses.asdict(options),
      "matmul_peak_gflops": {
          "wall": peak_flops / 1e9,
          "per_cpu_second": peak_cpu_flops / 1e9
      },
      "accelerator_anchor": {
          "what": "one H200, bf16, PyTorch, at the paper configuration (issue 42)",
          "step_s": options.accelerator_step_seconds,
          "batch_size": options.accelerator_batch_size,
          "examples_per_second": options.accelerator_examples_per_second,
          "query_embedding_gflop_per_example": throughput_lib.forward_flops(bert.bert_base_config(), 96) / 1e9
      },
      "configs": {}
  }
  try:
    for name in options.configs:
      _progress(f"== {name}")
      runner = {"demo": run_demo, "paper": run_paper}[name]
      results["configs"][name] = runner(options, work_dir)
  finally:
    if options.work_dir is None:
      shutil.rmtree(work_dir, ignore_errors=True)
  table_rows, in_step_rows = [], []
  for name, result in results["configs"].items():
    result["pipelines"] = pipelines(name, result, options)
    table_rows += result["pipelines"]
    result["in_step_pipelines"] = in_step_pipelines(name, result, result["pipelines"], options)
    in_step_rows += result["in_step_pipelines"]
  machine["load_average_at_end"] = throughput_lib.load_average()
  machine["peak_rss_mib"] = _peak_rss_mib()
  results["seconds"] = time.time() - _START
  table = markdown_table(table_rows)
  results["table"] = table
  anchor = results["accelerator_anchor"]
  print(f"\nREALM input pipeline on {machine['processor']} ({machine['usable_cpus']} usable cores; "
        f"load {machine['load_average_at_start'][0]:.2f} at start, "
        f"{machine['load_average_at_end'][0]:.2f} at end)")
  print(f"Accelerator anchor: {anchor['what']}: {anchor['step_s']} s per step of "
        f"{anchor['batch_size']}, about {anchor['examples_per_second']:.0f} examples/s; BERT-base "
        f"query embedding at 96 wordpieces {anchor['query_embedding_gflop_per_example']:.1f} "
        "GFLOP.")
  print("ex/s (host): this host's wall rate, components run one after another; per core: 1 / CPU "
        "seconds per example; cores per H200: accelerator examples/s x CPU s per example.\n")
  print(table)
  results["in_step_table"] = in_step_markdown_table(in_step_rows)
  print("\nThe in-step path (--retrieval=in_step): the host featurizes queries; the rest runs in the step.\n")
  print(results["in_step_table"])
  if "demo" in results["configs"]:
    demo = results["configs"]["demo"]
    print(f"\ndemo end to end through realm_input.realm_dataset: "
          f"{demo['end_to_end']['examples_per_second']:.1f} examples/s "
          f"({demo['end_to_end']['cpu_s_per_example'] * 1e3:.2f} CPU ms per example)")
  results = _json_ready(results)
  os.makedirs(os.path.dirname(os.path.abspath(options.output_json)), exist_ok=True)
  io_utils.write_json_atomic(options.output_json, results)
  print(f"\nWrote {options.output_json}")
  if options.output_png:
    plot(table_rows, options.output_png)
    print(f"Wrote {options.output_png}")
  return results


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  # SavedModel writing and the optimizer log a line each at INFO: noise between the progress lines.
  logging.set_verbosity(logging.WARNING)
  tf.get_logger().setLevel("ERROR")
  options = Options(configs=_CONFIGS.value,
                    paper_index_rows=[int(r.replace("_", "")) for r in _PAPER_INDEX_ROWS.value],
                    queries=_QUERIES.value,
                    demo_queries=_DEMO_QUERIES.value,
                    demo_e2e_batches=_DEMO_E2E_BATCHES.value,
                    demo_batch_size=_DEMO_BATCH.value,
                    paper_batch_size=_PAPER_BATCH.value,
                    implementations=_IMPLEMENTATIONS.value,
                    max_resident_rows=_MAX_RESIDENT.value,
                    scann_max_build_rows=_SCANN_MAX_BUILD.value,
                    paper_corpus_stored_rows=_STORED_ROWS.value,
                    paper_bert=_PAPER_BERT.value,
                    demo_jit_compile=_DEMO_JIT.value,
                    train_steps=_TRAIN_STEPS.value,
                    paper_train_batch_size=_PAPER_TRAIN_BATCH.value,
                    paper_train_steps=_PAPER_TRAIN_STEPS.value,
                    paper_jit_compile=_PAPER_JIT.value,
                    accelerator_examples_per_second=_ACCEL_EX_S.value,
                    accelerator_step_seconds=_ACCEL_STEP_S.value,
                    accelerator_batch_size=_ACCEL_BATCH.value,
                    min_seconds=_MIN_SECONDS.value,
                    work_dir=_WORK_DIR.value,
                    output_json=_OUTPUT_JSON.value,
                    output_png=_OUTPUT_PNG.value)
  run_bench(options, " ".join([os.path.relpath(sys.argv[0], _REPO)] + sys.argv[1:]))


if __name__ == "__main__":
  app.run(main)
