"""Tests for realm_tf.data.pretraining and bin/generate_pretraining_corpus: reading raw and pre-annotated
text, validating offsets, writing the original's TFRecord format, reading it back, and the binary."""

import hashlib
import json
import os
import re
import subprocess
import sys

import tensorflow as tf

from realm_tf.data import corpus
from realm_tf.data import pretraining
from realm_tf.data import salient_spans
from realm_tf.data import text_records
from realm_tf.testing import test_paths

InputError = text_records.InputError
_TESTDATA = os.path.join(test_paths.repo_root(), "testdata")


def _load_jsonl(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def _byte_text(doc, span):
  return doc.text.encode("utf-8")[span[0]:span[1]].decode("utf-8")


class _OutOfRangeAnnotator(salient_spans.SpanAnnotator):

  def annotate(self, text):
    return [(0, len(text) + 1)]


class PretrainingTestCase(tf.test.TestCase):

  def write(self, name, content, directory=None):
    path = os.path.join(directory or self.create_tempdir().full_path, name)
    with open(path, "wb") as f:
      f.write(content.encode("utf-8") if isinstance(content, str) else content)
    return path

  def write_records(self, records, name="docs.jsonl"):
    return self.write(
        name, "".join(
            (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records))

  def corpus_from(self, path, num_shards=1, skipped=None, reannotate=False, **kwargs):
    prefix = os.path.join(self.create_tempdir().full_path, "pt")
    stats = pretraining.write_pretraining_corpus(
        lambda: pretraining.read_raw_documents(path, skipped, reannotate=reannotate),
        prefix,
        num_shards,
        skipped=skipped,
        **kwargs)
    return prefix, stats


class TestdataRoundTripTest(PretrainingTestCase):

  def test_pre_annotated_offsets_preserved_exactly(self):
    path = os.path.join(_TESTDATA, "pretraining.jsonl")
    records = _load_jsonl(path)
    self.assertLen(records, 444)  # 300 articles, 144 news items
    prefix, stats = self.corpus_from(path, num_shards=4)
    docs = list(pretraining.read_pretraining_corpus(prefix))
    self.assertEqual(
        [(d.title, d.text, [list(s) for s in d.sentences], [list(s) for s in d.spans]) for d in docs],
        [(r["title"], r["text"], r["sentences"], r["spans"]) for r in records])

    with_spans = sum(
        len({i
             for i, (s, l) in enumerate(r["sentences"])
             for a, b in r["spans"]
             if s <= a and b <= l})
        for r in records)
    self.assertEqual((stats.num_documents, stats.num_shards, stats.num_annotated, stats.num_skipped),
                     (444, 4, 0, 0))
    self.assertEqual(stats.num_sentences, sum(len(r["sentences"]) for r in records))
    self.assertEqual(stats.num_spans, sum(len(r["spans"]) for r in records))
    self.assertEqual(stats.num_sentences_with_spans, with_spans)
    self.assertEqual(stats.num_spans_crossing_sentences, 0)

    manifest = pretraining.read_manifest(prefix)
    self.assertEqual(manifest["kind"], pretraining.KIND)
    self.assertEqual([s["num_documents"] for s in manifest["shards"]], [111, 111, 111, 111])
    self.assertIsNone(manifest["annotator"])
    for shard in manifest["shards"]:
      with open(os.path.join(os.path.dirname(prefix), shard["path"]), "rb") as f:
        self.assertEqual(hashlib.sha256(f.read()).hexdigest(), shard["sha256"])
    self.assertEqual(sorted(os.listdir(os.path.dirname(prefix))),
                     [f"pt-0000{i}-of-00004" for i in range(4)] + ["pt.manifest.json"])

  def test_dataset_has_the_original_features_in_row_order(self):
    prefix, _ = self.corpus_from(os.path.join(_TESTDATA, "pretraining.jsonl"), num_shards=3)
    records = _load_jsonl(os.path.join(_TESTDATA, "pretraining.jsonl"))
    dataset = pretraining.pretraining_dataset(prefix)
    self.assertEqual(
        set(dataset.element_spec),
        {"title", "text", "sentence_byte_start", "sentence_byte_limit", "span_byte_start", "span_byte_limit"})
    self.assertEqual(dataset.element_spec["span_byte_start"].dtype, tf.int64)
    parsed = list(dataset.as_numpy_iterator())
    self.assertLen(parsed, 444)
    for example, record in zip(parsed, records):
      self.assertEqual(example["text"], record["text"].encode("utf-8"))
      self.assertEqual(list(zip(example["span_byte_start"], example["span_byte_limit"])),
                       [tuple(s) for s in record["spans"]])
    batch = next(iter(dataset.ragged_batch(4)))
    self.assertIsInstance(batch["sentence_byte_start"], tf.RaggedTensor)
    # Raw tf.Example parsing (as the original's input pipeline does) sees the same features.
    shard = pretraining.pretraining_shards(prefix)[0]
    raw = next(iter(tf.data.TFRecordDataset(shard, compression_type="GZIP")))
    example = tf.train.Example.FromString(raw.numpy())
    self.assertEqual(sorted(example.features.feature), sorted(pretraining.FEATURE_SPEC))

  def test_uids_equal_the_retrieval_corpus_uids(self):
    prefix, _ = self.corpus_from(os.path.join(_TESTDATA, "pretraining.jsonl"))
    retrieval = list(corpus.read_documents(os.path.join(_TESTDATA, "corpus.jsonl")))
    self.assertLen(retrieval, 300)
    # The articles come first, byte for byte the retrieval corpus; the news items are not in it.
    uids = [d.uid for d in pretraining.read_pretraining_corpus(prefix)]
    self.assertEqual(uids[:300], [d.uid for d in retrieval])
    self.assertEmpty(set(uids[300:]) & set(uids[:300]))
    self.assertEqual(
        pretraining.PretrainingDocument("A b", "c").uid,
        hashlib.sha1(b"A b <sep> c").hexdigest())


class AnnotateRawTextTest(PretrainingTestCase):

  def test_testdata_corpus_without_annotations(self):
    """corpus.jsonl is pretraining.jsonl without offsets: sentences come out identical, every date
    span is found, and most names are."""
    prefix, stats = self.corpus_from(os.path.join(_TESTDATA, "corpus.jsonl"), num_shards=2)
    gold = _load_jsonl(os.path.join(_TESTDATA, "pretraining.jsonl"))
    docs = list(pretraining.read_pretraining_corpus(prefix))
    self.assertEqual((stats.num_documents, stats.num_annotated), (300, 300))
    self.assertIn("DateAnnotator", pretraining.read_manifest(prefix)["annotator"])
    date_re = re.compile(r"(?:[12]\d \w+ )?1\d{3}")
    num_dates = num_found = 0
    for doc, record in zip(docs, gold):
      self.assertEqual(doc.text, record["text"])
      self.assertEqual([list(s) for s in doc.sentences], record["sentences"])
      found = set(doc.spans)
      for span in map(tuple, record["spans"]):
        if date_re.fullmatch(_byte_text(doc, span)):
          num_dates += 1
          self.assertIn(span, found, f"{record['title']}: date {_byte_text(doc, span)!r} not found")
        num_found += span in found
    # 200 full dates and 400 years of people, and the villages' first-record years from 1000 on.
    self.assertGreater(num_dates, 650)
    self.assertGreater(num_found, 0.85 * 3000)  # of the 3000 gold spans
    self.assertEqual(stats.num_spans_crossing_sentences, 0)
    self.assertEqual(stats.num_documents_without_usable_spans, 0)

  def test_non_ascii_tsv_byte_offsets_and_uids(self):
    path = self.write(
        "docs.tsv", "id\ttext\ttitle\n"
        "1\tÉmile Zola was born in Paris on 2 April 1840. He lived in Zürich.\tZola\n"
        "2\t  The space around is kept. In 1854 Łódź grew.  \tŁódź\n")
    prefix, stats = self.corpus_from(path)
    docs = list(pretraining.read_pretraining_corpus(prefix))
    self.assertEqual([d.uid for d in docs], [d.uid for d in corpus.read_documents(path)])
    self.assertEqual(docs[1].text, "  The space around is kept. In 1854 Łódź grew.  ")
    self.assertEqual([[_byte_text(d, s) for s in d.spans] for d in docs],
                     [["Émile Zola", "Paris", "2 April 1840", "Zürich"], ["1854", "Łódź"]])
    self.assertEqual([_byte_text(docs[1], s) for s in docs[1].sentences],
                     ["The space around is kept.", "In 1854 Łódź grew."])
    self.assertEqual(stats.num_sentences, 4)

  def test_spans_crossing_sentences_are_kept_and_counted(self):
    path = self.write_records([
        {
            "title": "T",
            "text": "Aaaa bb. Cc dd.",
            "sentences": [[0, 8], [9, 15]],
            "spans": [[5, 11], [0, 4], [9, 11], [0, 4]]
        },
        {
            "title": "U",
            "text": "Eeee ff. Gg hh.",
            "sentences": [[0, 8]],
            "spans": [[9, 11]]
        },
    ])
    prefix, stats = self.corpus_from(path)
    docs = list(pretraining.read_pretraining_corpus(prefix))
    self.assertEqual(docs[0].spans, ((5, 11), (0, 4), (9, 11), (0, 4)))  # as given, duplicates too
    self.assertEqual((stats.num_spans, stats.num_spans_crossing_sentences, stats.num_sentences_with_spans,
                      stats.num_documents_without_usable_spans), (5, 2, 2, 1))

  def test_reannotate_replaces_given_offsets(self):
    path = self.write_records([{
        "title": "T",
        "text": "In 1854 Zorvel left.",
        "sentences": [[0, 99]],
        "spans": [[3, 2]]
    }])
    with self.assertRaisesRegex(InputError, r"docs.jsonl:1: sentences\[0\] = \[0, 99\] is out of range"):
      self.corpus_from(path)
    prefix, stats = self.corpus_from(path, reannotate=True, annotator=salient_spans.load_annotator("dates"))
    doc = next(pretraining.read_pretraining_corpus(prefix))
    self.assertEqual((doc.sentences, doc.spans), (((0, 20),), ((3, 7),)))
    self.assertEqual(stats.num_annotated, 1)

  def test_plugin_errors_name_the_document_and_leave_nothing(self):
    path = self.write_records([{"title": "T", "text": "Fine."}, {"title": "U", "text": "Also fine."}])
    directory = self.create_tempdir().full_path
    with self.assertRaisesRegex(ValueError, re.escape(f"{path}:1: ") + ".*_OutOfRangeAnnotator returned"):
      pretraining.write_pretraining_corpus(lambda: pretraining.read_raw_documents(path),
                                           os.path.join(directory, "pt"),
                                           2,
                                           annotator=_OutOfRangeAnnotator())
    self.assertEqual(os.listdir(directory), [])

  def test_shard_count_clamped_and_stale_shards_removed(self):
    path = self.write_records([{"title": f"T{i}", "text": f"Text {i}."} for i in range(3)])
    directory = self.create_tempdir().full_path
    prefix = os.path.join(directory, "pt")
    read = lambda: pretraining.read_raw_documents(path)  # pylint: disable=unnecessary-lambda-assignment
    self.assertEqual(pretraining.write_pretraining_corpus(read, prefix, 10).num_shards, 3)
    self.assertEqual(pretraining.write_pretraining_corpus(read, prefix, 2).num_shards, 2)
    self.assertEqual(sorted(os.listdir(directory)),
                     ["pt-00000-of-00002", "pt-00001-of-00002", "pt.manifest.json"])
    self.assertEqual([d.title for d in pretraining.read_pretraining_corpus(prefix)], ["T0", "T1", "T2"])
    with self.assertRaisesRegex(InputError, "holds no documents"):
      pretraining.write_pretraining_corpus(lambda: [], prefix, 2)

  def test_a_retrieval_corpus_is_not_a_pretraining_corpus(self):
    prefix = os.path.join(self.create_tempdir().full_path, "blocks")
    with open(prefix + pretraining.MANIFEST_SUFFIX, "w") as f:
      json.dump({"format_version": 1, "shards": []}, f)
    with self.assertRaisesRegex(ValueError, "not a pre-training corpus"):
      pretraining.pretraining_shards(prefix)
    with self.assertRaisesRegex(FileNotFoundError, "write it with bin/generate_pretraining_corpus"):
      pretraining.pretraining_shards(prefix + "x")


class BadInputTest(PretrainingTestCase):

  GOOD = {
      "title": "Zürich",
      "text": "Zürich is old. It grew.",
      "sentences": [[0, 15], [16, 24]],
      "spans": [[0, 7]]
  }

  def bad_cases(self):
    good = self.GOOD
    return [
        (dict(good, spans=[[0, 7], [20, 25]]), r"spans\[1\] = \[20, 25\] is out of range: the text is 24"),
        (dict(good, spans=[[-1, 3]]), r"spans\[0\] = \[-1, 3\] is out of range"),
        (dict(good, spans=[[7, 7]]), r"spans\[0\] = \[7, 7\]: the limit must be greater"),
        (dict(good, sentences=[[5, 2]]), r"sentences\[0\] = \[5, 2\]: the limit must be greater"),
        (dict(good, spans=[[0, 2]]), r"spans\[0\] = \[0, 2\]: the limit 2 falls inside a multi-byte"),
        (dict(good, spans=[[2, 7]]), r"spans\[0\] = \[2, 7\]: the start 2 falls inside a multi-byte"),
        (dict(good, sentences=[[0, 15], [10, 24]]), r"sentences\[1\] = \[10, 24\] starts before"),
        (dict(good, sentences=[[16, 24], [0, 15]]), r"sentences\[1\] = \[0, 15\] starts before"),
        (dict(good, spans=[[0, 7.0]]), r"spans\[0\] = \[0, 7.0\] is not a \[start, limit\] pair"),
        (dict(good, spans=[[0, True]]), r"spans\[0\] = \[0, true\] is not a \[start, limit\] pair"),
        (dict(good, spans="0-7"), r"\"spans\" must be a list"),
        ({
            "title": "T",
            "text": "x y",
            "spans": [[0, 1]]
        }, r"a pre-annotated document needs both \"sentences\" and \"spans\""),
        ({
            "title": "T",
            "text": 5
        }, r"title and text must be strings"),
        ({
            "title": " ",
            "text": ""
        }, r"the document has an empty title and text"),
        ({
            "title": "T"
        }, r"a document needs \"title\" and \"text\""),
        ({
            "title": "T",
            "text": "a",
            "body": "b"
        }, r"\"text\" and \"body\" differ"),
        ("{\"title\": \"T\", \"text\": ", r"not a JSON object"),
        ("[1, 2]", r"expected a JSON object"),
    ]

  def test_each_error_names_file_and_line(self):
    for record, message in self.bad_cases():
      path = self.write_records([self.GOOD, record])
      with self.assertRaisesRegex(InputError, re.escape(f"{path}:2: ") + message, msg=message):
        list(pretraining.read_raw_documents(path))

  def test_offset_errors_suggest_reannotate_and_skip(self):
    path = self.write_records([dict(self.GOOD, spans=[[0, 99]])])
    with self.assertRaisesRegex(InputError, "pass --reannotate .* or pass --skip_invalid"):
      list(pretraining.read_raw_documents(path))

  def test_skip_invalid_counts(self):
    cases = self.bad_cases()
    path = self.write_records([self.GOOD] + [record for record, _ in cases] + [self.GOOD, "", "  "])
    skipped = text_records.SkipCounter()
    prefix, stats = self.corpus_from(path, skipped=skipped)
    self.assertEqual((stats.num_documents, stats.num_skipped), (2, len(cases)))
    self.assertEqual(skipped.count, len(cases))  # counted once although the input is read twice
    self.assertEqual(pretraining.read_manifest(prefix)["num_skipped"], len(cases))
    self.assertIn(f"{path}:2:", skipped.summary())

  def test_missing_and_unknown_inputs(self):
    with self.assertRaisesRegex(InputError, "does not exist; pass --input_path"):
      list(pretraining.read_raw_documents("/nonexistent/docs.jsonl"))
    path = self.write("docs.csv", "a,b\n")
    with self.assertRaisesRegex(InputError, "unknown input format"):
      list(pretraining.read_raw_documents(path))


class DprSampleTest(PretrainingTestCase):
  """The annotating path on real Wikipedia passages ($REALM_TF_SHARED_DATA/dpr_sample)."""

  def test_annotates_real_passages(self):
    path = test_paths.shared_data_path("dpr_sample", "psgs_w100.haystack_sample.tsv")
    if path is None:
      self.skipTest(test_paths.missing_data_message("dpr_sample", "psgs_w100.haystack_sample.tsv"))
    prefix, stats = self.corpus_from(path, num_shards=3)
    self.assertEqual((stats.num_documents, stats.num_skipped, stats.num_annotated), (751, 0, 751))
    # About 100 words per passage: 3 to 10 sentences each on average; names and dates are frequent.
    self.assertBetween(stats.num_sentences, 3 * 751, 10 * 751)
    self.assertGreater(stats.num_spans, 5 * 751)
    self.assertGreater(stats.num_sentences_with_spans, 0.6 * stats.num_sentences)
    self.assertLess(stats.num_documents_without_usable_spans, 0.05 * 751)
    self.assertLess(stats.num_spans_crossing_sentences, 0.01 * stats.num_spans)
    docs = list(pretraining.read_pretraining_corpus(prefix))
    self.assertEqual([d.uid for d in docs], [d.uid for d in corpus.read_documents(path)])
    span_texts = [_byte_text(d, s) for d in docs for s in d.spans]
    years = [t for t in span_texts if re.fullmatch(r"(?:1[5-9]|20)\d\d", t)]
    full_dates = [t for t in span_texts if re.fullmatch(r"\w+ \d{1,2}, \d{4}|\d{1,2} \w+ \d{4}", t)]
    self.assertGreater(len(years), 300)
    self.assertGreater(len(full_dates), 20)
    self.assertTrue(all(t == t.strip() and t for t in span_texts))


def _run_binary(*args):
  repo = test_paths.repo_root()
  env = dict(os.environ, PYTHONPATH=repo, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
  return subprocess.run(
      [sys.executable, os.path.join(repo, "bin", "generate_pretraining_corpus.py"), *args],
      capture_output=True,
      text=True,
      env=env,
      timeout=300,
      check=False)


class GeneratePretrainingCorpusBinaryTest(PretrainingTestCase):

  def test_writes_testdata_skipping_invalid_with_a_plugin_annotator(self):
    # One process for the binary's success path (a process start costs seconds of CPU): the testdata
    # corpus in 3 shards, plus a document the plug-in annotator (loaded by its module path) annotates
    # and two invalid ones that --skip_invalid skips and counts.
    with open(os.path.join(_TESTDATA, "pretraining.jsonl"), encoding="utf-8") as f:
      testdata = [line.rstrip("\n") for line in f]
    path = self.write_records(testdata + [{
        "title": "T",
        "text": "Zorvel met Zorvel in 1854."
    }, "{broken",
                                          dict(BadInputTest.GOOD, spans=[[0, 99]])])
    prefix = os.path.join(self.create_tempdir().full_path, "pt")
    result = _run_binary(f"--input_path={path}", f"--output_prefix={prefix}", "--num_output_shards=3",
                         "--skip_invalid", "--annotator=realm_tf.data.salient_spans_test:FixedAnnotator")
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn("wrote 445 documents (1 annotated here, 2 invalid skipped) in 3 shards", result.stdout)
    self.assertIn("2 invalid documents skipped", result.stderr)
    self.assertIn("annotated 1 documents with realm_tf.data.salient_spans_test.FixedAnnotator", result.stderr)
    manifest = pretraining.read_manifest(prefix)
    self.assertEqual([s["num_documents"] for s in manifest["shards"]], [148, 148, 149])
    documents = list(pretraining.read_pretraining_corpus(prefix))
    self.assertLen(documents, 445)
    self.assertEqual([(d.title, d.spans) for d in documents if d.title == "T"], [("T", ((0, 6), (11, 17)))])
    # The pre-annotated testdata documents keep their spans: the annotator only fills missing ones.
    first = json.loads(testdata[0])
    self.assertEqual(documents[0].title, first["title"])
    self.assertEqual(documents[0].spans, tuple(tuple(span) for span in first["spans"]))

  def test_bad_offsets_fail_without_partial_shards(self):
    tmp = self.create_tempdir().full_path
    bad = self.write_records([BadInputTest.GOOD, dict(BadInputTest.GOOD, spans=[[0, 2]])])
    prefix = os.path.join(tmp, "out", "pt")
    result = _run_binary(f"--input_path={bad}", f"--output_prefix={prefix}")
    self.assertNotEqual(result.returncode, 0)
    self.assertIn(f"{bad}:2: spans[0] = [0, 2]: the limit 2 falls inside a multi-byte", result.stderr)
    self.assertIn("--skip_invalid", result.stderr)
    self.assertFalse(os.path.exists(os.path.dirname(prefix)) and os.listdir(os.path.dirname(prefix)))


if __name__ == "__main__":
  tf.test.main()
