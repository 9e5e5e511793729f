"""The REALM pre-training corpus: raw or pre-annotated text in, the original's TFRecord format out.

Shards are GZIP TFRecord files `{prefix}-{i:05d}-of-{n:05d}` of tf.Example, exactly the original's
features (language/realm's `wikipedia_annotated_with_dates_public*.tfrecord.gz`):
  title, text                                  bytes[1], UTF-8
  sentence_byte_start, sentence_byte_limit     int64 lists: the sentences, [start, limit) byte offsets
                                               into text, sorted and non-overlapping
  span_byte_start, span_byte_limit             int64 lists: the salient spans (entities, dates)
The REALM input pipeline takes one sentence with a span fully inside it, masks the span, and drops the
sentence's own document from the retrieved candidates by its uid, sha1("{title} <sep> {text}"). That
uid must equal the retrieval corpus's realm_tf.data.corpus.document_uid(title, body), so `text` is the
input's text byte for byte: never stripped or normalized, and read by the same readers as the corpus.

Documents are split into contiguous runs (row order = input order); shards are written under temporary
names and renamed when all are complete; `{prefix}.manifest.json` (counts, per-shard sha256, the
annotator) is written last. Input without annotations is annotated by realm_tf.data.salient_spans.
"""

import bisect
import dataclasses
import json
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf

from realm_tf.data import corpus
from realm_tf.data import salient_spans
from realm_tf.data import shards
from realm_tf.data import text_records

MANIFEST_SUFFIX = shards.MANIFEST_SUFFIX
FORMAT_VERSION = 1
KIND = "realm_pretraining_corpus"

Span = Tuple[int, int]
InputError = text_records.InputError


@dataclasses.dataclass(frozen=True)
class PretrainingDocument:
  """One document. sentences and spans are UTF-8 byte offsets into text; None means "not annotated
  yet" (write_pretraining_corpus annotates it). source names the input position ("file:line")."""
  title: str
  text: str
  sentences: Optional[Tuple[Span, ...]] = None
  spans: Optional[Tuple[Span, ...]] = None
  source: str = ""

  @property
  def uid(self) -> str:
    return corpus.document_uid(self.title, self.text)


# ----------------------------------------------------------------------------------------------------
# Reading raw input.


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _offset_error(where: str, message: str) -> InputError:
  return InputError(f"{where}: {message}; fix the record, pass --reannotate to recompute sentences and "
                    "spans from the text, or pass --skip_invalid")


def _parse_offsets(where: str, field: str, value) -> Tuple[Span, ...]:
  if not isinstance(value, list):
    raise _offset_error(
        where, f"\"{field}\" must be a list of [start, limit] byte offsets, got "
        f"{type(value).__name__}")
  pairs = []
  for i, pair in enumerate(value):
    if not (isinstance(pair, list) and len(pair) == 2 and all(_is_int(v) for v in pair)):
      raise _offset_error(where, f"{field}[{i}] = {json.dumps(pair)} is not a [start, limit] pair of "
                          "integers")
    pairs.append((pair[0], pair[1]))
  return tuple(pairs)


def validate_offsets(where: str, text: str, sentences: Sequence[Span], spans: Sequence[Span]) -> None:
  """Checks byte offsets against text: 0 <= start < limit <= len(text in UTF-8), both on character
  boundaries, sentences sorted and non-overlapping. Raises InputError naming `where` (file:line)."""
  data = text.encode("utf-8")
  for field, pairs in (("sentences", sentences), ("spans", spans)):
    for i, (start, limit) in enumerate(pairs):
      if start < 0 or limit > len(data):
        raise _offset_error(
            where, f"{field}[{i}] = [{start}, {limit}] is out of range: the text is "
            f"{len(data)} UTF-8 bytes")
      if limit <= start:
        raise _offset_error(
            where, f"{field}[{i}] = [{start}, {limit}]: the limit must be greater "
            "than the start (limits are exclusive)")
      for name, offset in (("start", start), ("limit", limit)):
        if offset < len(data) and 0x80 <= data[offset] < 0xC0:
          raise _offset_error(
              where, f"{field}[{i}] = [{start}, {limit}]: the {name} {offset} falls "
              "inside a multi-byte UTF-8 character (offsets count UTF-8 bytes "
              "of text, not characters)")
  for i in range(1, len(sentences)):
    if sentences[i][0] < sentences[i - 1][1]:
      raise _offset_error(
          where, f"sentences[{i}] = {list(sentences[i])} starts before sentences[{i - 1}]"
          f" = {list(sentences[i - 1])} ends; sentences must be sorted and must "
          "not overlap")


