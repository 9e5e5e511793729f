"""Training state on disk: checkpoint steps, the done marker, and restoring a run's retriever.

The trainers, the refresher and the pipeline share these conventions: CheckpointManager paths end in
ckpt-<step>, MODEL_DIR/TRAINING_DONE tells the refresher the trainer finished, and any retriever
checkpoint layout restores into a Retriever.

Trainers save tf.train.Checkpoint(model=<task model>, optimizer=...). Other processes need only a part:
the refresher the retriever of a REALM checkpoint, REALM's warm start the embedder of an ICT checkpoint,
exports the towers. The layout is recognized from the variable names, so any of these can be passed
wherever a retriever checkpoint is expected:
  model/retriever/...   bin/train_realm (RealmPretrainer.retriever) and bin/train_orqa
  model/embedder/...    bin/train_ict (one embedder: loaded into both towers)
  retriever/...         bin/convert_checkpoint output of a released REALM/ORQA embedder
A plain BERT (TF1 Google BERT, Model Garden, Hugging Face safetensors such as all-MiniLM-L6-v2) is
accepted too: its encoder initializes every tower's BERT and a projection, if the retriever has one,
keeps its fresh initialization (with --projection_size=0 a sentence-transformers model starts with its
own zero-shot space intact).
"""

import os
import re
from typing import Optional

import tensorflow as tf

from realm_tf import io_utils
from realm_tf.checkpoints import bert_mapping
from realm_tf.checkpoints import sources

DONE_MARKER = "TRAINING_DONE"
_STEP = re.compile(r"ckpt-(\d+)$")


def checkpoint_step(checkpoint_path: str) -> int:
  """The step number of a CheckpointManager path like MODEL_DIR/ckpt-1200."""
  match = _STEP.search(checkpoint_path)
  if not match:
    raise ValueError(f"{checkpoint_path}: not a checkpoint path ending in ckpt-<step>")
  return int(match.group(1))


_RETRIEVER_PREFIXES = ("model/retriever/", "model/embedder/", "retriever/")


def _layout(names, checkpoint_path: str) -> str:
  for prefix in _RETRIEVER_PREFIXES:
    if any(n.startswith(prefix) for n in names):
      return prefix
  shown = sorted({"/".join(n.split("/")[:2]) for n in names if not n.startswith("_")})[:8]
  raise ValueError(f"{checkpoint_path} holds no retriever (expected variables under model/retriever/, "
                   f"model/embedder/ or retriever/; found e.g. {shown}). Pass a checkpoint of "
                   "bin/train_realm, bin/train_ict, bin/train_orqa or bin/convert_checkpoint, or a BERT")


def _towers(retriever):
  towers = [retriever.doc_embedder]
  if retriever.query_embedder is not retriever.doc_embedder:
    towers.append(retriever.query_embedder)
  return towers


def _restore_bert_towers(retriever, source: sources.WeightSource, path: str) -> str:
  """Every tower's BERT from a plain BERT checkpoint (the module docstring); returns path."""
  for tower in _towers(retriever):
    try:
      bert_mapping.load_bert_weights(tower.encoder, source)
    except (sources.ConversionError, ValueError) as e:
      raise ValueError(f"{path}: a BERT checkpoint, but it does not fit the retriever's BERT (pass the "
                       f"--bert_config it was trained with): {e}") from e
  return path


