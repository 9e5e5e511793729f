"""ORQA's reader inputs, gold spans and answer tests as TensorFlow ops (reference/original_realm_orqa.md 3.7).

The original built the reader inputs with a custom C++ op (`ReaderInputs`) and tested answers with
`std::string::find`. Here the same features come from TensorFlow ops, in two forms that share one
packing and one span matcher:

- dense id form (`pack_reader_inputs`, `find_occurrences`, `gold_spans`, `contains_answer`): static
  shapes and no string ops, so the ORQA train step does retrieval, packing and labelling inside one
  XLA-compiled function (realm_tf.modeling.orqa);
- text form (`reader_inputs_from_texts`, `has_answer_strings`, `extract_answers`): questions, block texts
  and answers as strings, tokenized in-graph with byte offsets (realm_tf.tokenization), for SavedModels
  with raw-text signatures and for host-side checks.

Reader input, length L (320 in ORQA):
  [CLS] question [SEP] block [SEP] [PAD]*
  segment ids 0 for [CLS] question [SEP], 1 for block [SEP]; block_mask 1 on block wordpieces only.
  The question keeps every wordpiece that fits (at most L - 3, the original did not truncate it); the
  block is truncated to what is left. The title is not part of the reader input (as the original).

Gold spans: every occurrence of each answer's WORDPIECE-id sequence inside the block region (start and
end positions in the reader sequence, inclusive), at most `max_answers` per block, padded with -1, as
the original op's gold_starts / gold_ends.

Answer tests: the original's retriever_correct is a raw, case-sensitive substring test of the answer in
the block text (`has_answer_strings` here). The in-graph train step has only wordpiece ids, so it uses
`contains_answer`: the answer's wordpiece sequence occurs in the block's wordpieces. The two differ where
an answer is not a whole-word unit ("Paris" is a substring of "Parisian", but its wordpieces need not
occur there) and where case folding makes different strings the same wordpieces ("paris" vs "Paris");
both are documented stand-ins, and the wordpiece test is the one the reader's gold spans use anyway.

Answers are padded to [max_num_answers, max_answer_len] wordpieces: further answers are dropped, and an
answer longer than max_answer_len is matched on its first max_answer_len wordpieces (a prefix; reader
spans longer than max_span_width can never be gold anyway).
"""

from typing import Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import tokenization

# RE2's metacharacters; escaping exactly these makes an answer a literal pattern (escaping a non-ASCII
# letter would be an invalid RE2 escape).
_RE2_META = r"([\\.+*?()|\[\]{}^$])"


class ReaderInputs(NamedTuple):
  """Packed reader inputs of B questions x K blocks; every field int32.

  Attributes:
    token_ids, mask, segment_ids: [B, K, L].
    block_mask: [B, K, L], 1 on block wordpieces.
    block_start: [B, K], position of the block's first wordpiece (question length kept + 2).
    block_length: [B, K], number of block wordpieces kept.
  """
  token_ids: tf.Tensor
  mask: tf.Tensor
  segment_ids: tf.Tensor
  block_mask: tf.Tensor
  block_start: tf.Tensor
  block_length: tf.Tensor


