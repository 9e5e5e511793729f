"""The conversion job: Google's released REALM / ORQA checkpoints into realm_tf checkpoints and indexes.

bin/convert_checkpoint runs convert(): the models of a released checkpoint (loaded by
realm_tf.checkpoints.released, which says how layouts are detected and configs inferred) are saved as
realm_tf checkpoints with their configs, and a released block_emb becomes a saved MIPS index with the
block texts beside it. The converted sequence lengths are stated in realm_config.json and
conversion.json. An ORQA conversion plus a block_emb conversion with its blocks are what
orqa_model.load_converted and bin/export_saved_model --index_dir turn into the open-QA SavedModel
(converted_orqa_configs here, realm_tf.retrieval.converted_index.load_converted_index); bin/update_index
updates a converted index in place.

This job lives above realm_tf.checkpoints and realm_tf.retrieval because it writes both checkpoints and
retrieval indexes (the layout of a converted index directory is realm_tf.retrieval.converted_index's).
"""

import dataclasses
import json
import os
from typing import Dict, Iterator, Optional, Tuple

import tensorflow as tf

from realm_tf import io_utils
from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import released
from realm_tf.checkpoints import sources
from realm_tf.modeling import orqa as orqa_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import converted_index
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import mips_index

# Output files of convert().
CHECKPOINT_NAME = "ckpt"
BERT_CONFIG_NAME = "bert_config.json"

# ------------------------------------------------------------------------------------------------
# Block embeddings -> MIPS index.


def read_tfrecord_strings(path: str) -> Iterator[bytes]:
  """The records of an uncompressed TFRecord file of raw strings (ORQA's blocks.tfr, titles.tfr)."""
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"{path} does not exist; pass ORQA's blocks.tfr (one raw string per record)")
  for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
    yield record


def _decode(value: bytes, path: str, row: int) -> str:
  try:
    return value.decode("utf-8")
  except UnicodeDecodeError as e:
    raise sources.ConversionError(f"{path}: record {row} is not UTF-8 ({e}); pass ORQA's blocks.tfr / "
                                  "titles.tfr (raw UTF-8 strings, uncompressed)") from e


def _block_records(embeddings_path: str, num_rows: int, blocks_path: str,
                   titles_path: Optional[str]) -> Iterator[Dict]:
  """{"row", "text"[, "title"]} for each block, checking both files have exactly num_rows records."""
  titles = read_tfrecord_strings(titles_path) if titles_path else None
  row = -1
  for row, text in enumerate(read_tfrecord_strings(blocks_path)):
    if row >= num_rows:
      raise sources.ConversionError(f"{blocks_path} has more records than the {num_rows} rows of "
                                    f"{embeddings_path}; the embeddings and blocks must come from one "
                                    "corpus")
    record = {"row": row, "text": _decode(text, blocks_path, row)}
    if titles is not None:
      title = next(titles, None)
      if title is None:
        raise sources.ConversionError(f"{titles_path} has {row} records, {blocks_path} more; the files "
                                      "must be aligned")
      record["title"] = _decode(title, titles_path, row)
    yield record
  if row + 1 != num_rows:
    raise sources.ConversionError(f"{blocks_path} has {row + 1} records but {embeddings_path} has "
                                  f"{num_rows} rows; the embeddings and blocks must come from one corpus")
  if titles is not None and next(titles, None) is not None:
    raise sources.ConversionError(f"{titles_path} has more records than {blocks_path}; the files must be "
                                  "aligned")


