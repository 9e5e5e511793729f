"""An ORQA model over its frozen index: built fresh, or loaded from a trained model dir or from Google's
converted release.

This is what reads a bin/train_orqa run back (bin/eval_orqa, bin/update_index, bin/export_saved_model,
serving): the run's configs, its frozen index (checked against the corpus as it is now, and following a
corpus bin/update_index derived), and the checkpoint to restore, the best one by default.
"""

import dataclasses
import os
from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf

from realm_tf.checkpoints import sources
from realm_tf.conversion import released_conversion
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import corpus_table
from realm_tf.modeling import orqa as orqa_lib
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import converted_index
from realm_tf.runs import best_checkpoint
from realm_tf.runs import frozen_index
from realm_tf.runs import warm_start


def build_model(config: realm_config_lib.RealmConfig, orqa: orqa_lib.OrqaConfig, embeddings: np.ndarray,
                blocks: corpus_table.CorpusTable, tokenizer) -> orqa_lib.OrqaModel:
  """An OrqaModel with its variables created (call under the strategy's scope)."""
  token_ids, lengths = blocks.dense_bodies(orqa.max_block_len)
  model = orqa_lib.OrqaModel(config, orqa, embeddings, token_ids, lengths, tokenizer.cls_id, tokenizer.sep_id)
  model.build_variables()
  return model


class TrainedOrqa(NamedTuple):
  """A restored ORQA model with what predicting and exporting it need; checkpoint is the path read."""
  model: orqa_lib.OrqaModel
  config: realm_config_lib.RealmConfig
  orqa: orqa_lib.OrqaConfig
  blocks: corpus_table.CorpusTable
  tokenizer: object
  featurizer: object
  checkpoint: str


def resolve_trained_checkpoint(model_dir: str, checkpoint: Optional[str] = None) -> str:
  """--checkpoint if given, else the best checkpoint (best_metric.json), else the latest one."""
  if checkpoint:
    return sources.resolve_checkpoint(checkpoint)
  best = best_checkpoint.read_best(model_dir)
  if best is not None:
    return sources.resolve_checkpoint(os.path.join(model_dir, best["checkpoint"]))
  latest = tf.train.latest_checkpoint(model_dir)
  if latest is None:
    raise FileNotFoundError(f"{model_dir} holds no checkpoint yet (no {best_checkpoint.BEST_METRIC_NAME}, "
                            "no ckpt-N); train with bin/train_orqa first or pass --checkpoint")
  return latest


def load_trained(model_dir: str,
                 checkpoint: Optional[str] = None,
                 strategy: Optional[tf.distribute.Strategy] = None,
                 reader_beam_size: Optional[int] = None) -> TrainedOrqa:
  """Rebuilds a bin/train_orqa run's model from its model dir and restores a checkpoint into it.

  reader_beam_size: blocks the reader reads, instead of the run's (the weights do not depend on it).
  """
  config = realm_config_lib.RealmConfig.load(model_dir)
  orqa = orqa_lib.OrqaConfig.load(model_dir)
  if reader_beam_size is not None:
    orqa = dataclasses.replace(orqa, reader_beam_size=reader_beam_size)
  corpus_lib.check_vocab(config.vocab_path,
                         orqa.retrieval_corpus_path,
                         config.vocab_sha256,
                         os.path.join(model_dir, realm_config_lib.CONFIG_NAME),
                         source=f"{model_dir}/{realm_config_lib.CONFIG_NAME}'s vocab_path")
  path = resolve_trained_checkpoint(model_dir, checkpoint)
  tokenizer = config.tokenizer()
  # After bin/update_index the frozen index embeds a corpus derived from the configured one.
  orqa = dataclasses.replace(orqa,
                             retrieval_corpus_path=frozen_index.frozen_index_corpus(
                                 model_dir, orqa.retrieval_corpus_path))
  embeddings = frozen_index.load_frozen_index(model_dir, orqa.retrieval_corpus_path)
  blocks = corpus_table.CorpusTable.load(orqa.retrieval_corpus_path)
  with (strategy or tf.distribute.get_strategy()).scope():
    model = build_model(config, orqa, embeddings, blocks, tokenizer)
  status = tf.train.Checkpoint(model=model).read(path)
  status.expect_partial()
  try:
    status.assert_existing_objects_matched()
  except AssertionError as e:
    raise ValueError(f"{path}: not a checkpoint of this ORQA model ({e})") from e
  return TrainedOrqa(model, config, orqa, blocks, tokenizer, config.featurizer(tokenizer), path)


def load_converted(model_dir: str,
                   index_dir: str,
                   checkpoint: Optional[str] = None,
                   strategy: Optional[tf.distribute.Strategy] = None) -> TrainedOrqa:
  """Google's released ORQA as bin/convert_checkpoint wrote it, for the exporters: model_dir holds the
  converted orqa_from_realm checkpoint (retriever + span reader; its configs state the sequence lengths),
  index_dir the converted block_emb (mips/ and blocks.jsonl, row i = block i).

  The block embeddings are the released ones; ORQA fine-tuned only the query side of its retriever, so
  the converted tower is the query tower (the model's document tower gets the same weights but did not
  embed the index). Block ids are the row numbers, as strings.
  """
  config, orqa = released_conversion.converted_orqa_configs(model_dir)
  mips, records = converted_index.load_converted_index(index_dir)
  if mips.dim != config.embedding_dim:
    raise ValueError(f"--index_dir={index_dir} holds {mips.dim}-dimensional block embeddings but the "
                     f"retriever of --model_dir={model_dir} projects to {config.embedding_dim}; pass "
                     "the block_emb of the release this ORQA model was fine-tuned with")
  orqa = dataclasses.replace(orqa, retrieval_corpus_path=os.path.join(index_dir, converted_index.BLOCKS_NAME))
  tokenizer = config.tokenizer()
  blocks = corpus_table.CorpusTable.from_texts(
      tokenizer,
      [record.get("title", "") for record in records],
      # A released block is named by its row; bin/update_index gives every block of the index it writes
      # an "id" (released blocks keep their original row number), so ids survive removals.
      [record["text"] for record in records],
      [str(record.get("id", i)) for i, record in enumerate(records)],
      orqa.retrieval_corpus_path)
  path = sources.resolve_checkpoint(checkpoint or model_dir)
  flag = "--checkpoint" if checkpoint else "--model_dir"
  with (strategy or tf.distribute.get_strategy()).scope():
    model = build_model(config, orqa, np.asarray(mips.embeddings), blocks, tokenizer)
    orqa_lib.copy_retriever_weights(warm_start.load_retriever_checkpoint(config, path, flag=flag),
                                    model.retriever)
    warm_start.warm_start_reader(model.reader, path, flag=flag)
  return TrainedOrqa(model, config, orqa, blocks, tokenizer, config.featurizer(tokenizer), path)
