r"""Converts Google's released REALM / ORQA checkpoints into realm_tf checkpoints and indexes.

The layout is detected from the variable names (--layout=auto) and printed with the conversion report
(mapped / unmapped / ignored / unset variables); see realm_tf/checkpoints/released.py. A
retriever or ORQA conversion also prints the sequence lengths it writes: the originals' (REALM query 96,
document 288; ORQA query 64, document 288, reader 320) cut to the BERT's position table, or the
--query_seq_len / --candidate_seq_len / --reader_seq_len given (at most the table's size).

  # REALM retriever -> a `retriever/` checkpoint + realm_config.json (--init_retriever_checkpoint)
  python bin/convert_checkpoint.py --input_checkpoint=/realm/cc_news_pretrained/embedder \
      --output_dir=/conv/embedder
  # knowledge-augmented encoder -> encoder + masked_lm (--init_reader_checkpoint of bin/train_realm)
  python bin/convert_checkpoint.py --input_checkpoint=/realm/cc_news_pretrained/bert \
      --output_dir=/conv/bert
  # fine-tuned ORQA -> retriever + reader
  ORQA=/realm/orqa_nq_model_from_realm/export/best_default/checkpoint
  python bin/convert_checkpoint.py --input_checkpoint=$ORQA/model.ckpt-300000 \
      --vocab_path=/realm/cc_news_pretrained/embedder/assets/vocab.txt --output_dir=/conv/orqa_nq
  # precomputed block embeddings -> a MIPS index (+ the block texts, row i = block i)
  python bin/convert_checkpoint.py --layout=block_emb \
      --input_checkpoint=/realm/cc_news_pretrained/embedder/encoded/encoded.ckpt \
      --blocks_path=/orqa/enwiki-20181220/blocks.tfr --output_dir=/conv/wiki_index
  # the two served as one open-QA SavedModel
  python bin/export_saved_model.py --model_dir=/conv/orqa_nq --index_dir=/conv/wiki_index \
      --output_dir=/export/orqa_nq
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

import sys

from absl import app
from absl import flags
from absl import logging

from realm_tf.checkpoints import released
from realm_tf.config import trainer_flags
from realm_tf.conversion import released_conversion

_INPUT = flags.DEFINE_string("input_checkpoint",
                             None, "Released checkpoint prefix, directory, or TF-Hub module directory (its "
                             "variables/variables; with --layout=block_emb its encoded/encoded.ckpt).",
                             required=True)
_LAYOUT = flags.DEFINE_enum(
    "layout", released.AUTO, [released.AUTO, *released.LAYOUTS],
    "The checkpoint's layout; auto detects it from the variable names, any "
    "other value is checked against them.")
_BERT_CONFIG = flags.DEFINE_string(
    "bert_config_path", None, "Google bert_config.json of the BERT(s); default: inferred from the "
    "checkpoint's shapes.")
_VOCAB = flags.DEFINE_string(
    "vocab_path", None, "vocab.txt of the checkpoint (checked and copied); default: the hub "
    "module's assets/vocab.txt. Needed for the retriever layouts.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "New (or empty) output directory.", required=True)
_BLOCKS = flags.DEFINE_string(
    "blocks_path", None, "block_emb: ORQA's blocks.tfr (uncompressed TFRecord, one raw string per "
    "block, row-aligned with block_emb), written as blocks.jsonl.")
_TITLES = flags.DEFINE_string("titles_path", None,
                              "block_emb: ORQA's titles.tfr, aligned with --blocks_path.")
_HEADS = flags.DEFINE_integer("num_attention_heads", None,
                              "Attention heads when inferring the config (default hidden_size / 64).")
_INDEX = trainer_flags.define_index_implementation_flag("block_emb: MIPS implementation of the index.")
_QUERY_LEN = flags.DEFINE_integer(
    "query_seq_len", None, "Retriever layouts: the query length written to realm_config.json; "
    "default min(original, the retriever BERT's position table): "
    "REALM 96, ORQA 64.")
_CANDIDATE_LEN = flags.DEFINE_integer(
    "candidate_seq_len", None, "Retriever layouts: the document length; default min(288, the "
    "retriever BERT's position table).")
_READER_LEN = flags.DEFINE_integer(
    "reader_seq_len", None, "orqa_from_realm: the span reader's length; default min(320, the "
    "reader BERT's position table).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    # bert_mapping logs one report per BERT, counting the other parts' variables as unmapped; the
    # report printed below is the one that accounts for the whole checkpoint.
    logging.set_verbosity(logging.WARNING)
  try:
    result = released_conversion.convert(_INPUT.value,
                                         _OUTPUT_DIR.value,
                                         layout=_LAYOUT.value,
                                         bert_config_path=_BERT_CONFIG.value,
                                         vocab_path=_VOCAB.value,
                                         num_attention_heads=_HEADS.value,
                                         blocks_path=_BLOCKS.value,
                                         titles_path=_TITLES.value,
                                         index_implementation=_INDEX.value,
                                         query_seq_len=_QUERY_LEN.value,
                                         candidate_seq_len=_CANDIDATE_LEN.value,
                                         reader_seq_len=_READER_LEN.value)
  except (ValueError, FileNotFoundError, FileExistsError) as e:  # ConversionError is a ValueError.
    sys.exit(f"convert_checkpoint: {e}")
  print(result.summary(list_all=True))


if __name__ == "__main__":
  app.run(main)