def convert_block_emb(checkpoint_path: str,
                      output_dir: str,
                      blocks_path: Optional[str] = None,
                      titles_path: Optional[str] = None,
                      implementation: str = "scann",
                      **index_options) -> Tuple[mips_index.MipsIndex, released.Layout, Dict[str, str]]:
  """Builds and saves the MIPS index of a released block_emb, and the block texts beside it.

  Writes output_dir/mips/ (realm_tf.retrieval.index; doc ids are row numbers, so search returns block
  numbers) and, with blocks_path, output_dir/blocks.jsonl: line i is {"row": i, "text": record i of
  blocks_path[, "title": record i of titles_path]}. Row i of the index <-> block i <-> line i; the
  record counts must equal the number of rows (sources.ConversionError naming both files otherwise).

  Returns (the index, the checkpoint's released.Layout, {"index": path[, "blocks": path]}).
  """
  if titles_path and not blocks_path:
    raise ValueError("titles_path needs blocks_path (titles are stored beside the block texts)")
  embeddings, layout = released.read_block_emb(checkpoint_path)
  outputs = {}
  if blocks_path:
    outputs["blocks"] = os.path.join(output_dir, converted_index.BLOCKS_NAME)
    tf.io.gfile.makedirs(output_dir)
    io_utils.write_jsonl_atomic(
        outputs["blocks"],
        _block_records(layout.checkpoint_path, embeddings.shape[0], blocks_path, titles_path))
  mips = index_lib.build_index(embeddings, implementation=implementation, **index_options)
  outputs["index"] = os.path.join(output_dir, converted_index.MIPS_DIR)
  mips.save(outputs["index"],
            extra={
                "source": layout.checkpoint_path,
                "variable": layout.block_emb,
                "blocks_path": blocks_path,
                "titles_path": titles_path
            })
  return mips, layout, outputs


# ------------------------------------------------------------------------------------------------
# Conversion into realm_tf checkpoints (bin/convert_checkpoint).


@dataclasses.dataclass(frozen=True)
class ConversionResult:
  """What convert() wrote: the layout, the report (None for block_emb), the output paths and the
  sequence lengths the converted model runs with (empty when it has none: realm_bert, block_emb)."""
  layout: released.Layout
  report: Optional[bert_mapping.ConversionReport]
  outputs: Dict[str, str]
  sequence_lengths: Dict[str, int] = dataclasses.field(default_factory=dict)

  def summary(self, list_all: bool = True) -> str:
    """The layout, the report (every variable name with list_all) and the sequence lengths."""
    lines = [self.layout.describe()]
    if self.report is not None:
      lines.append(self.report.summary(list_all))
    if self.sequence_lengths:
      lines.append("sequence lengths: " +
                   ", ".join(f"{name} {value}" for name, value in self.sequence_lengths.items()) +
                   " (the originals' cut to the BERTs' position tables unless given as flags)")
    lines += [f"wrote {kind}: {path}" for kind, path in sorted(self.outputs.items())]
    return "\n".join(lines)


def _output_path(output_dir: str, name: str) -> str:
  path = os.path.join(output_dir, name)
  return path if "://" in path else os.path.abspath(path)


def _save_checkpoint(output_dir: str, **objects) -> str:
  """tf.train.Checkpoint(**objects) as output_dir/ckpt-0 with a `checkpoint` file, so the directory
  can be passed wherever a checkpoint directory is accepted."""
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(**objects),
                                       output_dir,
                                       max_to_keep=1,
                                       checkpoint_name=CHECKPOINT_NAME)
  return manager.save(checkpoint_number=0)


