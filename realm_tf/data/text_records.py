"""Line-oriented readers for raw text inputs (JSONL, TSV) with errors that name the file and line.

Every reader yields (line_number, record). A bad record raises InputError, whose message says where and
what to do; with skip_invalid=True it is counted in a SkipCounter instead, and the caller reports the count.
"""

import csv
import json
import sys
from typing import Dict, Iterator, List, Optional, Tuple

import tensorflow as tf

# DPR and SQuAD passages are far longer than csv's default 128 KiB field limit allows for.
csv.field_size_limit(sys.maxsize)


class InputError(ValueError):
  """A record of an input file is malformed; the message names the file and the line."""


class SkipCounter:
  """Counts records skipped under --skip_invalid, keeping the first few reasons for the log."""

  def __init__(self, keep: int = 5):
    self.count = 0
    self.examples: List[str] = []
    self._keep = keep

  def reset(self) -> None:
    """Forgets earlier counts, for a reader that passes over the same input again."""
    self.count = 0
    self.examples = []

  def skip(self, error: InputError) -> None:
    self.count += 1
    if len(self.examples) < self._keep:
      self.examples.append(str(error))

  def summary(self, what: str = "records") -> str:
    if not self.count:
      return f"0 invalid {what} skipped"
    return f"{self.count} invalid {what} skipped, e.g.: " + "; ".join(self.examples)


def handle_invalid(error: InputError, skipped: Optional[SkipCounter]) -> None:
  """Raises error unless skipping is on, in which case it is counted."""
  if skipped is None:
    raise error
  skipped.skip(error)


def _decoded_lines(path: str, skipped: Optional[SkipCounter]) -> Iterator[Tuple[int, Optional[str]]]:
  """Yields (line_number, text) per physical line; text is None for an invalid UTF-8 line that is skipped."""
  with tf.io.gfile.GFile(path, "rb") as f:
    for line_number, raw in enumerate(f, start=1):
      try:
        yield line_number, raw.decode("utf-8")
      except UnicodeDecodeError as e:
        handle_invalid(
            InputError(
                f"{path}:{line_number}: not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 4]!r}); "
                "re-encode the file as UTF-8 or pass --skip_invalid"), skipped)
        yield line_number, None


def read_jsonl(path: str, skipped: Optional[SkipCounter] = None) -> Iterator[Tuple[int, dict]]:
  """Yields (line_number, object) for each non-blank line of a JSON-lines file."""
  for line_number, line in _decoded_lines(path, skipped):
    if line is None or not line.strip():
      continue
    try:
      value = json.loads(line)
    except json.JSONDecodeError as e:
      handle_invalid(
          InputError(f"{path}:{line_number}: not a JSON object ({e.msg} at column "
                     f"{e.colno}); fix the line or pass --skip_invalid"), skipped)
      continue
    except RecursionError:
      handle_invalid(
          InputError(f"{path}:{line_number}: JSON nested too deeply to read; fix the line "
                     "or pass --skip_invalid"), skipped)
      continue
    if not isinstance(value, dict):
      handle_invalid(
          InputError(f"{path}:{line_number}: expected a JSON object, got "
                     f"{type(value).__name__}; fix the line or pass --skip_invalid"), skipped)
      continue
    yield line_number, value


def read_tsv(path: str,
             default_header: List[str],
             skipped: Optional[SkipCounter] = None) -> Iterator[Tuple[int, Dict[str, str]]]:
  """Yields (line_number, {column: value}) for each row of a tab-separated file.

  Fields may be double-quoted (and then hold tabs, newlines and "" escapes), as in DPR's psgs_w100.tsv.
  The first row is a header when it names all of default_header's columns; otherwise default_header
  applies. Every row must have as many columns as the header. Line numbers are physical lines, so a
  quoted multi-line field reports the line where its row starts.
  """
  pending_bad_line = []

  def lines():
    for line_number, text in _decoded_lines(path, skipped):
      if text is None:
        pending_bad_line.append(line_number)
        text = "\n"  # keeps csv's line count aligned; the row is dropped below
      yield text

  reader = csv.reader(lines(), delimiter="\t", quotechar='"', strict=True)
  header = None
  row_start = 1
  while True:
    try:
      row = next(reader)
    except StopIteration:
      return
    except csv.Error as e:
      pending_bad_line.clear()  # the bad line belonged to this malformed row, not to the next one
      handle_invalid(
          InputError(f"{path}:{row_start}: malformed TSV ({e}); fix the quoting or pass "
                     "--skip_invalid"), skipped)
      row_start = reader.line_num + 1
      continue
    line_number, row_start = row_start, reader.line_num + 1
    if pending_bad_line:
      pending_bad_line.clear()
      continue
    if not row or row == [""]:
      continue
    if header is None:
      header = default_header
      if set(default_header) <= set(row):
        header = row
        continue
    if len(row) != len(header):
      handle_invalid(
          InputError(
              f"{path}:{line_number}: {len(row)} tab-separated columns, expected {len(header)} "
              f"({', '.join(header)}); fix the row (quote fields that contain tabs) or pass --skip_invalid"),
          skipped)
      continue
    yield line_number, dict(zip(header, row))
