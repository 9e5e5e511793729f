"""Open-QA metrics as the original ORQA release computes them, so numbers compare with the papers.

- normalize_answer / exact_match: ORQA's eval_utils (SQuAD's normalisation plus a Unicode NFD step);
  wordpiece_exact_match: the same on a generative (FiD) reader's answer ids.
- regex_match: CuratedTREC's patterns, matched with re.match (anchored at the start of the prediction).
- f1_score: SQuAD's token F1, for SQuAD-style analysis (ORQA reports exact match only).
- has_answer / recall_at_k: "the answer string occurs in the retrieved passage", ORQA's retriever_correct
  and top_k_match. ORQA tests the raw, case-sensitive answer against the raw passage (a C++
  std::string::find); DPR-style papers lower-case and normalise first, which finds more. Both are here;
  raw is the default so that recall is the one ORQA trains on and reports.
- evaluate_predictions: ORQA's orqa_eval "accuracy" (exact match, or regex match for CuratedTREC) over a
  data set, with F1 and counts beside it.

All rates are percentages (0..100).
"""

import collections
import re
import string
import unicodedata
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np

from realm_tf import io_utils
from realm_tf.data import fid_features
from realm_tf.data import qa
from realm_tf.data import text_records

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# The original's regex_match_score flags, also used to search passages for a pattern.
REGEX_FLAGS = qa.REGEX_FLAGS

HAS_ANSWER_MODES = ("raw", "normalized")


def normalize_answer(text: str) -> str:
  """ORQA's normalisation: NFD, lower case, drop ASCII punctuation, articles -> space, collapse spaces.

  NFD splits accented letters into a base letter and a combining mark, and the mark is kept (it is not
  in string.punctuation): "Café" becomes "cafe\\u0301", which does not equal "cafe".
  """
  text = unicodedata.normalize("NFD", text).lower()
  text = "".join(ch for ch in text if ch not in _PUNCTUATION)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def exact_match(prediction: str, answers: Iterable[str]) -> bool:
  """Whether the normalised prediction equals some normalised answer (ORQA's is_correct)."""
  normalized = normalize_answer(prediction)
  return any(normalized == normalize_answer(answer) for answer in answers)


def wordpiece_exact_match(tokenizer, predictions: Sequence[Sequence[int]],
                          answers: Sequence[Sequence[str]]) -> List[bool]:
  """exact_match of generated wordpiece ids (a generative reader's answers, up to [SEP]) against the
  answers; an answer also counts as written back from its own wordpieces (the tokenizer lower-cases and
  strips accents, so "Kelarlé" decodes as "kelarle").

  Args:
    tokenizer: the realm_tf.tokenization.Tokenizer that made the ids.
    predictions: B id sequences (fid_features.detokenize reads them).
    answers: B lists of answer strings.
  """
  results = []
  for ids, golds in zip(predictions, answers):
    prediction = fid_features.detokenize(tokenizer, ids)
    round_trip = [fid_features.detokenize(tokenizer, t.ids) for t in tokenizer.tokenize_texts(list(golds))]
    results.append(exact_match(prediction, list(golds) + round_trip))
  return results


def _compiled(pattern: str) -> Optional["re.Pattern"]:
  try:
    return re.compile(pattern, REGEX_FLAGS)
  except re.error:
    return None


def regex_match(prediction: str, patterns: Iterable[str]) -> bool:
  """Whether some pattern matches at the start of prediction (re.match, as the original).

  Matching is not anchored at the end: "Sept" matches the prediction "September 1990". A pattern that
  does not compile counts as no match, as in the original.
  """
  for pattern in patterns:
    regex = _compiled(pattern)
    if regex is not None and regex.match(prediction) is not None:
      return True
  return False


