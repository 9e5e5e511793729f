"""Answer substitution for generative-reader training: every answer in the passages and the target relabeled.

A reader trained from scratch lowers its loss by memorizing question -> answer instead of reading; in a
substituted example the answers found in its passages are replaced, consistently, by other answers of the
same coarse shape, so the target can only be produced by copying it from the passage that holds it (see
AnswerSubstitution). Works on realm_tf.data.fid_features.TokenizedExamples (wordpiece id lists, before
truncation), whole-word matches only.
"""

from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np

from realm_tf.data import fid_features


def answer_shape(answer: str) -> Tuple[str, ...]:
  """A coarse, dataset-independent answer type: per word "d" (has a digit), "X" (capitalized) or "x".

  "19 October 1793" -> ("d", "X", "d"), "Lunithpry Guild" -> ("X", "X"), "Briarmer hymn" -> ("X", "x").
  """
  return tuple(
      "d" if any(c.isdigit() for c in w) else "X" if w[:1].isupper() else "x" for w in answer.split())


def continuation_ids(tokenizer) -> FrozenSet[int]:
  """Ids of the "##" wordpieces: a match that ends before one of them is only part of a word."""
  return frozenset(i for i, token in enumerate(tokenizer.vocab) if token.startswith("##"))


Pattern = Tuple[int, ...]


def _by_first_piece(patterns) -> Dict[int, List[Pattern]]:
  """Patterns indexed by their first wordpiece, longest first (for leftmost-longest matching)."""
  index: Dict[int, List[Pattern]] = {}
  for pattern in sorted({tuple(p) for p in patterns if p}, key=lambda p: (-len(p), p)):
    index.setdefault(pattern[0], []).append(pattern)
  return index


def find_spans(ids: Sequence[int], patterns: Dict[int, List[Pattern]],
               continuation: FrozenSet[int]) -> List[Tuple[int, Pattern]]:
  """Leftmost-longest, non-overlapping whole-word occurrences [(start, pattern)] of the patterns
  (_by_first_piece) in ids. A pattern's first piece starts a word (no "##" piece does), so only its end
  needs a word-boundary check."""
  spans, i = [], 0
  while i < len(ids):
    match = next((p for p in patterns.get(ids[i], ()) if tuple(ids[i:i + len(p)]) == p and
                  (i + len(p) == len(ids) or ids[i + len(p)] not in continuation)), None)
    if match is None:
      i += 1
    else:
      spans.append((i, match))
      i += len(match)
  return spans


def replace_spans(ids: Sequence[int], spans: Sequence[Tuple[int, Pattern]],
                  mapping: Dict[Pattern, Sequence[int]]) -> List[int]:
  """ids with every span's pattern replaced by mapping[pattern] (patterns not in mapping stay)."""
  out, last = [], 0
  for start, pattern in spans:
    out.extend(ids[last:start])
    out.extend(mapping.get(pattern, pattern))
    last = start + len(pattern)
  out.extend(ids[last:])
  return out


def answer_passages(examples: fid_features.TokenizedExamples,
                    continuation: FrozenSet[int],
                    max_len: Optional[int] = None) -> List[int]:
  """Per example, the index of its first (highest-ranked) pair holding its answer as whole words within
  its first max_len wordpieces (None: anywhere); -1 if none does (or the answer is empty).

  Why max_len: the reader reads each pair truncated at its passage_seq_len; an answer past that point is
  not in the passage it reads (SQuAD, MiniLM wordpieces, L = 160: 10% of the gold passages).
  """
  found = []
  for pairs, answer in zip(examples.pairs, examples.answers):
    patterns = _by_first_piece([answer])
    found.append(
        next((i for i, ids in enumerate(pairs) if any(
            start + len(p) <= (max_len or len(ids)) for start, p in find_spans(ids, patterns, continuation))),
             -1))
  return found


def single_passage_examples(examples: fid_features.TokenizedExamples,
                            continuation: FrozenSet[int],
                            max_len: Optional[int] = None) -> fid_features.TokenizedExamples:
  """The examples whose answer is in one of their pairs (within max_len), each with that pair alone
  (answer_passages)."""
  keep = [(i, p) for i, p in enumerate(answer_passages(examples, continuation, max_len)) if p >= 0]
  return fid_features.TokenizedExamples([[examples.pairs[i][p]] for i, p in keep],
                                        [examples.answers[i] for i, _ in keep],
                                        [examples.answer_texts[i] for i, _ in keep])