def pack_reader_inputs(question_ids, question_len, block_ids, block_len, seq_len: int, cls_id: int,
                       sep_id: int) -> ReaderInputs:
  """[CLS] question [SEP] block [SEP] [PAD]* for every block of every question, with dense ops only.

  Args:
    question_ids: int [B, Qm] question wordpieces (padded); Qm >= 1.
    question_len: int [B], real wordpieces of each question.
    block_ids: int [B, K, Cm] block wordpieces (padded); Cm >= 1.
    block_len: int [B, K], real wordpieces of each block.
    seq_len: L; at least 3.
    cls_id, sep_id: special token ids.

  Returns:
    ReaderInputs, [B, K, L] (XLA-compilable: gathers and selects over static shapes).
  """
  if seq_len < 3:
    raise ValueError(f"reader seq_len must be at least 3 ([CLS] [SEP] [SEP]), got {seq_len}")
  question_ids = tf.cast(question_ids, tf.int32)
  block_ids = tf.cast(block_ids, tf.int32)
  max_question, max_block = question_ids.shape[-1], block_ids.shape[-1]
  q = tf.minimum(tf.cast(question_len, tf.int32), seq_len - 3)[:, tf.newaxis, tf.newaxis]  # [B, 1, 1]
  c = tf.minimum(tf.cast(block_len, tf.int32), seq_len - 3 - q[:, :, 0])[:, :, tf.newaxis]  # [B, K, 1]
  c = tf.maximum(c, 0)
  pos = tf.range(seq_len, dtype=tf.int32)[tf.newaxis, tf.newaxis, :]  # [1, 1, L]
  shape = tf.shape(block_ids)
  batch, beam = shape[0], shape[1]

  question_index = tf.clip_by_value(pos[0] - 1, 0, max_question - 1)  # [1, L]
  question_tokens = tf.gather(question_ids, question_index[0], axis=1)[:, tf.newaxis, :]  # [B, 1, L]
  block_index = tf.clip_by_value(pos - q - 2, 0, max_block - 1)  # [B, 1, L]
  block_index = tf.broadcast_to(block_index, tf.stack([batch, beam, seq_len]))
  block_tokens = tf.gather(block_ids, block_index, batch_dims=2)  # [B, K, L]

  block_end = q + 2 + c  # position of the closing [SEP]
  zeros = tf.zeros_like(block_tokens)
  token_ids = tf.where(
      pos == 0, cls_id,
      tf.where(
          pos <= q, question_tokens + zeros,
          tf.where(pos == q + 1, sep_id,
                   tf.where(pos < block_end, block_tokens, tf.where(pos == block_end, sep_id, 0)))))
  mask = tf.cast(pos <= block_end, tf.int32)
  segment_ids = tf.cast(pos >= q + 2, tf.int32) * mask
  block_mask = tf.cast(tf.logical_and(pos >= q + 2, pos < block_end), tf.int32)
  block_start = tf.broadcast_to((q + 2)[:, :, 0], tf.stack([batch, beam]))
  return ReaderInputs(token_ids, mask, segment_ids, block_mask, block_start, c[:, :, 0])


def find_occurrences(haystack, region_start, region_end, needles, needle_len) -> tf.Tensor:
  """Where each needle's id sequence starts inside a region of each haystack row.

  Args:
    haystack: int [B, K, T] ids.
    region_start, region_end: int [B, K], the region [start, end) a match must lie in.
    needles: int [B, A, M] ids of A needles per question (answers), padded.
    needle_len: int [B, A] real length of each needle (0: padding, never matches).

  Returns:
    bool [B, K, A, T]: needle a of question b occurs in row (b, k) starting at position t.
  The comparison runs one needle position at a time over the whole haystack (M static steps), so the
  largest intermediate is [B, K, A, T] booleans, which XLA fuses into one pass.
  """
  haystack = tf.cast(haystack, tf.int32)
  needles = tf.cast(needles, tf.int32)
  needle_len = tf.cast(needle_len, tf.int32)
  length = haystack.shape[-1]
  max_needle = needles.shape[-1]
  pos = tf.range(length, dtype=tf.int32)[tf.newaxis, tf.newaxis, tf.newaxis, :]  # [1, 1, 1, T]
  lengths = needle_len[:, tf.newaxis, :, tf.newaxis]  # [B, 1, A, 1]
  start = tf.cast(region_start, tf.int32)[:, :, tf.newaxis, tf.newaxis]  # [B, K, 1, 1]
  end = tf.cast(region_end, tf.int32)[:, :, tf.newaxis, tf.newaxis]
  match = tf.logical_and(lengths > 0, tf.logical_and(pos >= start, pos + lengths <= end))
  for j in range(max_needle):
    if j < length:
      shifted = tf.pad(haystack[:, :, j:], [[0, 0], [0, 0], [0, j]], constant_values=-1)
    else:
      shifted = tf.fill(tf.shape(haystack), -1)
    equal = tf.equal(shifted[:, :, tf.newaxis, :], needles[:, tf.newaxis, :, j, tf.newaxis])
    match = tf.logical_and(match, tf.logical_or(equal, j >= lengths))
  return match


def contains_answer(block_ids, block_len, answer_ids, answer_len) -> tf.Tensor:
  """bool [B, K]: some answer's wordpiece sequence occurs in the block's first block_len wordpieces.

  The in-graph stand-in for the original's raw substring test (see the module docstring).

  Args:
    block_ids: int [B, K, C]; block_len: int [B, K].
    answer_ids: int [B, A, M]; answer_len: int [B, A].
  """
  matches = find_occurrences(block_ids, tf.zeros_like(block_len), block_len, answer_ids, answer_len)
  return tf.reduce_any(matches, axis=[2, 3])


