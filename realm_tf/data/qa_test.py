"""Tests for realm_tf.data.qa: every QA layout into QAExample, errors that name the line, the real files."""

import json
import os
import tempfile
from unittest import mock

import tensorflow as tf

from realm_tf.data import corpus
from realm_tf.data import qa
from realm_tf.testing import test_paths

InputError = qa.InputError

_TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata")


class QATestCase(tf.test.TestCase):

  def write(self, name, content):
    path = os.path.join(self.create_tempdir().full_path, name)
    with open(path, "wb") as f:
      f.write(content.encode("utf-8") if isinstance(content, str) else content)
    return path

  def assertRaisesAt(self, where, fn, *args, **kwargs):
    """fn raises InputError whose message starts with `where` (FILE:LINE)."""
    with self.assertRaises(InputError) as ctx:
      fn(*args, **kwargs)
    self.assertStartsWith(str(ctx.exception), where)
    return str(ctx.exception)


def _jsonl(*records):
  return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


class JsonlTest(QATestCase):

  def test_reads_questions_answers_and_metadata(self):
    path = self.write(
        "qa.jsonl",
        _jsonl({
            "question": "who?",
            "answer": ["Ann", "Anne"],
            "doc_id": "d1",
            "title": "T"
        }, "", {
            "question": "where?",
            "answers": ["Rome"]
        }))
    examples = qa.load_jsonl(path)
    self.assertEqual(examples, [
        qa.QAExample("who?", ["Ann", "Anne"], False, {
            "doc_id": "d1",
            "title": "T"
        }),
        qa.QAExample("where?", ["Rome"], False, {})
    ])

  def test_malformed_json_line_names_line(self):
    path = self.write("qa.jsonl", _jsonl({"question": "q", "answer": ["a"]}, '{"question": "q", '))
    self.assertRaisesAt(f"{path}:2:", qa.load_jsonl, path)

  def test_missing_answer_field_names_line(self):
    path = self.write("qa.jsonl", _jsonl({"question": "q", "answer": ["a"]}, {"question": "r"}))
    message = self.assertRaisesAt(f"{path}:2:", qa.load_jsonl, path)
    self.assertIn("require_answers=False", message)

  def test_empty_answers_name_line(self):
    path = self.write("qa.jsonl", _jsonl({"question": "q", "answer": []}))
    self.assertIn("no answers", self.assertRaisesAt(f"{path}:1:", qa.load_jsonl, path))
    path = self.write("qa.jsonl", _jsonl({"question": "q", "answer": ["a", " "]}))
    self.assertIn("empty answer", self.assertRaisesAt(f"{path}:1:", qa.load_jsonl, path))

  def test_wrong_types_name_line(self):
    for record in ({
        "question": "q",
        "answer": "a"
    }, {
        "question": "",
        "answer": ["a"]
    }, {
        "question": 3,
        "answer": ["a"]
    }, {
        "question": "q",
        "answer": [1]
    }):
      path = self.write("qa.jsonl", _jsonl(record))
      self.assertRaisesAt(f"{path}:1:", qa.load_jsonl, path)

  def test_skip_invalid_counts(self):
    path = self.write(
        "qa.jsonl",
        _jsonl({
            "question": "q1",
            "answer": ["a"]
        }, "not json", {"question": "q2"}, {
            "question": "q3",
            "answer": []
        }, {
            "question": "q4",
            "answer": ["b"]
        }))
    skipped = qa.SkipCounter()
    examples = qa.load_jsonl(path, skipped=skipped)
    self.assertEqual([e.question for e in examples], ["q1", "q4"])
    self.assertEqual(skipped.count, 3)
    self.assertIn(f"{path}:2:", skipped.examples[0])

  def test_prediction_only_files(self):
    path = self.write(
        "q.jsonl",
        _jsonl({"question": "q1"}, {
            "question": "q2",
            "answer": []
        }, {
            "question": "q3",
            "answer": ["c"]
        }))
    examples = qa.load_jsonl(path, require_answers=False)
    self.assertEqual([(e.question, e.answers) for e in examples], [("q1", []), ("q2", []), ("q3", ["c"])])

  def test_regex_answers_are_validated(self):
    path = self.write(
        "CuratedTrec.resplit.test.jsonl",
        _jsonl({
            "question": "q",
            "answer": ["Sept?(ember)?"]
        }, {
            "question": "r",
            "answer": ["(unclosed"]
        }))
    self.assertIn("regular expression",
                  self.assertRaisesAt(f"{path}:2:", qa.load_jsonl, path, answer_is_regex=True))
    skipped = qa.SkipCounter()
    examples = qa.load_qa(path, skipped=skipped)  # the file name says CuratedTrec: patterns
    self.assertEqual(examples, [qa.QAExample("q", ["Sept?(ember)?"], True, {})])
    self.assertEqual(skipped.count, 1)