def convert(input_checkpoint: str,
            output_dir: str,
            layout: str = released.AUTO,
            bert_config_path: Optional[str] = None,
            vocab_path: Optional[str] = None,
            num_attention_heads: Optional[int] = None,
            blocks_path: Optional[str] = None,
            titles_path: Optional[str] = None,
            index_implementation: str = "scann",
            query_seq_len: Optional[int] = None,
            candidate_seq_len: Optional[int] = None,
            reader_seq_len: Optional[int] = None) -> ConversionResult:
  """Converts a released checkpoint into realm_tf's formats under output_dir (a new or empty one).

  Outputs by layout:
    realm_bert: ckpt-0 = tf.train.Checkpoint(encoder=, masked_lm=) (Model Garden's
      BertPretrainerV2.checkpoint_items, which bert_mapping.load_bert_weights restores: pass
      output_dir as bin/train_realm --init_reader_checkpoint), bert_config.json, vocab.txt.
    realm_embedder: ckpt-0 = tf.train.Checkpoint(retriever=Retriever) (the `retriever/` layout of
      checkpoints.restore_retriever: pass output_dir as --init_retriever_checkpoint), realm_config.json
      (that BERT for both BERTs, projection_size, embedder_layer_norm_epsilon 1e-12, vocab_path,
      query_seq_len and candidate_seq_len: see sequence_lengths()), bert_config.json, vocab.txt.
    orqa_from_realm: ckpt-0 = tf.train.Checkpoint(retriever=, reader=), realm_config.json (retriever and
      reader BERTs), bert_config.json (the reader's), vocab.txt; conversion.json records
      span_hidden_size and the span reader's OrqaConfig ("orqa_config": reader_seq_len,
      span_hidden_size, max_span_width 10, LayerNorm epsilon 1e-3, the original's beams), which
      converted_orqa_configs() reads back.
    block_emb: mips/ (a saved MIPS index) and, with blocks_path, blocks.jsonl.
  Every layout also writes conversion.json (layout, source, report). The vocab (vocab_path, else the
  hub module's assets/vocab.txt) is checked against the checkpoint and copied; the retriever layouts
  need one (realm_config.json names it).
  """
  if tf.io.gfile.exists(output_dir) and tf.io.gfile.listdir(output_dir):
    raise FileExistsError(f"{output_dir} is not empty; converted checkpoints are written into a new "
                          "directory")
  resolved = sources.resolve_checkpoint(input_checkpoint, block_emb=layout == released.BLOCK_EMB)
  if layout == released.BLOCK_EMB or (layout == released.AUTO and
                                      released.detect_layout(resolved).name == released.BLOCK_EMB):
    if (query_seq_len, candidate_seq_len, reader_seq_len) != (None, None, None):
      raise ValueError("query_seq_len / candidate_seq_len / reader_seq_len do not apply to layout "
                       "block_emb (its embeddings are computed already)")
    mips, detected, outputs = convert_block_emb(resolved, output_dir, blocks_path, titles_path,
                                                index_implementation)
    info = {
        "layout": released.BLOCK_EMB,
        "source": detected.checkpoint_path,
        "variable": detected.block_emb,
        "num_blocks": mips.num_docs,
        "dim": mips.dim,
        "outputs": outputs
    }
    io_utils.write_json_atomic(os.path.join(output_dir, converted_index.CONVERSION_NAME), info)
    return ConversionResult(
        detected, None, dict(outputs, conversion=os.path.join(output_dir, converted_index.CONVERSION_NAME)))
  if blocks_path or titles_path:
    raise ValueError("blocks_path / titles_path only apply to layout block_emb")

  loaded = released.load_released(resolved,
                                  layout,
                                  bert_config_path,
                                  num_attention_heads,
                                  reader_seq_len=reader_seq_len,
                                  query_seq_len=query_seq_len,
                                  candidate_seq_len=candidate_seq_len)
  detected = loaded.layout
  configs = [(c, prefix)
             for c, prefix in ((loaded.encoder_config, detected.encoder_bert),
                               (loaded.retriever_config, detected.retriever_bert), (loaded.reader_config,
                                                                                    detected.reader_bert))
             if c]
  vocab_path = vocab_path or released.find_module_vocab(detected.checkpoint_path)
  if vocab_path is None and detected.name != released.REALM_BERT:
    raise sources.ConversionError(f"{detected.checkpoint_path}: no vocab.txt beside the checkpoint; pass "
                                  "vocab_path (--vocab_path): realm_config.json names the vocab")
  if vocab_path is not None:
    for c, prefix in configs:
      released.check_vocab(vocab_path, c, detected.checkpoint_path, prefix + bert_mapping.WORD_EMBEDDINGS)

  tf.io.gfile.makedirs(output_dir)
  outputs = {}
  if vocab_path is not None:
    outputs["vocab"] = _output_path(output_dir, released.VOCAB_NAME)
    io_utils.copy_atomic(vocab_path, outputs["vocab"])
  main_config = loaded.reader_config or loaded.encoder_config or loaded.retriever_config
  outputs["bert_config"] = _output_path(output_dir, BERT_CONFIG_NAME)
  io_utils.write_json_atomic(outputs["bert_config"], sources.google_bert_config_dict(main_config))
  if detected.name == released.REALM_BERT:
    kae = loaded.knowledge_augmented_encoder
    outputs["checkpoint"] = _save_checkpoint(output_dir, encoder=kae.encoder, masked_lm=kae.masked_lm)
  else:
    objects = {"retriever": loaded.retriever}
    if loaded.reader is not None:
      objects["reader"] = loaded.reader
    outputs["checkpoint"] = _save_checkpoint(output_dir, **objects)
    config = realm_config_lib.RealmConfig(retriever_bert=loaded.retriever_config,
                                          reader_bert=loaded.reader_config or loaded.retriever_config,
                                          vocab_path=outputs["vocab"],
                                          projection_size=loaded.projection_size,
                                          embedder_layer_norm_epsilon=released.EMBEDDER_LAYER_NORM_EPSILON,
                                          embedder_dropout_rate=0.0,
                                          share_embedders=True,
                                          query_seq_len=loaded.sequence_lengths["query_seq_len"],
                                          candidate_seq_len=loaded.sequence_lengths["candidate_seq_len"])
    outputs["realm_config"] = config.save(output_dir)
  info = {
      "layout": detected.name,
      "source": detected.checkpoint_path,
      "description": detected.describe(),
      "projection_size": loaded.projection_size,
      "span_hidden_size": loaded.span_hidden_size,
      "reader_layer_norm_epsilon": released.READER_LAYER_NORM_EPSILON if loaded.reader else None,
      "sequence_lengths": loaded.sequence_lengths,
      "outputs": dict(outputs),
      "report": loaded.report.to_dict()
  }
  if loaded.reader is not None:
    info["orqa_config"] = orqa_lib.OrqaConfig(
        reader_seq_len=loaded.sequence_lengths["reader_seq_len"],
        span_hidden_size=loaded.span_hidden_size,
        max_span_width=released.ORQA_MAX_SPAN_WIDTH,
        reader_layer_norm_epsilon=released.READER_LAYER_NORM_EPSILON).to_dict()
  outputs["conversion"] = _output_path(output_dir, converted_index.CONVERSION_NAME)
  io_utils.write_json_atomic(outputs["conversion"], info)
  return ConversionResult(detected, loaded.report, outputs, loaded.sequence_lengths)


