"""The retrieval corpus held in memory: every row's texts, doc id, wordpiece ids and fingerprint.

One class for every process that needs the corpus itself rather than a stream of it: REALM's input
pipeline (candidate token ids by row, own-document exclusion), ORQA's model and exporters (dense block
token ids, the bodies answers are sliced from, titles, doc ids), FiD-KD (passages for the reader, doc ids
of the gold passages) and retriever recall (texts, doc id -> row). Row i is document i of the corpus
(realm_tf.data.corpus: sorted shard order, then record order), which is also row i of every index of it.

Why compact arrays rather than Python lists: a corpus of Wikipedia's size (13M blocks) would spend more
on per-object overhead than on its text. Token ids are int32 values with row offsets; texts are UTF-8
bytes with row offsets, decoded when read.

The own-document fingerprint (document_fingerprint) is a 64-bit hash of "title <sep> body" computed
in-graph on both sides (the corpus stores the original's sha1 uid, which TensorFlow cannot compute
in-graph): a REALM pre-training query names its document by it.
"""

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from realm_tf.data import corpus as corpus_lib

_BATCH = 4096  # documents per read batch (and per tokenizer call in from_texts)


def document_fingerprint(title: tf.Tensor, body: tf.Tensor) -> tf.Tensor:
  """int64 fingerprint of "title <sep> body" (same bytes as the sha1 uid), any shape of strings."""
  joined = tf.strings.join([title, body], separator=" <sep> ")
  return tf.strings.to_hash_bucket_fast(joined, 2**62)


def _id_hashes(doc_ids: List[bytes]) -> np.ndarray:
  """int64 hashes of doc ids: which rows of two corpus versions are the same document."""
  if not doc_ids:
    return np.zeros([0], np.int64)
  return tf.strings.to_hash_bucket_fast(tf.constant(doc_ids, tf.string), 2**62).numpy()


