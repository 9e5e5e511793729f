r"""What bin/update_index saves: changing 1% of the SQuAD paragraphs, against a full refresh.

The corpus is the 20,963 SQuAD v1.1 paragraphs (squad-v1.1-paragraphs.tsv under --squad_dir;
--num_paragraphs for fewer), tokenized with all-MiniLM-L6-v2's vocab (bench/minilm_lib), embedded by a
REALM retriever of --config's shape (random weights: the cost does not depend on them; mean pooling,
candidate_seq_len --seq_len) and published as a ScaNN index, as bin/refresh_doc_embeds does. The change
set is --change_percent of the corpus, in equal thirds: paragraphs replaced (their sentences in
reverse order), removed, and added (new ids). In one run:
  base refresh   the index to update (the refresher's first refresh: compiles each length bucket)
  update         realm_tf.retrieval.index_update.update_published_index, as bin/update_index runs it in a
                 fresh process: read the corpus, check the change, embed the changed paragraphs (compiling
                 their buckets), write the derived corpus, build the ScaNN index, publish
  full           what the same change costs without it: tokenize the whole changed corpus
                 (bin/generate_retrieval_corpus) and refresh it (refresher.build_and_publish with the
                 refresher's compiled embedder, i.e. a long-running refresher's steady state)
and the two indexes are compared row by row (their embeddings must agree: the update is a refresh that
skips the unchanged rows).

  .venv/bin/python bench/update_index_bench.py                       # all 20,963 paragraphs, tiny tower
  .venv/bin/python bench/update_index_bench.py --config=minilm --num_paragraphs=2000

Prints a table and writes JSON (with a machine description) to --output.
"""

import json
import os
import shutil
import tempfile

from absl import app
from absl import flags
import numpy as np

import tensorflow as tf
import tf_keras

from bench import minilm_lib
from bench import throughput_lib
from realm_tf import io_utils
from realm_tf import tokenization
from realm_tf.data import corpus as corpus_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import index_update
from realm_tf.retrieval import published_index
from realm_tf.retrieval import refresher

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NUM_PARAGRAPHS = flags.DEFINE_integer("num_paragraphs", None, "Only the first N paragraphs (all: 20,963).")
_CHANGE_PERCENT = flags.DEFINE_float("change_percent", 1.0, "Paragraphs changed, % of the corpus.")
_CONFIG = flags.DEFINE_enum("config", "tiny", ["tiny", "minilm", "bert_base"],
                            "Shape of the retriever's BERT (bench/throughput_lib.bench_config).")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 256, "candidate_seq_len.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Documents per embedding batch.")
_WORK_DIR = flags.DEFINE_string("work_dir", None, "Scratch directory (default: a temporary one, removed).")
_OUTPUT = flags.DEFINE_string("output", os.path.join(_REPO, "bench", "results", "update_index_bench.json"),
                              "JSON results.")


def _changed(document: corpus_lib.Document, body: str, doc_id: str, title: str = None) -> dict:
  return {"id": doc_id, "title": document.title if title is None else title, "body": body}


def _reversed_sentences(text: str) -> str:
  sentences = [s for s in text.split(". ") if s]
  return ". ".join(reversed(sentences)) if len(sentences) > 1 else text + " (revised)"


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  tsv = os.path.join(minilm_lib.SQUAD_DIR.value, "squad-v1.1-paragraphs.tsv")
  if not os.path.exists(tsv):
    raise app.UsageError(f"{tsv} not found; point --squad_dir at the "
                         "squad/ folder `python bin/download_data.py --datasets=squad` writes")
  vocab = os.path.join(minilm_lib.minilm_directory(minilm_lib.CACHE_DIR.value, minilm_lib.MINILM_DIR.value),
                       "vocab.txt")
  documents = list(corpus_lib.read_documents(tsv))[:_NUM_PARAGRAPHS.value]
  work = _WORK_DIR.value or tempfile.mkdtemp(prefix="update_index_bench-")
  try:
    result = _run(documents, vocab, work)
  finally:
    if not _WORK_DIR.value:
      shutil.rmtree(work, ignore_errors=True)
  io_utils.write_json_atomic(_OUTPUT.value, result)
  _print(result)
  print(f"wrote {_OUTPUT.value}")