def gold_spans(matches, answer_len, max_answers: int) -> Tuple[tf.Tensor, tf.Tensor]:
  """The first max_answers occurrences (by answer, then position) as (starts, ends) int32 [B, K, max_answers].

  Args:
    matches: bool [B, K, A, T] from find_occurrences over the reader sequence.
    answer_len: int [B, A].
    max_answers: occurrences kept per block; the rest of each row is -1.
  """
  shape = tf.shape(matches)
  batch, beam = shape[0], shape[1]
  num_answers, length = matches.shape[2], matches.shape[3]
  n = num_answers * length
  flat = tf.reshape(matches, tf.stack([batch, beam, n]))
  # Earlier (answer, position) pairs get larger keys; float32 holds these integers exactly.
  key = tf.where(flat, tf.cast(n - tf.range(n), tf.float32), 0.0)
  k = min(max_answers, n)
  values, index = tf.math.top_k(key, k=k, sorted=True)
  valid = values > 0
  answer = index // length
  start = index % length
  lengths = tf.gather(tf.cast(answer_len, tf.int32), answer, batch_dims=1)  # [B, K, k]
  starts = tf.where(valid, start, -1)
  ends = tf.where(valid, start + lengths - 1, -1)
  if k < max_answers:
    padding = [[0, 0], [0, 0], [0, max_answers - k]]
    starts = tf.pad(starts, padding, constant_values=-1)
    ends = tf.pad(ends, padding, constant_values=-1)
  return starts, ends


def reader_gold_spans(inputs: ReaderInputs, answer_ids, answer_len,
                      max_answers: int) -> Tuple[tf.Tensor, tf.Tensor]:
  """Gold (starts, ends) int32 [B, K, max_answers] of packed reader inputs: answer occurrences in the
  block region."""
  matches = find_occurrences(inputs.token_ids, inputs.block_start, inputs.block_start + inputs.block_length,
                             answer_ids, answer_len)
  return gold_spans(matches, answer_len, max_answers)


# ---------------------------------------------------------------------------------------------------------
# Text form.


def _as_ragged_strings(values) -> tf.RaggedTensor:
  if isinstance(values, tf.RaggedTensor):
    return values
  if isinstance(values, (list, tuple)):
    return tf.ragged.constant(values, dtype=tf.string, ragged_rank=1) if values else \
        tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.string), tf.zeros([0], tf.int64))
  return tf.RaggedTensor.from_tensor(tf.convert_to_tensor(values, tf.string))


def _group_answers(pieces: tf.RaggedTensor, answers: tf.RaggedTensor, max_num_answers: int,
                   max_answer_len: int) -> Tuple[tf.Tensor, tf.Tensor]:
  """Wordpieces of the flat answers [total, (pieces)] -> dense [B, A, M] ids and [B, A] lengths."""
  batch = answers.nrows()
  pieces = pieces[:, :max_answer_len]
  lengths = tf.cast(pieces.row_lengths(), tf.int32)
  grouped = tf.RaggedTensor.from_row_splits(pieces, answers.row_splits)  # [B, (A), (pieces)]
  answer_ids = tf.cast(
      grouped.to_tensor(default_value=0, shape=tf.stack([batch, max_num_answers, max_answer_len])), tf.int32)
  answer_len = tf.RaggedTensor.from_row_splits(lengths, answers.row_splits).to_tensor(
      default_value=0, shape=tf.stack([batch, max_num_answers]))
  return answer_ids, answer_len


def tokenize_answers(tokenizer: tokenization.Tokenizer, answers, max_num_answers: int,
                     max_answer_len: int) -> Tuple[tf.Tensor, tf.Tensor]:
  """Answer strings -> (answer_ids int32 [B, A, M], answer_len int32 [B, A]).

  Args:
    answers: tf.string RaggedTensor [B, (answers)] (or a list of lists).
    max_num_answers: A; further answers are dropped.
    max_answer_len: M; longer answers keep their first M wordpieces.
  """
  answers = _as_ragged_strings(answers)[:, :max_num_answers]
  return _group_answers(tokenizer.tokenize(answers.flat_values), answers, max_num_answers, max_answer_len)


def question_ids(tokenizer: tokenization.Tokenizer, questions,
                 max_question_len: int) -> Tuple[tf.Tensor, tf.Tensor]:
  """Questions -> (ids int32 [B, max_question_len], length int32 [B]) for pack_reader_inputs."""
  pieces = tokenizer.tokenize(tf.convert_to_tensor(questions, tf.string))[:, :max_question_len]
  batch = pieces.nrows()
  ids = tf.cast(pieces.to_tensor(default_value=0, shape=tf.stack([batch, max_question_len])), tf.int32)
  return ids, tf.cast(pieces.row_lengths(), tf.int32)