class RaggedRows:
  """Rows of values as flat values + row starts and lengths (numpy), gathered on the host by row.

  Args:
    values: [total] flat values of all rows, in row order.
    lengths: [N] values per row.
  """

  def __init__(self, values: np.ndarray, lengths: np.ndarray):
    self.values = values
    self.lengths = np.asarray(lengths, np.int64)
    self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)

  def __len__(self) -> int:
    return len(self.lengths)

  def row(self, i: int) -> np.ndarray:
    start = self.starts[i]
    return self.values[start:start + self.lengths[i]]

  def gather(self, rows: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(flat values, lengths) of `rows` (int [M]), in their order."""
    starts, lengths = self.starts[rows], self.lengths[rows]
    # Position j of the output reads values[starts[r] + (j - first output position of r)].
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return self.values[np.arange(int(lengths.sum()), dtype=np.int64) + shift], lengths

  def dense(self, max_len: int, pad=0) -> Tuple[np.ndarray, np.ndarray]:
    """([N, C] the first max_len values of every row, padded; [N] int32 lengths kept); C is the longest
    row kept (at least 1)."""
    kept = np.minimum(self.lengths, max_len)
    width = max(1, int(kept.max()) if len(kept) else 1)
    positions = np.arange(width)[np.newaxis, :]
    inside = positions < kept[:, np.newaxis]
    out = np.full([len(kept), width], pad, self.values.dtype)
    out[inside] = self.values[(self.starts[:, np.newaxis] + positions)[inside]]
    return out, kept.astype(np.int32)

  @classmethod
  def from_lists(cls, rows: Sequence[Sequence[int]], dtype=np.int32) -> "RaggedRows":
    lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    values = (np.fromiter(
        (v for r in rows for v in r), dtype, int(lengths.sum())) if len(rows) else np.zeros([0], dtype))
    return cls(values, lengths)


class Texts(Sequence[str]):
  """N strings stored as UTF-8 bytes with row offsets; texts[i] decodes row i, texts[a:b] a list."""

  def __init__(self, rows: RaggedRows):
    self._rows = rows

  @classmethod
  def from_bytes(cls, values: Sequence[bytes]) -> "Texts":
    lengths = np.fromiter((len(v) for v in values), np.int64, len(values))
    return cls(RaggedRows(np.frombuffer(b"".join(values), np.uint8), lengths))

  def __len__(self) -> int:
    return len(self._rows)

  def __getitem__(self, i: Union[int, slice]):
    if isinstance(i, slice):
      return [self[j] for j in range(*i.indices(len(self)))]
    if not -len(self) <= i < len(self):
      raise IndexError(f"row {i} of a corpus of {len(self)} documents")
    return self._rows.row(int(i) % len(self)).tobytes().decode("utf-8")


class CorpusTable:
  """A retrieval corpus in memory (see the module docstring); build it with load() or from_texts().

  Attributes:
    prefix: the corpus shards' prefix (from_texts: where the texts came from, for messages).
    num_docs: N.
    titles, bodies, doc_ids: N strings each (Texts).
    title_token_ids, body_token_ids: RaggedRows of int32 wordpiece ids.
    fingerprints: int64 [N], document_fingerprint of each row.
    id_hashes: int64 [N], hashes of the doc ids.
    aliases: {original fingerprint: current fingerprint} of documents replaced since the run began (see
      load's `previous`).
  """

  def __init__(self, prefix: str, titles: Texts, bodies: Texts, doc_ids: Texts, title_token_ids: RaggedRows,
               body_token_ids: RaggedRows, fingerprints: np.ndarray, id_hashes: np.ndarray):
    if not len(bodies):
      raise ValueError(f"corpus {prefix} holds no documents; regenerate it with "
                       "bin/generate_retrieval_corpus")
    self.prefix = prefix
    self.titles, self.bodies, self.doc_ids = titles, bodies, doc_ids
    self.title_token_ids, self.body_token_ids = title_token_ids, body_token_ids
    self.fingerprints = fingerprints
    self.id_hashes = id_hashes
    self.num_docs = len(bodies)
    self.aliases: Dict[int, int] = {}
    self._row_of: Optional[Dict[str, int]] = None

  @classmethod
  def load(cls, corpus_prefix: str, previous: Optional["CorpusTable"] = None) -> "CorpusTable":
    """Reads a corpus written by bin/generate_retrieval_corpus (or derived by bin/update_index).

    previous: the table of the corpus version this one was derived from, in use by a running REALM
    trainer; carries the own-document exclusion over (aliases).
    """
    titles, bodies, doc_ids, fingerprints = [], [], [], []
    title_ids, title_lengths, body_ids, body_lengths = [], [], [], []
    for batch in corpus_lib.corpus_dataset(corpus_prefix).ragged_batch(_BATCH):
      titles.extend(batch["title"].numpy())
      bodies.extend(batch["body"].numpy())
      doc_ids.extend(batch["doc_id"].numpy())
      title_ids.append(batch["title_token_ids"].flat_values.numpy().astype(np.int32))
      title_lengths.append(batch["title_token_ids"].row_lengths().numpy())
      body_ids.append(batch["body_token_ids"].flat_values.numpy().astype(np.int32))
      body_lengths.append(batch["body_token_ids"].row_lengths().numpy())
      fingerprints.append(document_fingerprint(batch["title"], batch["body"]).numpy())
    concat = lambda arrays, dtype: np.concatenate(arrays) if arrays else np.zeros([0], dtype)
    table = cls(corpus_prefix, Texts.from_bytes(titles), Texts.from_bytes(bodies), Texts.from_bytes(doc_ids),
                RaggedRows(concat(title_ids, np.int32), concat(title_lengths, np.int64)),
                RaggedRows(concat(body_ids, np.int32), concat(body_lengths, np.int64)),
                concat(fingerprints, np.int64), _id_hashes(doc_ids))
    if previous is not None:
      table.aliases = previous._aliases_into(table)  # pylint: disable=protected-access
    return table

  @classmethod
  def from_texts(cls, tokenizer, titles: Sequence[str], bodies: Sequence[str], doc_ids: Sequence[str],
                 source: str) -> "CorpusTable":
    """The table of documents that no corpus holds yet (a converted ORQA blocks.jsonl), tokenized as
    bin/generate_retrieval_corpus tokenizes them (realm_tf.data.corpus.write_corpus); source names them
    in messages."""
    if not bodies:
      raise ValueError(f"{source}: no blocks to read; the open-QA model needs at least one")
    title_rows: List[List[int]] = []
    body_rows: List[List[int]] = []
    for begin in range(0, len(bodies), _BATCH):
      end = begin + _BATCH
      title_rows.extend(tokenizer.tokenize([t.encode("utf-8") for t in titles[begin:end]]).to_list())
      body_rows.extend(tokenizer.tokenize([b.encode("utf-8") for b in bodies[begin:end]]).to_list())
    title_bytes = [t.encode("utf-8") for t in titles]
    body_bytes = [b.encode("utf-8") for b in bodies]
    id_bytes = [str(i).encode("utf-8") for i in doc_ids]
    fingerprints = document_fingerprint(tf.constant(title_bytes, tf.string),
                                        tf.constant(body_bytes, tf.string)).numpy()
    return cls(source, Texts.from_bytes(title_bytes),
               Texts.from_bytes(body_bytes), Texts.from_bytes(id_bytes), RaggedRows.from_lists(title_rows),
               RaggedRows.from_lists(body_rows), fingerprints, _id_hashes(id_bytes))

  # -------------------------------------------------------------------------------------------------------
  # Lookups.

  def rows_of(self, doc_ids: Sequence[str]) -> np.ndarray:
    """int64 rows of the given doc ids, -1 for ids the corpus does not hold (the first row of an id
    held twice)."""
    if self._row_of is None:
      self._row_of = {}
      for row, doc_id in enumerate(self.doc_ids):
        self._row_of.setdefault(doc_id, row)
    return np.asarray([self._row_of.get(d, -1) for d in doc_ids], np.int64)

  def texts(self) -> List[str]:
    """"title body" of every row: the text an answer string is searched in (retriever recall)."""
    return [f"{t} {b}" for t, b in zip(self.titles, self.bodies)]

  def gather(self, rows: np.ndarray):
    """Token ids of `rows` (int [M]), int64 for the REALM pipeline's py_function: title values, title
    lengths, body values, body lengths."""
    title_values, title_lengths = self.title_token_ids.gather(rows)
    body_values, body_lengths = self.body_token_ids.gather(rows)
    return title_values.astype(np.int64), title_lengths, body_values.astype(np.int64), body_lengths

  def ragged_token_ids(self) -> Tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """(titles, bodies) int64 RaggedTensors [N, (wordpieces)], for Featurizer.candidate_inputs."""
    return tuple(
        tf.RaggedTensor.from_row_lengths(rows.values.astype(np.int64), rows.lengths)
        for rows in (self.title_token_ids, self.body_token_ids))

  def dense_bodies(self, max_len: int) -> Tuple[np.ndarray, np.ndarray]:
    """(token_ids int32 [N, C], lengths int32 [N]): every body's first max_len wordpieces, as ORQA's
    model holds its blocks (max_len = reader_seq_len - 3: more never fits); C is the longest kept."""
    return self.body_token_ids.dense(max_len)

  # -------------------------------------------------------------------------------------------------------
  # Own-document exclusion across corpus versions (REALM pre-training).

  def _aliases_into(self, newer: "CorpusTable") -> Dict[int, int]:
    """The aliases of `newer`, a later version of this corpus: the documents whose doc_id both hold
    with another text, and every earlier alias carried to its document's newest text.

    Why: a pre-training example names its own document by the fingerprint of the text it was cut from
    (the original's uid). When an update replaces that document, the row that holds it (same doc_id)
    has a new fingerprint, and the example's own document, often still holding the sentence, would be
    retrieved as a trivial candidate.
    """
    order = np.argsort(newer.id_hashes, kind="stable")
    positions = np.searchsorted(newer.id_hashes[order], self.id_hashes)
    positions = np.minimum(positions, len(order) - 1)
    kept = newer.id_hashes[order[positions]] == self.id_hashes  # False: removed by the update
    current = np.full(self.num_docs, -1, np.int64)
    current[kept] = newer.fingerprints[order[positions[kept]]]
    changed = kept & (current != self.fingerprints)
    moved = dict(zip(self.fingerprints[changed].tolist(), current[changed].tolist()))
    aliases = {old: moved.get(now, now) for old, now in self.aliases.items()}
    aliases.update(moved)
    return aliases

  def excluded(self, own_fingerprint: int) -> set:
    """Fingerprints a query cut from the document own_fingerprint must not retrieve."""
    own = int(own_fingerprint)
    return {own, self.aliases.get(own, own)}
