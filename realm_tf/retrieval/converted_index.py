"""A converted index directory: bin/convert_checkpoint --layout=block_emb's OUTPUT_DIR.

  mips/           a saved MIPS index (realm_tf.retrieval.index) of the released block_emb; its doc ids are
                  row numbers, so a search returns block numbers
  blocks.jsonl    line i is {"row": i, "text": ...[, "title": ...][, "id": ...]}: the text of row i
  conversion.json what wrote the directory (layout block_emb, source, and an update's record); written
                  last, so it marks a complete directory

realm_tf.conversion.released_conversion writes it; bin/update_index (realm_tf.retrieval.index_update)
writes an updated copy; orqa_model.load_converted and bin/export_saved_model --index_dir read it. The
layout lives here, beside the index format, rather than in the conversion job, so that retrieval's
updater need not import the job that imports retrieval.
"""

import json
import os
from typing import Dict, List, Tuple

import numpy as np
import tensorflow as tf

from realm_tf.checkpoints import sources
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import index_format
from realm_tf.retrieval import mips_index

CONVERSION_NAME = "conversion.json"
MIPS_DIR = "mips"
BLOCKS_NAME = "blocks.jsonl"


def load_block_texts(path: str) -> List[Dict]:
  """The records of a blocks.jsonl (convert_block_emb's or an update's), in row order."""
  with tf.io.gfile.GFile(path) as f:
    return [json.loads(line) for line in f]


def load_converted_index(index_dir: str) -> Tuple[mips_index.MipsIndex, List[Dict]]:
  """The MIPS index (index_dir/mips/) and block records (index_dir/blocks.jsonl) of a converted
  block_emb, checked to be row-aligned: search ids are rows, row i is record i.

  Raises:
    FileNotFoundError: naming index_dir and the conversion that writes what is missing.
    sources.ConversionError: when the index and the records disagree.
  """
  mips_dir = os.path.join(index_dir, MIPS_DIR)
  blocks_path = os.path.join(index_dir, BLOCKS_NAME)
  if not tf.io.gfile.exists(os.path.join(mips_dir, index_format.MANIFEST_NAME)):
    raise FileNotFoundError(f"{index_dir} holds no saved index {MIPS_DIR}/: pass the --output_dir of "
                            "bin/convert_checkpoint --layout=block_emb")
  if not tf.io.gfile.exists(blocks_path):
    raise FileNotFoundError(f"{index_dir} has no {BLOCKS_NAME}: the open-QA model needs the block "
                            "texts; convert the block_emb again with --blocks_path=<ORQA's blocks.tfr> "
                            "(and --titles_path=<titles.tfr>)")
  mips = index_lib.load_index(mips_dir)
  records = load_block_texts(blocks_path)
  if len(records) != mips.num_docs:
    raise sources.ConversionError(f"{blocks_path} has {len(records)} records but {mips_dir} has "
                                  f"{mips.num_docs} rows; they must come from one conversion")
  misplaced = next((i for i, record in enumerate(records) if record.get("row") != i), None)
  if misplaced is not None:
    raise sources.ConversionError(f"{blocks_path}: line {misplaced + 1} holds row "
                                  f"{records[misplaced].get('row')}, not {misplaced}; line i must be row i")
  if not np.array_equal(mips.doc_ids, np.arange(mips.num_docs)):
    raise sources.ConversionError(f"{mips_dir}: the index's ids are not its row numbers, so search results "
                                  "would not name blocks; use the index bin/convert_checkpoint wrote")
  return mips, records
