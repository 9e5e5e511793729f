"""Question-answering data sets read into one record type, QAExample, whatever their packaging.

ORQA fine-tuning and every evaluation (exact match, regex match, retrieval recall) need only a question and
its gold answers, but the public data sets ship in five layouts: ORQA/NQ-open JSONL, WebQuestions JSON
(Berant's SEMPRE `targetValue` or the `qText`/`answers` repackaging), CuratedTREC TSV whose answers are
regular expressions, SQuAD JSON, and TensorFlow Datasets builders. Each loader here maps one layout to
QAExample, so the trainer and the evaluator never see the difference.

Every loader validates as it reads: a bad record raises InputError naming `FILE:LINE` (a JSON path for
SQuAD, `tfds:NAME/SPLIT example N` for TFDS) and what to do, or, given a SkipCounter (`--skip_invalid`),
is counted and skipped. A question without answers is an error unless require_answers=False (prediction
files such as NQ-open's efficientqa `no-annotations` sets); an empty answer string is always an error,
because it is a substring of every passage and a regex that matches everything.

`load_qa(path_or_spec)` picks the loader from the file extension or a `tfds:NAME/SPLIT` spec.
"""

import dataclasses
import json
import os
import re
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf

from realm_tf.data import corpus
from realm_tf.data import text_records

InputError = text_records.InputError
SkipCounter = text_records.SkipCounter
handle_invalid = text_records.handle_invalid

TFDS_PREFIX = "tfds:"
# Flags of the original's regex_match_score (CuratedTREC); a pattern must compile with them.
REGEX_FLAGS = re.IGNORECASE | re.UNICODE | re.MULTILINE


@dataclasses.dataclass
class QAExample:
  """One question and its gold answers.

  Attributes:
    question: the question text, as in the source.
    answers: gold answer strings in source order (SQuAD's are de-duplicated); regular expressions when
      answer_is_regex. Empty only for prediction-only files loaded with require_answers=False.
    answer_is_regex: True for CuratedTREC, whose answers are patterns matched with REGEX_FLAGS.
    metadata: the source's other fields (e.g. doc_id and title of testdata, SQuAD id and paragraph
      doc_id, WebQuestions url), kept for analysis and for gold-passage recall.
  """
  question: str
  answers: List[str]
  answer_is_regex: bool = False
  metadata: Dict[str, Any] = dataclasses.field(default_factory=dict)


def _checked_example(where: str, question, answers, *, answer_is_regex: bool, require_answers: bool,
                     metadata: Dict[str, Any]) -> QAExample:
  """Validates one record's fields; raises InputError that starts with `where` (FILE:LINE or similar)."""
  fix = "fix the record or pass --skip_invalid"
  if not isinstance(question, str) or not question.strip():
    raise InputError(f"{where}: the question must be a non-empty string, got {question!r}; {fix}")
  if answers is None:
    answers = []
  if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
    raise InputError(f"{where}: the answers must be a list of strings, got {answers!r}; {fix}")
  if require_answers and not answers:
    raise InputError(f"{where}: the question {question!r} has no answers; {fix} (or, for a "
                     "prediction-only file, load it with require_answers=False)")
  for answer in answers:
    if not answer.strip():
      raise InputError(f"{where}: an empty answer {answer!r} would match every passage; {fix}")
    if answer_is_regex:
      try:
        re.compile(answer, REGEX_FLAGS)
      except (re.error, OverflowError, RecursionError) as e:  # a{4294967296}; deeply nested groups
        raise InputError(f"{where}: the answer pattern {answer!r} is not a valid regular expression "
                         f"({e}); fix the pattern or pass --skip_invalid") from None
  return QAExample(question=question,
                   answers=list(answers),
                   answer_is_regex=answer_is_regex,
                   metadata=metadata)


def _dedupe(values: Sequence[str]) -> List[str]:
  seen = set()
  return [v for v in values if not (v in seen or seen.add(v))]


# ---------------------------------------------------------------------------------------------------------
# ORQA resplit / NQ-open / testdata JSONL