def _document(where: str, title, text, sentences, spans, reannotate: bool) -> PretrainingDocument:
  """Validates one input record; raises InputError."""
  if not isinstance(title, str) or not isinstance(text, str):
    raise InputError(f"{where}: title and text must be strings; fix the record or pass --skip_invalid")
  if not title.strip() and not text.strip():
    raise InputError(f"{where}: the document has an empty title and text (it would be "
                     "indistinguishable from the null document); remove it or pass --skip_invalid")
  try:
    (title + text).encode("utf-8")
  except UnicodeEncodeError as e:
    raise InputError(f"{where}: the title or text holds a lone surrogate ({e.object[e.start:e.end]!r}) "
                     "that has no UTF-8 encoding; fix the record or pass --skip_invalid") from None
  if reannotate or (sentences is None and spans is None):
    return PretrainingDocument(title=title, text=text, source=where)
  if sentences is None or spans is None:
    raise InputError(f"{where}: a pre-annotated document needs both \"sentences\" and \"spans\" (byte "
                     "offsets into text); give both, neither (to annotate it), or pass --skip_invalid")
  sentence_pairs = _parse_offsets(where, "sentences", sentences)
  span_pairs = _parse_offsets(where, "spans", spans)
  validate_offsets(where, text, sentence_pairs, span_pairs)
  return PretrainingDocument(title=title, text=text, sentences=sentence_pairs, spans=span_pairs, source=where)


def read_raw_documents(path: str,
                       skipped: Optional[text_records.SkipCounter] = None,
                       reannotate: bool = False) -> Iterator[PretrainingDocument]:
  """Reads documents from JSONL or a DPR-style TSV (the format follows the extension).

  JSONL: {"title", "text"} ("body" is accepted as in the retrieval corpus), optionally pre-annotated
  with "sentences": [[start, limit], ...] and "spans": [[start, limit], ...], UTF-8 byte offsets into
  text (testdata/pretraining.jsonl). Pre-annotated offsets are validated (see validate_offsets) unless
  reannotate, which drops them so the writer recomputes both.
  TSV: id, text, title columns (header optional, extra columns ignored, quoted fields allowed), read by
  the same reader as realm_tf.data.corpus.read_documents, so texts and uids agree with the retrieval
  corpus. A bad record raises InputError naming file:line, or is counted in skipped.
  """
  if not tf.io.gfile.exists(path):
    raise InputError(f"{path} does not exist; pass --input_path pointing at a JSONL or TSV file of "
                     "documents")
  lower = path.lower()
  if lower.endswith((".jsonl", ".json")):
    for line_number, record in text_records.read_jsonl(path, skipped):
      where = f"{path}:{line_number}"
      try:
        text = record.get("text", record.get("body"))
        if "title" not in record or text is None:
          raise InputError(f"{where}: a document needs \"title\" and \"text\" (or \"body\") fields, got "
                           f"{sorted(record)}; fix the record or pass --skip_invalid")
        if "body" in record and "text" in record and record["body"] != record["text"]:
          raise InputError(f"{where}: \"text\" and \"body\" differ; keep one of them (the text must "
                           "equal the retrieval corpus body) or pass --skip_invalid")
        yield _document(where, record["title"], text, record.get("sentences"), record.get("spans"),
                        reannotate)
      except InputError as e:
        text_records.handle_invalid(e, skipped)
  elif lower.endswith(".tsv"):
    for line_number, row in text_records.read_tsv(path, corpus.DPR_TSV_COLUMNS, skipped):
      try:
        yield _document(f"{path}:{line_number}", row["title"], row["text"], None, None, reannotate)
      except InputError as e:
        text_records.handle_invalid(e, skipped)
  else:
    raise InputError(f"{path}: unknown input format; use a .jsonl file of {{\"title\", \"text\"}} "
                     "objects (optionally with \"sentences\" and \"spans\") or a .tsv file with id, "
                     "text, title columns")


def annotate_document(doc: PretrainingDocument, annotator: salient_spans.SpanAnnotator,
                      splitter: salient_spans.SentenceSplitter) -> PretrainingDocument:
  """Fills in whatever doc lacks (sentences, spans); a plug-in error names the document's source."""
  if doc.sentences is not None and doc.spans is not None:
    return doc
  offsets = salient_spans.char_to_byte_offsets(doc.text)
  try:
    sentences = doc.sentences
    if sentences is None:
      sentences = tuple(salient_spans.split_sentences(doc.text, splitter, offsets))
    spans = doc.spans
    if spans is None:
      spans = tuple(salient_spans.annotate_spans(doc.text, annotator, offsets))
  except ValueError as e:
    raise ValueError(f"{doc.source or repr(doc.title)}: {e}") from e
  return dataclasses.replace(doc, sentences=sentences, spans=spans)