def _token_f1(prediction_tokens: List[str], answer_tokens: List[str]) -> float:
  common = collections.Counter(prediction_tokens) & collections.Counter(answer_tokens)
  num_same = sum(common.values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(prediction_tokens)
  recall = num_same / len(answer_tokens)
  return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, answers: Iterable[str]) -> float:
  """SQuAD's token F1 (0..1) of the normalised prediction, maximised over the answers."""
  prediction_tokens = normalize_answer(prediction).split()
  return max((_token_f1(prediction_tokens,
                        normalize_answer(answer).split()) for answer in answers),
             default=0.0)


def normalize_for_search(text: str) -> str:
  """Lower-cased, runs of whitespace collapsed: has_answer's "normalized" form of passages and answers."""
  return " ".join(text.lower().split())


def has_answer(text: str, answers: Iterable[str], is_regex: bool = False, mode: str = "raw") -> bool:
  """Whether a retrieved passage contains some answer: retriever correctness for recall@k.

  Args:
    text: the passage (title and body as the retriever indexed them, or the body alone).
    answers: answer strings, or patterns when is_regex.
    is_regex: the answers are patterns, searched anywhere in text (re.search with REGEX_FLAGS, which
      already ignore case); a pattern that does not compile never matches.
    mode: "raw" (default): a case-sensitive substring test of the raw answer in the raw text, ORQA's
      HasAnswer, which decides retriever_correct in training and top_k_match in evaluation.
      "normalized": both sides lower-cased with runs of whitespace collapsed to one space, closer to
      DPR-style recall (finds "paris" in "Paris", "New  York" in "new york").
  Answers that are empty or only whitespace are ignored (they would occur in every passage).
  """
  if mode not in HAS_ANSWER_MODES:
    raise ValueError(f"has_answer: mode must be one of {HAS_ANSWER_MODES}, got {mode!r}")
  if mode == "normalized":
    text = normalize_for_search(text)
  for answer in answers:
    if not answer.strip():
      continue
    if is_regex:
      regex = _compiled(answer)
      if regex is not None and regex.search(text) is not None:
        return True
    elif (normalize_for_search(answer) if mode == "normalized" else answer) in text:
      return True
  return False


def first_hit_ranks(retrieved_has_answer: Iterable[Iterable[bool]]) -> np.ndarray:
  """int64 [num_questions]: per question the 1-based rank of its first answer-bearing passage, 0 if none.

  The rank decides every recall@k cut-off at once, and two rankers can be compared question by question
  (which questions one finds in its top k and the other does not). Each question's flags are read only up
  to its first hit, so they may be a lazy iterable.
  """
  return np.asarray(
      [next((rank for rank, hit in enumerate(flags, start=1) if hit), 0) for flags in retrieved_has_answer],
      np.int64)


def _recall_of_ranks(ranks: np.ndarray, ks: Sequence[int]) -> Dict[str, float]:
  """{"recall@K": percentage} of first_hit_ranks; recall_at_k's checks (its name in their messages)."""
  if not len(ranks):  # pylint: disable=g-explicit-length-test (an array)
    raise ValueError("recall_at_k: no questions; pass one list of has_answer flags per question")
  if any(k < 1 for k in ks):
    raise ValueError(f"recall_at_k: every k must be >= 1, got {list(ks)}")
  return {f"recall@{k}": 100.0 * float(np.mean((ranks > 0) & (ranks <= k))) for k in ks}


def recall_at_k(
    retrieved_has_answer: Sequence[Sequence[bool]], ks: Sequence[int] = (1, 5, 20, 100)) -> Dict[str, float]:
  """Percentage of questions with an answer-bearing passage among their top k, for each k.

  Args:
    retrieved_has_answer: [num_questions][num_retrieved] has_answer of each retrieved passage, best
      first. A question with fewer than k passages counts those it has.
    ks: cut-offs, each >= 1.
  Returns:
    {"recall@K": percentage} for each k in ks.
  """
  return _recall_of_ranks(first_hit_ranks(retrieved_has_answer), ks)


