"""Tests of realm_tf.json_config through a small frozen dataclass: save, load, errors, resume check."""

import dataclasses
import json
import os
from typing import ClassVar

import tensorflow as tf

from realm_tf import json_config


@dataclasses.dataclass(frozen=True)
class _Config(json_config.JsonConfig):
  FILE_NAME: ClassVar[str] = "thing_config.json"
  DESCRIPTION: ClassVar[str] = "a thing configuration"
  WRITTEN_BY: ClassVar[str] = "bin/train_thing"
  NOT_COMPARED: ClassVar[tuple] = ("note",)
  width: int = 4
  depth: int = 2
  note: str = ""


class JsonConfigTest(tf.test.TestCase):

  def test_save_or_check_writes_then_compares_every_field_but_the_uncompared(self):
    model_dir = os.path.join(self.get_temp_dir(), "run")
    self.assertEqual(_Config(width=8).save_or_check(model_dir), _Config(width=8))
    with open(os.path.join(model_dir, "thing_config.json")) as f:
      self.assertEqual(json.load(f), {"width": 8, "depth": 2, "note": ""})
    # A resume with the same fields (a note may differ) returns the saved configuration.
    self.assertEqual(_Config(width=8, note="moved").save_or_check(model_dir), _Config(width=8))
    with self.assertRaisesRegex(
        ValueError, f"{model_dir} was started with another thing configuration; "
        "use a new --model_dir or the same flags. Differences: width: 8 "
        r"\(saved\) vs 16 \(flags\); depth: 2 \(saved\) vs 3 \(flags\)"):
      _Config(width=16, depth=3).save_or_check(model_dir)

  def test_load_errors_name_the_file_and_the_writer(self):
    directory = self.get_temp_dir()
    os.makedirs(os.path.join(directory, "empty"))
    with self.assertRaisesRegex(
        FileNotFoundError, r"thing_config.json does not exist: the trainer writes "
        r"it when it starts \(bin/train_thing\)"):
      _Config.load(os.path.join(directory, "empty"))
    for name, text in (("broken.json", "{not json"), ("unknown.json", '{"width": 1, "colour": 2}')):
      path = os.path.join(directory, name)
      with open(path, "w") as f:
        f.write(text)
      with self.assertRaisesRegex(ValueError, f"{path}: not a thing configuration"):
        _Config.load(path)


if __name__ == "__main__":
  tf.test.main()
