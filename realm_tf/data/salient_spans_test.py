"""Tests for realm_tf.data.salient_spans: dates, capitalized entities, overlaps, plug-ins, sentences."""

import json
import os
import re

import tensorflow as tf

from realm_tf.data import salient_spans as ss
from realm_tf.testing import test_paths


def _texts(annotator_or_splitter, text):
  """The substrings an annotator or splitter returns, in order of start."""
  if isinstance(annotator_or_splitter, ss.SentenceSplitter):
    spans = annotator_or_splitter.split(text)
  else:
    spans = annotator_or_splitter.annotate(text)
  return [text[s:l] for s, l in sorted(spans)]


class FixedAnnotator(ss.SpanAnnotator):
  """A plug-in for the tests, loaded by "module:FixedAnnotator": marks every "Zorvel"."""

  def annotate(self, text):
    spans, start = [], text.find("Zorvel")
    while start >= 0:
      spans.append((start, start + len("Zorvel")))
      start = text.find("Zorvel", start + 1)
    return spans


def make_fixed_annotator():
  return FixedAnnotator()


class _ListAnnotator(ss.SpanAnnotator):

  def __init__(self, spans):
    self.spans = spans

  def annotate(self, text):
    return list(self.spans)


class EveryWordSplitter(ss.SentenceSplitter):
  """A plug-in splitter: every word is a sentence."""

  def split(self, text):
    return [m.span() for m in re.finditer(r"\S+", text)]


NOT_AN_ANNOTATOR = 42


class DateAnnotatorTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.dates = ss.DateAnnotator()

  def test_each_form(self):
    cases = {
        "He was born on 12 March 1854 in town.": ["12 March 1854"],
        "On the 12th of March, 1854 it rained.": ["12th of March, 1854"],
        "Born 3 Sept. 1901 there.": ["3 Sept. 1901"],
        "It opened on March 12, 1854, at noon.": ["March 12, 1854"],
        "It opened on March 12 1854 at noon.": ["March 12 1854"],
        "In March 1854 the war began.": ["March 1854"],
        "In 1854 the war began.": ["1854"],
        "Dated 12/03/1854 and 03/12/54 and 12.03.1854 and 12-03-1854.": [
            "12/03/1854", "03/12/54", "12.03.1854", "12-03-1854"
        ],
        "Filed 1854-03-12 here.": ["1854-03-12"],
        "Popular in the 1850s and 1960's.": ["1850s", "1960's"],
        "A 19th century house and a 5th-century tomb.": ["19th century", "5th-century"],
        "From 44 BC to AD 800 and 300 CE.": ["44 BC", "AD 800", "300 CE"],
        "We met on 12 March and again on March 14.": ["12 March", "March 14"],
        "From 1854–1856.": ["1854", "1856"],
    }
    for text, expected in cases.items():
      self.assertEqual(_texts(self.dates, text), expected, text)

  def test_non_dates(self):
    for text in [
        "It is 3.5 metres.", "A crowd of 4352 people.", "It cost $1854.", "Count 1,854 votes.",
        "The value 1854.5 is high.", "In March they left.", "You may 12 times.", "Code 18545 failed.",
        "Dated 13/13/1854 and 1.2.34.", "Filed 1854-13-01.", "Around 999 of them.",
        "Version 12.03.54 shipped.", "Year 2150 or 0999."
    ]:
      self.assertEqual(_texts(self.dates, text), [], text)

  def test_lower_case_month_is_no_date_but_the_year_is(self):
    self.assertEqual(_texts(self.dates, "They may 1854."), ["1854"])


class CapitalizedEntityAnnotatorTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.entities = ss.CapitalizedEntityAnnotator()

  def test_runs_with_particles(self):
    self.assertEqual(_texts(self.entities, "Leonardo da Vinci painted the Mona Lisa in Florence."),
                     ["Leonardo da Vinci", "Mona Lisa", "Florence"])
    self.assertEqual(_texts(self.entities, "She studied at the University of California in 1990."),
                     ["University of California"])
    self.assertEqual(_texts(self.entities, "A loan from the Bank of the United States of America."),
                     ["Bank of the United States of America"])
    # Particles only connect capitalized words; trailing ones are not part of the name.
    self.assertEqual(_texts(self.entities, "He met Smith of the army."), ["Smith"])

  def test_sentence_initial_common_words(self):
    self.assertEqual(_texts(self.entities, "The Great Lakes of North America are large."),
                     ["Great Lakes of North America"])
    self.assertEqual(_texts(self.entities, "In 1776, Rosis founded the Quoenmer Circle."),
                     ["Rosis", "Quoenmer Circle"])
    self.assertEqual(_texts(self.entities, "It lies on the river. Its source is far."), [])
    # "Originally" looks like an adverb; "Water" occurs in lower case elsewhere; "Zorvel" is a name.
    self.assertEqual(_texts(self.entities, "Originally, it ran. Water is wet. Zorvel liked water."),
                     ["Zorvel"])
    # Mid-sentence, a capitalized "The" belongs to the name.
    self.assertEqual(_texts(self.entities, "He read The Times daily."), ["The Times"])

  def test_single_words_dropped(self):
    self.assertEqual(_texts(self.entities, "Then I left in March on a Monday with Plan B."), ["Plan B"])

  def test_initials_titles_and_possessives(self):
    self.assertEqual(_texts(self.entities, "Yesterday Dr. Jones met J. R. R. Tolkien in St. Louis."),
                     ["Dr. Jones", "J. R. R. Tolkien", "St. Louis"])
    self.assertEqual(_texts(self.entities, "We saw Lake Erie's shore and O'Brien's house."),
                     ["Lake Erie", "O'Brien"])
    self.assertEqual(_texts(self.entities, "It was Plan B. The plan failed."), ["Plan B"])
    self.assertEqual(_texts(self.entities, "Erie Canal The Erie Canal is long."),
                     ["Erie Canal", "The Erie Canal"])

  def test_no_run_across_line_breaks_or_punctuation(self):
    self.assertEqual(_texts(self.entities, "We went to Paris\nLondon came later, Berlin too."),
                     ["Paris", "London", "Berlin"])

  def test_accented_names_and_byte_offsets(self):
    text = "Émile Zola lived in Zürich near Łódź."
    spans = self.entities.annotate(text)
    self.assertEqual([text[s:l] for s, l in spans], ["Émile Zola", "Zürich", "Łódź"])
    self.assertEqual(spans, [(0, 10), (20, 26), (32, 36)])  # characters
    byte_spans = ss.annotate_spans(text, self.entities)
    data = text.encode("utf-8")
    self.assertEqual(byte_spans, [(0, 11), (21, 28), (34, 41)])  # bytes: É, ü, Ł, ó, ź take two
    self.assertEqual([data[s:l].decode("utf-8") for s, l in byte_spans], ["Émile Zola", "Zürich", "Łódź"])


class OffsetConversionTest(tf.test.TestCase):

  def test_char_to_byte_offsets(self):
    self.assertEqual(ss.char_to_byte_offsets("abc"), [0, 1, 2, 3])
    self.assertEqual(ss.char_to_byte_offsets("aé€😀b"), [0, 1, 3, 6, 10, 11])
    self.assertEqual(ss.char_to_byte_offsets(""), [0])

  def test_to_byte_spans_round_trip(self):
    text = "Zürich, 12 März 1854 — 東京 1868."
    data = text.encode("utf-8")
    chars = [(0, 6), (8, 20), (23, 25), (26, 30)]
    for (cs, cl), (bs, bl) in zip(chars, ss.to_byte_spans(text, chars)):
      self.assertEqual(data[bs:bl].decode("utf-8"), text[cs:cl])


