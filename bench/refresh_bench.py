r"""The refresher's corpus embedding on real text: padded to candidate_seq_len vs length-bucketed.

A REALM refresh re-embeds the whole corpus, so its documents/s set how stale the trainer's index is.
This runs realm_tf.retrieval.corpus_embedding.embed_corpus (the refresher's path, XLA on) over the first
--num_paragraphs SQuAD v1.1 paragraphs (../shared/data/squad) tokenized with all-MiniLM-L6-v2's uncased
vocab, with a MiniLM-shaped document tower (6 layers, hidden 384; random weights: speed does not depend
on them) at 288 wordpieces, once with every document padded to 288 (--embed_length_buckets=1) and once
in 4 length buckets, alternating over --rounds so load changes hit both alike. Each call is timed whole,
as a refresh pays it (compilation of each bucket's program included), with its process CPU time; the
bucketed rows are checked against the padded ones.

  .venv/bin/python bench/refresh_bench.py                       # 600 paragraphs, 2 rounds (~8 min)
  .venv/bin/python bench/refresh_bench.py --num_paragraphs=2000 --rounds=3

Prints a table and writes JSON (with a machine description) to --output.
"""

import csv
import json
import os
import statistics
import sys
import time

from absl import app
from absl import flags
import numpy as np

# Runs as `python bench/refresh_bench.py` from the repository root as well as under Bazel.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position
import tf_keras  # pylint: disable=g-import-not-at-top,wrong-import-position

from bench import minilm_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from bench import throughput_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf import featurization  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf import io_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf import tokenization  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.data import corpus as corpus_lib  # pylint: disable=g-import-not-at-top
from realm_tf.modeling import bert  # pylint: disable=g-import-not-at-top,wrong-import-position
from realm_tf.modeling import embedder as embedder_lib  # pylint: disable=g-import-not-at-top
from realm_tf.retrieval import corpus_embedding  # pylint: disable=g-import-not-at-top

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NUM_PARAGRAPHS = flags.DEFINE_integer("num_paragraphs", 600, "First N paragraphs of the SQuAD TSV.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 288, "candidate_seq_len (the original's).")
_BUCKETS = flags.DEFINE_integer("buckets", corpus_embedding.DEFAULT_LENGTH_BUCKETS,
                                "Length buckets of the bucketed runs.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Documents per batch.")
_ROUNDS = flags.DEFINE_integer("rounds", 2, "Alternating rounds; the median is reported.")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "refresh_bench.json"),
                              "JSON results.")


def _write_corpus(tokenizer: tokenization.Tokenizer) -> str:
  tsv = os.path.join(minilm_lib.SQUAD_DIR.value, "squad-v1.1-paragraphs.tsv")
  if not os.path.exists(tsv):
    raise app.UsageError(f"{tsv} not found; point --squad_dir at ../shared/data/squad")
  with open(tsv, encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f, delimiter="\t"))[1:_NUM_PARAGRAPHS.value + 1]
  documents = [corpus_lib.Document(title, text, doc_id) for doc_id, text, title, *_ in rows]
  prefix = os.path.join(minilm_lib.CACHE_DIR.value, "refresh_bench", f"squad_{len(documents)}", "blocks")
  if not os.path.exists(prefix + corpus_lib.MANIFEST_SUFFIX):
    corpus_lib.write_corpus(lambda: documents, tokenizer, prefix, num_shards=1)
  return prefix


def main(argv):
  del argv
  directory = minilm_lib.minilm_directory(minilm_lib.CACHE_DIR.value, minilm_lib.MINILM_DIR.value)
  tokenizer = tokenization.Tokenizer(os.path.join(directory, "vocab.txt"), do_lower_case=True)
  prefix = _write_corpus(tokenizer)
  featurizer = featurization.Featurizer.from_tokenizer(tokenizer, query_seq_len=32,
                                                       candidate_seq_len=_SEQ_LEN.value, max_masks=1)
  lengths = [int(sum(d["mask"])) for d in corpus_embedding.candidate_dataset(prefix, featurizer)
             .as_numpy_iterator()]
  tf_keras.utils.set_random_seed(0)
  with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
    config = bert.BertConfig.from_dict(json.load(f), huggingface=True)
  tower = embedder_lib.RetrieverEmbedder(config, 128, pooling="mean")
  embed_fn = lambda inputs: tower(inputs, training=False)
  settings = {"padded": 1, "bucketed": _BUCKETS.value}
  timings = {name: [] for name in settings}
  results = {}
  for round_index in range(_ROUNDS.value):
    order = list(settings) if round_index % 2 == 0 else list(settings)[::-1]
    for name in order:
      wall, cpu = time.perf_counter(), time.process_time()
      results[name] = corpus_embedding.embed_corpus(
          embed_fn, prefix, featurizer, batch_size=_BATCH.value, log=lambda _: None,
          num_length_buckets=settings[name])
      wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
      timings[name].append({"seconds": wall, "cpu_seconds": cpu, "docs_per_second": len(lengths) / wall})
      print(f"round {round_index}: {name:<9} {len(lengths) / wall:7.2f} docs/s ({wall:.1f} s wall, "
            f"{cpu:.1f} s CPU)", flush=True)
  max_difference = float(np.max(np.abs(results["bucketed"] - results["padded"])))
  buckets = corpus_embedding.length_buckets(_SEQ_LEN.value, _BUCKETS.value)
  padded_tokens = {name: sum(next(b for b in corpus_embedding.length_buckets(_SEQ_LEN.value, n) if b >= l)
                             for l in lengths) for name, n in settings.items()}
  summary = {name: statistics.median(t["docs_per_second"] for t in timings[name]) for name in settings}
  out = {"machine": throughput_lib.machine(), "num_paragraphs": len(lengths), "seq_len": _SEQ_LEN.value,
         "batch_size": _BATCH.value, "buckets": buckets,
         "wordpieces": {"mean": float(np.mean(lengths)), "median": float(np.median(lengths)),
                        "p95": float(np.percentile(lengths, 95))},
         "real_token_share": {name: sum(lengths) / padded_tokens[name] for name in settings},
         "timings": timings, "median_docs_per_second": summary,
         "speedup": summary["bucketed"] / summary["padded"], "max_abs_difference": max_difference}
  out["machine"]["load_average_at_end"] = throughput_lib.load_average()
  print(f"\n{len(lengths)} paragraphs, {np.mean(lengths):.0f} wordpieces on average (median "
        f"{np.median(lengths):.0f}); buckets {buckets}")
  for name in settings:
    print(f"{name:<9} {summary[name]:7.2f} docs/s  real tokens {100 * out['real_token_share'][name]:5.1f}% "
          "of the computed positions")
  print(f"speed-up {out['speedup']:.2f}x; largest difference between the embeddings {max_difference:.2e}")
  io_utils.write_json_atomic(_OUTPUT.value, out)
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
