"""Writes realm_tf's testdata: a synthetic world of invented people and villages.

Nothing here comes from a real text. Names are built from invented syllables, so the tiny vocab splits
them into wordpieces ("zor", "##vel", ...) and a tiny BERT has something to learn. Every fact that a
question asks about (a birthplace, a founded guild, a famous work, a full birth date, a river) occurs in
exactly one document, so a retriever's recall of the answer-bearing document is measurable. The generator
checks that property and drops any question that breaks it.

Documents also mention each other, as Wikipedia articles do: a person studied under a mentor (both
documents name both people) and worked in a village (both documents name both). Those mentions are never
answers; they are what REALM's pre-training learns from, because it never retrieves a sentence's own
document: masking "Hulera Lomar" in "Velin studied under Hulera Lomar." is helped only by retrieving
Lomar's document, which says "Lomar taught Zorbak Velin.".

The pre-training corpus also holds one short news item per person and village, which the retrieval
corpus does not: REALM pre-trains on one text (CC-News) while it retrieves from another (Wikipedia).
"Hulera Lomar died in 1931." can only be completed from Lomar's own article, so masking the death year
teaches the retriever to find an entity's article from its name, which is what the questions ask for.
Inside the articles that lesson is never available: a sentence's own article is never retrieved, and
the facts of an article are stated nowhere else. A news item's salient spans are its facts (a
profession, a death year, a valley), never the questions' facts (birthplace, birth date, foundation,
best-known work, river, recorder), so pre-training cannot leak an answer.

Outputs (all deterministic for a seed; `bin/generate_testdata` rewrites testdata/ byte for byte):
  vocab.txt          WordPiece vocab covering the corpus (specials, words, syllable pieces, characters)
  corpus.jsonl       {"id", "title", "body"}: the retrieval corpus
  pretraining.jsonl  {"title", "text", "sentences": [[start, limit]...], "spans": [[start, limit]...]}:
                     the same documents with sentence and salient-span byte offsets (names, places,
                     dates, works), then the news items; the input of bin/generate_pretraining_corpus
  qa.train.jsonl, qa.dev.jsonl, qa.test.jsonl
                     {"question", "answer": [...], "doc_id", "title"}: ORQA-style QA whose answer lies in
                     exactly the one document doc_id
  bert_pretraining.jsonl
                     {"title", "text"}: articles of ANOTHER invented world in the same language, the text
                     bin/train_mlm pre-trains the reader's tiny BERT on (bin/demo). A BERT pre-trained on
                     corpus.jsonl itself would memorize the facts REALM's masked spans ask for and never
                     need to read the retrieved documents; one pre-trained on other text must read them.
"""

import dataclasses
import json
import os
import random
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple

from realm_tf import io_utils
from realm_tf import tokenization

_ONSETS = [
    "zor", "kel", "vas", "tam", "bri", "dol", "fen", "gar", "hul", "jin", "lom", "mer", "nak", "pel", "quo",
    "rud", "sil", "tov", "ul", "wen", "yar", "bel", "cor", "dra", "ess", "fal", "gri", "hod", "isk", "jor",
    "kra", "lun", "mav", "nor", "orm", "pry", "ros", "sav", "thal", "vir", "zé", "lé"
]
_CODAS = [
    "ak", "el", "in", "or", "us", "an", "ek", "ith", "om", "ar", "ul", "en", "is", "ot", "ada", "ene", "ix",
    "ova", "und", "era", "ys", "ash"
]
_MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December"
]
_PROFESSIONS = [
    "painter", "sculptor", "poet", "astronomer", "weaver", "composer", "cartographer", "glassmaker",
    "botanist", "engineer", "physician", "architect"
]
_WORK_KINDS = ["tapestry", "lantern", "map", "hymn", "telescope", "bridge", "garden", "clock"]
_ORG_KINDS = ["Guild", "Academy", "Society", "Workshop", "Circle", "School"]
# Title of the news items: pre-training text about the articles' subjects, never in the retrieval corpus.
NEWS_TITLE = "Gazette"
_REGIONS = ["northern", "southern", "eastern", "western", "upper", "lower"]


