"""Salient spans and sentences for REALM pre-training: pluggable annotators and sentence splitters.

REALM masks one salient span (a named entity or a date) of one sentence. The original release has no
span finder (its corpus came pre-annotated by a BERT tagger trained on CoNLL-2003 plus date regular
expressions), so this module supplies rule-based stand-ins good enough to build a corpus from raw text,
and a seam where a real NER model plugs in by name (`load_annotator("my_pkg.ner:Tagger")`).

Offsets. Plug-ins speak CHARACTERS: `SpanAnnotator.annotate` and `SentenceSplitter.split` return
[start, limit) offsets into the Python str (what regular expressions, spaCy's `start_char`/`end_char` and
Hugging Face offset mappings give). Records speak UTF-8 BYTES (the original's `span_byte_start`, ...).
The conversion happens in exactly two places, `annotate_spans` and `split_sentences`, which also check a
plug-in's output (in range, start < limit) so a buggy plug-in fails loudly instead of writing offsets
that land inside a multi-byte character.
"""

import abc
import bisect
import importlib
import re
from typing import Iterable, List, Optional, Sequence, Tuple

Span = Tuple[int, int]

# ----------------------------------------------------------------------------------------------------
# Character <-> byte offsets.


def _utf8_length(ch: str) -> int:
  code = ord(ch)
  return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


def char_to_byte_offsets(text: str) -> List[int]:
  """offsets[i] is the UTF-8 byte offset of character i; offsets[len(text)] is the byte length."""
  if text.isascii():
    return list(range(len(text) + 1))
  offsets = [0] * (len(text) + 1)
  position = 0
  for i, ch in enumerate(text):
    offsets[i] = position
    position += _utf8_length(ch)
  offsets[len(text)] = position
  return offsets


def to_byte_spans(text: str, spans: Iterable[Span], offsets: Optional[List[int]] = None) -> List[Span]:
  """Converts [start, limit) character offsets into UTF-8 byte offsets of the same text."""
  offsets = char_to_byte_offsets(text) if offsets is None else offsets
  return [(offsets[s], offsets[l]) for s, l in spans]


def _checked_char_spans(spans, text: str, who: str, what: str) -> List[Span]:
  """Validates a plug-in's output: a list of (start, limit) ints with 0 <= start < limit <= len(text)."""
  checked = []
  for i, span in enumerate(spans):
    try:
      start, limit = span
    except (TypeError, ValueError):
      raise ValueError(f"{who} returned {what}[{i}] = {span!r}, not a (start, limit) pair; fix the "
                       "plug-in to return a list of (start, limit) character offsets") from None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, limit)):
      raise ValueError(f"{who} returned {what}[{i}] = {span!r}; offsets must be ints (character "
                       "offsets into the text); fix the plug-in")
    if not 0 <= start < limit <= len(text):
      raise ValueError(f"{who} returned {what}[{i}] = ({start}, {limit}) for a text of {len(text)} "
                       "characters; offsets must satisfy 0 <= start < limit <= len(text) (characters, not "
                       "bytes); fix the plug-in")
    checked.append((start, limit))
  return checked


# ----------------------------------------------------------------------------------------------------
# Annotators.


class SpanAnnotator(abc.ABC):
  """Finds salient spans (entities, dates) in a text.

  Subclasses implement annotate(text) -> [(start, limit), ...] in CHARACTER offsets (Python str
  indices), limit exclusive, in any order; overlapping spans are allowed (the pipeline samples one span
  per query). Bring your own (e.g. a CoNLL-2003 BERT tagger) and select it with
  --annotator=module.path:ClassOrFactory.
  """

  @abc.abstractmethod
  def annotate(self, text: str) -> List[Span]:
    """Returns [start, limit) character offsets of the salient spans of text."""

  @property
  def name(self) -> str:
    """A short description for logs and the corpus manifest."""
    return f"{type(self).__module__}.{type(self).__qualname__}"


_MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December"
]
_WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
# Full names first: regex alternation takes the first alternative that matches, not the longest.
_MONTH = (r"(?:" + "|".join(_MONTHS) + r"|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?)")
_DAY = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_YEAR = r"\d{3,4}"  # in a full date
_YEAR4 = r"(?:1\d{3}|20\d{2})"  # alone or with a month only: 1000-2099
_ERA = r"(?:BCE|BC|CE|AD|B\.C\.|A\.D\.)"
_BEFORE = r"(?<![\w.,/$£€#])"
_AFTER = r"(?![\w%]|[.,/:]\d)"