def restore_retriever(retriever, checkpoint_path: str) -> str:
  """Restores a realm_tf.modeling.embedder.Retriever (variables created) from any known layout, or
  its towers' BERT from a plain BERT checkpoint (see the module docstring).

  Returns the resolved checkpoint path. Raises ValueError naming the file when a retriever weight is
  missing from the checkpoint or has another shape.
  """
  source = sources.open_source(checkpoint_path)
  if isinstance(source, sources.SafetensorsSource):
    return _restore_bert_towers(retriever, source, checkpoint_path)
  checkpoint_path = sources.resolve_checkpoint(checkpoint_path)
  names = [name for name, _ in tf.train.list_variables(checkpoint_path)]
  if not any(n.startswith(p) for n in names for p in _RETRIEVER_PREFIXES):
    source = sources.open_source(checkpoint_path)
    if bert_mapping.find_bert_prefixes(source) or any(n.startswith("encoder/") for n in names):
      return _restore_bert_towers(retriever, source, checkpoint_path)
  layout = _layout(names, checkpoint_path)
  # read(), not restore(): restore() adds a save_counter to the new root Checkpoint, which
  # assert_existing_objects_matched then reports as unmatched for checkpoints written without one
  # (tf.train.Checkpoint.write, converters).
  towers = _towers(retriever)
  try:
    if layout == "model/retriever/":
      statuses = [tf.train.Checkpoint(model=tf.train.Checkpoint(retriever=retriever)).read(checkpoint_path)]
    elif layout == "retriever/":
      statuses = [tf.train.Checkpoint(retriever=retriever).read(checkpoint_path)]
    else:  # ICT: its single embedder initializes every tower.
      statuses = [
          tf.train.Checkpoint(model=tf.train.Checkpoint(embedder=tower)).read(checkpoint_path)
          for tower in towers
      ]
    for status in statuses:
      status.expect_partial()
      status.assert_existing_objects_matched()
  except (AssertionError, ValueError, IndexError, tf.errors.OpError) as e:
    # IndexError: TensorFlow's reader of a truncated data file ("Read less bytes than requested").
    raise ValueError(f"{checkpoint_path}: cannot restore the retriever from it ({layout} layout): "
                     f"{e}") from e
  return checkpoint_path


def write_checkpoint_state(directory: str,
                           checkpoint_name: str,
                           timestamp: Optional[float] = None,
                           last_preserved_timestamp: Optional[float] = None) -> None:
  """Writes DIRECTORY/checkpoint, the state file tf.train.latest_checkpoint and tf.train.CheckpointManager
  read, naming the one checkpoint checkpoint_name (ckpt-<step>), relative to the directory as the manager
  writes it, so the directory can be renamed (TensorFlow's own writer of it is deprecated).

  Without timestamps the checkpoint is found by latest_checkpoint, enough for an export read by path. A
  directory a trainer resumes from needs them: a CheckpointManager counts as its own only checkpoints
  saved after last_preserved_timestamp, and a trainer whose manager lists none warm-starts at step 0.
  """
  lines = [f'model_checkpoint_path: "{checkpoint_name}"', f'all_model_checkpoint_paths: "{checkpoint_name}"']
  if timestamp is not None:
    lines.append(f"all_model_checkpoint_timestamps: {timestamp!r}")
  if last_preserved_timestamp is not None:
    lines.append(f"last_preserved_timestamp: {last_preserved_timestamp!r}")
  # Atomic: a trainer resuming from a directory cut short mid-write would find no checkpoint and start over.
  with io_utils.atomic_write(os.path.join(directory, "checkpoint")) as f:
    f.write("\n".join(lines) + "\n")


def write_done_marker(model_dir: str) -> None:
  """Tells the refresher that training finished (it exits once it has seen the last checkpoint)."""
  with tf.io.gfile.GFile(os.path.join(model_dir, DONE_MARKER), "w") as f:
    f.write("done\n")


def clear_done_marker(model_dir: str) -> bool:
  """Removes the done marker (a finished run continued to more steps); returns whether there was one."""
  path = os.path.join(model_dir, DONE_MARKER)
  if not tf.io.gfile.exists(path):
    return False
  tf.io.gfile.remove(path)
  return True


def training_done(model_dir: str) -> bool:
  """Whether the trainer of model_dir wrote its done marker."""
  return tf.io.gfile.exists(os.path.join(model_dir, DONE_MARKER))


def latest_step(model_dir: str) -> Optional[int]:
  """The step of model_dir's latest checkpoint, None when it has none."""
  latest = tf.train.latest_checkpoint(model_dir)
  return None if latest is None else checkpoint_step(latest)