# ----------------------------------------------------------------------------------------------------
# Writing.


@dataclasses.dataclass
class PretrainingStats:
  num_documents: int = 0
  num_shards: int = 0
  num_skipped: int = 0
  num_annotated: int = 0  # documents whose sentences/spans were computed here
  num_sentences: int = 0
  num_spans: int = 0
  num_sentences_with_spans: int = 0  # sentences that fully contain at least one span
  num_spans_crossing_sentences: int = 0  # spans inside no single sentence (kept; the pipeline drops them)
  num_documents_without_usable_spans: int = 0  # no sentence holds a span: the pipeline skips them
  shard_paths: List[str] = dataclasses.field(default_factory=list)

  def summary(self) -> str:
    return (f"{self.num_documents} documents ({self.num_annotated} annotated here, {self.num_skipped} "
            f"invalid skipped) in {self.num_shards} shards: {self.num_sentences} sentences, "
            f"{self.num_spans} spans, {self.num_sentences_with_spans} sentences with >= 1 span, "
            f"{self.num_spans_crossing_sentences} spans crossing sentence boundaries, "
            f"{self.num_documents_without_usable_spans} documents without a usable span")


def span_sentence_counts(sentences: Sequence[Span], spans: Sequence[Span]) -> Tuple[int, int]:
  """(sentences that fully contain >= 1 span, spans contained in no single sentence; duplicates count),
  as the original pipeline maps each span to the sentence that fully contains it. sentences must be
  sorted and non-overlapping."""
  starts = [s for s, _ in sentences]
  with_spans = set()
  crossing = 0
  for start, limit in spans:
    i = bisect.bisect_right(starts, start) - 1
    if i >= 0 and limit <= sentences[i][1]:
      with_spans.add(i)
    else:
      crossing += 1
  return len(with_spans), crossing


def _int64_feature(values) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def _bytes_feature(value: str) -> tf.train.Feature:
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))


def to_example(doc: PretrainingDocument) -> bytes:
  """The serialized tf.Example of an annotated document, in the original's features."""
  if doc.sentences is None or doc.spans is None:
    raise ValueError(f"{doc.source or repr(doc.title)} is not annotated; call annotate_document first")
  return tf.train.Example(features=tf.train.Features(
      feature={
          "title": _bytes_feature(doc.title),
          "text": _bytes_feature(doc.text),
          "sentence_byte_start": _int64_feature([s for s, _ in doc.sentences]),
          "sentence_byte_limit": _int64_feature([l for _, l in doc.sentences]),
          "span_byte_start": _int64_feature([s for s, _ in doc.spans]),
          "span_byte_limit": _int64_feature([l for _, l in doc.spans]),
      })).SerializeToString()


