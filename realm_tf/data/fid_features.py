"""The FiD reader's inputs: (question, passage) pairs formatted, tokenized, truncated and padded.

FiD (Izacard & Grave 2021, facebookresearch/FiD src/data.py) formats each (question, passage) pair as
"question: Q title: T context: P"; the reader (realm_tf.modeling.fid_reader) encodes every pair on its own.
The decoder is teacher-forced: its input is [CLS] a_1 ... a_{T-1}, its target a_1 ... [SEP]. Tokenization
is realm_tf.tokenization (WordPiece). On a vocab without the words "question", "title", "context"
(testdata/vocab.txt) the markers are [UNK] pieces, which still separate the fields positionally.

Featurization runs in two steps so that answer substitution (realm_tf.data.answer_substitution) can edit
the untruncated wordpiece lists in between: tokenize_examples, then pad_examples.
"""

from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np


def format_passage(question: str, title: str, body: str) -> str:
  """FiD's reader input text (src/data.py)."""
  return f"question: {question} title: {title} context: {body}"


class ReaderFeatures(NamedTuple):
  """Padded reader inputs (numpy int32).

  passage_ids, passage_mask: [B, n, L] formatted pairs, 1 on real tokens.
  decoder_input_ids: [B, T] [CLS] a_1 ... a_{T-1} (teacher forcing).
  target_ids, target_mask: [B, T] a_1 ... [SEP], 1 on real target tokens.
  """
  passage_ids: np.ndarray
  passage_mask: np.ndarray
  decoder_input_ids: np.ndarray
  target_ids: np.ndarray
  target_mask: np.ndarray


def _pad(rows: Sequence[Sequence[int]], length: int) -> Tuple[np.ndarray, np.ndarray]:
  ids = np.zeros([len(rows), length], np.int32)
  mask = np.zeros([len(rows), length], np.int32)
  for i, row in enumerate(rows):
    row = list(row)[:length]
    ids[i, :len(row)] = row
    mask[i, :len(row)] = 1
  return ids, mask


class TokenizedExamples(NamedTuple):
  """Reader examples as wordpiece id lists, before truncation and padding (what answer substitution edits).

  pairs: B lists of n id lists, the formatted (question, passage) pairs, untruncated.
  answers: B id lists, the target answers without [SEP] (empty lists for prediction).
  answer_texts: B strings, the answers as written ("" for prediction).
  """
  pairs: List[List[List[int]]]
  answers: List[List[int]]
  answer_texts: List[str]


def tokenize_examples(tokenizer,
                      questions: Sequence[str],
                      passages: Sequence[Sequence[Tuple[str, str]]],
                      answers: Optional[Sequence[str]] = None) -> TokenizedExamples:
  """Formats and tokenizes B questions with their n passages each (and their answers, if given)."""
  num_passages = {len(p) for p in passages}
  if len(num_passages) > 1:
    raise ValueError(f"fid_features.tokenize_examples: every question needs the same number of passages, got "
                     f"{sorted(num_passages)}")
  n = num_passages.pop() if num_passages else 0
  texts = [format_passage(q, t, b) for q, ps in zip(questions, passages) for t, b in ps]
  tokenized = [t.ids for t in tokenizer.tokenize_texts(texts)]
  pairs = [tokenized[i * n:(i + 1) * n] for i in range(len(questions))]
  answer_ids = ([t.ids for t in tokenizer.tokenize_texts(list(answers))]
                if answers is not None else [[] for _ in questions])
  return TokenizedExamples(pairs, answer_ids, list(answers) if answers is not None else [""] * len(pairs))


def pad_examples(tokenizer,
                 examples: TokenizedExamples,
                 passage_seq_len: int,
                 answer_seq_len: int,
                 with_answers: bool = True) -> ReaderFeatures:
  """Truncates the pairs at L = passage_seq_len wordpieces (FiD truncates at text_maxlength), the
  answers at T - 1 (T = answer_seq_len), and pads; with_answers=False gives empty targets (prediction).

  Args:
    tokenizer: realm_tf.tokenization.Tokenizer (pad id 0, [CLS] start, [SEP] end).
    examples: from tokenize_examples (B questions, n pairs each), possibly answer-substituted.
    passage_seq_len, answer_seq_len: L and T, the reader's (FidConfig fields).
    with_answers: False gives all-zero target masks (prediction).
  """
  n = len(examples.pairs[0]) if examples.pairs else 0
  passage_ids, passage_mask = _pad([ids for pairs in examples.pairs for ids in pairs], passage_seq_len)
  shape = [len(examples.pairs), n, passage_seq_len]
  steps = answer_seq_len
  answer_ids = [list(a)[:steps - 1] for a in examples.answers]
  decoder_input_ids, _ = _pad([[tokenizer.cls_id] + a for a in answer_ids], steps)
  target_ids, target_mask = _pad([a + [tokenizer.sep_id] for a in answer_ids], steps)
  if not with_answers:
    target_mask[:] = 0
  return ReaderFeatures(passage_ids.reshape(shape), passage_mask.reshape(shape), decoder_input_ids,
                        target_ids, target_mask)


def detokenize(tokenizer, ids: Sequence[int]) -> str:
  """Wordpiece ids up to the first [SEP] (exclusive) -> text ("##" pieces joined to their word)."""
  pieces = []
  for i in ids:
    i = int(i)
    if i == tokenizer.sep_id:
      break
    if i in (tokenizer.pad_id, tokenizer.cls_id):
      continue
    pieces.append(tokenizer.vocab[i])
  return " ".join(pieces).replace(" ##", "").replace("##", "")