@dataclasses.dataclass
class _Doc:
  doc_id: str
  title: str
  sentences: List[str] = dataclasses.field(default_factory=list)
  # (sentence index, salient substring) pairs; byte offsets are computed when the text is assembled.
  salient: List[Tuple[int, str]] = dataclasses.field(default_factory=list)
  questions: List[Tuple[str, str]] = dataclasses.field(default_factory=list)
  news: Optional["_Doc"] = None  # the pre-training-only news item about this document's subject
  # A Wikipedia-style lead restating the article's facts in other words; only the BERT pre-training
  # text uses it (see generate).
  lead: str = ""


class _Names:
  """Draws invented, never-repeating capitalized words from syllables.

  Two-syllable words (924 possible) are used for the 500 person and village names only; everything
  else takes three syllables, so drawing never runs short.
  """

  def __init__(self, rng: random.Random):
    self._rng = rng
    self._used = set()

  def draw(self, syllables: int) -> str:
    while True:
      word = self._rng.choice(_ONSETS) + "".join(
          self._rng.choice(_CODAS) if i % 2 == 0 else self._rng.choice(_ONSETS) for i in range(syllables - 1))
      if word not in self._used:
        self._used.add(word)
        return word.capitalize()


def _person(i: int, rng: random.Random, names: _Names, dates: set) -> _Doc:
  first, last = names.draw(2), names.draw(2)
  full = f"{first} {last}"
  town, guild_name, work_name = names.draw(3), names.draw(3), names.draw(3)
  profession = rng.choice(_PROFESSIONS)
  org = f"{guild_name} {rng.choice(_ORG_KINDS)}"
  work = f"{work_name} {rng.choice(_WORK_KINDS)}"
  while True:
    # Days from 10 to 28 keep every date string from being a suffix of another ("2 May" in "12 May").
    born = rng.randint(1700, 1899)
    date = f"{rng.randint(10, 28)} {rng.choice(_MONTHS)} {born}"
    if date not in dates:
      dates.add(date)
      break
  founded = born + rng.randint(20, 45)
  died = founded + rng.randint(5, 40)
  doc = _Doc(doc_id=f"person-{i:04d}", title=full)
  doc.sentences = [
      f"{full} was {'an' if profession[0] in 'aeiou' else 'a'} {profession} from {town}.",
      f"{last} was born on {date} in {town}.",
      f"In {founded}, {last} founded the {org}.",
      f"{last} is best known for the {work}.",
      f"{last} died in {died}.",
  ]
  doc.salient = [(0, full), (0, town), (1, last), (1, date), (1, town), (2, str(founded)), (2, last),
                 (2, org), (3, last), (3, work), (4, last), (4, str(died))]
  # Facts only this person's article holds (the masked span names them, so only that article helps the
  # reader): REALM's reward goes to the subject's own document, not to any article of the same type.
  doc.news = _news(doc, [(f"{full} was born in {town}.", town), (f"{full} founded the {org}.", org),
                         (f"{full} is best known for the {work}.", work)])
  # Two phrasings, chosen by index so no draw from rng changes the rest of the world.
  # Words of the vocabulary only (it covers this world's text, not the lead's).
  doc.lead = (f"{full}, born in {town}, founded the {org}, best known for the {work}." if i %
              2 == 0 else f"Known for the {work}, {full} from {town} founded the {org}.")
  doc.questions = [
      (f"Where was {full} born?", town),
      (f"When was {full} born?", date),
      (f"What did {full} found?", org),
      (f"What is {full} best known for?", work),
  ]
  return doc


def _news(doc: _Doc, facts: Sequence[Tuple[str, str]]) -> _Doc:
  """A news item about doc's subject: (sentence, salient fact) pairs, the fact inside the sentence."""
  news = _Doc(doc_id=f"news-{doc.doc_id}", title=NEWS_TITLE)
  for sentence, fact in facts:
    _mention(news, sentence, [fact])
  return news