def load_jsonl(path: str,
               *,
               require_answers: bool = True,
               answer_is_regex: bool = False,
               skipped: Optional[SkipCounter] = None) -> List[QAExample]:
  """Reads JSON lines `{"question": str, "answer": [str, ...], ...}` (ORQA's `*.resplit.*.jsonl`, NQ-open,
  testdata/qa.*.jsonl). `"answers"` is accepted where `"answer"` is absent; every other field (testdata's
  doc_id and title, efficientqa's rated predictions) goes to metadata.

  Args:
    path: the JSONL file.
    require_answers: False for prediction-only files (efficientqa `no-annotations`), whose records have no
      answer field; the examples then have answers [].
    answer_is_regex: True for ORQA's CuratedTrec.resplit files, whose answers are patterns.
    skipped: given, invalid records are counted there instead of raising InputError.
  """
  examples = []
  for line_number, record in text_records.read_jsonl(path, skipped):
    where = f"{path}:{line_number}"
    key = "answer" if "answer" in record or "answers" not in record else "answers"
    if require_answers and key not in record:
      handle_invalid(
          InputError(
              f"{where}: no \"answer\" field (keys: {', '.join(sorted(record)) or 'none'}); add the gold "
              "answers, pass --skip_invalid, or load a prediction-only file with require_answers=False"),
          skipped)
      continue
    metadata = {k: v for k, v in record.items() if k not in ("question", key)}
    try:
      examples.append(
          _checked_example(where,
                           record.get("question"),
                           record.get(key),
                           answer_is_regex=answer_is_regex,
                           require_answers=require_answers,
                           metadata=metadata))
    except InputError as e:
      handle_invalid(e, skipped)
  return examples


# ---------------------------------------------------------------------------------------------------------
# WebQuestions

_JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _read_json_text(path: str) -> str:
  with tf.io.gfile.GFile(path, "rb") as f:
    raw = f.read()
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    line = raw.count(b"\n", 0, e.start) + 1
    raise InputError(
        f"{path}:{line}: not valid UTF-8 (byte {e.start}); re-encode the file as UTF-8") from None


def _json_syntax_error(path: str, e: json.JSONDecodeError) -> InputError:
  return InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno}); fix the file (a "
                    "syntax error in a JSON document stops the load even with --skip_invalid, since "
                    "the records after it cannot be located)")


def read_json_array(path: str) -> Iterator[Tuple[int, Any]]:
  """Yields (line_number, element) for each element of a file holding one JSON array.

  Elements are decoded one at a time, so each comes with the line where it starts (WebQuestions keeps one
  question per line) for error messages. A syntax error raises InputError naming its line.
  """
  text = _read_json_text(path)
  decoder = json.JSONDecoder()
  pos = _JSON_WHITESPACE.match(text).end()
  if not text.startswith("[", pos):
    line = text.count("\n", 0, pos) + 1
    raise InputError(f"{path}:{line}: expected a JSON array of records ('['), got "
                     f"{text[pos:pos + 20]!r}; use the data set's original .json file")
  pos = _JSON_WHITESPACE.match(text, pos + 1).end()
  line, counted_to = 1, 0
  if text.startswith("]", pos):
    return
  while True:
    try:
      value, end = decoder.raw_decode(text, pos)
    except json.JSONDecodeError as e:
      raise _json_syntax_error(path, e) from None
    except RecursionError:
      line += text.count("\n", counted_to, pos)
      raise InputError(f"{path}:{line}: JSON nested too deeply to read; fix the record") from None
    line += text.count("\n", counted_to, pos)
    counted_to = pos
    yield line, value
    pos = _JSON_WHITESPACE.match(text, end).end()
    if text.startswith("]", pos):
      rest = _JSON_WHITESPACE.match(text, pos + 1).end()
      if rest != len(text):
        raise _json_syntax_error(path, json.JSONDecodeError("Extra data", text, rest))
      return
    if not text.startswith(",", pos):
      raise _json_syntax_error(path, json.JSONDecodeError("Expecting ',' delimiter", text, pos))
    pos = _JSON_WHITESPACE.match(text, pos + 1).end()


