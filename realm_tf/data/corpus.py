"""The retrieval corpus: raw documents in, sharded TFRecords of tokenized documents out, and back.

Shards are GZIP TFRecord files `{prefix}-{i:05d}-of-{n:05d}` of tf.Example with
  title, body            bytes, UTF-8
  title_token_ids        int64 wordpiece ids of the title
  body_token_ids         int64 wordpiece ids of the body
  uid                    bytes, hex sha1 of "{title} <sep> {body}" (the original's document uid; the
                         pre-training pipeline uses it to drop a sentence's own document)
  doc_id                 bytes, the source id (TSV id column, JSONL "id"), or "line-N" for a JSONL
                         record without one (N its line number, so skipped lines shift nothing)
Documents are split into contiguous runs, so the row order of the corpus (sorted shard order, then
record order) is the input order and stable across runs: index row i is document i.
`{prefix}.manifest.json` records the counts, the vocab and a checksum per shard; it is written last.
"""

import dataclasses
import hashlib
import os
import re
from typing import Callable, Iterable, Iterator, List, Optional

import tensorflow as tf

from realm_tf.data import shards
from realm_tf.data import text_records

MANIFEST_SUFFIX = shards.MANIFEST_SUFFIX
FORMAT_VERSION = 1
DPR_TSV_COLUMNS = ["id", "text", "title"]


@dataclasses.dataclass(frozen=True)
class Document:
  title: str
  body: str
  doc_id: str = ""

  @property
  def uid(self) -> str:
    return document_uid(self.title, self.body)


def document_uid(title: str, body: str) -> str:
  """sha1 of "{title} <sep> {body}" as hex, exactly the bytes the original hashed."""
  return hashlib.sha1(f"{title} <sep> {body}".encode("utf-8")).hexdigest()


def _validated(path: str, line_number: int, title, body, doc_id,
               skipped: Optional[text_records.SkipCounter]) -> Optional[Document]:
  if not isinstance(title, str) or not isinstance(body, str):
    text_records.handle_invalid(
        text_records.InputError(
            f"{path}:{line_number}: title and body must be strings; fix the record or pass --skip_invalid"),
        skipped)
    return None
  if not title.strip() and not body.strip():
    text_records.handle_invalid(
        text_records.InputError(
            f"{path}:{line_number}: the document has an empty title and body (it would be "
            "indistinguishable from the null document); remove it or pass --skip_invalid"), skipped)
    return None
  try:
    (title + body + str(doc_id)).encode("utf-8")
  except UnicodeEncodeError as e:  # a JSON "\ud800" escape: the uid and the shard need UTF-8
    text_records.handle_invalid(
        text_records.InputError(
            f"{path}:{line_number}: the title, body or id holds a lone surrogate "
            f"({e.object[e.start:e.end]!r}) that has no UTF-8 encoding; fix the record or pass "
            "--skip_invalid"), skipped)
    return None
  return Document(title=title, body=body, doc_id=str(doc_id))


def read_documents(path: str, skipped: Optional[text_records.SkipCounter] = None) -> Iterator[Document]:
  """Reads raw documents from JSONL ({"title", "body"} or {"title", "text"}, optional "id") or from a
  DPR-style TSV (id, text, title; a header row is optional and extra columns such as SQuAD's split are
  ignored). The format follows the extension: .jsonl/.json or .tsv.
  """
  if not tf.io.gfile.exists(path):
    raise text_records.InputError(f"{path} does not exist; pass --input_path pointing at a JSONL or "
                                  "TSV file of documents")
  lower = path.lower()
  if lower.endswith((".jsonl", ".json")):
    for line_number, record in text_records.read_jsonl(path, skipped):
      body = record.get("body", record.get("text"))
      if "title" not in record or body is None:
        text_records.handle_invalid(
            text_records.InputError(
                f"{path}:{line_number}: a document needs \"title\" and \"body\" (or \"text\") fields, got "
                f"{sorted(record)}; fix the record or pass --skip_invalid"), skipped)
        continue
      doc = _validated(path, line_number, record["title"], body, record.get("id", f"line-{line_number}"),
                       skipped)
      if doc is not None:
        yield doc
  elif lower.endswith(".tsv"):
    for line_number, row in text_records.read_tsv(path, DPR_TSV_COLUMNS, skipped):
      doc = _validated(path, line_number, row["title"], row["text"], row["id"], skipped)
      if doc is not None:
        yield doc
  else:
    raise text_records.InputError(
        f"{path}: unknown corpus format; use a .jsonl file of {{\"title\", \"body\"}} objects or a "
        ".tsv file with id, text, title columns")


