"""Tests for realm_tf.data.text_records: JSONL and TSV readers, errors naming file:line, skipping."""

import os

import tensorflow as tf

from realm_tf.data import text_records

InputError = text_records.InputError
HEADER = ["id", "text", "title"]


class TextRecordsTestCase(tf.test.TestCase):

  def write(self, name, content):
    path = os.path.join(self.create_tempdir().full_path, name)
    with open(path, "wb") as f:
      f.write(content.encode("utf-8") if isinstance(content, str) else content)
    return path


class ReadJsonlTest(TextRecordsTestCase):

  def test_reads_objects_with_physical_line_numbers(self):
    path = self.write("docs.jsonl", '{"a": 1}\n\n   \n{"b": "é"}\r\n{"c": [1, 2]}')
    self.assertEqual(list(text_records.read_jsonl(path)), [(1, {
        "a": 1
    }), (4, {
        "b": "é"
    }), (5, {
        "c": [1, 2]
    })])

  def test_not_json_names_file_and_line(self):
    path = self.write("docs.jsonl", '{"a": 1}\n{"a": 2}\n{"a": \n{"a": 4}\n')
    with self.assertRaises(InputError) as ctx:
      list(text_records.read_jsonl(path))
    message = str(ctx.exception)
    self.assertIn(f"{path}:3:", message)
    self.assertIn("not a JSON object", message)
    self.assertIn("--skip_invalid", message)

  def test_non_object_json_names_line(self):
    for line, kind in (("[1, 2]", "list"), ('"text"', "str"), ("3", "int"), ("null", "NoneType")):
      path = self.write("docs.jsonl", '{"ok": true}\n' + line + "\n")
      with self.assertRaisesRegex(InputError, rf"docs\.jsonl:2: expected a JSON object, got {kind}"):
        list(text_records.read_jsonl(path))

  def test_invalid_utf8_names_line(self):
    path = self.write("docs.jsonl", b'{"a": 1}\n{"a": "caf\xe9"}\n{"a": 3}\n')
    with self.assertRaises(InputError) as ctx:
      list(text_records.read_jsonl(path))
    self.assertIn(f"{path}:2: not valid UTF-8", str(ctx.exception))
    self.assertIn("byte 10", str(ctx.exception))

  def test_records_before_the_error_are_yielded(self):
    path = self.write("docs.jsonl", '{"a": 1}\nnope\n')
    reader = text_records.read_jsonl(path)
    self.assertEqual(next(reader), (1, {"a": 1}))
    with self.assertRaises(InputError):
      next(reader)

  def test_skip_invalid_counts(self):
    path = self.write("docs.jsonl", b'{"a": 1}\nnot json\n[1]\n{"a": "\xff"}\n\n{"a": 6}\n')
    skipped = text_records.SkipCounter()
    self.assertEqual(list(text_records.read_jsonl(path, skipped)), [(1, {"a": 1}), (6, {"a": 6})])
    self.assertEqual(skipped.count, 3)
    self.assertLen(skipped.examples, 3)
    self.assertIn(f"{path}:2:", skipped.examples[0])
    self.assertIn(f"{path}:3:", skipped.examples[1])
    self.assertIn(f"{path}:4:", skipped.examples[2])
    self.assertStartsWith(skipped.summary("lines"), "3 invalid lines skipped, e.g.: ")


class SkipCounterTest(tf.test.TestCase):

  def test_keeps_first_examples_only(self):
    counter = text_records.SkipCounter(keep=2)
    self.assertEqual(counter.summary(), "0 invalid records skipped")
    for i in range(4):
      counter.skip(InputError(f"bad {i}"))
    self.assertEqual(counter.count, 4)
    self.assertEqual(counter.examples, ["bad 0", "bad 1"])
    self.assertEqual(counter.summary("rows"), "4 invalid rows skipped, e.g.: bad 0; bad 1")

  def test_reset(self):
    counter = text_records.SkipCounter()
    counter.skip(InputError("bad"))
    counter.reset()
    self.assertEqual((counter.count, counter.examples), (0, []))
    counter.skip(InputError("worse"))
    self.assertEqual(counter.summary(), "1 invalid records skipped, e.g.: worse")

  def test_handle_invalid(self):
    error = InputError("x.tsv:3: bad")
    with self.assertRaises(InputError):
      text_records.handle_invalid(error, None)
    counter = text_records.SkipCounter()
    text_records.handle_invalid(error, counter)
    self.assertEqual(counter.count, 1)