_SEXPR_TOKEN = re.compile(r'\s*(?:(\()|(\))|"((?:[^"\\]|\\.)*)"|([^\s()"]+))', re.DOTALL)
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)


def parse_target_value(target_value: str) -> List[str]:
  """The answers of a WebQuestions (SEMPRE) targetValue, `(list (description "A b") (description C))`.

  Quoted descriptions may hold spaces, parentheses and backslash escapes (`\\"`, `\\\\`); a bare description
  is the text up to its closing parenthesis (single spaces between words, as SEMPRE writes it).
  Raises ValueError on anything else.
  """
  pos = 0

  def token():
    nonlocal pos
    m = _SEXPR_TOKEN.match(target_value, pos)
    if m is None:
      if target_value[pos:].strip():
        raise ValueError(f"cannot read {target_value[pos:pos + 20]!r} (an unterminated quote?)")
      return None
    pos = m.end()
    if m.group(1):
      return ("(", None)
    if m.group(2):
      return (")", None)
    if m.group(3) is not None:
      return ("str", _UNESCAPE.sub(r"\1", m.group(3)))
    return ("atom", m.group(4))

  def expect(kind, value=None):
    got = token()
    if got is None or got[0] != kind or (value is not None and got[1] != value):
      raise ValueError(f"expected {value or kind!r} at character {pos}, got {got[1] if got else 'the end'!r}")

  expect("(")
  expect("atom", "list")
  answers = []
  while True:
    got = token()
    if got == (")", None):
      break
    if got != ("(", None):
      raise ValueError(f"expected '(description ...)' or ')' at character {pos}")
    expect("atom", "description")
    parts = []
    while True:
      got = token()
      if got is None:
        raise ValueError("unbalanced parentheses")
      if got[0] == ")":
        break
      if got[0] == "(":
        raise ValueError(f"unexpected '(' inside a description at character {pos}")
      parts.append(got)
    if len(parts) == 1 and parts[0][0] == "str":
      answers.append(parts[0][1])
    elif parts and all(kind == "atom" for kind, _ in parts):
      answers.append(" ".join(value for _, value in parts))
    else:
      raise ValueError(f"a description must be one quoted string or bare words, got {parts!r}")
  if target_value[pos:].strip():
    raise ValueError(f"unexpected text after the list: {target_value[pos:pos + 20]!r}")
  return answers


def load_webquestions(path: str,
                      *,
                      require_answers: bool = True,
                      skipped: Optional[SkipCounter] = None) -> List[QAExample]:
  """Reads a WebQuestions JSON array in either packaging:

  - Berant et al.'s original: `{"url", "targetValue": "(list (description ...) ...)", "utterance"}`;
    metadata keeps url.
  - the `qText` repackaging (trainmodel/val/devtest/test.json, as bin/download_data.py fetches it):
    `{"qId", "qText", "answers": [...]}`; metadata keeps qId.
  """
  examples = []
  for line_number, record in read_json_array(path):
    where = f"{path}:{line_number}"
    try:
      if not isinstance(record, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(record).__name__}; fix the "
                         "record or pass --skip_invalid")
      if "utterance" in record:
        question = record["utterance"]
        target = record.get("targetValue")
        if target is None:
          answers = None
        elif not isinstance(target, str):
          raise InputError(f"{where}: targetValue must be a string, got {target!r}; fix the record or "
                           "pass --skip_invalid")
        else:
          try:
            answers = parse_target_value(target)
          except ValueError as e:
            raise InputError(f"{where}: cannot parse targetValue {target!r} ({e}); fix the record or "
                             "pass --skip_invalid") from None
        metadata = {k: v for k, v in record.items() if k not in ("utterance", "targetValue")}
      elif "qText" in record:
        question, answers = record["qText"], record.get("answers")
        metadata = {k: v for k, v in record.items() if k not in ("qText", "answers")}
      else:
        raise InputError(f"{where}: neither \"utterance\" (original WebQuestions) nor \"qText\" "
                         f"(repackaged) in a record with keys {', '.join(sorted(record))}; fix the "
                         "record or pass --skip_invalid")
      if answers is None and require_answers:
        raise InputError(f"{where}: no answers (\"targetValue\" or \"answers\"); add them, pass "
                         "--skip_invalid, or load with require_answers=False")
      examples.append(
          _checked_example(where,
                           question,
                           answers,
                           answer_is_regex=False,
                           require_answers=require_answers,
                           metadata=metadata))
    except InputError as e:
      handle_invalid(e, skipped)
  return examples