def escape_re2(texts: tf.Tensor) -> tf.Tensor:
  """Makes strings literal RE2 patterns by escaping the metacharacters."""
  return tf.strings.regex_replace(texts, _RE2_META, r"\\\1")


def has_answer_strings(block_texts, answers) -> tf.Tensor:
  """bool [B, K]: the original's retriever_correct, a raw case-sensitive substring test.

  Args:
    block_texts: tf.string [B, K].
    answers: tf.string RaggedTensor [B, (A)]; empty answers never match (they are in every text).
  """
  block_texts = tf.convert_to_tensor(block_texts, tf.string)
  answers = _as_ragged_strings(answers)
  flat_answers = answers.flat_values
  rows = answers.value_rowids()
  patterns = tf.strings.join(["(?s).*", escape_re2(flat_answers), ".*"])
  texts = tf.gather(block_texts, rows)  # [total_answers, K]

  def match(args):
    text_row, pattern = args
    return tf.strings.regex_full_match(text_row, pattern)

  found = tf.map_fn(match, (texts, patterns), fn_output_signature=tf.TensorSpec([None], tf.bool))
  found = tf.logical_and(found, (tf.strings.length(flat_answers) > 0)[:, tf.newaxis])
  beam = tf.shape(block_texts)[1]
  found = tf.reshape(found, tf.stack([-1, beam]))
  return tf.math.unsorted_segment_max(tf.cast(found, tf.int32), rows, answers.nrows()) > 0


class TextReaderFeatures(NamedTuple):
  """reader_inputs_from_texts' result.

  Attributes:
    inputs: ReaderInputs [B, K, L].
    byte_starts, byte_limits: int32 [B, K, L], the byte span [start, limit) in the block text of the
      wordpiece at each reader position; -1 outside the block. A predicted span (s, e) is the answer
      text block_text[byte_starts[s]:byte_limits[e]], a slice of the original (accents, case and
      spacing kept).
    gold_starts, gold_ends: int32 [B, K, max_answers] or None without answers.
    retriever_correct: bool [B, K], the raw substring test, or None without answers.
  """
  inputs: ReaderInputs
  byte_starts: tf.Tensor
  byte_limits: tf.Tensor
  gold_starts: Optional[tf.Tensor]
  gold_ends: Optional[tf.Tensor]
  retriever_correct: Optional[tf.Tensor]


def reader_inputs_from_texts(tokenizer: tokenization.Tokenizer,
                             questions,
                             block_texts,
                             seq_len: int,
                             answers=None,
                             max_answers: int = 10,
                             max_num_answers: int = 10,
                             max_answer_len: int = 16) -> TextReaderFeatures:
  """Reader features of B questions x K block texts.

  Args:
    tokenizer: the vocab's in-graph tokenizer.
    questions: tf.string [B].
    block_texts: tf.string [B, K] (block bodies: the reader does not read titles).
    seq_len: L.
    answers: optional tf.string RaggedTensor [B, (A)] for gold spans and retriever_correct.
    max_answers, max_num_answers, max_answer_len: see the module docstring.
  """
  block_texts = tf.convert_to_tensor(block_texts, tf.string)
  max_len = seq_len - 3
  q_ids, q_len = question_ids(tokenizer, questions, max_len)
  batch, beam = tf.shape(block_texts)[0], tf.shape(block_texts)[1]
  ids, starts, limits = tokenizer.tokenize_with_offsets(tf.reshape(block_texts, [-1]))
  dense_shape = tf.stack([batch * beam, max_len])

  def dense(ragged, default):
    return tf.reshape(
        tf.cast(ragged[:, :max_len].to_tensor(default_value=default, shape=dense_shape), tf.int32),
        tf.stack([batch, beam, max_len]))

  block_ids, piece_starts, piece_limits = dense(ids, 0), dense(starts, -1), dense(limits, -1)
  block_len = tf.reshape(tf.cast(tf.minimum(ids.row_lengths(), max_len), tf.int32), tf.stack([batch, beam]))
  inputs = pack_reader_inputs(q_ids, q_len, block_ids, block_len, seq_len, tokenizer.cls_id, tokenizer.sep_id)
  piece = tf.clip_by_value(
      tf.range(seq_len)[tf.newaxis, tf.newaxis, :] - inputs.block_start[:, :, tf.newaxis], 0, max_len - 1)
  in_block = inputs.block_mask > 0
  byte_starts = tf.where(in_block, tf.gather(piece_starts, piece, batch_dims=2), -1)
  byte_limits = tf.where(in_block, tf.gather(piece_limits, piece, batch_dims=2), -1)
  gold_starts = gold_ends = retriever_correct = None
  if answers is not None:
    answers = _as_ragged_strings(answers)
    answer_ids, answer_len = tokenize_answers(tokenizer, answers, max_num_answers, max_answer_len)
    gold_starts, gold_ends = reader_gold_spans(inputs, answer_ids, answer_len, max_answers)
    retriever_correct = has_answer_strings(block_texts, answers)
  return TextReaderFeatures(inputs, byte_starts, byte_limits, gold_starts, gold_ends, retriever_correct)


