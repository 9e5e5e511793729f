"""Warm starts from checkpoints: a retriever (ORQA, FiD-KD) and ORQA's span reader.

A retriever checkpoint may hold one shared tower (REALM, ICT, a converted release) or two (ORQA): the
retriever is built to match, so that each tower gets its own weights. A reader checkpoint is either a
whole span reader (reader/) or any BERT checkpoint bert_mapping reads. Errors name the flag and the
configuration to pass, since a misfit is almost always a run started with another --bert_config or vocab.
"""

import gc
import logging
import re
from typing import Optional

import tensorflow as tf

from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import sources
from realm_tf.checkpoints import training_state
from realm_tf.modeling import embedder as embedder_lib
from realm_tf.modeling import realm_config as realm_config_lib

_WORD_EMBEDDINGS = re.compile(r"(^|/)(retriever/(doc|query)_embedder|embedder)/encoder/_embedding_layer/"
                              r"embeddings/\.ATTRIBUTES/VARIABLE_VALUE$")


def load_retriever_checkpoint(config: realm_config_lib.RealmConfig,
                              checkpoint: Optional[str],
                              flag: str = "--retriever_checkpoint") -> embedder_lib.Retriever:
  """A Retriever with the checkpoint's weights (any layout training_state.restore_retriever reads), or
  freshly initialized without one. Built shared or with two towers as the checkpoint was saved, so
  that each tower gets its own weights (a REALM or converted checkpoint holds one shared tower, an
  ORQA one two).

  Raises ValueError naming the flag and the checkpoint when it does not fit the configuration.
  """
  separate = False
  resolved = None
  if checkpoint and isinstance(sources.open_source(checkpoint), sources.SafetensorsSource):
    # A plain Hugging Face BERT (e.g. all-MiniLM-L6-v2's directory): one shared tower gets it;
    # restore_retriever names a misfit.
    resolved = checkpoint
  elif checkpoint:
    resolved = sources.resolve_checkpoint(checkpoint)
    shapes = dict(tf.train.list_variables(resolved))
    separate = any("/query_embedder/" in name for name in shapes)
    # Checked before building anything: a vocab of another size is the commonest misfit.
    rows = [shape[0] for name, shape in shapes.items() if _WORD_EMBEDDINGS.search(name)]
    if rows and rows[0] != config.retriever_bert.vocab_size:
      raise ValueError(
          f"{flag}={checkpoint} has {rows[0]} word embeddings but this run's retriever BERT has "
          f"vocab_size {config.retriever_bert.vocab_size} (from --bert_config; its presets count the "
          f"tokens of --vocab_path={config.vocab_path}): pass the --vocab_path and --bert_config the "
          "checkpoint was trained with")
  retriever = embedder_lib.build_retriever(config.retriever_bert,
                                           config.projection_size,
                                           config.embedder_layer_norm_epsilon,
                                           config.embedder_dropout_rate,
                                           share_embedders=not separate,
                                           pooling=config.embedder_pooling,
                                           cosine_score_scale=config.cosine_score_scale)
  if resolved:
    error = None
    tf_logger = tf.get_logger()
    level = tf_logger.level
    try:
      # A read that fails half-way leaves deferred restores whose garbage collection logs a warning per
      # unmatched checkpoint value (hundreds for a full ORQA/REALM checkpoint), after the error below.
      # They say nothing the error does not: collect them now, quietly.
      tf_logger.setLevel(logging.ERROR)
      try:
        training_state.restore_retriever(retriever, resolved)
      except ValueError as e:
        error = str(e)
      if error is not None:
        gc.collect()
    finally:
      tf_logger.setLevel(level)
    if error is not None:
      raise ValueError(
          f"{flag}={checkpoint} does not fit this run's retriever (hidden_size "
          f"{config.retriever_bert.hidden_size}, {config.retriever_bert.num_layers} layers, projection "
          f"{config.projection_size or 0}): {error}. Pass the --bert_config and --projection_size the "
          "checkpoint was trained with (its model dir's realm_config.json names them)")
  return retriever


def warm_start_reader(reader, checkpoint: str, flag: str = "--reader_checkpoint") -> str:
  """Initializes the span reader from --reader_checkpoint; returns what was loaded.

  A checkpoint holding a whole span reader under reader/ (bin/convert_checkpoint's orqa_from_realm
  output, or Checkpoint(reader=...)) restores the BERT and the span head; anything else is a BERT
  checkpoint for bert_mapping.load_bert_weights (TF1 Google BERT, Hugging Face, Model Garden TF2),
  which leaves the span head initialized.
  """
  try:
    resolved = sources.resolve_checkpoint(checkpoint)
    names = [name for name, _ in tf.train.list_variables(resolved)]
  except (FileNotFoundError, ValueError, tf.errors.OpError):
    names = []  # not a TensorFlow checkpoint (e.g. safetensors): a BERT source
  if any(name.startswith("reader/") for name in names):
    try:
      status = tf.train.Checkpoint(reader=reader).read(resolved)
      status.expect_partial()
      status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
      raise ValueError(f"{flag}={checkpoint}: its reader/ does not fit this span reader "
                       f"(pass the --span_hidden_size and --bert_config it was trained with): {e}") from e
    return f"span reader (BERT and span head) restored from {resolved}"
  report = bert_mapping.load_bert_weights(reader.encoder, checkpoint, strict=False)
  return f"reader BERT warm-started: {report.summary()}"