def write_pretraining_corpus(documents: Callable[[], Iterable[PretrainingDocument]],
                             output_prefix: str,
                             num_shards: int,
                             annotator: Optional[salient_spans.SpanAnnotator] = None,
                             sentence_splitter: Optional[salient_spans.SentenceSplitter] = None,
                             skipped: Optional[text_records.SkipCounter] = None,
                             log: Callable[[str], None] = lambda message: None) -> PretrainingStats:
  """Annotates what needs it and writes the documents as shards under output_prefix.

  Args:
    documents: a callable returning a fresh iterable of documents (e.g. read_raw_documents); it is
      called twice: once to count (cheap: nothing is annotated), so shards are contiguous runs, and once
      to annotate and write. Memory stays flat.
    output_prefix: path prefix of the shards, e.g. /data/pretraining/wiki.
    num_shards: number of shards, clamped to [1, number of documents].
    annotator, sentence_splitter: used for documents without spans / sentences; default: the builtin
      annotator (dates + capitalized entities) and the rule-based splitter.
    skipped: the counter that documents() fills under --skip_invalid; reset before each pass, so its
      count after writing is the number of skipped records (it goes into the stats and the manifest).

  Raises InputError for an empty input, ValueError naming the document when a plug-in returns bad
  offsets. Shards of an earlier corpus under the same prefix with another shard count are removed.
  """
  annotator = salient_spans.load_annotator("builtin") if annotator is None else annotator
  splitter = salient_spans.RuleSentenceSplitter() if sentence_splitter is None else sentence_splitter
  if skipped is not None:
    skipped.reset()
  total = sum(1 for _ in documents())
  if total == 0:
    raise InputError("the input holds no documents; nothing to write")
  with shards.ShardedWriter(output_prefix, total, num_shards) as writer:
    stats = PretrainingStats(num_shards=writer.num_shards)
    if skipped is not None:
      skipped.reset()
    for doc in documents():
      if doc.sentences is None or doc.spans is None:
        doc = annotate_document(doc, annotator, splitter)
        stats.num_annotated += 1
      # Checks plug-in output and programmatic documents alike (read_raw_documents already checked its).
      try:
        validate_offsets(doc.source or repr(doc.title), doc.text, doc.sentences, doc.spans)
      except InputError as e:
        raise ValueError(str(e)) from e
      writer.write(to_example(doc))
      stats.num_documents += 1
      with_spans, crossing = span_sentence_counts(doc.sentences, doc.spans)
      stats.num_sentences += len(doc.sentences)
      stats.num_spans += len(doc.spans)
      stats.num_sentences_with_spans += with_spans
      stats.num_spans_crossing_sentences += crossing
      stats.num_documents_without_usable_spans += with_spans == 0
      if stats.num_documents % 10000 == 0:
        log(f"wrote {stats.num_documents}/{total} documents")
    stats.num_skipped = skipped.count if skipped is not None else 0
    stats.shard_paths = writer.finals
    writer.finish(
        {
            "kind": KIND,
            "format_version": FORMAT_VERSION,
            "num_documents": stats.num_documents,
            "num_skipped": stats.num_skipped,
            "num_annotated": stats.num_annotated,
            "num_sentences": stats.num_sentences,
            "num_spans": stats.num_spans,
            "num_sentences_with_spans": stats.num_sentences_with_spans,
            "num_spans_crossing_sentences": stats.num_spans_crossing_sentences,
            "num_documents_without_usable_spans": stats.num_documents_without_usable_spans,
            "annotator": annotator.name if stats.num_annotated else None,
            "sentence_splitter": splitter.name if stats.num_annotated else None,
        }, log)
  return stats


# ----------------------------------------------------------------------------------------------------
# Reading the corpus back.

_HINT = "bin/generate_pretraining_corpus"


def read_manifest(output_prefix: str) -> dict:
  manifest = shards.read_manifest(output_prefix, "pre-training corpus", _HINT)
  if manifest.get("kind") != KIND:
    raise ValueError(f"{output_prefix}{MANIFEST_SUFFIX} describes a "
                     f"{manifest.get('kind', 'retrieval corpus')!r}, not a pre-training corpus; pass the "
                     f"prefix written by {_HINT}")
  return manifest


def pretraining_shards(output_prefix: str) -> List[str]:
  """The shard paths of a complete pre-training corpus, in row order, checked against its manifest."""
  return shards.listed_shards(output_prefix, read_manifest(output_prefix), _HINT)


FEATURE_SPEC = {
    "title": tf.io.FixedLenFeature([], tf.string),
    "text": tf.io.FixedLenFeature([], tf.string),
    "sentence_byte_start": tf.io.RaggedFeature(tf.int64),
    "sentence_byte_limit": tf.io.RaggedFeature(tf.int64),
    "span_byte_start": tf.io.RaggedFeature(tf.int64),
    "span_byte_limit": tf.io.RaggedFeature(tf.int64),
}


def pretraining_dataset(output_prefix: str) -> tf.data.Dataset:
  """The corpus as a dataset of parsed examples (FEATURE_SPEC), in row order (not shuffled). The int64
  lists are variable-length; batching them gives ragged tensors."""
  files = tf.data.Dataset.from_tensor_slices(pretraining_shards(output_prefix))
  records = tf.data.TFRecordDataset(files, compression_type="GZIP")
  return records.map(lambda r: tf.io.parse_single_example(r, FEATURE_SPEC))


def read_pretraining_corpus(output_prefix: str) -> Iterator[PretrainingDocument]:
  """Yields each record as an annotated PretrainingDocument (source "shard:record"), in row order.

  A truncated or corrupt shard raises InputError naming the shard and the record.
  """
  counts = [s["num_documents"] for s in read_manifest(output_prefix)["shards"]]
  for path, count in zip(pretraining_shards(output_prefix), counts):
    for index, record in enumerate(
        corpus.read_shard_records(path,
                                  FEATURE_SPEC,
                                  "regenerate it with bin/generate_pretraining_corpus",
                                  expected=count)):
      yield PretrainingDocument(
          title=record["title"].decode("utf-8"),
          text=record["text"].decode("utf-8"),
          sentences=tuple(zip(record["sentence_byte_start"].tolist(),
                              record["sentence_byte_limit"].tolist())),
          spans=tuple(zip(record["span_byte_start"].tolist(), record["span_byte_limit"].tolist())),
          source=f"{path}:{index}")