class WebQuestionsTest(QATestCase):

  def test_parse_target_value(self):
    self.assertEqual(qa.parse_target_value('(list (description "Jazmyn Bieber") (description Lawyer))'),
                     ["Jazmyn Bieber", "Lawyer"])
    self.assertEqual(qa.parse_target_value(r'(list (description "\"Weird Al\" Yankovic"))'),
                     ['"Weird Al" Yankovic'])
    self.assertEqual(qa.parse_target_value(r'(list (description "a \\ b (c)"))'), ["a \\ b (c)"])
    self.assertEqual(qa.parse_target_value("(list (description New York) (description 1945))"),
                     ["New York", "1945"])
    self.assertEqual(qa.parse_target_value("(list)"), [])
    for bad in ('(list (description "open', "(set (description a))", "(list (description a)",
                "(list (description)) x", "(list (description (a)))", '(list (description "a" b))'):
      with self.assertRaises(ValueError, msg=bad):
        qa.parse_target_value(bad)

  def test_original_packaging(self):
    records = [{
        "url": "http://www.freebase.com/view/en/x",
        "utterance": "who is x?",
        "targetValue": '(list (description "Padm\u00e9 Amidala") (description "Tom \\"T\\" Jones"))'
    }, {
        "url": "u2",
        "utterance": "what is y?",
        "targetValue": "(list (description Lawyer))"
    }]
    path = self.write("webquestions.examples.test.json",
                      "[" + ",\n".join(json.dumps(r) for r in records) + "]\n")
    examples = qa.load_qa(path)
    self.assertEqual(examples, [
        qa.QAExample("who is x?", ["Padmé Amidala", 'Tom "T" Jones'], False,
                     {"url": "http://www.freebase.com/view/en/x"}),
        qa.QAExample("what is y?", ["Lawyer"], False, {"url": "u2"})
    ])

  def test_qtext_packaging(self):
    path = self.write(
        "test.json", '[\n {"qId": "wq1", "answers": ["A", "B"], "qText": "q1?"},\n'
        ' {"qId": "wq2", "answers": ["C"], "qText": "q2?"}\n]\n')
    self.assertEqual(qa.load_webquestions(path), [
        qa.QAExample("q1?", ["A", "B"], False, {"qId": "wq1"}),
        qa.QAExample("q2?", ["C"], False, {"qId": "wq2"})
    ])

  def test_errors_name_the_record_line(self):
    good = '{"qId": "a", "answers": ["A"], "qText": "q?"}'
    cases = {
        3: [good, good, '{"qId": "c", "answers": [], "qText": "q?"}'],
        2: [good, '{"utterance": "u?", "targetValue": "(list (description \\"x)"}'],
        4: [good, good, good, '{"url": "u", "utterance": "u?"}'],
        5: [good, good, good, good, '["not", "an", "object"]'],
    }
    for line, lines in cases.items():
      path = self.write("wq.json", "[" + ",\n".join(lines) + "]")
      self.assertRaisesAt(f"{path}:{line}:", qa.load_webquestions, path)
      skipped = qa.SkipCounter()
      self.assertLen(qa.load_webquestions(path, skipped=skipped), line - 1)
      self.assertEqual(skipped.count, 1)

  def test_malformed_json_names_line_even_when_skipping(self):
    path = self.write("wq.json", '[\n{"qId": "a", "answers": ["A"], "qText": "q?"},\n{"qId": "b",, }\n]')
    message = self.assertRaisesAt(f"{path}:3:", qa.load_webquestions, path, skipped=qa.SkipCounter())
    self.assertIn("not valid JSON", message)
    path = self.write("wq.json", '[{"qId": "a", "answers": ["A"], "qText": "q?"}\n\n{"qId": "b"}]')
    self.assertRaisesAt(f"{path}:3:", qa.load_webquestions, path)
    path = self.write("wq.json", '{"data": []}')
    self.assertRaisesAt(f"{path}:1:", qa.load_webquestions, path)

  def test_prediction_only(self):
    path = self.write("wq.json", '[{"utterance": "u?", "url": "x"}, {"qText": "q?"}]')
    self.assertEqual([e.answers for e in qa.load_webquestions(path, require_answers=False)], [[], []])