shard_paths = shards.shard_paths


def _int64_feature(values) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def _bytes_feature(value: str) -> tf.train.Feature:
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))


def _to_example(doc: Document, title_ids, body_ids) -> bytes:
  return tf.train.Example(features=tf.train.Features(
      feature={
          "title": _bytes_feature(doc.title),
          "body": _bytes_feature(doc.body),
          "title_token_ids": _int64_feature(title_ids),
          "body_token_ids": _int64_feature(body_ids),
          "uid": _bytes_feature(doc.uid),
          "doc_id": _bytes_feature(doc.doc_id),
      })).SerializeToString()


@dataclasses.dataclass
class CorpusStats:
  num_documents: int
  num_shards: int
  num_skipped: int
  num_duplicate_uids: int
  mean_body_wordpieces: float
  max_body_wordpieces: int
  shard_paths: List[str]


def write_corpus(documents: Callable[[], Iterable[Document]],
                 tokenizer,
                 output_prefix: str,
                 num_shards: int,
                 batch_size: int = 512,
                 skipped: Optional[text_records.SkipCounter] = None,
                 log: Callable[[str], None] = lambda message: None) -> CorpusStats:
  """Tokenizes documents and writes them as shards under output_prefix.

  Args:
    documents: a callable returning a fresh iterable of documents; it is called twice (once to count,
      so shards can be contiguous runs, once to write), which keeps memory flat for large corpora.
    tokenizer: a realm_tf.tokenization.Tokenizer.
    output_prefix: path prefix of the shards, e.g. /data/corpus/blocks.
    num_shards: number of shards (reduced to the number of documents when there are fewer).
    skipped: the counter that documents() fills under --skip_invalid (reset at each pass); its count
      after the writing pass goes into the manifest.

  Shards are written under temporary names and renamed only after all of them are complete; shards of
  an earlier corpus under the same prefix with another shard count are removed afterwards.
  """
  total = sum(1 for _ in documents())
  if total == 0:
    raise text_records.InputError("the input holds no documents; nothing to write")
  uids = set()
  duplicates = 0
  body_lengths_sum = 0
  body_length_max = 0
  with shards.ShardedWriter(output_prefix, total, num_shards) as writer:
    batch: List[Document] = []

    def flush():
      nonlocal duplicates, body_lengths_sum, body_length_max
      titles = tokenizer.tokenize([d.title.encode("utf-8") for d in batch]).to_list()
      bodies = tokenizer.tokenize([d.body.encode("utf-8") for d in batch]).to_list()
      for doc, title_ids, body_ids in zip(batch, titles, bodies):
        writer.write(_to_example(doc, title_ids, body_ids))
        if doc.uid in uids:
          duplicates += 1
        uids.add(doc.uid)
        body_lengths_sum += len(body_ids)
        body_length_max = max(body_length_max, len(body_ids))
      batch.clear()
      log(f"tokenized {writer.written}/{total} documents")

    for doc in documents():
      batch.append(doc)
      if len(batch) == batch_size:
        flush()
    if batch:
      flush()
    num_skipped = skipped.count if skipped is not None else 0
    writer.finish(
        {
            "format_version": FORMAT_VERSION,
            "num_documents": total,
            "num_skipped": num_skipped,
            "num_duplicate_uids": duplicates,
            "vocab_size": tokenizer.vocab_size,
            "vocab_sha256": vocab_sha256(tokenizer.vocab_path),
            "do_lower_case": tokenizer.do_lower_case,
        }, log)
  return CorpusStats(num_documents=total,
                     num_shards=writer.num_shards,
                     num_skipped=num_skipped,
                     num_duplicate_uids=duplicates,
                     mean_body_wordpieces=body_lengths_sum / total,
                     max_body_wordpieces=body_length_max,
                     shard_paths=writer.finals)


_HINT = "bin/generate_retrieval_corpus"


def read_manifest(output_prefix: str) -> dict:
  return shards.read_manifest(output_prefix, "realm_tf corpus", _HINT)


def fingerprint(output_prefix: str) -> str:
  """sha256 (hex) of the corpus manifest, which lists every shard's checksum and count: two corpora with
  the same fingerprint hold the same documents in the same rows. Indexes record it (published.json)."""
  return shards.sha256_file(output_prefix + MANIFEST_SUFFIX)


def derived_from(output_prefix: str) -> Optional[dict]:
  """The corpus this one was derived from by bin/update_index ({"corpus_prefix", "fingerprint", "change"}),
  or None for a corpus written from raw documents."""
  return read_manifest(output_prefix).get("derived_from")