_DATE_RE = re.compile("|".join([
    # 12 March 1854, 12th of March, 1854, 12 Mar. 1854
    rf"(?P<dmy>{_BEFORE}{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}(?:\s?{_ERA})?{_AFTER})",
    # March 12, 1854, March 12 1854
    rf"(?P<mdy>(?<!\w){_MONTH}\s+{_DAY},?\s+{_YEAR}(?:\s?{_ERA})?{_AFTER})",
    # 12 March
    rf"(?P<dm>{_BEFORE}{_DAY}\s+(?:of\s+)?{_MONTH}(?!\w))",
    # March 1854, March, 1854 (before "March 12", which must not take "March 18" of "March 1854")
    rf"(?P<my>(?<!\w){_MONTH},?\s+{_YEAR4}{_AFTER})",
    # March 12
    rf"(?P<md>(?<!\w){_MONTH}\s+{_DAY}{_AFTER})",
    # 1854-03-12 (ISO)
    rf"(?P<iso>{_BEFORE}(?P<iso_y>{_YEAR4})-(?P<iso_m>\d{{1,2}})-(?P<iso_d>\d{{1,2}}){_AFTER})",
    # 12/03/1854, 03/12/54, 12.03.1854, 12-03-1854
    rf"(?P<num>{_BEFORE}(?P<num_a>\d{{1,2}})(?P<sep>[/.\-])(?P<num_b>\d{{1,2}})(?P=sep)"
    rf"(?P<num_y>\d{{4}}|\d{{2}}){_AFTER})",
    # 1850s, 1850's
    rf"(?P<decade>{_BEFORE}(?:1\d|20)\d0['’]?s(?!\w))",
    # 19th century, 19th-century
    rf"(?P<century>{_BEFORE}(?:2[01]|1\d|[1-9])(?:st|nd|rd|th)[\s-]+[Cc]entury(?!\w))",
    # 44 BC, 800 AD, AD 800, A.D. 800
    rf"(?P<era>{_BEFORE}\d{{1,4}}\s?{_ERA}(?!\w)|(?<!\w)(?:AD|A\.D\.)\s?\d{{1,4}}{_AFTER})",
    # 1854 (1000-2099)
    rf"(?P<year>{_BEFORE}{_YEAR4}{_AFTER})",
]))


class DateAnnotator(SpanAnnotator):
  """Dates by regular expression (the paper's "dates found by regular expression"; the exact
  expressions were not released). Month names must be capitalized; each match is one span:

    12 March 1854 / 12th of March, 1854 / 12 Mar. 1854   day month year (year 3-4 digits, optional era)
    March 12, 1854 / March 12 1854                       month day year
    12 March / March 12                                  day and month without a year
    March 1854                                           month year (year 1000-2099)
    1854-03-12, 12/03/1854, 03/12/54, 12.03.1854         numeric (day and month 1-31, one of them <= 12,
                                                         the same separator twice; "." needs a 4-digit year)
    1850s, 1850's                                        decades ("the" not included)
    19th century                                         centuries
    44 BC, 800 AD, AD 800                                years with an era
    1854                                                 a bare year 1000-2099, not part of a larger
                                                         number ("1,854", "1854.5", "$1854", "18540")

  Not matched: a bare month or weekday ("in March"), lower-case months, "3.5", years below 1000
  without an era. Known false positives: counts in 1000-2099 ("1854 people").
  """

  def annotate(self, text: str) -> List[Span]:
    spans = []
    for m in _DATE_RE.finditer(text):
      if m.group("num") is not None:
        a, b = int(m.group("num_a")), int(m.group("num_b"))
        if not (1 <= a <= 31 and 1 <= b <= 31 and min(a, b) <= 12):
          continue
        if m.group("sep") == "." and len(m.group("num_y")) != 4:
          continue
      elif m.group("iso") is not None:
        if not (1 <= int(m.group("iso_m")) <= 12 and 1 <= int(m.group("iso_d")) <= 31):
          continue
      spans.append(m.span())
    return spans