def paired_change(now: Sequence[bool], before: Sequence[bool]) -> Dict[str, float]:
  """Two systems' yes/no outcomes on the same questions (an answer found in the top k, an exact match):
  "gained", the questions where only the first succeeds, "lost", the reverse, and "p_value", the exact
  two-sided sign test of gained against lost (McNemar's exact test): the chance of a split at least that
  uneven if the two succeeded on any given question equally often.
  """
  from scipy import stats  # pylint: disable=g-import-not-at-top (only here; tf-models-official's dependency)
  now, before = np.asarray(now, bool), np.asarray(before, bool)
  if now.shape != before.shape:
    raise ValueError(f"paired_change: {now.shape[0]} questions against {before.shape[0]}; compare "
                     "outcomes of the same questions")
  gained, lost = int(np.sum(now & ~before)), int(np.sum(before & ~now))
  p_value = stats.binomtest(gained, gained + lost).pvalue if gained + lost else 1.0
  return {"gained": gained, "lost": lost, "p_value": float(p_value)}


def paired_recall_change(
    first_hits: Sequence[int], baseline_first_hits: Sequence[int],
    ks: Sequence[int] = (1, 5, 20, 100)) -> Dict[str, Dict[str, float]]:
  """Two rankers' recall compared question by question, from each one's first_hit_ranks of the same
  questions: per k ("@k"), paired_change of finding an answer in the top k.
  """
  now, before = np.asarray(first_hits), np.asarray(baseline_first_hits)
  if now.shape != before.shape:
    raise ValueError(f"paired_recall_change: {now.shape[0]} questions against {before.shape[0]}; compare "
                     "rankings of the same questions")
  return {f"@{k}": paired_change((now > 0) & (now <= k), (before > 0) & (before <= k)) for k in ks}


def answer_first_hits(rows,
                      texts: Sequence[str],
                      answers: Sequence[Sequence[str]],
                      mode: str = "raw",
                      answers_are_regex: Optional[Sequence[bool]] = None) -> np.ndarray:
  """first_hit_ranks of ranked corpus rows: rows[i] are question i's rows of texts, best first, and a row
  is a hit when has_answer finds some answers[i] in it (rankings_recall's arguments). Rows after a
  question's first hit are not searched."""
  regex = answers_are_regex or [False] * len(answers)
  return first_hit_ranks((has_answer(texts[d], question_answers, is_regex, mode=mode)
                          for d in ranked)
                         for ranked, question_answers, is_regex in zip(rows, answers, regex))


def rankings_recall(rows,
                    texts: Sequence[str],
                    answers: Sequence[Sequence[str]],
                    gold_rows: Optional[Sequence[int]] = None,
                    ks: Sequence[int] = (1, 5, 20, 100),
                    mode: str = "raw",
                    answers_are_regex: Optional[Sequence[bool]] = None,
                    first_hits: Optional[Sequence[int]] = None) -> Dict[str, float]:
  """Recall percentages of ranked corpus rows: rows[i] are question i's rows of texts, best first.

  Returns "answer_recall@k" (some answers[i] in texts[row], by has_answer with mode, or as regexes where
  answers_are_regex[i]) and, given gold_rows (question i's gold row, -1 for none), "gold_recall@k", for
  each k in ks, and "num_questions". Raises if rows is not [len(answers), k] with k at least
  min(max(ks), len(texts)): a truncated ranking would understate recall silently. first_hits: these
  rows' answer_first_hits with the same arguments, when the caller keeps them too (not searched again).
  """
  rows = np.asarray(rows)
  if rows.ndim != 2 or rows.shape[0] != len(answers):
    raise ValueError(f"rankings_recall: rows must be [num_questions={len(answers)}, k], got shape "
                     f"{rows.shape}")
  if rows.shape[1] < min(max(ks), len(texts)):
    raise ValueError(f"rankings_recall: rankings of {rows.shape[1]} rows cannot give recall@{max(ks)}; "
                     "retrieve at least max(ks) documents per question")
  if first_hits is None:
    first_hits = answer_first_hits(rows, texts, answers, mode=mode, answers_are_regex=answers_are_regex)
  elif len(first_hits) != len(answers):
    raise ValueError(f"rankings_recall: {len(first_hits)} first hits for {len(answers)} questions")
  results = {"num_questions": float(len(answers))}
  for name, value in _recall_of_ranks(np.asarray(first_hits), ks).items():
    results["answer_" + name] = value
  if gold_rows is not None:
    gold = np.asarray(gold_rows)
    for name, value in recall_at_k((rows == gold[:, None]).tolist(), ks).items():
      results["gold_" + name] = value
  return results