def descends_from(output_prefix: str, ancestor_prefix: str, max_depth: int = 1000) -> bool:
  """Whether output_prefix was derived from ancestor_prefix by one or more bin/update_index runs, each
  from the corpus as it is now (every link's recorded fingerprint is checked where that corpus still
  exists): a process started on the ancestor may then follow the derived corpus. A corpus is not its own
  descendant."""
  target = os.path.abspath(ancestor_prefix)
  current = output_prefix
  for _ in range(max_depth):
    parent = derived_from(current)
    if not parent:
      return False
    parent_prefix = parent["corpus_prefix"]
    if tf.io.gfile.exists(parent_prefix + MANIFEST_SUFFIX):
      if fingerprint(parent_prefix) != parent["fingerprint"]:
        return False  # that corpus was rewritten since: the chain no longer holds
    elif os.path.abspath(parent_prefix) != target:
      return False
    if os.path.abspath(parent_prefix) == target:
      return True
    current = parent_prefix
  return False


def write_derived_corpus(base_prefix: str,
                         records: Callable[[], Iterable[dict]],
                         total: int,
                         output_prefix: str,
                         num_shards: int,
                         change: dict,
                         log: Callable[[str], None] = lambda message: None) -> dict:
  """Writes a corpus derived from base_prefix (bin/update_index: documents added, replaced, removed)
  from already tokenized records (dicts as read_corpus yields), without tokenizing again; returns its
  manifest.

  The manifest keeps the base's vocab fields and records "derived_from" (the base's prefix, its
  fingerprint and the change), so that an index of the base can be told apart from one of this corpus,
  and a refresher or trainer started on the base can follow it (descends_from). Written like
  write_corpus: temporary shards renamed when complete, the manifest last.
  """
  base = read_manifest(base_prefix)
  if os.path.abspath(output_prefix) == os.path.abspath(base_prefix):
    raise ValueError(f"the derived corpus must not overwrite its base {base_prefix}: indexes of the "
                     "base still point at its rows; pass another output prefix")
  uids = set()
  duplicates = 0
  with shards.ShardedWriter(output_prefix, total, num_shards) as writer:
    for record in records():
      doc = Document(record["title"], record["body"], record["doc_id"])
      writer.write(_to_example(doc, record["title_token_ids"], record["body_token_ids"]))
      duplicates += doc.uid in uids
      uids.add(doc.uid)
    return writer.finish(
        {
            "format_version": FORMAT_VERSION,
            "num_documents": total,
            "num_skipped": 0,
            "num_duplicate_uids": duplicates,
            "vocab_size": base.get("vocab_size"),
            "vocab_sha256": base.get("vocab_sha256"),
            "do_lower_case": base.get("do_lower_case"),
            "derived_from": {
                "corpus_prefix": os.path.abspath(base_prefix),
                "fingerprint": fingerprint(base_prefix),
                "change": change
            },
        }, log)


class VocabMismatchError(ValueError):
  """The vocab file a process tokenizes with is not the one its corpus or its run was made with."""


def vocab_sha256(vocab_path: str) -> str:
  """sha256 (hex) of a vocab file's bytes, as the corpus manifest and realm_config.json record it."""
  if not tf.io.gfile.exists(vocab_path):
    raise FileNotFoundError(f"vocab file {vocab_path} does not exist; pass --vocab_path pointing at the "
                            "vocab.txt the corpus and the checkpoints were made with")
  return shards.sha256_file(vocab_path)