def answer_byte_spans(tokenizer: tokenization.Tokenizer, block_texts, first_piece,
                      last_piece) -> Tuple[tf.Tensor, tf.Tensor]:
  """Byte spans [begin, end) in each block's original text of predicted wordpiece indices.

  Args:
    block_texts: tf.string [B], the predicted block of each question.
    first_piece, last_piece: int [B], wordpiece indices (0-based, within the block's wordpieces,
      i.e. reader position - block_start); a negative or out-of-range index gives no span.

  Returns:
    (begin, end), int64 [B] each: the start byte of first_piece and the limit byte of last_piece;
    -1 and -1 where there is no span.
  """
  block_texts = tf.convert_to_tensor(block_texts, tf.string)
  _, starts, limits = tokenizer.tokenize_with_offsets(block_texts)
  counts = starts.row_lengths()
  first = tf.cast(first_piece, tf.int64)
  last = tf.cast(last_piece, tf.int64)
  valid = tf.logical_and(tf.logical_and(first >= 0, last >= first), last < counts)
  first_index = starts.row_starts() + tf.where(valid, first, 0)
  last_index = starts.row_starts() + tf.where(valid, last, 0)
  flat_starts = tf.concat([starts.flat_values, [0]], 0)  # one spare entry: never an empty gather
  flat_limits = tf.concat([limits.flat_values, [0]], 0)
  begin = tf.gather(flat_starts, tf.where(valid, first_index, tf.size(starts.flat_values, tf.int64)))
  end = tf.gather(flat_limits, tf.where(valid, last_index, tf.size(limits.flat_values, tf.int64)))
  none = tf.constant(-1, tf.int64)
  return tf.where(valid, begin, none), tf.where(valid, end, none)


def slice_answers(block_texts, begin, end) -> tf.Tensor:
  """text[begin:end] (bytes) per block; "" where begin is -1 (answer_byte_spans' "no span")."""
  valid = begin >= 0
  text = tf.strings.substr(tf.convert_to_tensor(block_texts, tf.string),
                           tf.where(valid, begin, 0),
                           tf.where(valid, end - begin, 0),
                           unit="BYTE")
  return tf.where(valid, text, "")


def extract_answers(tokenizer: tokenization.Tokenizer, block_texts, first_piece, last_piece) -> tf.Tensor:
  """Answer strings from predicted wordpiece indices into each block, sliced from the original text.

  Args: as answer_byte_spans.

  Returns:
    tf.string [B]: text[start byte of first_piece : limit byte of last_piece] ("" for no span).
  """
  begin, end = answer_byte_spans(tokenizer, block_texts, first_piece, last_piece)
  return slice_answers(block_texts, begin, end)


# ---------------------------------------------------------------------------------------------------------
# Host side: QA examples as training features.

# Feature names of an ORQA batch (realm_tf.modeling.orqa.OrqaModel.compute_loss).
QUERY_FIELDS = ("query_token_ids", "query_mask", "query_segment_ids")  # int32 [B, Q]
QUESTION_IDS = "question_ids"  # int32 [B, L - 3]
QUESTION_LEN = "question_len"  # int32 [B]
ANSWER_IDS = "answer_ids"  # int32 [B, A, M]
ANSWER_LEN = "answer_len"  # int32 [B, A]
# Another retriever's corpus rows (BM25's, a hybrid's; realm_tf.retrieval.hybrid), best first, int32
# [B, R]: the model reads and scores these instead of searching its dense index.
CANDIDATE_ROWS = "candidate_rows"