def _village(i: int, rng: random.Random, names: _Names) -> _Doc:
  village, river, founder = names.draw(2), names.draw(3), names.draw(3)
  region = rng.choice(_REGIONS)
  recorded = rng.randint(900, 1600)
  population = rng.randint(120, 9800)
  doc = _Doc(doc_id=f"village-{i:04d}", title=village)
  doc.sentences = [
      f"{village} is a village in the {region} valley.",
      f"It lies on the {river} river.",
      f"{village} was first recorded in {recorded} by {founder}.",
      f"Its population was {population} in 1900.",
  ]
  doc.salient = [(0, village), (1, river), (2, village), (2, str(recorded)), (2, founder),
                 (3, str(population))]
  doc.news = _news(doc, [(f"{village} lies on the {river} river.", river)])
  doc.lead = (f"{village}, a village on the {river} river, was first recorded by {founder}." if i %
              2 == 0 else f"On the {river} river lies {village}, first recorded by {founder} in {recorded}.")
  doc.questions = [
      (f"On which river does {village} lie?", river),
      (f"Who first recorded {village}?", founder),
  ]
  return doc


def _mention(doc: _Doc, sentence: str, salient: Sequence[str]) -> None:
  doc.sentences.append(sentence)
  doc.salient.extend((len(doc.sentences) - 1, name) for name in salient)


def _link(people: List[_Doc], villages: List[_Doc], rng: random.Random) -> None:
  """Adds the cross-document mentions: mentors and students, workplaces and notable residents."""
  for i, student in enumerate(people):
    mentor = people[rng.randrange(len(people) - 1)]
    if mentor is student:
      mentor = people[-1]
    student_last, mentor_last = student.title.split()[-1], mentor.title.split()[-1]
    _mention(student, f"{student_last} studied under {mentor.title}.", [student_last, mentor.title])
    _mention(mentor, f"{mentor_last} taught {student.title}.", [mentor_last, student.title])
    village = villages[i % len(villages)]
    _mention(student, f"{student_last} worked in {village.title}.", [student_last, village.title])
    _mention(village, f"{student.title} worked in {village.title}.", [student.title, village.title])


def _assemble(doc: _Doc) -> dict:
  """Joins sentences with spaces and turns salient substrings into byte offsets of the text."""
  text = " ".join(doc.sentences)
  sentence_offsets = []
  position = 0
  for sentence in doc.sentences:
    start = len(text[:position].encode("utf-8"))
    sentence_offsets.append([start, start + len(sentence.encode("utf-8"))])
    position += len(sentence) + 1
  spans = set()
  for sentence_index, substring in doc.salient:
    sentence = doc.sentences[sentence_index]
    char_start = sentence.index(substring)
    byte_start = sentence_offsets[sentence_index][0] + len(sentence[:char_start].encode("utf-8"))
    spans.add((byte_start, byte_start + len(substring.encode("utf-8"))))
  return {
      "title": doc.title,
      "text": text,
      "sentences": sentence_offsets,
      "spans": [list(s) for s in sorted(spans)]
  }


def build_vocab(texts: Sequence[str]) -> List[str]:
  """A WordPiece vocab for the synthetic world: specials, every lower-cased whole word of the texts
  except invented names (kept out so names split into syllable pieces), syllables as word starts and
  continuations, and single characters so nothing is [UNK]."""

  def strip_accents(s):
    return "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")

  syllables = sorted({strip_accents(s) for s in _ONSETS + _CODAS})
  words = set()
  for t in texts:
    for raw in t.replace(".", " ").replace(",", " ").replace("?", " ").split():
      word = strip_accents(raw.lower())
      if raw[:1].isupper() and raw.lower() not in {w.lower() for w in _MONTHS + _ORG_KINDS} \
          and raw not in ("In", "It", "Its", "Where", "When", "What", "Who", "On"):
        continue  # an invented name: leave it to syllable pieces
      if not word.isdigit():
        words.add(word)
  chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789"))
  vocab = list(tokenization.SPECIAL_TOKENS)
  vocab += [".", ",", "?", "-", "'"]
  vocab += sorted(words)
  vocab += [s for s in syllables if s not in words]
  vocab += ["##" + s for s in syllables]
  vocab += [c for c in chars if c not in vocab] + ["##" + c for c in chars]
  seen, unique = set(), []
  for token in vocab:
    if token not in seen:
      seen.add(token)
      unique.append(token)
  return unique


def _world(rng: random.Random, num_people: int, num_villages: int) -> List[_Doc]:
  names = _Names(rng)
  dates: set = set()
  people = [_person(i, rng, names, dates) for i in range(num_people)]
  villages = [_village(i, rng, names) for i in range(num_villages)]
  _link(people, villages, rng)
  docs = people + villages
  rng.shuffle(docs)
  return docs


