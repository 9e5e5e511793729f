"""Tests for realm_tf.data.corpus: reading raw documents, writing and reading sharded corpora."""

import hashlib
import json
import os

import tensorflow as tf

from realm_tf import tokenization
from realm_tf.data import corpus
from realm_tf.data import text_records
from realm_tf.testing import test_paths
from realm_tf.testing import tiny_inputs

InputError = text_records.InputError


def _docs(n):
  """n distinct documents; a few with accents, an empty title or an empty body."""
  docs = []
  for i in range(n):
    title = "" if i % 7 == 3 else f"Title {i}" + (" café" if i % 5 == 0 else "")
    body = "" if i % 11 == 4 else f"body of document {i}, about Zürich and the number {i * 37}."
    docs.append(corpus.Document(title=title, body=body, doc_id=f"d{i}"))
  return docs


class CorpusTestCase(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.tokenizer = tokenization.Tokenizer(tiny_inputs.write_vocab(self.create_tempdir().full_path))

  def write(self, name, content, directory=None):
    path = os.path.join(directory or self.create_tempdir().full_path, name)
    with open(path, "wb") as f:
      f.write(content.encode("utf-8") if isinstance(content, str) else content)
    return path

  def snapshot(self, directory):
    """{file name: bytes} of a directory."""
    result = {}
    for name in sorted(os.listdir(directory)):
      with open(os.path.join(directory, name), "rb") as f:
        result[name] = f.read()
    return result


class DocumentUidTest(tf.test.TestCase):

  def test_sha1_of_title_sep_body(self):
    self.assertEqual(corpus.document_uid("title", "body"), hashlib.sha1(b"title <sep> body").hexdigest())
    self.assertEqual(corpus.document_uid("Zürich", "Café"),
                     hashlib.sha1("Zürich <sep> Café".encode("utf-8")).hexdigest())
    self.assertEqual(corpus.Document("a", "b", "7").uid, hashlib.sha1(b"a <sep> b").hexdigest())
    self.assertNotEqual(corpus.document_uid("a b", "c"), corpus.document_uid("a", "b c"))
    self.assertLen(corpus.document_uid("", "x"), 40)


class ReadDocumentsTest(CorpusTestCase):

  def test_jsonl_body_or_text_field(self):
    path = self.write(
        "docs.jsonl", "\n".join([
            json.dumps({
                "title": "A",
                "body": "first",
                "id": "x1"
            }),
            "",
            json.dumps({
                "title": "B",
                "text": "second",
                "extra": 1
            }),
            json.dumps({
                "title": "",
                "body": "no title"
            }),
            json.dumps({
                "title": "Only title",
                "text": "",
                "id": 42
            }),
        ]) + "\n")
    self.assertEqual(
        list(corpus.read_documents(path)),
        [
            corpus.Document("A", "first", "x1"),
            corpus.Document("B", "second", "line-3"),  # no id: its line number, so skips shift nothing
            corpus.Document("", "no title", "line-4"),
            corpus.Document("Only title", "", "42"),
        ])

  def test_extension_is_case_insensitive_and_json_accepted(self):
    line = json.dumps({"title": "A", "body": "b"}) + "\n"
    for name in ("docs.JSONL", "docs.json"):
      self.assertEqual([d.title for d in corpus.read_documents(self.write(name, line))], ["A"])

  def test_jsonl_missing_fields_names_line(self):
    path = self.write("docs.jsonl", '{"title": "A", "body": "b"}\n{"name": "B", "body": "c"}\n')
    with self.assertRaises(InputError) as ctx:
      list(corpus.read_documents(path))
    self.assertIn(f"{path}:2:", str(ctx.exception))
    self.assertIn("['body', 'name']", str(ctx.exception))
    path = self.write("docs.jsonl", '{"title": "A"}\n')
    with self.assertRaisesRegex(InputError, r"docs\.jsonl:1: a document needs"):
      list(corpus.read_documents(path))

  def test_jsonl_non_string_fields(self):
    path = self.write("docs.jsonl", '{"title": 3, "body": "b"}\n')
    with self.assertRaisesRegex(InputError, r"docs\.jsonl:1: title and body must be strings"):
      list(corpus.read_documents(path))

  def test_empty_title_and_body_names_line(self):
    path = self.write("docs.jsonl", '{"title": "A", "body": "b"}\n\n{"title": " ", "body": "\\t"}\n')
    with self.assertRaises(InputError) as ctx:
      list(corpus.read_documents(path))
    self.assertIn(f"{path}:3: the document has an empty title and body", str(ctx.exception))
    path = self.write("docs.tsv", "id\ttext\ttitle\n1\tb\tT\n2\t\t\n3\tc\tU\n")
    with self.assertRaisesRegex(InputError, r"docs\.tsv:3: the document has an empty title and body"):
      list(corpus.read_documents(path))

  def test_skip_invalid_counts(self):
    path = self.write(
        "docs.jsonl", "\n".join([
            '{"title": "A", "body": "a"}',
            '{"title": "", "body": ""}',
            "not json",
            '{"title": "B"}',
            '{"title": null, "body": "x"}',
            '{"title": "C", "text": "c"}',
        ]) + "\n")
    skipped = text_records.SkipCounter()
    self.assertEqual([d.title for d in corpus.read_documents(path, skipped)], ["A", "C"])
    self.assertEqual(skipped.count, 4)
    self.assertEqual([e.split(": ")[0] for e in skipped.examples], [f"{path}:{n}" for n in (2, 3, 4, 5)])
    path = self.write("docs.tsv", "1\ta\tA\n2\t \t \n3\tonly two\n4\tb\tB\n")
    skipped = text_records.SkipCounter()
    self.assertEqual([d.doc_id for d in corpus.read_documents(path, skipped)], ["1", "4"])
    self.assertEqual(skipped.count, 2)

  def test_tsv_with_and_without_header(self):
    with_header = self.write("a.tsv", "id\ttext\ttitle\tsplit\n7\tbody seven\tSeven\tdev\n")
    self.assertEqual(list(corpus.read_documents(with_header)), [corpus.Document("Seven", "body seven", "7")])
    without = self.write("b.tsv", '8\t"quoted\tbody"\tEight\n9\tnine\tNine\n')
    self.assertEqual(list(corpus.read_documents(without)),
                     [corpus.Document("Eight", "quoted\tbody", "8"),
                      corpus.Document("Nine", "nine", "9")])

  def test_missing_file(self):
    path = os.path.join(self.get_temp_dir(), "no_such_dir", "docs.jsonl")
    with self.assertRaises(InputError) as ctx:
      list(corpus.read_documents(path))
    self.assertIn(path, str(ctx.exception))

  def test_unknown_extension(self):
    path = self.write("docs.txt", "title\tbody\n")
    with self.assertRaises(InputError) as ctx:
      list(corpus.read_documents(path))
    self.assertIn(path, str(ctx.exception))
    self.assertIn("unknown corpus format", str(ctx.exception))


class WriteCorpusTest(CorpusTestCase):

  def setUp(self):
    super().setUp()
    self.out_dir = self.create_tempdir().full_path
    self.prefix = os.path.join(self.out_dir, "corpus")

  def test_round_trip(self):
    docs = _docs(23)
    docs[22] = corpus.Document(docs[0].title, docs[0].body, "dup")  # same uid as document 0
    logs = []
    skipped = text_records.SkipCounter()
    skipped.skip(InputError("x:1: bad"))
    skipped.skip(InputError("x:2: bad"))
    stats = corpus.write_corpus(lambda: iter(docs),
                                self.tokenizer,
                                self.prefix,
                                num_shards=4,
                                batch_size=5,
                                skipped=skipped,
                                log=logs.append)
    names = [f"corpus-0000{i}-of-00004" for i in range(4)]
    self.assertEqual(sorted(os.listdir(self.out_dir)), names + ["corpus.manifest.json"])
    self.assertEqual(stats.shard_paths, [os.path.join(self.out_dir, n) for n in names])
    self.assertEqual((stats.num_documents, stats.num_shards, stats.num_skipped, stats.num_duplicate_uids),
                     (23, 4, 2, 1))
    self.assertIn("tokenized 23/23 documents", logs)

    rows = list(corpus.read_corpus(self.prefix))
    self.assertLen(rows, 23)
    titles = self.tokenizer.tokenize([d.title for d in docs]).to_list()
    bodies = self.tokenizer.tokenize([d.body for d in docs]).to_list()
    for doc, row, title_ids, body_ids in zip(docs, rows, titles, bodies):
      self.assertEqual(row["title"], doc.title)
      self.assertEqual(row["body"], doc.body)
      self.assertEqual(row["doc_id"], doc.doc_id)
      self.assertEqual(row["uid"], hashlib.sha1(f"{doc.title} <sep> {doc.body}".encode()).hexdigest())
      self.assertEqual(row["title_token_ids"], title_ids)
      self.assertEqual(row["body_token_ids"], body_ids)
    # "Title 5 café": lower-cased and accent-stripped into letter pieces.
    self.assertEqual(self.tokenizer.ids_to_tokens(rows[5]["title_token_ids"]),
                     ["t", "##i", "##t", "##l", "##e", "5", "c", "##a", "##f", "##e"])
    self.assertEqual(rows[4]["body_token_ids"], [])
    self.assertGreater(len(rows[0]["body_token_ids"]), 10)
    lengths = [len(b) for b in bodies]
    self.assertEqual(stats.max_body_wordpieces, max(lengths))
    self.assertAlmostEqual(stats.mean_body_wordpieces, sum(lengths) / 23)

    with open(self.prefix + ".manifest.json", encoding="utf-8") as f:
      manifest = json.load(f)
    self.assertEqual(manifest["num_documents"], 23)
    self.assertEqual(manifest["num_skipped"], 2)
    self.assertEqual(manifest["num_duplicate_uids"], 1)
    self.assertEqual(manifest["format_version"], corpus.FORMAT_VERSION)
    self.assertEqual(manifest["vocab_size"], self.tokenizer.vocab_size)
    self.assertTrue(manifest["do_lower_case"])
    with open(self.tokenizer.vocab_path, "rb") as f:
      self.assertEqual(manifest["vocab_sha256"], hashlib.sha256(f.read()).hexdigest())
    # Contiguous runs with boundaries 23 * i // 4 = 0, 5, 11, 17, 23.
    self.assertEqual([s["path"] for s in manifest["shards"]], names)
    self.assertEqual([s["num_documents"] for s in manifest["shards"]], [5, 6, 6, 6])
    offset = 0
    for shard in manifest["shards"]:
      path = os.path.join(self.out_dir, shard["path"])
      with open(path, "rb") as f:
        self.assertEqual(shard["sha256"], hashlib.sha256(f.read()).hexdigest())
      records = list(tf.data.TFRecordDataset(path, compression_type="GZIP").as_numpy_iterator())
      self.assertLen(records, shard["num_documents"])
      ids = [
          tf.train.Example.FromString(r).features.feature["doc_id"].bytes_list.value[0].decode()
          for r in records
      ]
      self.assertEqual(ids, [d.doc_id for d in docs[offset:offset + len(records)]])
      offset += len(records)
    self.assertEqual(offset, 23)
    self.assertEqual(corpus.corpus_shards(self.prefix), stats.shard_paths)

  def test_skipped_records_counted_once_over_both_passes(self):
    path = self.write(
        "docs.jsonl", "\n".join([
            '{"title": "A", "body": "a", "id": "a"}',
            "not json",
            '{"title": "", "body": " "}',
            '{"title": "B", "body": "b", "id": "b"}',
        ]) + "\n")
    skipped = text_records.SkipCounter()

    def documents():
      skipped.reset()
      return corpus.read_documents(path, skipped)

    stats = corpus.write_corpus(documents, self.tokenizer, self.prefix, num_shards=2, skipped=skipped)
    self.assertEqual((stats.num_documents, stats.num_skipped), (2, 2))
    self.assertEqual(corpus.read_manifest(self.prefix)["num_skipped"], 2)
    self.assertEqual([r["doc_id"] for r in corpus.read_corpus(self.prefix)], ["a", "b"])

  def test_corpus_dataset_is_parsed_in_row_order(self):
    docs = _docs(6)
    corpus.write_corpus(lambda: docs, self.tokenizer, self.prefix, num_shards=3)
    dataset = corpus.corpus_dataset(self.prefix)
    self.assertEqual(dataset.element_spec["body_token_ids"].dtype, tf.int64)
    self.assertEqual([x["doc_id"] for x in dataset.as_numpy_iterator()], [d.doc_id.encode() for d in docs])

  def test_rewrite_with_fewer_shards_removes_old_shards(self):
    other = self.write("other-00000-of-00004", b"unrelated", directory=self.out_dir)
    notes = self.write("corpus-notes.txt", b"keep me", directory=self.out_dir)
    corpus.write_corpus(lambda: _docs(23), self.tokenizer, self.prefix, num_shards=4)
    self.assertLen([n for n in os.listdir(self.out_dir) if "-of-00004" in n], 5)
    docs = _docs(9)
    logs = []
    stats = corpus.write_corpus(lambda: docs, self.tokenizer, self.prefix, num_shards=2, log=logs.append)
    self.assertEqual(sorted(os.listdir(self.out_dir)), [
        "corpus-00000-of-00002", "corpus-00001-of-00002", "corpus-notes.txt", "corpus.manifest.json",
        "other-00000-of-00004"
    ])
    self.assertTrue(os.path.exists(other) and os.path.exists(notes))
    self.assertLen([m for m in logs if m.startswith("removing ")], 4)
    self.assertEqual(stats.num_shards, 2)
    self.assertEqual([r["doc_id"] for r in corpus.read_corpus(self.prefix)], [d.doc_id for d in docs])

  def test_stale_shard_cleanup_does_not_glob_the_prefix(self):
    # Regression: stale shards are found with tf.io.gfile.glob(f"{prefix}-?????-of-?????"),
    # so glob metacharacters in the prefix match other paths: writing to ".../run[12]/c" deletes
    # ".../run1/c-00000-of-00004".
    other = os.path.join(self.out_dir, "run1", "c-00000-of-00004")
    os.makedirs(os.path.dirname(other))
    self.write(os.path.basename(other), b"another corpus", directory=os.path.dirname(other))
    prefix = os.path.join(self.out_dir, "run[12]", "c")
    corpus.write_corpus(lambda: _docs(2), self.tokenizer, prefix, num_shards=1)
    self.assertTrue(os.path.exists(other))

  def test_num_shards_clamped_to_number_of_documents(self):
    docs = _docs(3)
    stats = corpus.write_corpus(lambda: docs, self.tokenizer, self.prefix, num_shards=10)
    self.assertEqual(stats.num_shards, 3)
    self.assertEqual(sorted(os.listdir(self.out_dir)),
                     [f"corpus-0000{i}-of-00003" for i in range(3)] + ["corpus.manifest.json"])
    self.assertEqual([s["num_documents"] for s in corpus.read_manifest(self.prefix)["shards"]], [1, 1, 1])
    stats = corpus.write_corpus(lambda: docs, self.tokenizer, self.prefix, num_shards=0)
    self.assertEqual(stats.num_shards, 1)

  def test_creates_output_directory(self):
    prefix = os.path.join(self.out_dir, "a", "b", "blocks")
    corpus.write_corpus(lambda: _docs(2), self.tokenizer, prefix, num_shards=1)
    self.assertEqual(sorted(os.listdir(os.path.dirname(prefix))),
                     ["blocks-00000-of-00001", "blocks.manifest.json"])

  def test_no_documents(self):
    with self.assertRaisesRegex(InputError, "holds no documents"):
      corpus.write_corpus(lambda: [], self.tokenizer, self.prefix, num_shards=2)
    self.assertEqual(os.listdir(self.out_dir), [])

  def _failing_documents(self, docs, fail_after):
    """A documents() callable whose second pass raises after fail_after documents."""
    calls = []

    def documents():
      calls.append(1)
      for i, doc in enumerate(docs):
        if len(calls) > 1 and i == fail_after:
          raise OSError("disk went away")
        yield doc

    return documents

  def test_failure_mid_write_leaves_no_files(self):
    with self.assertRaisesRegex(OSError, "disk went away"):
      corpus.write_corpus(self._failing_documents(_docs(23), 13),
                          self.tokenizer,
                          self.prefix,
                          num_shards=4,
                          batch_size=4)
    self.assertEqual(os.listdir(self.out_dir), [])

  def test_failure_mid_write_keeps_earlier_corpus(self):
    earlier = _docs(23)
    corpus.write_corpus(lambda: earlier, self.tokenizer, self.prefix, num_shards=4)
    before = self.snapshot(self.out_dir)
    self.assertLen(before, 5)
    newer = [corpus.Document(d.title + " new", d.body, d.doc_id) for d in _docs(30)]
    # Same shard count (the shards would be overwritten in place) and another one (3).
    for num_shards in (4, 3):
      with self.assertRaisesRegex(OSError, "disk went away"):
        corpus.write_corpus(self._failing_documents(newer, 25),
                            self.tokenizer,
                            self.prefix,
                            num_shards=num_shards,
                            batch_size=4)
      self.assertEqual(self.snapshot(self.out_dir), before)  # same names, same bytes, no .tmp-
      self.assertEqual([r["title"] for r in corpus.read_corpus(self.prefix)], [d.title for d in earlier])

  def test_input_that_shrinks_between_passes(self):
    calls = []

    def documents():
      calls.append(1)
      return _docs(10 if len(calls) == 1 else 8)

    with self.assertRaisesRegex(RuntimeError, "counted 10 documents, then read 8"):
      corpus.write_corpus(documents, self.tokenizer, self.prefix, num_shards=3)
    self.assertEqual(os.listdir(self.out_dir), [])

  def test_input_that_grows_between_passes(self):
    # Regression: a second pass longer than the first runs past the last shard boundary in
    # flush() and raises IndexError instead of the RuntimeError that explains the problem.
    calls = []

    def documents():
      calls.append(1)
      return _docs(10 if len(calls) == 1 else 12)

    with self.assertRaisesRegex(RuntimeError, "the input changed while it was read"):
      corpus.write_corpus(documents, self.tokenizer, self.prefix, num_shards=3)

  def test_input_that_grows_between_passes_leaves_no_files(self):
    calls = []

    def documents():
      calls.append(1)
      return _docs(10 if len(calls) == 1 else 12)

    with self.assertRaises(Exception):  # pylint: disable=broad-except
      corpus.write_corpus(documents, self.tokenizer, self.prefix, num_shards=3)
    self.assertEqual(os.listdir(self.out_dir), [])

  def test_missing_manifest_or_shard(self):
    with self.assertRaisesRegex(FileNotFoundError, "is not a complete realm_tf corpus"):
      corpus.corpus_shards(self.prefix)
    stats = corpus.write_corpus(lambda: _docs(4), self.tokenizer, self.prefix, num_shards=2)
    os.remove(stats.shard_paths[1])
    with self.assertRaises(FileNotFoundError) as ctx:
      corpus.corpus_shards(self.prefix)
    self.assertIn(stats.shard_paths[1], str(ctx.exception))

  def test_check_vocab_against_the_manifest_and_a_run_record(self):
    corpus.write_corpus(lambda: _docs(4), self.tokenizer, self.prefix, num_shards=1)
    vocab = self.tokenizer.vocab_path
    sha = corpus.check_vocab(vocab, self.prefix)
    self.assertEqual(sha, corpus.read_manifest(self.prefix)["vocab_sha256"])
    self.assertEqual(sha, corpus.vocab_sha256(vocab))
    self.assertEqual(corpus.check_vocab(vocab, self.prefix, sha, "run/realm_config.json"), sha)
    # Another vocab of the same size (two tokens swapped): same length, other word ids.
    with open(vocab, encoding="utf-8") as f:
      tokens = f.read().splitlines()
    tokens[-1], tokens[-2] = tokens[-2], tokens[-1]
    other = self.write("other_vocab.txt", "\n".join(tokens) + "\n")
    with self.assertRaises(corpus.VocabMismatchError) as ctx:
      corpus.check_vocab(other, self.prefix)
    message = str(ctx.exception)
    for part in (other, "--vocab_path", self.prefix + corpus.MANIFEST_SUFFIX, sha[:16],
                 "bin/generate_retrieval_corpus"):
      self.assertIn(part, message)
    with self.assertRaisesRegex(
        corpus.VocabMismatchError, r"not the vocab this run was started with \(run/realm_config.json "
        r"records .*start a new --model_dir"):
      corpus.check_vocab(other, None, sha, "run/realm_config.json")
    # Records that are absent (older files) are not checked.
    self.assertEqual(corpus.check_vocab(other, None, None), corpus.vocab_sha256(other))
    with self.assertRaisesRegex(FileNotFoundError, "pass --vocab_path"):
      corpus.check_vocab(os.path.join(self.out_dir, "missing.txt"), self.prefix)


class SharedDataTest(CorpusTestCase):
  """Reads the real data sets in $REALM_TF_SHARED_DATA (skipped when it is unset or absent)."""

  def setUp(self):
    super().setUp()
    self.data_dir = test_paths.shared_data_dir()
    if self.data_dir is None:
      self.skipTest(test_paths.missing_data_message())

  def _path(self, *parts):
    path = os.path.join(self.data_dir, *parts)
    if not os.path.exists(path):
      self.skipTest(f"{path} is missing from the shared data")
    return path

  def test_dpr_sample(self):
    skipped = text_records.SkipCounter()
    docs = list(corpus.read_documents(self._path("dpr_sample", "psgs_w100.haystack_sample.tsv"), skipped))
    self.assertLen(docs, 751)
    self.assertEqual(skipped.count, 0)
    self.assertEqual(docs[0].doc_id, "128529")
    self.assertEqual(docs[0].title, "Erie Canal")
    self.assertTrue(all(d.title.strip() for d in docs))
    self.assertTrue(all(d.body.strip() for d in docs))
    self.assertLen({d.doc_id for d in docs}, 751)

  def test_squad_paragraphs(self):
    skipped = text_records.SkipCounter()
    docs = list(corpus.read_documents(self._path("squad", "squad-v1.1-paragraphs.tsv"), skipped))
    self.assertLen(docs, 20963)
    self.assertEqual(skipped.count, 0)
    self.assertEqual(docs[0].doc_id, "1")
    self.assertEqual(docs[0].title, "University of Notre Dame")
    self.assertTrue(docs[0].body.startswith("Architecturally, the school has a Catholic character."))
    self.assertTrue(all(d.title.strip() for d in docs))

  def test_write_dpr_sample_corpus(self):
    path = self._path("dpr_sample", "psgs_w100.haystack_sample.tsv")
    prefix = os.path.join(self.create_tempdir().full_path, "dpr")
    stats = corpus.write_corpus(lambda: corpus.read_documents(path), self.tokenizer, prefix, num_shards=3)
    manifest = corpus.read_manifest(prefix)
    self.assertEqual(manifest["num_documents"], 751)
    self.assertEqual([s["num_documents"] for s in manifest["shards"]], [250, 250, 251])
    self.assertEqual(stats.num_documents, 751)
    self.assertGreater(stats.mean_body_wordpieces, 100)
    first = next(corpus.read_corpus(prefix))
    self.assertEqual(first["doc_id"], "128529")
    self.assertEqual(first["title_token_ids"], self.tokenizer.tokenize(["Erie Canal"]).to_list()[0])


if __name__ == "__main__":
  tf.test.main()