def _question_features(featurizer, pieces: tf.RaggedTensor, reader_seq_len: int) -> Dict[str, tf.Tensor]:
  query = featurizer.query_inputs(pieces)
  max_question_len = reader_seq_len - 3
  kept = pieces[:, :max_question_len]
  features = dict(zip(QUERY_FIELDS, query))
  features[QUESTION_IDS] = tf.cast(
      kept.to_tensor(default_value=0, shape=tf.stack([kept.nrows(), max_question_len])), tf.int32)
  features[QUESTION_LEN] = tf.cast(kept.row_lengths(), tf.int32)
  return features


def question_features(tokenizer: tokenization.Tokenizer, featurizer, questions,
                      reader_seq_len: int) -> Dict[str, tf.Tensor]:
  """Retriever query inputs ([CLS] q [SEP], featurizer.query_seq_len) and the reader's question ids
  (QUESTION_IDS [B, reader_seq_len - 3], QUESTION_LEN [B])."""
  pieces = tokenizer.tokenize(tf.convert_to_tensor(questions, tf.string))
  return _question_features(featurizer, pieces, reader_seq_len)


def qa_features(tokenizer: tokenization.Tokenizer,
                featurizer,
                questions,
                answers,
                reader_seq_len: int,
                max_num_answers: int = 10,
                max_answer_len: int = 16) -> Dict[str, tf.Tensor]:
  """question_features plus ANSWER_IDS [B, A, M] and ANSWER_LEN [B, A], from ONE tokenizer call.

  One call, because tracing the tokenizer into a graph (tf.data, SavedModels) costs seconds each time.
  """
  questions = tf.convert_to_tensor(questions, tf.string)
  answers = _as_ragged_strings(answers)[:, :max_num_answers]
  num_questions = tf.shape(questions, out_type=tf.int64)[0]
  pieces = tokenizer.tokenize(tf.concat([questions, answers.flat_values], 0))
  features = _question_features(featurizer, pieces[:num_questions], reader_seq_len)
  features[ANSWER_IDS], features[ANSWER_LEN] = _group_answers(pieces[num_questions:], answers,
                                                              max_num_answers, max_answer_len)
  return features


def qa_dataset(questions: Sequence[str],
               answers: Sequence[Sequence[str]],
               tokenizer,
               featurizer,
               reader_seq_len: int,
               batch_size: int,
               max_num_answers: int = 10,
               max_answer_len: int = 16,
               seed: int = 0,
               repeat: bool = True,
               shuffle: bool = True,
               skip_batches: int = 0,
               candidate_rows: Optional[np.ndarray] = None) -> tf.data.Dataset:
  """Batches of ORQA training features (qa_features) from QA examples (answers as literal strings).

  Shuffled per epoch with a fixed seed and endless when repeat (training); with repeat=False, one pass
  in order, the last batch padded by repeating the first example so shapes stay static (callers trim).
  skip_batches resumes the stream where a checkpoint left it. candidate_rows: int [Q, R], each
  question's rows from another retriever, carried along as CANDIDATE_ROWS (shuffled with its question).
  """
  if not questions:
    raise ValueError("no QA examples to featurize")
  columns = {
      "question": tf.constant(list(questions), tf.string),
      "answers": tf.ragged.constant([list(a) for a in answers], dtype=tf.string, ragged_rank=1)
  }
  if candidate_rows is not None:
    candidate_rows = np.asarray(candidate_rows, np.int32)
    if candidate_rows.ndim != 2 or candidate_rows.shape[0] != len(questions):
      raise ValueError(f"candidate rows of shape {candidate_rows.shape} for {len(questions)} questions; "
                       "expected one row of corpus rows per question")
    columns[CANDIDATE_ROWS] = candidate_rows
  data = tf.data.Dataset.from_tensor_slices(columns)
  if repeat:
    if shuffle:
      data = data.shuffle(len(questions), seed=seed, reshuffle_each_iteration=True)
    data = data.repeat()
  else:
    padding = (-len(questions)) % batch_size
    data = data.concatenate(data.take(1).repeat(padding))

  # No autograph: nothing here branches on tensors, and converting the tokenizer costs seconds.
  @tf.autograph.experimental.do_not_convert
  def featurize(batch):
    features = qa_features(tokenizer, featurizer, batch["question"], batch["answers"], reader_seq_len,
                           max_num_answers, max_answer_len)
    if CANDIDATE_ROWS in batch:
      features[CANDIDATE_ROWS] = batch[CANDIDATE_ROWS]
    return features

  data = data.ragged_batch(batch_size, drop_remainder=True).map(featurize)
  if skip_batches:
    data = data.skip(skip_batches)
  return data.prefetch(2)