class CombinedAnnotatorTest(tf.test.TestCase):

  def test_overlap_prefers_longer_then_earlier(self):
    combined = ss.CombinedAnnotator([
        _ListAnnotator([(0, 5), (10, 12), (20, 30)]),
        _ListAnnotator([(3, 12), (11, 15), (20, 30), (40, 42)])
    ])
    # (3,12) beats (0,5) and (10,12); (11,15) overlaps (3,12); (20,30) is deduplicated.
    self.assertEqual(combined.annotate("x" * 50), [(3, 12), (20, 30), (40, 42)])
    tie = ss.CombinedAnnotator([_ListAnnotator([(5, 9)]), _ListAnnotator([(2, 6)])])
    self.assertEqual(tie.annotate("x" * 10), [(2, 6)])
    self.assertEqual(ss.resolve_overlaps([(0, 2), (2, 4), (1, 3)]), [(0, 2), (2, 4)])

  def test_builtin_date_wins_over_month_entity(self):
    text = "Rosis was born on 12 September 1737 in Pryenfal."
    self.assertEqual(_texts(ss.load_annotator("builtin"), text), ["Rosis", "12 September 1737", "Pryenfal"])

  def test_bad_plugin_output_is_named(self):
    bad = ss.CombinedAnnotator([_ListAnnotator([(3, 99)])])
    with self.assertRaisesRegex(ValueError, r"_ListAnnotator returned spans\[0\] = \(3, 99\).*characters"):
      bad.annotate("short")
    with self.assertRaisesRegex(ValueError, r"spans\[0\] = \(4, 4\)"):
      ss.annotate_spans("short", _ListAnnotator([(4, 4)]))
    with self.assertRaisesRegex(ValueError, "not a \\(start, limit\\) pair"):
      ss.annotate_spans("short", _ListAnnotator([7]))


class LoadAnnotatorTest(tf.test.TestCase):

  def test_builtins(self):
    self.assertIsInstance(ss.load_annotator("dates"), ss.DateAnnotator)
    self.assertIsInstance(ss.load_annotator("entities"), ss.CapitalizedEntityAnnotator)
    builtin = ss.load_annotator("builtin")
    self.assertIsInstance(builtin, ss.CombinedAnnotator)
    self.assertEqual([type(a) for a in builtin.annotators], [ss.DateAnnotator, ss.CapitalizedEntityAnnotator])

  def test_plugin_by_module_path(self):
    text = "In 1854 Zorvel met Zorvel."
    for spec in (f"{__name__}:FixedAnnotator", f"{__name__}:make_fixed_annotator"):
      annotator = ss.load_annotator(spec)
      self.assertIsInstance(annotator, FixedAnnotator, spec)
      self.assertEqual(_texts(annotator, text), ["Zorvel", "Zorvel"])
    combined = ss.load_annotator(f"dates, {__name__}:FixedAnnotator")
    self.assertEqual(_texts(combined, text), ["1854", "Zorvel", "Zorvel"])
    self.assertIn("FixedAnnotator", combined.name)

  def test_bad_specs(self):
    for spec, message in [
        ("nope", "unknown annotator 'nope'"),
        ("", "empty annotator spec"),
        ("no_such_module_xyz:Thing", "cannot import module 'no_such_module_xyz'"),
        (f"{__name__}:Missing", "has no attribute 'Missing'"),
        (f"{__name__}:NOT_AN_ANNOTATOR", "names a int"),
        (f"{__name__}:_ListAnnotator", "calling it with no arguments failed"),
        (f"{__name__}:EveryWordSplitter", "has no annotate\\(text\\) method"),
        (f"{__name__}:", "expected module.path:ClassOrFactory"),
    ]:
      with self.assertRaisesRegex(ValueError, message, msg=spec):
        ss.load_annotator(spec)


class SentenceSplitterTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.splitter = ss.RuleSentenceSplitter()

  def test_basic_punctuation_and_trimming(self):
    self.assertEqual(_texts(self.splitter, "  One here. Two there!  Three? 4 is a number. Last  "),
                     ["One here.", "Two there!", "Three?", "4 is a number.", "Last"])
    self.assertEqual(_texts(self.splitter, 'He said "Go." Then he left. (So did I.) "Why?" she asked.'),
                     ['He said "Go."', "Then he left.", "(So did I.)", '"Why?" she asked.'])
    self.assertEqual(self.splitter.split(""), [])
    self.assertEqual(self.splitter.split("   "), [])

  def test_abbreviations_initials_and_numbers(self):
    self.assertEqual(_texts(self.splitter, "Mr. Smith met Dr. Jones. They left."),
                     ["Mr. Smith met Dr. Jones.", "They left."])
    self.assertEqual(_texts(self.splitter, "Fruit, e.g. Apples, i.e. Red ones. See Fig. 3 now."),
                     ["Fruit, e.g. Apples, i.e. Red ones.", "See Fig. 3 now."])
    self.assertEqual(_texts(self.splitter, "J. R. R. Tolkien wrote it. The U.S. Army came."),
                     ["J. R. R. Tolkien wrote it.", "The U.S. Army came."])
    self.assertEqual(_texts(self.splitter, "It is 3.5 m tall. Pi is 3.14159. Version 2.0 is out."),
                     ["It is 3.5 m tall.", "Pi is 3.14159.", "Version 2.0 is out."])

  def test_lower_case_continuation_and_blank_lines(self):
    self.assertEqual(_texts(self.splitter, "It cost 5 vs. 6 dollars. ok. fine then.\n\nNew part\nwith lines"),
                     ["It cost 5 vs. 6 dollars. ok. fine then.", "New part\nwith lines"])

  def test_byte_offsets_of_non_ascii_text(self):
    text = "Zürich liegt am See. Łódź ist weit."
    self.assertEqual(ss.split_sentences(text), [(0, 21), (22, 39)])
    data = text.encode("utf-8")
    self.assertEqual([data[s:l].decode("utf-8") for s, l in ss.split_sentences(text)],
                     ["Zürich liegt am See.", "Łódź ist weit."])

  def test_other_splitters_and_plugins(self):
    self.assertEqual(_texts(ss.load_sentence_splitter("lines"), "a b.\n\n c. D\n"), ["a b.", "c. D"])
    self.assertEqual(_texts(ss.load_sentence_splitter("none"), " A. B. "), ["A. B."])
    self.assertIsInstance(ss.load_sentence_splitter("builtin"), ss.RuleSentenceSplitter)
    plugin = ss.load_sentence_splitter(f"{__name__}:EveryWordSplitter")
    self.assertEqual(ss.split_sentences("ab é c", plugin), [(0, 2), (3, 5), (6, 7)])
    with self.assertRaisesRegex(ValueError, "unknown sentence splitter 'punkt'"):
      ss.load_sentence_splitter("punkt")
    with self.assertRaisesRegex(ValueError, "has no split\\(text\\) method"):
      ss.load_sentence_splitter(f"{__name__}:FixedAnnotator")

  def test_overlapping_plugin_sentences_fail(self):

    class Overlapping(ss.SentenceSplitter):

      def split(self, text):
        return [(0, 4), (2, 6)]

    with self.assertRaisesRegex(
        ValueError, r"Overlapping returned sentences\[1\] = \(2, 6\) starting "
        r"before sentences\[0\] = \(0, 4\) ends"):
      ss.split_sentences("abcdefgh", Overlapping())

  def test_reproduces_testdata_sentences(self):
    """The synthetic world's sentences are simple: the splitter must find exactly them."""
    path = os.path.join(test_paths.repo_root(), "testdata", "pretraining.jsonl")
    with open(path, encoding="utf-8") as f:
      records = [json.loads(line) for line in f]
    self.assertLen(records, 444)  # 300 articles, 144 news items
    for record in records:
      self.assertEqual([list(s) for s in ss.split_sentences(record["text"])], record["sentences"],
                       record["title"])


if __name__ == "__main__":
  tf.test.main()