def _run(documents, vocab: str, work: str) -> dict:
  out = {
      "machine": throughput_lib.machine(),
      "num_paragraphs": len(documents),
      "config": _CONFIG.value,
      "seq_len": _SEQ_LEN.value,
      "batch_size": _BATCH.value,
      "index": "scann"
  }
  tokenizer = tokenization.Tokenizer(vocab)
  base_prefix = os.path.join(work, "corpus", "blocks")
  minilm_lib.log(f"tokenizing {len(documents)} paragraphs")
  out["base_tokenize"] = throughput_lib.timed(
      lambda: corpus_lib.write_corpus(lambda: documents, tokenizer, base_prefix, num_shards=8))
  bert = throughput_lib.bench_config(_CONFIG.value)
  config = realm_config_lib.RealmConfig(retriever_bert=bert,
                                        reader_bert=bert,
                                        vocab_path=vocab,
                                        projection_size=128,
                                        query_seq_len=64,
                                        candidate_seq_len=_SEQ_LEN.value,
                                        embedder_pooling="mean")
  model_dir = os.path.join(work, "realm")
  config.save(model_dir)
  tf_keras.utils.set_random_seed(0)
  retriever = config.build_retriever()
  checkpoint = tf.train.CheckpointManager(tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=retriever)),
                                          model_dir,
                                          max_to_keep=2).save(checkpoint_number=1)
  options = refresher.RefresherOptions(model_dir=model_dir,
                                       corpus_prefix=base_prefix,
                                       batch_size=_BATCH.value,
                                       keep=5)
  embedder = refresher.corpus_embedder(config, retriever, options)
  minilm_lib.log("base refresh")
  paths = {}
  out["base_refresh"] = throughput_lib.timed(lambda: paths.update(base=refresher.build_and_publish(
      config, retriever, 1, options, info={"checkpoint": checkpoint}, log=minilm_lib.log, embedder=embedder)))

  # The change set: a third replaced, a third removed, a third added, spread over the corpus.
  count = max(3, round(len(documents) * _CHANGE_PERCENT.value / 100))
  rng = np.random.default_rng(0)
  picked = rng.choice(len(documents), size=count, replace=False)
  replaced, removed, sources = np.array_split(picked, 3)
  change_records = [
      _changed(documents[i], _reversed_sentences(documents[i].body), documents[i].doc_id) for i in replaced
  ]
  change_records += [
      _changed(documents[i], _reversed_sentences(documents[i].body), f"added-{j}",
               documents[i].title + " (new)") for j, i in enumerate(sources)
  ]
  change_path = os.path.join(work, "change.jsonl")
  with open(change_path, "w", encoding="utf-8") as f:
    f.writelines(json.dumps(r) + "\n" for r in change_records)
  removed_ids = [documents[i].doc_id for i in removed]
  out["change"] = {
      "replaced": len(replaced),
      "removed": len(removed),
      "added": len(sources),
      "percent": _CHANGE_PERCENT.value
  }

  minilm_lib.log(f"update: {out['change']}")
  out["update"] = throughput_lib.timed(lambda: paths.update(updated=index_update.update_published_index(
      paths["base"],
      index_update.read_change_set(change_path, removed_ids),
      on_existing="replace",
      batch_size=_BATCH.value,
      keep=5,
      log=minilm_lib.log)))

  # The same change without update_index: the whole changed corpus tokenized and refreshed.
  by_id = {r["id"]: corpus_lib.Document(r["title"], r["body"], r["id"]) for r in change_records}
  gone = set(removed_ids)
  changed_docs = [by_id.get(d.doc_id, d) for d in documents if d.doc_id not in gone]
  changed_docs += [by_id[f"added-{j}"] for j in range(len(sources))]
  full_prefix = os.path.join(work, "full", "blocks")
  minilm_lib.log("full: tokenize the changed corpus")
  out["full_tokenize"] = throughput_lib.timed(
      lambda: corpus_lib.write_corpus(lambda: changed_docs, tokenizer, full_prefix, num_shards=8))
  minilm_lib.log("full: refresh")
  full_options = refresher.RefresherOptions(model_dir=model_dir,
                                            corpus_prefix=full_prefix,
                                            batch_size=_BATCH.value,
                                            keep=5)
  out["full_refresh"] = throughput_lib.timed(
      lambda: paths.update(full=refresher.build_and_publish(config,
                                                            retriever,
                                                            10,
                                                            full_options,
                                                            info={"checkpoint": checkpoint},
                                                            log=minilm_lib.log,
                                                            embedder=embedder)))

  updated = published_index.load_published(paths["updated"])
  full = published_index.load_published(paths["full"])
  updated_ids = [r["doc_id"] for r in corpus_lib.read_corpus(updated.record["corpus_prefix"])]
  full_ids = [r["doc_id"] for r in corpus_lib.read_corpus(full_prefix)]
  a, b = np.asarray(updated.mips.embeddings), np.asarray(full.mips.embeddings)
  out["agreement"] = {
      "same_rows": updated_ids == full_ids,
      "num_docs": len(updated_ids),
      "max_abs_difference": float(np.abs(a - b).max()) if a.shape == b.shape else None
  }
  for name in ("base_tokenize", "base_refresh", "update", "full_tokenize", "full_refresh"):
    wall, cpu = out[name]
    out[name] = {"wall_seconds": wall, "cpu_seconds": cpu}
  full_wall = out["full_tokenize"]["wall_seconds"] + out["full_refresh"]["wall_seconds"]
  full_cpu = out["full_tokenize"]["cpu_seconds"] + out["full_refresh"]["cpu_seconds"]
  out["full"] = {"wall_seconds": full_wall, "cpu_seconds": full_cpu}
  out["speedup"] = {
      "wall": full_wall / out["update"]["wall_seconds"],
      "cpu": full_cpu / out["update"]["cpu_seconds"]
  }
  out["update_record"] = updated.record["update"]
  out["machine"]["load_average_at_end"] = throughput_lib.load_average()
  return out


def _print(out: dict) -> None:
  print(f"\n{out['num_paragraphs']} paragraphs, {out['config']} tower, seq_len {out['seq_len']}, "
        f"change {out['change']}")
  print(f"{'step':36s} {'wall s':>8s} {'CPU s':>8s}")
  for name, label in (("base_refresh", "base refresh (first, compiling)"),
                      ("update", "update_index (1 process)"), ("full_tokenize",
                                                               "full: tokenize changed corpus"),
                      ("full_refresh", "full: refresh (compiled embedder)"), ("full", "full: total")):
    print(f"{label:36s} {out[name]['wall_seconds']:8.1f} {out[name]['cpu_seconds']:8.1f}")
  print(f"update is {out['speedup']['wall']:.1f}x faster (wall), {out['speedup']['cpu']:.1f}x less CPU; "
        f"agreement {out['agreement']}")


if __name__ == "__main__":
  app.run(main)