class CuratedTrecTest(QATestCase):

  def test_both_layouts(self):
    path = self.write(
        "trec.tsv", "12\tfactoid\t\"The Muppets\" was created by whom?\tHenson\n"
        "When is it?\tSept?(ember)?|Feb(ruary)?\n"
        "lfb1\tfactoid\tWhat is x?\tA\\\tB|C\n")
    self.assertEqual(qa.load_curatedtrec(path), [
        qa.QAExample('"The Muppets" was created by whom?', ["Henson"], True, {
            "id": "12",
            "type": "factoid"
        }),
        qa.QAExample("When is it?", ["Sept?(ember)?|Feb(ruary)?"], True, {}),
        qa.QAExample("What is x?", ["A\\\tB|C"], True, {
            "id": "lfb1",
            "type": "factoid"
        })
    ])

  def test_invalid_regex_names_line(self):
    path = self.write("trec.tsv", "q1\tfine\nq2\tSievert \\(Sv\\)\\\nq3\tok\n")
    self.assertIn("regular expression", self.assertRaisesAt(f"{path}:2:", qa.load_curatedtrec, path))
    skipped = qa.SkipCounter()
    self.assertEqual([e.question for e in qa.load_curatedtrec(path, skipped=skipped)], ["q1", "q3"])
    self.assertEqual(skipped.count, 1)

  def test_wrong_column_count_names_line(self):
    for row in ("only a question", "1\tfactoid\tq", "q\tpattern\t"):
      path = self.write("trec.tsv", "q\tp\n" + row + "\n")
      self.assertIn("columns", self.assertRaisesAt(f"{path}:2:", qa.load_curatedtrec, path))

  def test_empty_pattern_is_rejected(self):
    path = self.write("trec.tsv", "q\t \n")
    self.assertRaisesAt(f"{path}:1:", qa.load_curatedtrec, path)


def _squad_json(articles):
  return json.dumps({"version": "1.1", "data": articles})


_SQUAD = [
    {
        "title":
            "Alpha_Beta",
        "paragraphs": [{
            "context":
                "Alpha ctx one.",
            "qas": [{
                "id":
                    "q1",
                "question":
                    "Q1?",
                "answers": [{
                    "answer_start": 0,
                    "text": "Alpha"
                }, {
                    "answer_start": 6,
                    "text": "ctx"
                }, {
                    "answer_start": 0,
                    "text": "Alpha"
                }]
            }]
        }, {
            "context": "Alpha ctx two.",
            "qas": []
        }]
    },
    {
        "title":
            "Gamma",
        "paragraphs": [{
            "context":
                "Gamma ctx.",
            "qas": [{
                "id": "q2",
                "question": "Q2?",
                "answers": [{
                    "answer_start": 0,
                    "text": "Gamma"
                }]
            }, {
                "id": "q3",
                "question": "Q3?",
                "answers": [{
                    "answer_start": 6,
                    "text": "ctx"
                }]
            }]
        }]
    },
]


class SquadTest(QATestCase):

  def test_questions_answers_and_gold_paragraphs(self):
    path = self.write("dev.json", _squad_json(_SQUAD))
    examples = qa.load_squad(path, first_paragraph_id=10)
    self.assertEqual([(e.question, e.answers) for e in examples], [("Q1?", ["Alpha", "ctx"]),
                                                                   ("Q2?", ["Gamma"]), ("Q3?", ["ctx"])])
    self.assertEqual(examples[0].metadata, {
        "id": "q1",
        "title": "Alpha Beta",
        "paragraph_index": 0,
        "doc_id": "10"
    })
    self.assertEqual([e.metadata["paragraph_index"] for e in examples], [0, 2, 2])
    documents = qa.load_squad_paragraphs(path, first_paragraph_id=10)
    self.assertEqual(documents, [
        corpus.Document("Alpha Beta", "Alpha ctx one.", "10"),
        corpus.Document("Alpha Beta", "Alpha ctx two.", "11"),
        corpus.Document("Gamma", "Gamma ctx.", "12")
    ])
    by_id = {d.doc_id: d for d in documents}
    for example in examples:
      self.assertTrue(any(a in by_id[example.metadata["doc_id"]].body for a in example.answers))
    self.assertEqual(qa.load_qa(path), qa.load_squad(path))

  def test_unanswerable_question_names_json_path(self):
    articles = json.loads(json.dumps(_SQUAD))
    articles[1]["paragraphs"][0]["qas"][1]["answers"] = []
    path = self.write("dev.json", _squad_json(articles))
    message = self.assertRaisesAt(f"{path}: data[1].paragraphs[0].qas[1] (id 'q3')", qa.load_squad, path)
    self.assertIn("no answers", message)
    skipped = qa.SkipCounter()
    self.assertLen(qa.load_squad(path, skipped=skipped), 2)
    self.assertEqual(skipped.count, 1)
    self.assertLen(qa.load_squad(path, require_answers=False), 3)

  def test_bad_structure(self):
    path = self.write("dev.json", '{"data": [{"title": "t"}]}')
    self.assertRaisesAt(f"{path}: data[0]", qa.load_squad, path)
    path = self.write("dev.json", '{"data": \n[}')
    self.assertRaisesAt(f"{path}:2:", qa.load_squad_paragraphs, path)