# ---------------------------------------------------------------------------------------------------------
# CuratedTREC


def load_curatedtrec(path: str, *, skipped: Optional[SkipCounter] = None) -> List[QAExample]:
  """Reads CuratedTREC TSV; each answer is one regular expression (answer_is_regex=True).

  Two row layouts are accepted:
  - `question<TAB>pattern` (the two-column export);
  - `id<TAB>type<TAB>question<TAB>pattern` (the original files, e.g. large2180-test.tsv); metadata keeps
    id and type. The pattern is the rest of the row: one row of large2180-train.tsv holds an escaped
    tab (`\\<TAB>`) inside its pattern, which compiles and is kept.
  Lines are split on tabs, not read as CSV: questions such as `"The Muppets" was created by whom?` start
  with a double quote that is part of the text.
  """
  examples = []
  # text_records' line reader: UTF-8 decoding with FILE:LINE errors, but no CSV quoting (see above).
  for line_number, line in text_records._decoded_lines(path, skipped):  # pylint: disable=protected-access
    if line is None or not line.strip():
      continue
    where = f"{path}:{line_number}"
    columns = line.rstrip("\r\n").split("\t")
    try:
      if len(columns) == 2:
        question, pattern = columns
        metadata = {}
      elif len(columns) >= 4:
        question, pattern = columns[2], "\t".join(columns[3:])
        metadata = {"id": columns[0], "type": columns[1]}
      else:
        raise InputError(f"{where}: {len(columns)} tab-separated columns, expected 2 (question, "
                         "pattern) or 4 (id, type, question, pattern); fix the row or pass "
                         "--skip_invalid")
      examples.append(
          _checked_example(where,
                           question, [pattern],
                           answer_is_regex=True,
                           require_answers=True,
                           metadata=metadata))
    except InputError as e:
      handle_invalid(e, skipped)
  return examples


# ---------------------------------------------------------------------------------------------------------
# SQuAD v1.1


def _squad_articles(path: str) -> List[dict]:
  text = _read_json_text(path)
  try:
    value = json.loads(text)
  except json.JSONDecodeError as e:
    raise _json_syntax_error(path, e) from None
  except RecursionError:
    raise InputError(f"{path}: JSON nested too deeply to read; fix the file") from None
  if not isinstance(value, dict) or not isinstance(value.get("data"), list):
    raise InputError(f"{path}: not a SQuAD file (expected an object with a \"data\" list of articles); "
                     "use the official train-v1.1.json / dev-v1.1.json layout")
  for i, article in enumerate(value["data"]):
    if (not isinstance(article, dict) or not isinstance(article.get("title"), str) or
        not isinstance(article.get("paragraphs"), list) or not all(
            isinstance(p, dict) and isinstance(p.get("context"), str) and isinstance(p.get("qas", []), list)
            for p in article["paragraphs"])):
      raise InputError(f"{path}: data[{i}] is not an article with a \"title\" and \"paragraphs\" of "
                       "{\"context\", \"qas\"}; fix the file")
  return value["data"]


def _squad_title(title: str) -> str:
  """SQuAD article titles are Wikipedia URL keys (Super_Bowl_50); documents show them with spaces."""
  return title.replace("_", " ")


