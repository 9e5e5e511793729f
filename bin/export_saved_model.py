r"""Exports a trained run as SavedModels (realm_tf.export.saved_models).

From a bin/train_orqa model dir (its best checkpoint unless --checkpoint): OUTPUT_DIR/query_embedder,
OUTPUT_DIR/document_embedder and OUTPUT_DIR/open_qa (questions in, answers, scores, retrieved blocks out;
it carries the index and the block texts). From Google's released ORQA converted by
bin/convert_checkpoint (--model_dir) and its converted block_emb with the blocks (--index_dir):
OUTPUT_DIR/query_embedder and OUTPUT_DIR/open_qa. From a REALM / ICT / converted run: the two embedders.
These take raw text and tokenize inside with tensorflow_text ops (and ScaNN's with --index=scann), which
the process serving them must have registered. With --token_ids (the default) each also gets a twin,
OUTPUT_DIR/<name>_token_ids, that takes BERT token ids and needs only core TensorFlow ops: the stock
saved_model_cli and any TF Serving build run it (open_qa_token_ids searches by exact brute force).
--retriever=bm25 or hybrid: open_qa (and its twin) retrieve by BM25 over the corpus's wordpieces, or by
its reciprocal rank fusion with the dense tower, inside the graph (realm_tf/retrieval/sparse_in_graph.py):
the model carries the BM25 postings, so it needs no corpus files where it is served.
  python bin/export_saved_model.py --model_dir=/runs/orqa_nq --output_dir=/export/orqa_nq --index=scann
  python bin/export_saved_model.py --model_dir=/runs/orqa_squad --output_dir=/export/squad_hybrid \
      --retriever=hybrid
  python bin/export_saved_model.py --model_dir=/conv/orqa_nq --index_dir=/conv/wiki_index \
      --output_dir=/export/orqa_nq_released
  python bin/answer.py "who wrote the iliad" --saved_model=/export/orqa_nq/open_qa
  saved_model_cli run --dir /export/orqa_nq/open_qa_token_ids --tag_set serve \
      --signature_def serving_token_ids \
      --input_exprs 'input_word_ids=[[101, 2040, 2626, 102]];input_mask=[[1, 1, 1, 1]]'
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

import sys

from absl import app
from absl import flags
from absl import logging

from realm_tf.config import trainer_flags
from realm_tf.export import saved_models
from realm_tf.retrieval import scann_index

_MODEL_DIR = trainer_flags.define_model_dir_flag("A bin/train_orqa (or REALM / ICT) model dir.")
_OUTPUT = flags.DEFINE_string("output_dir", None, "New directory for the SavedModels.", required=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Checkpoint to export instead of the best/latest.")
_INDEX_DIR = flags.DEFINE_string(
    "index_dir", None, "With a converted ORQA --model_dir (bin/convert_checkpoint, layout "
    "orqa_from_realm): the converted block_emb (bin/convert_checkpoint "
    "--layout=block_emb --blocks_path=...: mips/ and blocks.jsonl), which "
    "the open-QA model searches and reads.")
_INDEX = flags.DEFINE_enum(
    "index", "brute_force", list(saved_models.INDEX_CHOICES),
    "Search inside the open-QA model: exact brute force, or ScaNN's TF ops (load "
    "such a model after `import scann`).")
_TREE_MIN_DOCS = flags.DEFINE_integer("scann_tree_min_docs", 5000,
                                      "Below this many blocks ScaNN scores by brute force.")
_LEAVES = flags.DEFINE_integer("scann_num_leaves", None, "ScaNN tree leaves (default from the size).")
_LEAVES_TO_SEARCH = flags.DEFINE_integer("scann_num_leaves_to_search", None, "ScaNN leaves searched.")
_TOKEN_IDS = flags.DEFINE_bool(
    "token_ids", True, "Also write the core-ops token-id twins (<name>_token_ids); they "
    "copy the index and block texts again, plus two int32 [N, C] offset "
    "arrays.")
_RETRIEVER = flags.DEFINE_enum(
    "retriever", "dense", list(saved_models.RETRIEVER_CHOICES),
    "What open_qa retrieves by: its dense tower (dense), BM25 over the corpus's wordpieces "
    "(bm25), or their reciprocal rank fusion (hybrid); BM25 is built from the frozen index's "
    "blocks and carried in the model. Only for a run that exports open_qa.")
_HYBRID_WEIGHT = flags.DEFINE_float(
    "hybrid_bm25_weight", None, "With --retriever=hybrid: fuse by W x BM25's + (1 - W) x the dense "
    "tower's z-normalised scores instead of reciprocal rank fusion (W in [0, 1], tuned on held-out "
    "questions, as bin/eval_orqa's).")
_CANDIDATES = flags.DEFINE_integer("scann_num_candidates", 100,
                                   "ScaNN candidates re-ranked by their exact score.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  scann_options = scann_index.ScannOptions(num_leaves=_LEAVES.value,
                                           num_leaves_to_search=_LEAVES_TO_SEARCH.value,
                                           num_candidates=_CANDIDATES.value,
                                           tree_min_docs=_TREE_MIN_DOCS.value)
  try:
    paths = saved_models.export_all(_MODEL_DIR.value,
                                    _OUTPUT.value,
                                    checkpoint=_CHECKPOINT.value,
                                    index=_INDEX.value,
                                    scann_options=scann_options,
                                    log=logging.info,
                                    token_ids=_TOKEN_IDS.value,
                                    index_dir=_INDEX_DIR.value,
                                    retriever=_RETRIEVER.value,
                                    hybrid_bm25_weight=_HYBRID_WEIGHT.value)
  except (ValueError, FileNotFoundError, FileExistsError) as e:  # the messages say what to pass
    sys.exit(f"export_saved_model: {e}")
  for kind, path in paths.items():
    print(f"{kind}: {path}")


if __name__ == "__main__":
  app.run(main)