class LoadQaTest(QATestCase):

  def test_testdata_via_dispatch(self):
    examples = qa.load_qa(os.path.join(_TESTDATA, "qa.dev.jsonl"))
    self.assertLen(examples, 100)
    self.assertFalse(any(e.answer_is_regex for e in examples))
    self.assertTrue(all(set(e.metadata) == {"doc_id", "title"} for e in examples))

  def test_dispatch_by_extension(self):
    trec = self.write("t.tsv", "q\tp\n")
    self.assertTrue(qa.load_qa(trec)[0].answer_is_regex)
    with self.assertRaisesRegex(ValueError, "unknown QA file type"):
      qa.load_qa(self.write("qa.csv", "q,a\n"))

  def test_parse_tfds_spec(self):
    self.assertEqual(qa.parse_tfds_spec("tfds:natural_questions_open/validation"),
                     ("natural_questions_open", "validation"))
    self.assertEqual(qa.parse_tfds_spec("tfds:squad/v1.1:3.0.0/train[:10%]"),
                     ("squad/v1.1:3.0.0", "train[:10%]"))
    with self.assertRaises(ValueError):
      qa.parse_tfds_spec("tfds:squad")
    with self.assertRaisesRegex(ValueError, "no QA mapping"):
      qa.load_tfds("mnist", "test")


class TfdsTest(QATestCase):
  """TFDS loading on TFDS's mock data: the real tfds.load path, random records, no download."""

  def setUp(self):
    super().setUp()
    # tfds.load makes a scratch directory per builder (DatasetInfo.initialize_from_bucket) and leaves it;
    # keep those inside the test's own temporary directory.
    patcher = mock.patch.object(tempfile, "tempdir", self.create_tempdir().full_path)
    patcher.start()
    self.addCleanup(patcher.stop)

  def _raw(self, name, split):
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    return list(tfds.as_numpy(tfds.load(name, split=split)))

  def _check(self, spec, expected_fn):
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    name, split = qa.parse_tfds_spec(spec)
    with tfds.testing.mock_data(num_examples=4):
      examples = qa.load_qa(spec)
      raw = self._raw(name, split)
    self.assertLen(examples, 4)
    self.assertEqual([(e.question, e.answers, e.metadata) for e in examples], [expected_fn(r) for r in raw])
    self.assertTrue(all(e.answers for e in examples))

  def test_natural_questions_open(self):
    self._check("tfds:natural_questions_open/validation", lambda r:
                (r["question"].decode(), [a.decode() for a in r["answer"]], {}))

  def test_web_questions(self):
    self._check(
        "tfds:web_questions/test", lambda r: (r["question"].decode(), [a.decode() for a in r["answers"]], {
            "url": r["url"].decode()
        }))

  def test_squad(self):

    def expected(r):
      answers = []
      for a in r["answers"]["text"]:
        if a.decode() not in answers:
          answers.append(a.decode())
      return (r["question"].decode(), answers, {
          "id": r["id"].decode(),
          "title": r["title"].decode().replace("_", " ")
      })

    self._check("tfds:squad/v1.1/validation", expected)

  def test_trivia_qa(self):

    def expected(r):
      answers = [r["answer"]["value"].decode()]
      answers += [a.decode() for a in r["answer"]["aliases"] if a.decode() not in answers]
      return r["question"].decode(), answers, {"question_id": r["question_id"].decode()}

    self._check("tfds:trivia_qa/unfiltered.nocontext/validation", expected)