class AnswerSubstitution:
  """Answer substitution for reader training: answers in the passages and the target are relabeled.

  The pool is the examples' own answers. In a substituted example, EVERY whole-word occurrence of ANY
  pool answer in its n (question, passage) pairs is replaced, one mapping per example, by another pool
  answer of the same answer_shape (distinct originals get distinct replacements), and the target becomes
  its own answer's replacement.

  Why: a reader trained from scratch lowers its loss by memorizing question -> answer instead of reading,
  and then its cross-attention says nothing about the passages (FiD-KD's teacher signal); a substituted
  answer can only be produced by copying it from the passage that holds it. Why every answer, not only
  the example's own: with only the gold one replaced, the reader learned to spot the passage whose
  answer-like span differs from what it had memorized of the corpus (testdata: 96% training token
  accuracy, 2% dev exact match); relabeling all of them leaves matching the question to the passage as
  the only way to the answer. The same shape keeps the answer type (a date stays a date), which the
  reader needs to find the answer's place. A fresh draw every epoch keeps the pairs from being memorized.

  Left as they are: examples whose answer occurs in none of their passages (a substituted target would
  be in no passage: noise to the reader, not reading), answers holding [UNK] (their pieces cannot be
  located reliably) and answers whose shape no other answer has.

  Args:
    examples: from fid_features.tokenize_examples, with answers.
    continuation: continuation_ids(tokenizer).
    unk_id: the tokenizer's [UNK] id.
  """

  def __init__(self, examples: fid_features.TokenizedExamples, continuation: FrozenSet[int], unk_id: int):
    self.examples = examples
    shapes: Dict[Pattern, Tuple[str, ...]] = {}
    for ids, text in zip(examples.answers, examples.answer_texts):
      if ids and unk_id not in ids:
        shapes.setdefault(tuple(ids), answer_shape(text))
    self._shape = shapes
    self._texts = {}
    for ids, text in zip(examples.answers, examples.answer_texts):
      self._texts.setdefault(tuple(ids), text)
    self._by_shape: Dict[Tuple[str, ...], List[Pattern]] = {}
    for pattern, shape in sorted(shapes.items()):
      self._by_shape.setdefault(shape, []).append(pattern)
    patterns = _by_first_piece(shapes)
    # Where the pool answers are does not change between draws: found once.
    self._spans = [[find_spans(ids, patterns, continuation) for ids in pairs] for pairs in examples.pairs]

  def substitute(self, rate: float, rng: np.random.Generator) -> Tuple[fid_features.TokenizedExamples, int]:
    """(the examples with a `rate` fraction substituted, the number substituted); deterministic for rng."""
    if not 0.0 <= rate <= 1.0:
      raise ValueError(f"answer substitution rate must be in [0, 1], got {rate}")
    pairs, answers = list(self.examples.pairs), list(self.examples.answers)
    texts = list(self.examples.answer_texts)
    substituted = 0
    chosen = rng.random(len(answers)) < rate  # one draw per example, so a rate's choices nest
    for i in np.flatnonzero(chosen):
      gold = tuple(answers[i])
      present = list(dict.fromkeys(p for spans in self._spans[i] for _, p in spans))  # first-seen order
      if gold not in present:
        continue
      mapping = self._draw_mapping(present, rng)
      if gold not in mapping:
        continue
      pairs[i] = [replace_spans(ids, spans, mapping) for ids, spans in zip(pairs[i], self._spans[i])]
      answers[i], texts[i] = list(mapping[gold]), self._texts[mapping[gold]]
      substituted += 1
    return fid_features.TokenizedExamples(pairs, answers, texts), substituted

  def _draw_mapping(self, present: Sequence[Pattern], rng: np.random.Generator) -> Dict[Pattern, Pattern]:
    """Each present answer -> an answer of its shape drawn uniformly among those not present and not yet
    drawn (an answer with none left keeps itself, i.e. stays out of the mapping)."""
    mapping: Dict[Pattern, Pattern] = {}
    used = set(present)
    for pattern in present:
      group = self._by_shape[self._shape[pattern]]
      # Rejection sampling is uniform over the free answers and cheap while most are free; the list of
      # free ones is built only when a few draws all hit used ones.
      draws = (group[int(rng.integers(len(group)))] for _ in range(8))
      candidate = next((c for c in draws if c not in used), None)
      if candidate is None:
        free = [c for c in group if c not in used]
        if not free:
          continue
        candidate = free[int(rng.integers(len(free)))]
      mapping[pattern] = candidate
      used.add(candidate)
    return mapping