# Capitalized function words and other common sentence openers: never an entity on their own.
_STOPWORDS = frozenset("""
a an the this that these those it its he she his her hers him they them their theirs we our us you your
i my me in on at by for from with without of to into onto after before during since until while when
where which who whom whose what why how there here then than thus however although though because if
unless as also but and or nor so yet both either neither each every all some any many most much more
other another such no not one two three first second third last later today yesterday tomorrow
despite between among under over about above below within throughout following according upon once
is was are were be been being has have had do does did can could will would should may might must
let yes only even just still now often sometimes again meanwhile instead indeed furthermore moreover
therefore nevertheless besides around along across behind beyond near next new old several few both
since whether towards toward via per unlike like hence thereafter afterwards afterward thereby
""".split())
# Never an entity when alone (they are dates, handled by DateAnnotator, or usually not names).
_NOT_ALONE = frozenset(w.lower() for w in _MONTHS + _WEEKDAYS)
# Lower-case words that may connect capitalized words inside one name (at most two in a row):
# "University of California", "Leonardo da Vinci", "Bank of the United States", "Ludwig van Beethoven".
_PARTICLES = frozenset(
    "of the de da di del della der den des du van von la le y bin ibn al el zu ter".split())
# Capitalized abbreviations whose period belongs to the name: "Mr. Smith", "St. Louis", "King Jr."
_NAME_ABBREVIATIONS = frozenset(
    "Mr Mrs Ms Dr Prof St Jr Sr Mt Ft Gen Col Lt Capt Sgt Gov Rev Sen Rep".split())
# A word: a letter, then letters/digits, with inner apostrophes and hyphens ("O'Brien", "Saint-Denis").
_WORD_RE = re.compile(r"[^\W\d_](?:\w|['’\-](?=\w))*")
# Capitalized words that start a new run instead of continuing one: articles, and after a word that
# ends with a period (an initial or a title may end a sentence), any stopword.
_ARTICLES = frozenset(["the", "a", "an"])
_GAP_RE = re.compile(r"[ \t\u00a0]+")  # words of one name are separated by spaces only, not newlines
_OPENERS = "\"'“‘([«"
_CLOSERS = "\"'”’)]»"


def _is_sentence_initial(text: str, start: int) -> bool:
  """True when start is the first word of a sentence: at the beginning of the text, after a line
  break, or after . ! ? (optionally followed by closing quotes/brackets), with opening quotes or
  brackets and whitespace allowed in between."""
  i = start - 1
  while i >= 0 and text[i] in _OPENERS:
    i -= 1
  saw_space = False
  while i >= 0 and text[i].isspace():
    if text[i] in "\n\r":
      return True
    saw_space = True
    i -= 1
  if i < 0:
    return True
  if not saw_space:
    return False
  while i >= 0 and text[i] in _CLOSERS:
    i -= 1
  return i >= 0 and text[i] in ".!?"