class SharedDataTest(QATestCase):
  """Reads the real data sets in $REALM_TF_SHARED_DATA (skipped when it is unset or absent)."""

  def setUp(self):
    super().setUp()
    self.data_dir = test_paths.shared_data_dir()
    if self.data_dir is None:
      self.skipTest(test_paths.missing_data_message())

  def _path(self, *parts):
    path = os.path.join(self.data_dir, *parts)
    if not os.path.exists(path):
      self.skipTest(f"{path} is missing from the shared data")
    return path

  def _load(self, *parts, **kwargs):
    skipped = qa.SkipCounter()
    examples = qa.load_qa(self._path(*parts), skipped=skipped, **kwargs)
    self.assertEqual(skipped.count, 0, skipped.summary())
    return examples

  def test_nq_open(self):
    dev = self._load("nq_open", "NQ-open.dev.jsonl")
    self.assertLen(dev, 3610)
    self.assertEqual(dev[0].answers, ["14 December 1972 UTC", "December 1972"])
    self.assertLen(self._load("nq_open", "NQ-open.efficientqa.dev.1.1.jsonl"), 1800)
    test = self._load("nq_open", "NQ-open.efficientqa.test.1.1.jsonl")
    self.assertLen(test, 1769)  # this variant carries answers and rated predictions
    self.assertTrue(all(e.answers for e in test))
    self.assertIn("def_correct_predictions", test[0].metadata)
    for split, count in (("dev", 1800), ("test", 1769)):
      name = f"NQ-open.efficientqa.{split}.1.1.no-annotations.jsonl"
      questions = self._load("nq_open", name, require_answers=False)
      self.assertLen(questions, count)
      self.assertFalse(any(e.answers for e in questions))
      self.assertRaisesAt(f"{self._path('nq_open', name)}:1:", qa.load_qa, self._path("nq_open", name))

  def test_webquestions(self):
    for name, count in (("test.json", 2032), ("trainmodel.json", 2834), ("val.json", 755), ("devtest.json",
                                                                                            189)):
      examples = self._load("webquestions", name)
      self.assertLen(examples, count, name)
      self.assertLen({e.metadata["qId"] for e in examples}, count)
    self.assertEqual(examples[0].answers, ["Jazmyn Bieber", "Jaxon Bieber"])

  def test_curatedtrec(self):
    counts = {
        "large2180-test.tsv": 694,
        "large2180-train.tsv": 1479,
        "large2470-test.tsv": 766,
        "large2470-train.tsv": 1704,
        "curated-test.tsv": 430,
        "curated-train.tsv": 430,
        "curated-full.tsv": 867
    }
    loaded = {}
    for name, count in counts.items():
      loaded[name] = self._load("curatedtrec", name)
      self.assertLen(loaded[name], count, name)
      self.assertTrue(all(e.answer_is_regex and len(e.answers) == 1 for e in loaded[name]))
    # large2180-train.tsv:701 has an escaped tab inside its pattern; it is one pattern, not a 5th column.
    curies = [e for e in loaded["large2180-train.tsv"] if e.metadata["id"] == "462"]
    self.assertLen(curies, 1)
    self.assertIn("\\\t", curies[0].answers[0])

  def test_squad(self):
    # The shared paragraph corpus numbers train then dev paragraphs from 1; the ids line up with it.
    tsv = {d.doc_id: d for d in corpus.read_documents(self._path("squad", "squad-v1.1-paragraphs.tsv"))}
    self.assertLen(tsv, 20963)
    for split, first_id, (questions, paragraphs, articles) in (("dev", 18897, (10570, 2067, 48)),
                                                               ("train", 1, (87599, 18896, 442))):
      path = self._path("squad", f"{split}-v1.1.rebuilt.json")
      skipped = qa.SkipCounter()
      examples = qa.load_squad(path, first_paragraph_id=first_id, skipped=skipped)
      documents = qa.load_squad_paragraphs(path, first_paragraph_id=first_id)
      self.assertEqual(skipped.count, 0, skipped.summary())
      self.assertLen(examples, questions)
      self.assertLen(documents, paragraphs)
      self.assertLen({d.title for d in documents}, articles)
      self.assertEqual({e.metadata["paragraph_index"] for e in examples}, set(range(paragraphs)))
      self.assertTrue(all(len(set(e.answers)) == len(e.answers) for e in examples))
      self.assertEqual(documents, [tsv[str(i)] for i in range(first_id, first_id + paragraphs)])
      self.assertTrue(all(any(a in tsv[e.metadata["doc_id"]].body for a in e.answers) for e in examples))
    self.assertEqual(examples[0].answers, ["Saint Bernadette Soubirous"])

  def test_testdata(self):
    for split, count in (("train", 800), ("dev", 100), ("test", 100)):
      self.assertLen(qa.load_qa(os.path.join(_TESTDATA, f"qa.{split}.jsonl")), count)


if __name__ == "__main__":
  tf.test.main()