def load_squad_paragraphs(path: str, *, first_paragraph_id: int = 0) -> List[corpus.Document]:
  """The paragraphs of a SQuAD file as retrieval-corpus documents, in file order.

  Document i has title = the article title with spaces for underscores, body = the context, and
  doc_id = str(first_paragraph_id + i), the same id load_squad gives its questions' gold paragraph.
  bin/download_data.py's squad-v1.1-paragraphs.tsv numbers train paragraphs 1..18,896 and dev paragraphs
  18,897..20,963 in this order, so first_paragraph_id=1 (train) or 18897 (dev) yields its ids.
  """
  documents = []
  for article in _squad_articles(path):
    for paragraph in article["paragraphs"]:
      documents.append(
          corpus.Document(title=_squad_title(article["title"]),
                          body=paragraph["context"],
                          doc_id=str(first_paragraph_id + len(documents))))
  return documents


def load_squad(path: str,
               *,
               first_paragraph_id: int = 0,
               require_answers: bool = True,
               skipped: Optional[SkipCounter] = None) -> List[QAExample]:
  """SQuAD v1.1 questions with their answer texts (duplicates removed, first-seen order).

  metadata: id (the question id), title (as in load_squad_paragraphs), paragraph_index (the paragraph's
  position in the file, from 0) and doc_id (str(first_paragraph_id + paragraph_index), the gold
  document's id in load_squad_paragraphs(path, first_paragraph_id=...)), for gold-paragraph recall.
  Errors name the record by its JSON path, e.g. `dev.json: data[3].paragraphs[2].qas[5]`.
  """
  examples = []
  paragraph_index = 0
  for i, article in enumerate(_squad_articles(path)):
    for j, paragraph in enumerate(article["paragraphs"]):
      for k, qa in enumerate(paragraph.get("qas", [])):
        where = f"{path}: data[{i}].paragraphs[{j}].qas[{k}]"
        try:
          if not isinstance(qa, dict):
            raise InputError(f"{where}: expected an object with \"question\" and \"answers\"; fix the "
                             "file or pass --skip_invalid")
          where += f" (id {qa.get('id')!r})"
          answers = qa.get("answers", [])
          if not isinstance(answers, list) or not all(
              isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
            raise InputError(f"{where}: answers must be a list of {{\"text\", \"answer_start\"}}; fix "
                             "the file or pass --skip_invalid")
          examples.append(
              _checked_example(where,
                               qa.get("question"),
                               _dedupe([a["text"] for a in answers]),
                               answer_is_regex=False,
                               require_answers=require_answers,
                               metadata={
                                   "id": qa.get("id"),
                                   "title": _squad_title(article["title"]),
                                   "paragraph_index": paragraph_index,
                                   "doc_id": str(first_paragraph_id + paragraph_index)
                               }))
        except InputError as e:
          handle_invalid(e, skipped)
      paragraph_index += 1
  return examples


# ---------------------------------------------------------------------------------------------------------
# TensorFlow Datasets


def _text(value) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _texts(values) -> List[str]:
  return [_text(v) for v in values]


def _tfds_natural_questions_open(ex) -> Tuple[str, List[str], dict]:
  return _text(ex["question"]), _texts(ex["answer"]), {}


def _tfds_web_questions(ex) -> Tuple[str, List[str], dict]:
  return _text(ex["question"]), _texts(ex["answers"]), {"url": _text(ex["url"])}


def _tfds_squad(ex) -> Tuple[str, List[str], dict]:
  return (_text(ex["question"]), _dedupe(_texts(ex["answers"]["text"])), {
      "id": _text(ex["id"]),
      "title": _squad_title(_text(ex["title"]))
  })


def _tfds_trivia_qa(ex) -> Tuple[str, List[str], dict]:
  # Open-domain TriviaQA counts the answer's value and all its aliases as correct.
  answer = ex["answer"]
  return (_text(ex["question"]), _dedupe([_text(answer["value"])] + _texts(answer["aliases"])), {
      "question_id": _text(ex["question_id"])
  })


_TFDS_MAPPERS = {
    "natural_questions_open": _tfds_natural_questions_open,
    "web_questions": _tfds_web_questions,
    "squad": _tfds_squad,
    "trivia_qa": _tfds_trivia_qa,
}


def load_tfds(name: str,
              split: str,
              data_dir: Optional[str] = None,
              *,
              download: bool = True,
              require_answers: bool = True,
              skipped: Optional[SkipCounter] = None) -> List[QAExample]:
  """Loads a TensorFlow Datasets QA set, mapping its features to QAExample.

  Args:
    name: a builder name, optionally with config and version: natural_questions_open, web_questions,
      squad (squad/v1.1), trivia_qa (e.g. trivia_qa/unfiltered.nocontext; answers are value + aliases).
    split: a TFDS split, e.g. "validation", "train[:10%]".
    data_dir: TFDS data directory (default: TFDS's own).
    download: whether TFDS may download and prepare the data when it is absent.
  """
  base = name.split("/")[0].split(":")[0]
  if base not in _TFDS_MAPPERS:
    raise ValueError(f"tfds:{name}: no QA mapping for builder {base!r}; use one of "
                     f"{', '.join(sorted(_TFDS_MAPPERS))}")
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top  (heavy; only this loader)
  mapper = _TFDS_MAPPERS[base]
  dataset = tfds.load(name, split=split, data_dir=data_dir, download=download, shuffle_files=False)
  examples = []
  for index, ex in enumerate(tfds.as_numpy(dataset)):
    where = f"tfds:{name}/{split} example {index}"
    try:
      question, answers, metadata = mapper(ex)
      examples.append(
          _checked_example(where,
                           question,
                           answers,
                           answer_is_regex=False,
                           require_answers=require_answers,
                           metadata=metadata))
    except InputError as e:
      handle_invalid(e, skipped)
  return examples


# ---------------------------------------------------------------------------------------------------------
# Dispatch


def parse_tfds_spec(spec: str) -> Tuple[str, str]:
  """`tfds:NAME[/CONFIG][:VERSION]/SPLIT` -> (name, split); the split is the last path component."""
  body = spec[len(TFDS_PREFIX):] if spec.startswith(TFDS_PREFIX) else spec
  name, sep, split = body.rpartition("/")
  if not sep or not name or not split:
    raise ValueError(f"{spec}: a TFDS spec is tfds:NAME/SPLIT, e.g. tfds:natural_questions_open/validation "
                     "or tfds:squad/v1.1/validation")
  return name, split


def _json_starts_with_array(path: str) -> bool:
  with tf.io.gfile.GFile(path, "rb") as f:
    head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
  return head.startswith(b"[")


def load_qa(path_or_spec: str,
            *,
            require_answers: bool = True,
            answer_is_regex: Optional[bool] = None,
            skipped: Optional[SkipCounter] = None) -> List[QAExample]:
  """Loads QA examples from a file or a TFDS spec, choosing the loader by form:

  - `tfds:NAME/SPLIT` -> load_tfds;
  - `.jsonl` -> load_jsonl (answers are regexes when answer_is_regex, which by default is True only
    for a file named like ORQA's CuratedTrec.resplit.*.jsonl);
  - `.json` -> load_webquestions when the file holds a JSON array, else load_squad;
  - `.tsv` / `.txt` -> load_curatedtrec.
  """
  if path_or_spec.startswith(TFDS_PREFIX):
    name, split = parse_tfds_spec(path_or_spec)
    return load_tfds(name, split, require_answers=require_answers, skipped=skipped)
  path = path_or_spec
  extension = os.path.splitext(path)[1].lower()
  if extension == ".jsonl":
    if answer_is_regex is None:
      answer_is_regex = "curatedtrec" in os.path.basename(path).lower()
    return load_jsonl(path, require_answers=require_answers, answer_is_regex=answer_is_regex, skipped=skipped)
  if extension == ".json":
    if _json_starts_with_array(path):
      return load_webquestions(path, require_answers=require_answers, skipped=skipped)
    return load_squad(path, require_answers=require_answers, skipped=skipped)
  if extension in (".tsv", ".txt"):
    return load_curatedtrec(path, skipped=skipped)
  raise ValueError(f"{path}: unknown QA file type {extension!r}; use .jsonl (ORQA / NQ-open), .json "
                   "(WebQuestions or SQuAD), .tsv (CuratedTREC) or tfds:NAME/SPLIT")
