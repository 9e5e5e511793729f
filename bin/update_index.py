r"""Adds, replaces and removes documents of a published index, embedding only the changed documents.

--index is a REALM run's published index (MODEL_DIR/index/<step>, or MODEL_DIR for its newest), an ORQA
run (MODEL_DIR of bin/train_orqa, or its MODEL_DIR/frozen_index), or a converted index (the --output_dir of
bin/convert_checkpoint --layout=block_emb, or its mips/; --checkpoint names the converted model whose
document tower computed block_emb): that one is written as a new converted index `<dir>-v<k>/` in the same
layout, whose blocks.jsonl gives each block an "id" (a released block's is its row number), for
bin/export_saved_model --index_dir, or bin/train_orqa --index_dir=<dir>-v<k>/mips with the corpus
bin/generate_retrieval_corpus makes of its blocks.jsonl. Otherwise the update writes a new corpus derived
from the index's corpus (default `<corpus>-v<k>` beside it; the old corpus is left as it is), embeds the
added and replaced documents with the index's own document tower, and publishes the new index atomically:
MODEL_DIR/index/<newest + 1>/ for a REALM run (a trainer's watcher swaps it in; a refresher's next full
refresh embeds the derived corpus), MODEL_DIR/frozen_index for an ORQA run (eval_orqa, export_saved_model
and a resumed train_orqa read the derived corpus). Removed documents are deleted from the corpus and the
index, so they are never returned again. A bad change set stops before anything is written.

  python bin/update_index.py --index=/runs/realm --documents=new_docs.jsonl --remove_ids=doc-17,doc-40
  python bin/update_index.py --index=/runs/orqa --documents=fixed.tsv --on_existing=replace
  python bin/update_index.py --index=/conv/wiki_index --checkpoint=/conv/embedder --documents=new.jsonl \
      --remove_ids=17
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

import os
import sys

from absl import app
from absl import flags

from realm_tf.config import trainer_flags
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import text_records
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import index_format
from realm_tf.retrieval import index_update
from realm_tf.runs import frozen_index
from realm_tf.runs import orqa_model

_INDEX = flags.DEFINE_string("index",
                             None,
                             "MODEL_DIR/index/<step> (or a REALM MODEL_DIR: its newest index), or an ORQA "
                             "MODEL_DIR (or its frozen_index).",
                             required=True)
_DOCUMENTS = flags.DEFINE_string(
    "documents", None, "Documents to add or replace: JSONL {\"id\", \"title\", \"body\"}, DPR TSV "
    "(id, text, title), or a corpus prefix from bin/generate_retrieval_corpus.")
_REMOVE_IDS = flags.DEFINE_list("remove_ids", [], "doc_ids to remove (comma-separated).")
_REMOVE_IDS_PATH = flags.DEFINE_string("remove_ids_path", None, "A file of doc_ids to remove, one a line.")
_ON_EXISTING = flags.DEFINE_enum(
    "on_existing", "error", index_update.ON_EXISTING,
    "A document of --documents whose id the corpus holds: stop with an error, or replace it in its row.")
_OUTPUT_CORPUS = flags.DEFINE_string("output_corpus_prefix", None,
                                     "Prefix of the updated corpus (default: <the index's corpus>-v<k>).")
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "REALM: the checkpoint whose document tower built the index (default: the one "
    "published.json records). Converted index: the bin/convert_checkpoint output whose document tower "
    "computed block_emb, for the release the converted cc_news_pretrained/embedder (default: the one an "
    "earlier update recorded).")
_OUTPUT_DIR = flags.DEFINE_string(
    "output_dir", None, "Converted index: the new directory (default: <the converted index>-v<k>).")
_KEEP = trainer_flags.define_indexes_kept_flag(
    "REALM: published indexes to keep (as bin/refresh_doc_embeds).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 128, "Documents per embedding batch.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  target = _INDEX.value.rstrip("/")
  converted = index_update.converted_index_dir(target)
  if converted is not None:
    try:
      change = index_update.read_change_set(_DOCUMENTS.value, _REMOVE_IDS.value, _REMOVE_IDS_PATH.value)
      written = index_update.update_converted_index(converted, change, _CHECKPOINT.value, _ON_EXISTING.value,
                                                    _OUTPUT_DIR.value, _BATCH_SIZE.value)
    except (index_update.UpdateError, text_records.InputError, corpus_lib.VocabMismatchError,
            index_format.CorruptIndexError, FileNotFoundError) as e:
      sys.exit(f"bin/update_index: {e}\nThe converted index {converted} is unchanged.")
    print(f"wrote {written}")
    return
  orqa_dir = None
  if os.path.basename(target) == frozen_index.FROZEN_INDEX_DIR:
    orqa_dir = os.path.dirname(target)
  elif os.path.exists(os.path.join(target, frozen_index.FROZEN_INDEX_DIR, index_format.MANIFEST_NAME)):
    orqa_dir = target
  try:
    if orqa_dir is not None:
      config = realm_config_lib.RealmConfig.load(orqa_dir)
      change = index_update.read_change_set(_DOCUMENTS.value, _REMOVE_IDS.value, _REMOVE_IDS_PATH.value,
                                            corpus_lib.vocab_sha256(config.vocab_path))
      frozen_index.update_frozen_index(orqa_dir, orqa_model.load_trained(orqa_dir), change,
                                       _ON_EXISTING.value, _OUTPUT_CORPUS.value, _BATCH_SIZE.value)
      # An export is a snapshot of the run: its index and (--retriever=bm25/hybrid) its BM25 side are
      # built from the frozen index when exporting.
      print(f"updated {frozen_index.frozen_index_dir(orqa_dir)}; export the run again "
            "(bin/export_saved_model) to serve the update")
      return
    path = index_update.resolve_published(target)
    model_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    config = realm_config_lib.RealmConfig.load(os.path.join(model_dir, realm_config_lib.CONFIG_NAME))
    change = index_update.read_change_set(_DOCUMENTS.value, _REMOVE_IDS.value, _REMOVE_IDS_PATH.value,
                                          corpus_lib.vocab_sha256(config.vocab_path))
    published = index_update.update_published_index(path, change, _ON_EXISTING.value, _CHECKPOINT.value,
                                                    _OUTPUT_CORPUS.value, _KEEP.value, _BATCH_SIZE.value)
    print(f"published {published}")
  except (index_update.UpdateError, text_records.InputError, corpus_lib.VocabMismatchError,
          index_format.CorruptIndexError, FileNotFoundError) as e:
    # A data error, not a usage error: the message alone, without absl's flag listing.
    sys.exit(f"bin/update_index: {e}\nThe published index is unchanged.")


if __name__ == "__main__":
  app.run(main)