def generate(seed: int = 20200812, num_people: int = 200, num_villages: int = 100) -> Dict[str, object]:
  """Builds the synthetic world; returns the records of every output file (not yet written)."""
  rng = random.Random(seed)
  docs = _world(rng, num_people, num_villages)
  # The reader's BERT pre-training text: another world of the same language (its own generator, so the
  # files above do not change with it). BERT learns to read from it, not this corpus's facts, as
  # Google's BERT learned from Wikipedia and books before REALM retrieved from a corpus. As in real text,
  # a document states its facts more than once: each article opens with a lead that restates them in
  # other words and the subject's news item, then the article itself. Masked LM on pairs of that text
  # rewards copying a fact from elsewhere in the pair, which is what REALM's reader does with a retrieved
  # document; with every fact stated once (the articles alone), the BERT predicted the news items'
  # masked facts no better from their own article than from the null document, and REALM's retriever
  # followed noise (docs/experiments/benchmarks_notebook.md, 2026-11-26).
  other = _world(random.Random(f"bert-{seed}"), num_people, num_villages)

  assembled = [_assemble(d) for d in docs]
  corpus = [{"id": d.doc_id, "title": d.title, "body": a["text"]} for d, a in zip(docs, assembled)]
  qa = []
  for doc in docs:
    for question, answer in doc.questions:
      holders = [c["id"] for c in corpus if answer in c["body"] or answer in c["title"]]
      if holders == [doc.doc_id]:
        qa.append({"question": question, "answer": [answer], "doc_id": doc.doc_id, "title": doc.title})
  rng.shuffle(qa)
  num_dev = num_test = len(qa) // 10
  asked = {q["doc_id"] for q in qa[:num_dev + num_test]}
  return {
      "vocab.txt":
          build_vocab([c["title"] + " " + c["body"] for c in corpus] + [q["question"] for q in qa]),
      "corpus.jsonl":
          corpus,
      # News items only about subjects no dev or test question asks about: REALM's gain on those questions
      # is then the retriever's learned skill (matching a name to its article), not a memorized fact.
      "pretraining.jsonl":
          assembled + [_assemble(d.news) for d in docs if d.doc_id not in asked],
      "qa.train.jsonl":
          qa[num_dev + num_test:],
      "qa.dev.jsonl":
          qa[:num_dev],
      "qa.test.jsonl":
          qa[num_dev:num_dev + num_test],
      "bert_pretraining.jsonl": [{
          "title": d.title,
          "text": f"{d.lead} {_assemble(d.news)['text']} {_assemble(d)['text']}"
      } for d in other],
  }


def all_news_items(seed: int = 20200812, num_people: int = 200, num_villages: int = 100) -> List[dict]:
  """The news item of every subject, with its subject's "doc_id". pretraining.jsonl holds only those of
  subjects no dev or test question asks about; the others are statements no training text holds."""
  docs = _world(random.Random(seed), num_people, num_villages)  # generate's world: _world draws first
  return [dict(_assemble(d.news), doc_id=d.doc_id) for d in docs]


def write_testdata(output_dir: str, seed: int = 20200812) -> Dict[str, int]:
  """Writes every testdata file atomically; returns the number of lines written per file."""
  os.makedirs(output_dir, exist_ok=True)
  counts = {}
  for name, records in generate(seed).items():
    path = os.path.join(output_dir, name)
    if name.endswith(".txt"):
      with io_utils.atomic_write(path) as f:
        f.write("".join(token + "\n" for token in records))
      counts[name] = len(records)
    else:
      counts[name] = io_utils.write_jsonl_atomic(path, records)
  return counts


def write_news_items(pretraining_path: str, output_path: str) -> int:
  """Writes the news items of a pretraining.jsonl (its NEWS_TITLE records) as their own JSONL file."""
  with open(pretraining_path, encoding="utf-8") as f:
    lines = [line for line in f if json.loads(line)["title"] == NEWS_TITLE]
  if not lines:
    raise ValueError(f"{pretraining_path} has no {NEWS_TITLE!r} records; regenerate testdata with "
                     "bin/generate_testdata.py")
  os.makedirs(os.path.dirname(output_path) or ".", exist_ok=True)
  with io_utils.atomic_write(output_path) as out:
    out.write("".join(lines))
  return len(lines)


def load_jsonl(path: str) -> List[dict]:
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]