class CapitalizedEntityAnnotator(SpanAnnotator):
  """Named entities by a capitalization heuristic (a stand-in for a CoNLL-2003 tagger).

  1. A name is a maximal run of capitalized words (first letter upper case, any script: "Zürich",
     "Émile") separated by spaces, which may contain up to two connecting lower-case particles
     ("of", "the", "de", "da", "van", "von", ...) between capitalized words. A capitalized title or
     single-letter initial keeps its period ("Dr. J. R. R. Tolkien", "St. Louis"); a final initial's
     period is dropped ("World War I." -> "World War I"); a final possessive 's is dropped. A
     capitalized article starts a new run ("Erie Canal The Erie Canal", DPR's title-then-text), and
     so does a stopword after a period ("Plan B. The plan" -> "Plan B").
  2. At the start of a sentence, leading common words ("The", "In", "After", ...; a fixed stopword
     list) are removed from the run ("In March Smith" -> "March Smith"; "The Great Lakes" -> "Great
     Lakes").
  3. A single-word run is dropped when it is a stopword ("It", "I"), a month or weekday (dates are the
     DateAnnotator's), a single letter, or - at the start of a sentence only - an adverb-looking word
     ending in "ly" or a word that also occurs in lower case in the same text ("Originally", "Water").
  Known misses: lower-case names ("iPhone"), names split by a line break, a sentence-initial one-word
  name that is also a lower-case word of the text.
  """

  def annotate(self, text: str) -> List[Span]:
    words = []
    for m in _WORD_RE.finditer(text):
      start, end = m.span()
      word = m.group()
      capitalized = word[0].isupper()
      if capitalized and end < len(text) and text[end] == "." and (len(word) == 1 or
                                                                   word in _NAME_ABBREVIATIONS):
        end += 1
      words.append((start, end, capitalized))
    lower_words = {text[s:e].lower() for s, e, capitalized in words if not capitalized}

    spans = []
    run: List[Tuple[int, int]] = []
    particles: List[Tuple[int, int]] = []

    def close():
      if run:
        span = self._finish(text, run, lower_words)
        if span is not None:
          spans.append(span)
      run.clear()
      particles.clear()

    previous_end = None
    for start, end, capitalized in words:
      adjacent = previous_end is not None and _GAP_RE.fullmatch(text, previous_end, start) is not None
      previous_end = end
      if capitalized:
        lower = text[start:end].lower()
        if run and adjacent and not particles and (lower in _ARTICLES or
                                                   (text[run[-1][1] - 1] == "." and lower in _STOPWORDS)):
          adjacent = False  # "Plan B. The ..."; "Erie Canal The Erie Canal" (DPR's title + text)
        if run and adjacent:
          run.extend(particles)
          particles.clear()
          run.append((start, end))
        else:
          close()
          run.append((start, end))
      elif run and adjacent and len(particles) < 2 and text[start:end] in _PARTICLES:
        particles.append((start, end))
      else:
        close()
    close()
    return spans

  @staticmethod
  def _finish(text: str, run: List[Tuple[int, int]], lower_words) -> Optional[Span]:
    """Applies rules 1-3 to one run of words; returns its span or None."""
    initial = _is_sentence_initial(text, run[0][0])
    words = list(run)
    if initial:
      while words and text[words[0][0]:words[0][1]].lower() in _STOPWORDS:
        words.pop(0)
      while words and text[words[0][0]:words[0][1]] in _PARTICLES:
        words.pop(0)
    if not words:
      return None
    start, end = words[0][0], words[-1][1]
    last = text[words[-1][0]:end]
    if len(last) == 2 and last.endswith("."):
      end -= 1  # a final initial's period ends the sentence
    for suffix in ("'s", "’s"):
      if text[start:end].endswith(suffix) and end - 2 > start:
        end -= 2
    if len(words) == 1:
      word = text[start:end].rstrip(".")
      lower = word.lower()
      if lower in _STOPWORDS or lower in _NOT_ALONE or len(word) == 1:
        return None
      if words[0] == run[0] and initial and ((len(lower) > 4 and lower.endswith("ly")) or
                                             lower in lower_words):
        return None
    return (start, end)


def resolve_overlaps(spans: Iterable[Span]) -> List[Span]:
  """Keeps a non-overlapping subset: longer spans first, then earlier ones; returned sorted by start."""
  kept: List[Span] = []
  starts: List[int] = []
  for span in sorted(set(spans), key=lambda s: (s[0] - s[1], s[0])):
    i = bisect.bisect_left(starts, span[0])
    if i > 0 and kept[i - 1][1] > span[0]:
      continue
    if i < len(kept) and kept[i][0] < span[1]:
      continue
    kept.insert(i, span)
    starts.insert(i, span[0])
  return kept


class CombinedAnnotator(SpanAnnotator):
  """The union of several annotators' spans; overlapping spans resolve to the longer one (then the
  earlier), so "12 March 1854" from the dates wins over "March" from another annotator."""

  def __init__(self, annotators: Sequence[SpanAnnotator]):
    if not annotators:
      raise ValueError("CombinedAnnotator needs at least one annotator")
    self.annotators = list(annotators)

  def annotate(self, text: str) -> List[Span]:
    spans = []
    for annotator in self.annotators:
      spans.extend(_checked_char_spans(annotator.annotate(text), text, _name_of(annotator), "spans"))
    return resolve_overlaps(spans)

  @property
  def name(self) -> str:
    return "combined(" + ", ".join(_name_of(a) for a in self.annotators) + ")"


def _name_of(plugin) -> str:
  name = getattr(plugin, "name", None)
  return name if isinstance(name, str) else f"{type(plugin).__module__}.{type(plugin).__qualname__}"


# ----------------------------------------------------------------------------------------------------
# Sentence splitters.


class SentenceSplitter(abc.ABC):
  """Splits a text into sentences: split(text) -> sorted, non-overlapping [start, limit) CHARACTER
  offsets. Text between sentences (whitespace) belongs to none. Select your own (e.g. NLTK punkt, as
  ORQA used) with --sentence_splitter=module.path:ClassOrFactory."""

  @abc.abstractmethod
  def split(self, text: str) -> List[Span]:
    """Returns the [start, limit) character offsets of the sentences of text."""

  @property
  def name(self) -> str:
    return f"{type(self).__module__}.{type(self).__qualname__}"