def evaluate_predictions(examples: Sequence[qa.QAExample],
                         predictions: Union[Sequence[str], Mapping[str, str]]) -> Dict[str, float]:
  """Scores predicted answer strings against the examples' gold answers.

  Args:
    examples: the gold QA examples.
    predictions: one string per example in the same order, or a {question: prediction} mapping (as read
      from a predictions file of {"question", "prediction"} records); a question missing from the
      mapping is scored as the empty prediction.
  Returns:
    accuracy: ORQA's reported metric, regex_match for regex examples and exact_match otherwise;
    exact_match, f1: over the examples with string answers (absent when there are none);
    regex_match: over the regex examples (absent when there are none);
    num_examples, num_string_examples, num_regex_examples, num_missing_predictions.
  """
  if isinstance(predictions, Mapping):
    missing = sum(1 for ex in examples if ex.question not in predictions)
    predicted = [predictions.get(ex.question, "") for ex in examples]
  else:
    if len(predictions) != len(examples):
      raise ValueError(f"evaluate_predictions: {len(predictions)} predictions for {len(examples)} "
                       "examples; pass one prediction per example, in order")
    missing = 0
    predicted = list(predictions)
  if not examples:
    raise ValueError("evaluate_predictions: no examples to score")
  correct, em, f1, regex = [], [], [], []
  for index, (example, prediction) in enumerate(zip(examples, predicted)):
    if not example.answers:
      raise ValueError(f"evaluate_predictions: example {index} ({example.question!r}) has no gold "
                       "answers; score only files loaded with answers")
    if example.answer_is_regex:
      regex.append(regex_match(prediction, example.answers))
      correct.append(regex[-1])
    else:
      em.append(exact_match(prediction, example.answers))
      f1.append(f1_score(prediction, example.answers))
      correct.append(em[-1])
  result = {
      "accuracy": 100.0 * sum(correct) / len(correct),
      "num_examples": len(examples),
      "num_string_examples": len(em),
      "num_regex_examples": len(regex),
      "num_missing_predictions": missing,
  }
  if em:
    result["exact_match"] = 100.0 * sum(em) / len(em)
    result["f1"] = 100.0 * sum(f1) / len(f1)
  if regex:
    result["regex_match"] = 100.0 * sum(regex) / len(regex)
  return result


def write_predictions_jsonl(path: str, records: Iterable[Mapping]) -> int:
  """Writes prediction records, the original's `{"question", "prediction"}` JSONL (other fields such as
  scores or retrieved doc ids may ride along), atomically; returns how many were written."""

  def checked():
    for index, record in enumerate(records):
      if (not isinstance(record, Mapping) or not isinstance(record.get("question"), str) or
          not isinstance(record.get("prediction"), str)):
        raise ValueError(f"write_predictions_jsonl({path}): record {index} needs string \"question\" "
                         f"and \"prediction\" fields, got {record!r}; {path} was not written")
      yield dict(record)

  return io_utils.write_jsonl_atomic(path, checked())


def read_predictions_jsonl(path: str, skipped: Optional[text_records.SkipCounter] = None) -> Dict[str, str]:
  """Reads a predictions file into {question: prediction}, for evaluate_predictions."""
  predictions = {}
  for line_number, record in text_records.read_jsonl(path, skipped):
    question, prediction = record.get("question"), record.get("prediction")
    if not isinstance(question, str) or not isinstance(prediction, str):
      text_records.handle_invalid(
          text_records.InputError(
              f"{path}:{line_number}: a prediction needs string \"question\" and \"prediction\" fields; "
              "fix the line or pass --skip_invalid"), skipped)
      continue
    predictions[question] = prediction
  return predictions
