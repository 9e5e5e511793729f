"""Property-based tests (hypothesis): featurization invariants, and readers fed arbitrary bytes.

Every property runs a fixed, derandomized set of examples (no example database), so a run is
deterministic. The readers may reject input only with InputError (a ValueError naming FILE:LINE), and
with a SkipCounter (--skip_invalid) not at all.
"""

import json
import os
import tempfile

import hypothesis
from hypothesis import configuration as hypothesis_configuration
from hypothesis import strategies as st
import tensorflow as tf

from realm_tf import featurization
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import pretraining
from realm_tf.data import qa
from realm_tf.data import text_records

# Hypothesis caches (e.g. its Unicode tables) under ./.hypothesis by default; keep its writes in the
# temporary directory (Bazel's TEST_TMPDIR), not in the source tree or the runfiles.
hypothesis_configuration.set_hypothesis_home_dir(
    os.path.join(os.environ.get("TEST_TMPDIR") or tempfile.gettempdir(), "realm_tf_hypothesis"))

_SETTINGS = hypothesis.settings(max_examples=50,
                                deadline=None,
                                derandomize=True,
                                database=None,
                                suppress_health_check=list(hypothesis.HealthCheck))
_CLS, _SEP, _MASK = 2, 3, 4
_VOCAB_SIZE = 285

_ids = st.lists(st.integers(5, _VOCAB_SIZE - 1), max_size=24)


class BertFormatPropertiesTest(tf.test.TestCase):

  @_SETTINGS
  @hypothesis.given(
      batch=st.integers(1, 3).flatmap(  # rows of 1-3 segments, as many in every row
          lambda n: st.lists(st.lists(_ids, min_size=n, max_size=n), min_size=1, max_size=4)),
      extra=st.integers(0, 40))
  def test_packing_invariants(self, batch, extra):
    num_segments = len(batch[0])
    max_len = num_segments + 1 + extra
    featurizer = featurization.Featurizer(_CLS,
                                          _SEP,
                                          _MASK,
                                          query_seq_len=3,
                                          candidate_seq_len=3,
                                          max_masks=1)
    segments = [
        tf.ragged.constant([row[s]
                            for row in batch], tf.int64, ragged_rank=1) if any(row[s]
                                                                               for row in batch) else
        tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int64), [0] * len(batch))
        for s in range(num_segments)
    ]
    out = featurizer.bert_format(segments, max_len)
    token_ids, mask, segment_ids = (x.numpy() for x in out)
    self.assertEqual(token_ids.shape, (len(batch), max_len))
    self.assertEqual(mask.shape, (len(batch), max_len))
    self.assertEqual(segment_ids.shape, (len(batch), max_len))
    for b, row in enumerate(batch):
      # The waterfall: earlier segments are kept whole first, later ones get what is left.
      budget = max_len - 1 - num_segments
      kept = []
      for segment in row:
        kept.append(segment[:max(0, min(len(segment), budget))])
        budget -= len(kept[-1])
      expected_ids, expected_segments = [_CLS], [0]
      for s, piece in enumerate(kept):
        expected_ids += piece + [_SEP]
        expected_segments += [s] * (len(piece) + 1)
      length = len(expected_ids)
      self.assertLessEqual(length, max_len)
      self.assertEqual(token_ids[b].tolist(), expected_ids + [0] * (max_len - length))
      self.assertEqual(mask[b].tolist(), [1] * length + [0] * (max_len - length))  # a prefix of ones
      self.assertEqual(segment_ids[b].tolist(), expected_segments + [0] * (max_len - length))
      # The invariants, stated directly as well.
      self.assertEqual(token_ids[b, 0], _CLS)
      self.assertEqual(int((token_ids[b] == _SEP).sum()), num_segments)
      real = segment_ids[b, :length]
      self.assertTrue((real[1:] >= real[:-1]).all() and real[0] == 0)  # monotone, from 0
      self.assertEqual(int(real.max()), num_segments - 1)