# Lower-cased abbreviations after which a period does not end a sentence.
_ABBREVIATIONS = frozenset("""
mr mrs ms dr prof st jr sr mt ft gen col lt capt sgt gov rev sen rep hon messrs mme mlle
e.g i.e cf vs al approx ca c no nos vol vols fig figs pp p ed eds est dept univ assn bros inc ltd co corp
jan feb mar apr jun jul aug sep sept oct nov dec
""".split())
# A candidate boundary: . ! or ? (repeats allowed), closing quotes/brackets, whitespace, then an upper-case
# letter, a digit or an opening quote/bracket. A blank line always ends a sentence.
_BOUNDARY_RE = re.compile(r"[.!?]+[\"'”’)\]»]*(?=\s+([\"'“‘(\[«]*)(\w))|\n[ \t\r]*\n")
_TOKEN_BEFORE_PERIOD_RE = re.compile(r"(?:[^\W\d_]\.)*[^\W\d_]+$")


class RuleSentenceSplitter(SentenceSplitter):
  """A rule-based splitter. A sentence ends at ".", "!" or "?" (repeats allowed, plus any closing
  quotes or brackets) followed by whitespace and then an upper-case letter, a digit or an opening
  quote or bracket; and always at a blank line. A "." right before the whitespace does not end a
  sentence when the word before it is a common abbreviation ("Mr.", "Dr.", "St.", "e.g.", "i.e.",
  "vs.", "No.", "Fig.", "Jan.", ...; case-insensitive), a single letter ("J. Smith") or dotted letters
  ("U.S. Army"). "3.5" never splits (no whitespace follows the "."). Sentences are trimmed of
  surrounding whitespace; empty ones are dropped. Known misses: a sentence that really ends with an
  abbreviation or an initial ("... in the U.S. The next").
  """

  def split(self, text: str) -> List[Span]:
    sentences = []
    start = 0
    for m in _BOUNDARY_RE.finditer(text):
      if m.group().startswith("\n"):
        end = m.start()
      else:
        opener, first = m.group(1), m.group(2)
        if not (opener or first.isupper() or first.isdigit()):
          continue
        # After an abbreviation or an initial a "." ends nothing, unless a quote or bracket closes
        # around it ("(So did I.) Then"), or it is an ellipsis.
        if m.group()[-1] == "." and text[m.start():m.start() + 2] != "..":
          token = _TOKEN_BEFORE_PERIOD_RE.search(text, max(0, m.start() - 40), m.start())
          if token is not None:
            word = token.group()
            if len(word) == 1 or "." in word or word.lower() in _ABBREVIATIONS:
              continue
        end = m.end()
      self._add(text, start, end, sentences)
      start = m.end()
    self._add(text, start, len(text), sentences)
    return sentences

  @staticmethod
  def _add(text: str, start: int, end: int, sentences: List[Span]) -> None:
    while start < end and text[start].isspace():
      start += 1
    while end > start and text[end - 1].isspace():
      end -= 1
    if start < end:
      sentences.append((start, end))


class LineSentenceSplitter(SentenceSplitter):
  """One sentence per non-blank line (for input that is already split), trimmed of whitespace."""

  def split(self, text: str) -> List[Span]:
    sentences = []
    for m in re.finditer(r"[^\n]+", text):
      RuleSentenceSplitter._add(text, m.start(), m.end(), sentences)
    return sentences


class WholeTextSplitter(SentenceSplitter):
  """The whole text (trimmed) is one sentence."""

  def split(self, text: str) -> List[Span]:
    sentences = []
    RuleSentenceSplitter._add(text, 0, len(text), sentences)
    return sentences


# ----------------------------------------------------------------------------------------------------
# Loading plug-ins by name, and the two conversion points.


def _import_object(spec: str, kind: str):
  module_name, _, attribute = spec.partition(":")
  if not module_name or not attribute:
    raise ValueError(f"{kind} spec {spec!r}: expected module.path:ClassOrFactory")
  try:
    obj = importlib.import_module(module_name)
  except ImportError as e:
    raise ValueError(f"{kind} spec {spec!r}: cannot import module {module_name!r} ({e}); put it on "
                     "PYTHONPATH or fix the module path") from e
  for part in attribute.split("."):
    if not hasattr(obj, part):
      raise ValueError(f"{kind} spec {spec!r}: module {module_name!r} has no attribute {attribute!r}; "
                       "name a class, a factory function or an instance defined there")
    obj = getattr(obj, part)
  return obj