def check_vocab(vocab_path: str,
                corpus_prefix: Optional[str] = None,
                recorded_sha256: Optional[str] = None,
                recorded_in: str = "",
                source: str = "--vocab_path") -> str:
  """Stops, before any work, when vocab_path is not the vocab that the corpus and/or the run were made
  with; returns its sha256.

  Word ids mean nothing with another vocab: a corpus tokenized with one vocab and a model or queries
  with another give garbage retrieval and answers, and nothing else fails. Two records are compared:
  the corpus manifest's vocab_sha256 (corpus_prefix given; bin/generate_retrieval_corpus writes it), and
  recorded_sha256, e.g. a run's realm_config.json vocab_sha256 (recorded_in names that file). A record
  that is absent (older files) is not checked.

  Args:
    vocab_path: the vocab file to be used.
    corpus_prefix: a retrieval corpus whose manifest to compare with.
    recorded_sha256, recorded_in: another record and the file holding it.
    source: where vocab_path came from, for the message ("--vocab_path", "MODEL_DIR/realm_config.json").

  Raises:
    VocabMismatchError naming both files and the fix.
  """
  actual = vocab_sha256(vocab_path)
  if corpus_prefix:
    recorded = read_manifest(corpus_prefix).get("vocab_sha256")
    if recorded and recorded != actual:
      raise VocabMismatchError(
          f"the vocab {vocab_path} ({source}, sha256 {actual[:16]}...) is not the vocab the corpus "
          f"{corpus_prefix} was tokenized with ({corpus_prefix}{MANIFEST_SUFFIX} records vocab_sha256 "
          f"{recorded[:16]}...); pass the vocab.txt the corpus was generated with, or regenerate the "
          f"corpus with bin/generate_retrieval_corpus --vocab_path={vocab_path}")
  if recorded_sha256 and recorded_sha256 != actual:
    raise VocabMismatchError(
        f"the vocab {vocab_path} ({source}, sha256 {actual[:16]}...) is not the vocab this run was "
        f"started with ({recorded_in} records vocab_sha256 {recorded_sha256[:16]}...): its checkpoints "
        "map other word ids; pass the vocab.txt the run was started with, or start a new --model_dir")
  return actual


def corpus_shards(output_prefix: str) -> List[str]:
  """The shard paths of a complete corpus, in row order, checked against its manifest."""
  return shards.listed_shards(output_prefix, read_manifest(output_prefix), _HINT)


FEATURE_SPEC = {
    "title": tf.io.FixedLenFeature([], tf.string),
    "body": tf.io.FixedLenFeature([], tf.string),
    "title_token_ids": tf.io.RaggedFeature(tf.int64),
    "body_token_ids": tf.io.RaggedFeature(tf.int64),
    "uid": tf.io.FixedLenFeature([], tf.string),
    "doc_id": tf.io.FixedLenFeature([], tf.string),
}


def corpus_dataset(output_prefix: str) -> tf.data.Dataset:
  """The corpus as a dataset of parsed documents, in row order (deterministic, not shuffled)."""
  files = tf.data.Dataset.from_tensor_slices(corpus_shards(output_prefix))
  records = tf.data.TFRecordDataset(files, compression_type="GZIP")
  return records.map(lambda r: tf.io.parse_single_example(r, FEATURE_SPEC))


def read_shard_records(path: str,
                       feature_spec: dict,
                       fix: str,
                       expected: Optional[int] = None) -> Iterator[dict]:
  """Yields the parsed records of one GZIP TFRecord shard (numpy values), in order.

  A truncated or corrupt shard raises InputError naming the shard and the record (0-based) that cannot
  be read; TensorFlow's own DataLossError names neither. `fix` says what to do (regenerate the corpus).
  `expected` is the shard's record count from its manifest: a GZIP stream cut at a deflate block
  boundary can read as a clean end of file, so a shard that ends early is reported as truncated too.
  """
  iterator = tf.data.TFRecordDataset(path, compression_type="GZIP").map(
      tf.autograph.experimental.do_not_convert(
          lambda r: tf.io.parse_single_example(r, feature_spec))).as_numpy_iterator()
  index = 0
  while True:
    try:
      record = next(iterator)
    except StopIteration:
      if expected is not None and index < expected:
        raise text_records.InputError(
            f"{path}: record {index} (0-based) cannot be read: the shard is truncated or corrupt (it "
            f"ends after {index} of the {expected} records its manifest lists); {fix}") from None
      return
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
      detail = re.sub(r"\{\{function_node [^}]*\}\}|\s*\[Op:\w+\].*$", "", e.message).strip()
      raise text_records.InputError(
          f"{path}: record {index} (0-based) cannot be read: the shard is truncated or corrupt "
          f"({detail}); {fix}") from e
    yield record
    index += 1


def read_corpus(output_prefix: str) -> Iterator[dict]:
  """Yields each document as a dict of Python values (str, list of int), in row order.

  A truncated or corrupt shard raises InputError naming the shard and the record.
  """
  counts = [s["num_documents"] for s in read_manifest(output_prefix)["shards"]]
  for path, count in zip(corpus_shards(output_prefix), counts):
    for features in read_shard_records(path,
                                       FEATURE_SPEC, "regenerate the corpus with "
                                       "bin/generate_retrieval_corpus",
                                       expected=count):
      yield {
          "title": features["title"].decode("utf-8"),
          "body": features["body"].decode("utf-8"),
          "title_token_ids": features["title_token_ids"].tolist(),
          "body_token_ids": features["body_token_ids"].tolist(),
          "uid": features["uid"].decode("utf-8"),
          "doc_id": features["doc_id"].decode("utf-8"),
      }
