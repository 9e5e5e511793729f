"""A run configuration kept as MODEL_DIR/<name>.json: written when a run starts, compared when it resumes.

A restarted trainer must use the configuration its checkpoints were written with (another shape fails
to restore, another sequence length or beam silently changes what the run learns), and evaluation,
export and the refresher rebuild the model from the saved file. RealmConfig, OrqaConfig and FidConfig
(frozen dataclasses) share this one implementation: atomic JSON (no pickle), errors that name the file
and the binary that writes it, and a resume check that lists every difference.
"""

import dataclasses
import json
import os
from typing import Any, ClassVar, Dict, List, Tuple, TypeVar

import tensorflow as tf

from realm_tf import io_utils

_Config = TypeVar("_Config", bound="JsonConfig")


class JsonConfig:
  """Mixin of a frozen dataclass saved as MODEL_DIR/FILE_NAME.

  Class attributes:
    FILE_NAME: the file's name in a model dir.
    DESCRIPTION: what the file is, for errors ("an ORQA configuration").
    WRITTEN_BY: the binaries that write it when they start ("bin/train_orqa").
    NOT_COMPARED: fields a resumed run may change (compared elsewhere, or harmless).
  """
  FILE_NAME: ClassVar[str]
  DESCRIPTION: ClassVar[str]
  WRITTEN_BY: ClassVar[str]
  NOT_COMPARED: ClassVar[Tuple[str, ...]] = ()

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, values: Dict[str, Any]):
    return cls(**values)

  def save(self, model_dir: str) -> str:
    tf.io.gfile.makedirs(model_dir)
    path = os.path.join(model_dir, self.FILE_NAME)
    io_utils.write_json_atomic(path, self.to_dict())
    return path

  @classmethod
  def load(cls, model_dir_or_file: str):
    """From a model dir or the file itself. FileNotFoundError names the binary that writes it;
    ValueError names the file."""
    path = model_dir_or_file
    if tf.io.gfile.isdir(path):
      path = os.path.join(path, cls.FILE_NAME)
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"{path} does not exist: the trainer writes it when it starts "
                              f"({cls.WRITTEN_BY}); start it, or pass the run's model dir")
    with tf.io.gfile.GFile(path) as f:
      try:
        values = json.load(f)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not {cls.DESCRIPTION} ({e})") from e
    try:
      return cls.from_dict(values)
    except (TypeError, KeyError) as e:
      raise ValueError(f"{path}: not {cls.DESCRIPTION} ({e})") from e
    except ValueError as e:
      raise ValueError(f"{path}: {e}") from e

  def differences(self, saved) -> List[str]:
    mine, theirs = self.to_dict(), saved.to_dict()
    return [
        f"{k}: {theirs.get(k)!r} (saved) vs {mine[k]!r} (flags)" for k in mine
        if k not in self.NOT_COMPARED and mine[k] != theirs.get(k)
    ]

  def check_matches(self, saved, path: str) -> None:
    """Raises ValueError listing every difference between this config and the saved one."""
    differences = self.differences(saved)
    if differences:
      raise ValueError(f"{path} was started with another {self.DESCRIPTION.split(' ', 1)[1]}; use a new "
                       "--model_dir or the same flags. Differences: " + "; ".join(differences))

  def save_or_check(self: _Config, model_dir: str) -> _Config:
    """Writes MODEL_DIR/FILE_NAME when absent, else checks that it matches (check_matches); returns the
    saved configuration (self when written now)."""
    try:
      saved = type(self).load(model_dir)
    except FileNotFoundError:
      self.save(model_dir)
      return self
    self.check_matches(saved, model_dir)
    return saved