def _instantiate(spec: str, kind: str, method: str):
  """A class or zero-argument factory is called; an object with the method is used as is."""
  obj = _import_object(spec, kind)
  if not isinstance(obj, type) and callable(getattr(obj, method, None)):
    return obj
  if not callable(obj):
    raise ValueError(f"{kind} spec {spec!r} names a {type(obj).__name__}, not a class, factory or "
                     f"object with a {method}() method")
  try:
    instance = obj()
  except TypeError as e:
    raise ValueError(f"{kind} spec {spec!r}: calling it with no arguments failed ({e}); give it "
                     "defaults or wrap it in a zero-argument factory function") from e
  if not callable(getattr(instance, method, None)):
    raise ValueError(f"{kind} spec {spec!r} returned a {type(instance).__name__}, which has no "
                     f"{method}(text) method; subclass realm_tf.data.salient_spans."
                     f"{'SpanAnnotator' if method == 'annotate' else 'SentenceSplitter'}")
  return instance


_BUILTIN_ANNOTATORS = {
    "builtin": lambda: CombinedAnnotator([DateAnnotator(), CapitalizedEntityAnnotator()]),
    "dates": DateAnnotator,
    "entities": CapitalizedEntityAnnotator,
}


def load_annotator(spec: str) -> SpanAnnotator:
  """An annotator from a spec: "builtin" (dates + entities), "dates", "entities", or
  "module.path:ClassOrFactory" (a SpanAnnotator subclass, a zero-argument factory, or an instance with
  an annotate(text) method, imported by name). A comma-separated list combines several, e.g.
  "dates,my_pkg.ner:BertTagger" (overlaps resolve to the longer span)."""
  parts = [p.strip() for p in spec.split(",") if p.strip()]
  if not parts:
    raise ValueError("empty annotator spec; use \"builtin\", \"dates\", \"entities\" or "
                     "module.path:ClassOrFactory")
  annotators = []
  for part in parts:
    if part in _BUILTIN_ANNOTATORS:
      annotators.append(_BUILTIN_ANNOTATORS[part]())
    elif ":" in part:
      annotators.append(_instantiate(part, "annotator", "annotate"))
    else:
      raise ValueError(f"unknown annotator {part!r}; use one of {sorted(_BUILTIN_ANNOTATORS)} or "
                       "module.path:ClassOrFactory for your own")
  return annotators[0] if len(annotators) == 1 else CombinedAnnotator(annotators)


_BUILTIN_SPLITTERS = {
    "builtin": RuleSentenceSplitter,
    "rules": RuleSentenceSplitter,
    "lines": LineSentenceSplitter,
    "none": WholeTextSplitter,
}


def load_sentence_splitter(spec: str) -> SentenceSplitter:
  """A splitter from a spec: "builtin" (= "rules", RuleSentenceSplitter), "lines" (one sentence per
  line), "none" (the whole text is one sentence), or "module.path:ClassOrFactory"."""
  spec = spec.strip()
  if spec in _BUILTIN_SPLITTERS:
    return _BUILTIN_SPLITTERS[spec]()
  if ":" in spec:
    return _instantiate(spec, "sentence splitter", "split")
  raise ValueError(f"unknown sentence splitter {spec!r}; use one of {sorted(_BUILTIN_SPLITTERS)} or "
                   "module.path:ClassOrFactory for your own")


def annotate_spans(text: str, annotator: SpanAnnotator, offsets: Optional[List[int]] = None) -> List[Span]:
  """The annotator's spans as sorted, unique UTF-8 BYTE offsets into text (checked first)."""
  spans = _checked_char_spans(annotator.annotate(text), text, _name_of(annotator), "spans")
  return to_byte_spans(text, sorted(set(spans)), offsets)


def split_sentences(text: str,
                    splitter: Optional[SentenceSplitter] = None,
                    offsets: Optional[List[int]] = None) -> List[Span]:
  """Sentences as sorted, non-overlapping UTF-8 BYTE offsets into text (RuleSentenceSplitter by
  default); a plug-in's output is checked to be in range, sorted and non-overlapping."""
  splitter = RuleSentenceSplitter() if splitter is None else splitter
  who = _name_of(splitter)
  sentences = _checked_char_spans(splitter.split(text), text, who, "sentences")
  for i in range(1, len(sentences)):
    if sentences[i][0] < sentences[i - 1][1]:
      raise ValueError(f"{who} returned sentences[{i}] = {sentences[i]} starting before sentences"
                       f"[{i - 1}] = {sentences[i - 1]} ends; sentences must be sorted and must not "
                       "overlap; fix the plug-in")
  return to_byte_spans(text, sentences, offsets)