class SalientSpanMaskingPropertiesTest(tf.test.TestCase):

  @_SETTINGS
  @hypothesis.given(tokens=st.lists(st.tuples(st.integers(5, _VOCAB_SIZE - 1), st.integers(0, 2),
                                              st.integers(1, 6)),
                                    max_size=20),
                    span=st.tuples(st.integers(0, 90), st.integers(0, 90)),
                    query_seq_len=st.integers(3, 24),
                    max_masks=st.integers(1, 6))
  def test_masking_invariants(self, tokens, span, query_seq_len, max_masks):
    ids, starts, limits = [], [], []
    position = 0
    for token_id, gap, width in tokens:  # wordpieces with their byte offsets, in order
      position += gap
      ids.append(token_id)
      starts.append(position)
      limits.append(position + width)
      position += width
    span_start, span_limit = span
    featurizer = featurization.Featurizer(_CLS,
                                          _SEP,
                                          _MASK,
                                          query_seq_len=query_seq_len,
                                          candidate_seq_len=8,
                                          max_masks=max_masks)
    ragged = lambda values: tf.ragged.constant([values], tf.int64, ragged_rank=1) if values else \
        tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int64), [0])
    out = featurizer.mask_salient_span(ragged(ids), ragged(starts), ragged(limits), [span_start],
                                       [span_limit])
    masked = out.token_ids[0].numpy().tolist()
    positions = out.mlm_positions[0].numpy()
    targets = out.mlm_targets[0].numpy()
    weights = out.mlm_mask[0].numpy()
    status = int(out.status[0])

    inside = [i for i in range(len(ids)) if starts[i] >= span_start and limits[i] <= span_limit]
    self.assertEqual(masked, [_MASK if i in inside else ids[i] for i in range(len(ids))])
    predicted = min(len(inside), max_masks)
    self.assertEqual(weights.tolist(), [1.0] * predicted + [0.0] * (max_masks - predicted))
    for position, target in zip(positions[:predicted], targets[:predicted]):
      piece = position - 1  # position 0 is [CLS]
      self.assertIn(piece, inside)  # every predicted position lies inside the span
      self.assertEqual(target, ids[piece])  # and its target is the original id
    self.assertEqual(positions[predicted:].tolist(), [0] * (max_masks - predicted))
    self.assertEqual(positions[:predicted].tolist(), [i + 1 for i in inside[:predicted]])
    if not inside:
      self.assertEqual(status, featurization.MaskingStatus.SPAN_COVERS_NO_WORDPIECE)
    elif inside[-1] >= query_seq_len - 2:
      self.assertEqual(status, featurization.MaskingStatus.MASK_WOULD_BE_TRUNCATED)
    else:
      self.assertEqual(status, featurization.MaskingStatus.OK)
      query = featurizer.query_inputs(out.token_ids).token_ids[0].numpy()
      for position in positions[:predicted]:  # an OK example keeps every predicted [MASK]
        self.assertEqual(query[position], _MASK)


# ----------------------------------------------------------------------------------------------------
# Readers: arbitrary bytes and arbitrary JSON never crash with anything but InputError.

_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12)
_json_values = st.recursive(
    _json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from([
        "title", "body", "text", "id", "sentences", "spans", "question", "answer", "answers", "qText",
        "utterance", "targetValue", "data", "paragraphs", "context", "qas"
    ]) | st.text(max_size=6),
                                                                      children,
                                                                      max_size=5),
    max_leaves=12)
_jsonl_lines = st.lists(_json_values.map(json.dumps) | st.text(max_size=40) |
                        st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
                        max_size=6)
_HOSTILE_LINES = [
    b"[" * 5000 + b"]" * 5000,  # nesting deeper than json can parse
    b'{"title": "a", "body": "b", "sentences": [[0, 1]], "spans": [[0, 1e400]]}',
    b'{"title": "\\ud800", "text": "lone surrogate"}',
    b'{"question": "q", "answer": ["a{4294967296}"]}',
    b"\x00\xff\xfe\t\"\r\n\"",
]


def _write(directory: str, name: str, data: bytes) -> str:
  path = os.path.join(directory, name)
  with open(path, "wb") as f:
    f.write(data)
  return path


class ReaderFuzzTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.directory = tempfile.mkdtemp(dir=self.get_temp_dir())

  def _check(self, read, path):
    """read(path, skipped) may raise InputError only; with a SkipCounter it never raises. Whatever it
    yields can be written: its text has a UTF-8 encoding."""
    try:
      list(read(path, None))
    except text_records.InputError as e:
      self.assertIn(path, str(e))
    for record in read(path, text_records.SkipCounter()):
      if isinstance(record, (corpus_lib.Document, pretraining.PretrainingDocument)):
        self.assertIsInstance(record.uid, str)  # hashes title and text as UTF-8
      else:
        self.assertIsInstance(record, qa.QAExample)
        for text in [record.question] + record.answers:
          text.encode("utf-8")

  def _check_all_readers(self, data: bytes):
    for extension in (".jsonl", ".tsv"):
      path = _write(self.directory, "input" + extension, data)
      self._check(corpus_lib.read_documents, path)
      self._check(lambda p, s: pretraining.read_raw_documents(p, s), path)
      self._check(lambda p, s: pretraining.read_raw_documents(p, s, reannotate=True), path)
    path = _write(self.directory, "qa.jsonl", data)
    self._check(lambda p, s: qa.load_jsonl(p, skipped=s), path)
    self._check(lambda p, s: qa.load_jsonl(p, require_answers=False, answer_is_regex=True, skipped=s), path)
    path = _write(self.directory, "qa.tsv", data)
    self._check(lambda p, s: qa.load_curatedtrec(p, skipped=s), path)

  def _check_json_file_readers(self, data: bytes):
    """WebQuestions and SQuAD: one JSON document, so a syntax error stops even --skip_invalid."""
    path = _write(self.directory, "qa.json", data)
    for skipped in (None, qa.SkipCounter()):
      try:
        qa.load_qa(path, skipped=skipped)
      except qa.InputError as e:
        self.assertIn(path, str(e))

  @_SETTINGS
  @hypothesis.given(data=st.binary(max_size=300))
  @hypothesis.example(data=b"\n".join(_HOSTILE_LINES))
  def test_random_bytes(self, data):
    self._check_all_readers(data)
    self._check_json_file_readers(data)

  @_SETTINGS
  @hypothesis.given(lines=_jsonl_lines)
  @hypothesis.example(lines=[line.decode("latin-1") for line in _HOSTILE_LINES])
  def test_random_json_lines(self, lines):
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    self._check_all_readers(data)

  @_SETTINGS
  @hypothesis.given(records=st.lists(_json_values, max_size=5), squad=_json_values)
  @hypothesis.example(records=[{
      "utterance": "q",
      "targetValue": "(list (description"
  }],
                      squad={"data": [{
                          "title": "t",
                          "paragraphs": [{
                              "context": "c",
                              "qas": [1]
                          }]
                      }]})
  def test_random_json_documents(self, records, squad):
    self._check_json_file_readers(json.dumps(records).encode())
    self._check_json_file_readers(json.dumps(squad).encode())
    self._check_json_file_readers(json.dumps({"data": [squad]}).encode())

  @_SETTINGS
  @hypothesis.given(rows=st.lists(st.lists(st.text(max_size=10), max_size=5), max_size=6))
  @hypothesis.example(
      rows=[["id", "text", "title"], ["1", '"quoted\tfield"', "T"], ["2", '"unterminated', "T"]])
  def test_random_tsv_rows(self, rows):
    data = "\n".join("\t".join(row) for row in rows).encode("utf-8", "surrogatepass")
    self._check_all_readers(data)

  @_SETTINGS
  @hypothesis.given(value=st.text(max_size=60))
  @hypothesis.example(value='(list (description "unterminated')
  @hypothesis.example(value="(list (description (a)))")
  def test_webquestions_target_values(self, value):
    try:
      answers = qa.parse_target_value(value)
    except ValueError:
      return
    self.assertTrue(all(isinstance(a, str) for a in answers))


if __name__ == "__main__":
  tf.test.main()