# ------------------------------------------------------------------------------------------------
# Reading converted outputs back (the exporters).


def read_conversion(output_dir: str) -> Optional[Dict]:
  """The conversion.json that convert() wrote into output_dir, or None when there is none (a directory
  that bin/convert_checkpoint did not write)."""
  path = os.path.join(output_dir, converted_index.CONVERSION_NAME)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)


def converted_orqa_configs(model_dir: str) -> Tuple[realm_config_lib.RealmConfig, orqa_lib.OrqaConfig]:
  """The RealmConfig (realm_config.json) and the span reader's OrqaConfig (conversion.json) of a
  converted orqa_from_realm checkpoint, with every sequence length checked against its BERT's position
  table (a hand-edited or older config would otherwise fail deep inside the model with a reshape error).

  Raises:
    ValueError: naming the file, for another layout, a conversion.json without orqa_config (written
      before it was recorded), or a length beyond a position table.
  """
  info = read_conversion(model_dir)
  path = os.path.join(model_dir, converted_index.CONVERSION_NAME)
  if info is None or info.get("layout") != released.ORQA_FROM_REALM:
    found = "no such file" if info is None else f"layout {info.get('layout')}"
    raise ValueError(f"{model_dir} is not a converted ORQA checkpoint ({path}: {found}); convert "
                     "orqa_{nq,wq}_model_from_realm with bin/convert_checkpoint into it")
  if "orqa_config" not in info:
    raise ValueError(f"{path} records no orqa_config (the reader's sequence length): it was written by "
                     "an older bin/convert_checkpoint; convert the checkpoint again into a new "
                     "--output_dir")
  config = realm_config_lib.RealmConfig.load(model_dir)
  try:
    orqa = orqa_lib.OrqaConfig.from_dict(info["orqa_config"])
  except (TypeError, ValueError) as e:
    raise ValueError(f"{path}: orqa_config is not an ORQA configuration ({e})") from e
  for name, value, bert_config, which, source in (("query_seq_len", config.query_seq_len,
                                                   config.retriever_bert, "retriever",
                                                   realm_config_lib.CONFIG_NAME),
                                                  ("candidate_seq_len", config.candidate_seq_len,
                                                   config.retriever_bert, "retriever",
                                                   realm_config_lib.CONFIG_NAME),
                                                  ("reader_seq_len", orqa.reader_seq_len, config.reader_bert,
                                                   "reader", converted_index.CONVERSION_NAME)):
    if value > bert_config.max_position_embeddings:
      raise ValueError(f"{os.path.join(model_dir, source)}: {name} {value} exceeds the "
                       f"{bert_config.max_position_embeddings} positions of the {which} BERT's "
                       "position table; convert the checkpoint again (bin/convert_checkpoint takes "
                       "the lengths from the position tables) or set it to at most "
                       f"{bert_config.max_position_embeddings}")
  return config, orqa