class ReadTsvTest(TextRecordsTestCase):

  def test_header_row_is_detected_and_used(self):
    # Columns in another order and an extra one (SQuAD's split): the header names them.
    path = self.write("p.tsv", "title\tid\ttext\tsplit\nT1\t1\tbody one\ttrain\n")
    self.assertEqual(list(text_records.read_tsv(path, HEADER)), [(2, {
        "title": "T1",
        "id": "1",
        "text": "body one",
        "split": "train"
    })])

  def test_without_header_the_default_applies(self):
    path = self.write("p.tsv", "1\tbody one\tT1\n2\tbody two\tT2\n")
    self.assertEqual(list(text_records.read_tsv(path, HEADER)), [(1, {
        "id": "1",
        "text": "body one",
        "title": "T1"
    }), (2, {
        "id": "2",
        "text": "body two",
        "title": "T2"
    })])

  def test_partial_header_is_data(self):
    # A first row naming only some of the columns is not a header.
    path = self.write("p.tsv", "id\ttext\tname\n")
    self.assertEqual(list(text_records.read_tsv(path, HEADER)), [(1, {
        "id": "id",
        "text": "text",
        "title": "name"
    })])

  def test_wrong_column_count_names_line(self):
    path = self.write("p.tsv", "id\ttext\ttitle\n1\tbody\tT\n2\tonly two\n")
    with self.assertRaises(InputError) as ctx:
      list(text_records.read_tsv(path, HEADER))
    message = str(ctx.exception)
    self.assertIn(f"{path}:3: 2 tab-separated columns, expected 3 (id, text, title)", message)
    path = self.write("p.tsv", "1\tbody\tT\textra\n")
    with self.assertRaisesRegex(InputError, r"p\.tsv:1: 4 tab-separated columns, expected 3"):
      list(text_records.read_tsv(path, HEADER))

  def test_quoted_multiline_fields_and_physical_line_numbers(self):
    content = (
        "id\ttext\ttitle\n"  # 1
        "1\t\"first line\nsecond line\"\tT1\n"  # 2-3
        "2\tplain\tT2\n"  # 4
        "\n"  # 5
        "3\t\"a \"\"quoted\"\" word and a\ttab\"\tT3\n"  # 6
        "4\t\"x\n\n\ny\"\t\"Multi\nTitle\"\n"  # 7-11
        "5\tlast\tT5\n")  # 12
    path = self.write("p.tsv", content)
    rows = list(text_records.read_tsv(path, HEADER))
    self.assertEqual([n for n, _ in rows], [2, 4, 6, 7, 12])
    self.assertEqual(rows[0][1], {"id": "1", "text": "first line\nsecond line", "title": "T1"})
    self.assertEqual(rows[2][1]["text"], 'a "quoted" word and a\ttab')
    self.assertEqual(rows[3][1], {"id": "4", "text": "x\n\n\ny", "title": "Multi\nTitle"})
    self.assertEqual(rows[4][1]["id"], "5")

  def test_error_after_multiline_field_names_physical_line(self):
    content = "1\t\"a\nb\nc\"\tT1\n2\tbad row\n"  # row 1 spans lines 1-3, the bad row is line 4
    path = self.write("p.tsv", content)
    with self.assertRaisesRegex(InputError, r"p\.tsv:4: 2 tab-separated columns"):
      list(text_records.read_tsv(path, HEADER))

  def test_blank_lines_ignored(self):
    path = self.write("p.tsv", "\n\nid\ttext\ttitle\n\n1\tb\tT\n\n\n2\tc\tU\n\n")
    self.assertEqual([(n, r["id"]) for n, r in text_records.read_tsv(path, HEADER)], [(5, "1"), (8, "2")])

  def test_crlf_line_endings(self):
    path = self.write("p.tsv", "id\ttext\ttitle\r\n1\tb\tT\r\n2\tc\tU\r\n")
    self.assertEqual(list(text_records.read_tsv(path, HEADER)), [(2, {
        "id": "1",
        "text": "b",
        "title": "T"
    }), (3, {
        "id": "2",
        "text": "c",
        "title": "U"
    })])

  def test_malformed_quoting_names_line(self):
    path = self.write("p.tsv", '1\tok\tT\n2\t"bad"x\tT\n3\tok\tT\n')
    with self.assertRaisesRegex(InputError, r"p\.tsv:2: malformed TSV"):
      list(text_records.read_tsv(path, HEADER))
    skipped = text_records.SkipCounter()
    rows = list(text_records.read_tsv(path, HEADER, skipped))
    self.assertEqual([(n, r["id"]) for n, r in rows], [(1, "1"), (3, "3")])
    self.assertEqual(skipped.count, 1)

  def test_unterminated_quote_names_starting_line(self):
    path = self.write("p.tsv", '1\tok\tT\n2\t"never closed\n3\tx\tT\n')
    with self.assertRaisesRegex(InputError, r"p\.tsv:2: malformed TSV"):
      list(text_records.read_tsv(path, HEADER))

  def test_invalid_utf8_names_line(self):
    path = self.write("p.tsv", b"id\ttext\ttitle\n1\tcaf\xc3\xa9\tT\n2\tcaf\xe9\tT\n3\tok\tT\n")
    with self.assertRaisesRegex(InputError, r"p\.tsv:3: not valid UTF-8"):
      list(text_records.read_tsv(path, HEADER))

  def test_skip_invalid_counts_and_keeps_line_numbers(self):
    content = (
        b"id\ttext\ttitle\n"  # 1
        b"1\tgood\tT\n"  # 2
        b"2\tbad \xff\tT\n"  # 3: invalid UTF-8
        b"3\ttwo columns\n"  # 4: wrong column count
        b"4\t\"multi\nline\"\tT\n"  # 5-6
        b"5\tgood\tT\n")  # 7
    path = self.write("p.tsv", content)
    skipped = text_records.SkipCounter()
    rows = list(text_records.read_tsv(path, HEADER, skipped))
    self.assertEqual([(n, r["id"]) for n, r in rows], [(2, "1"), (5, "4"), (7, "5")])
    self.assertEqual(rows[1][1]["text"], "multi\nline")
    self.assertEqual(skipped.count, 2)
    self.assertIn(f"{path}:3: not valid UTF-8", skipped.examples[0])
    self.assertIn(f"{path}:4: 2 tab-separated columns", skipped.examples[1])

  def test_skip_malformed_row_holding_invalid_utf8_keeps_next_row(self):
    # Regression: the invalid line 3 is inside the malformed quoted row 2-4; skipping that row must not
    # also drop the valid row 5.
    path = self.write("p.tsv", b'1\tok\tT\n2\t"abc\n\xff\ndef"x\tT\n5\tgood\tT\n6\tgood\tT\n')
    skipped = text_records.SkipCounter()
    rows = list(text_records.read_tsv(path, HEADER, skipped))
    self.assertEqual([(n, r["id"]) for n, r in rows], [(1, "1"), (5, "5"), (6, "6")])
    self.assertEqual(skipped.count, 2)
    self.assertIn(f"{path}:3: not valid UTF-8", skipped.examples[0])
    self.assertIn(f"{path}:2: malformed TSV", skipped.examples[1])

  def test_invalid_utf8_inside_quoted_field_drops_only_that_row(self):
    path = self.write("p.tsv", b'1\t"abc\n\xff\ndef"\tT\n4\tgood\tT\n')
    skipped = text_records.SkipCounter()
    rows = list(text_records.read_tsv(path, HEADER, skipped))
    self.assertEqual([(n, r["id"]) for n, r in rows], [(4, "4")])
    self.assertEqual(skipped.count, 1)

  def test_long_field(self):
    # Larger than csv's default 128 KiB field limit.
    body = "word " * 40000
    path = self.write("p.tsv", f"1\t\"{body}\"\tT\n")
    ((line_number, row),) = list(text_records.read_tsv(path, HEADER))
    self.assertEqual(line_number, 1)
    self.assertEqual(row["text"], body)


if __name__ == "__main__":
  tf.test.main()
