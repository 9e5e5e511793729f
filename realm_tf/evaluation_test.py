"""Tests for realm_tf.evaluation: the original's normalisation and matches, F1, has_answer, recall@k."""

import json
import os

import tensorflow as tf

from realm_tf import evaluation
from realm_tf import tokenization
from realm_tf.data import qa
from realm_tf.testing import tiny_inputs


class NormalizeAnswerTest(tf.test.TestCase):

  def test_articles_punctuation_and_spaces(self):
    self.assertEqual(evaluation.normalize_answer("The  Eiffel\tTower!"), "eiffel tower")
    self.assertEqual(evaluation.normalize_answer("a cat, an owl & the end."), "cat owl end")
    # Articles go only as whole words; punctuation is removed first, so "the-end" becomes one word.
    self.assertEqual(evaluation.normalize_answer("Theatre another"), "theatre another")
    self.assertEqual(evaluation.normalize_answer("the-end"), "theend")
    self.assertEqual(evaluation.normalize_answer("1,000.5"), "10005")
    self.assertEqual(evaluation.normalize_answer("  The  "), "")

  def test_nfd_keeps_combining_marks(self):
    self.assertEqual(evaluation.normalize_answer("Café"), "cafe\u0301")
    self.assertEqual(evaluation.normalize_answer("cafe\u0301"), evaluation.normalize_answer("caf\u00e9"))
    self.assertNotEqual(evaluation.normalize_answer("Café"), "cafe")
    # The mark is not a word character, so "thé" is the article "the" plus a lone mark.
    self.assertEqual(evaluation.normalize_answer("thé"), "\u0301")
    # Non-ASCII punctuation is not in string.punctuation and stays.
    self.assertEqual(evaluation.normalize_answer("«Les Misérables»"), "«les mise\u0301rables»")


class MatchTest(tf.test.TestCase):

  def test_exact_match_max_over_answers(self):
    self.assertTrue(evaluation.exact_match("the Beatles", ["Rolling Stones", "Beatles"]))
    self.assertTrue(evaluation.exact_match("  December, 1972 ", ["december 1972"]))
    self.assertFalse(evaluation.exact_match("December 1972 UTC", ["December 1972"]))
    self.assertFalse(evaluation.exact_match("Cafe", ["Café"]))
    self.assertFalse(evaluation.exact_match("anything", []))

  def test_regex_match_is_anchored_at_the_start_only(self):
    patterns = ["Sept?(ember)?|Feb(ruary)?"]
    self.assertTrue(evaluation.regex_match("september 2001", patterns))  # IGNORECASE; open end
    self.assertTrue(evaluation.regex_match("Feb", patterns))
    self.assertFalse(evaluation.regex_match("in September", patterns))  # not at the start
    # MULTILINE does not let match() start after a newline; only ^ and $ change.
    self.assertFalse(evaluation.regex_match("line one\nChina", ["China"]))
    self.assertTrue(evaluation.regex_match("China", ["Japan", "Chin"]))

  def test_invalid_pattern_is_no_match(self):
    self.assertFalse(evaluation.regex_match("Sievert (Sv)", ["Sievert \\(Sv\\)\\"]))
    self.assertTrue(evaluation.regex_match("Sievert (Sv)", ["(unclosed", "Sievert \\(Sv\\)"]))

  def test_f1(self):
    # "the Eiffel tower in Paris" -> eiffel tower in paris (4 tokens).
    # vs "Eiffel Tower": 2 common, P = 2/4, R = 2/2, F1 = 2/3; vs "Paris France": P = 1/4, R = 1/2,
    # F1 = 1/3. The max is 2/3.
    self.assertAlmostEqual(evaluation.f1_score("the Eiffel tower in Paris", ["Paris France"]), 1 / 3)
    self.assertAlmostEqual(evaluation.f1_score("the Eiffel tower in Paris", ["Eiffel Tower", "Paris France"]),
                           2 / 3)
    # A repeated token counts as often as it occurs in both: new new york vs new york has 2 in common,
    # P = 2/3, R = 1, F1 = 0.8.
    self.assertAlmostEqual(evaluation.f1_score("new new york", ["new york"]), 2 * (2 / 3) / (1 + 2 / 3))
    self.assertEqual(evaluation.f1_score("Beatles", ["the beatles"]), 1.0)
    self.assertEqual(evaluation.f1_score("nothing", ["else"]), 0.0)
    self.assertEqual(evaluation.f1_score("the", ["a"]), 0.0)  # both normalise to no tokens
    self.assertEqual(evaluation.f1_score("x", []), 0.0)


class WordpieceExactMatchTest(tf.test.TestCase):

  def test_decoded_ids_up_to_sep_against_answers_and_their_round_trip(self):
    tokenizer = tokenization.Tokenizer(tiny_inputs.write_vocab(self.get_temp_dir()))
    ids = tokenizer.tokenize_texts(["the abc 12"])[0].ids + [tokenizer.sep_id] + [5, 6]
    padded = [tokenizer.cls_id] + ids
    self.assertEqual([True, True, False],
                     evaluation.wordpiece_exact_match(tokenizer, [ids, padded, ids],
                                                      [["ABC 12"], ["x", "abc 12."], ["abc"]]))
    # An answer the tokenizer cannot spell back (lower case, accents stripped) matches its round trip.
    accented = tokenizer.tokenize_texts(["Abé"])[0].ids
    self.assertEqual([True], evaluation.wordpiece_exact_match(tokenizer, [accented], [["Abé"]]))


class HasAnswerTest(tf.test.TestCase):

  def test_raw_is_case_sensitive_substring(self):
    text = "The Eiffel Tower is in  Paris, France."
    self.assertTrue(evaluation.has_answer(text, ["Paris"]))
    self.assertTrue(evaluation.has_answer(text, ["Par"]))  # a substring, not a token match
    self.assertFalse(evaluation.has_answer(text, ["paris"]))
    self.assertFalse(evaluation.has_answer(text, ["in Paris"]))  # two spaces in the text
    self.assertFalse(evaluation.has_answer(text, ["", "  "]))

  def test_normalized_lowercases_and_collapses_whitespace(self):
    text = "The Eiffel Tower is in  Paris,\nFrance."
    self.assertTrue(evaluation.has_answer(text, ["paris"], mode="normalized"))
    self.assertTrue(evaluation.has_answer(text, ["IN PARIS"], mode="normalized"))
    self.assertTrue(evaluation.has_answer(text, ["Paris, France"], mode="normalized"))
    self.assertFalse(evaluation.has_answer(text, ["Paris France"], mode="normalized"))  # comma kept
    with self.assertRaisesRegex(ValueError, "mode"):
      evaluation.has_answer(text, ["Paris"], mode="fuzzy")

  def test_regex_searches_anywhere(self):
    text = "Fashion week is held in September and February."
    self.assertTrue(evaluation.has_answer(text, ["Sept?(ember)?"], is_regex=True))
    self.assertTrue(evaluation.has_answer(text, ["feb(ruary)?"], is_regex=True))
    self.assertFalse(evaluation.has_answer(text, ["March", "(bad"], is_regex=True))


class RecallAtKTest(tf.test.TestCase):

  def test_hand_matrix(self):
    matrix = [
        [True, False, False],  # hit at rank 1
        [False, False, True],  # hit at rank 3
        [False, False, False],  # no hit
        [False, True],  # hit at rank 2, only two retrieved
        [],  # nothing retrieved
    ]
    self.assertEqual(evaluation.recall_at_k(matrix, ks=(1, 2, 3, 100)), {
        "recall@1": 20.0,
        "recall@2": 40.0,
        "recall@3": 60.0,
        "recall@100": 60.0
    })
    self.assertEqual(list(evaluation.recall_at_k(matrix)),
                     ["recall@1", "recall@5", "recall@20", "recall@100"])
    self.assertEqual(evaluation.first_hit_ranks(matrix).tolist(), [1, 3, 0, 2, 0])

  def test_invalid(self):
    with self.assertRaises(ValueError):
      evaluation.recall_at_k([])
    with self.assertRaises(ValueError):
      evaluation.recall_at_k([[True]], ks=(0,))


class PairedRecallChangeTest(tf.test.TestCase):

  def test_counts_gains_and_losses_per_k(self):
    baseline = [1, 0, 3, 6, 2] + [1] * 20
    later = [2, 1, 0, 5, 2] + [1] * 20
    change = evaluation.paired_recall_change(later, baseline, ks=(1, 5))
    # @1: question 1 gained, question 0 lost; @5: questions 1 and 3 gained, question 2 lost.
    self.assertEqual((change["@1"]["gained"], change["@1"]["lost"]), (1, 1))
    self.assertEqual((change["@5"]["gained"], change["@5"]["lost"]), (2, 1))
    self.assertEqual(change["@1"]["p_value"], 1.0)
    self.assertAlmostEqual(change["@5"]["p_value"], 1.0)  # 2 of 3: as uneven as a split of 3 can be but one

  def test_a_one_sided_split_is_unlikely(self):
    change = evaluation.paired_recall_change([1] * 12, [0] * 12, ks=(1,))
    self.assertEqual(change["@1"]["gained"], 12)
    self.assertAlmostEqual(change["@1"]["p_value"], 2 / 2**12)
    self.assertEqual(
        evaluation.paired_recall_change([1, 0], [1, 0], ks=(1,))["@1"], {
            "gained": 0,
            "lost": 0,
            "p_value": 1.0
        })

  def test_different_questions_are_refused(self):
    with self.assertRaisesRegex(ValueError, "same questions"):
      evaluation.paired_recall_change([1, 2], [1, 2, 3])


class PairedChangeTest(tf.test.TestCase):

  def test_exact_matches_compared_question_by_question(self):
    before = [True, True, False, False, True, False]
    now = [True, False, True, True, True, True]
    self.assertEqual(
        evaluation.paired_change(now, before),
        {
            "gained": 3,
            "lost": 1,
            "p_value": 0.625  # 1 or 3 of 4 (or fewer/more): 10 of 16 equally likely splits
        })
    with self.assertRaisesRegex(ValueError, "same questions"):
      evaluation.paired_change([True], [True, False])


class RankingsRecallTest(tf.test.TestCase):

  def test_answer_and_gold_recall_with_regex_answers_and_without_gold_rows(self):
    texts = ["Tallis was born in 1802.", "Rome lies on the Tiber.", "nothing here"]
    rows = [[2, 1, 0], [0, 2, 1]]
    answers = [["Tiber"], [r"18\d\d"]]
    recall = evaluation.rankings_recall(rows,
                                        texts,
                                        answers,
                                        gold_rows=[1, 1],
                                        ks=(1, 2, 3),
                                        answers_are_regex=[False, True])
    # Question 0: "Tiber" at rank 2; question 1: the year pattern at rank 1.
    self.assertEqual(recall["num_questions"], 2)
    self.assertAllClose([recall[f"answer_recall@{k}"] for k in (1, 2, 3)], [50, 100, 100])
    self.assertAllClose([recall[f"gold_recall@{k}"] for k in (1, 2, 3)], [0, 50, 100])
    no_gold = evaluation.rankings_recall(rows, texts, answers, ks=(1,), answers_are_regex=[False, True])
    self.assertNotIn("gold_recall@1", no_gold)
    with self.assertRaisesRegex(ValueError, r"rows must be \[num_questions=2, k\]"):
      evaluation.rankings_recall([[0, 1]], texts, answers, ks=(1,))
    with self.assertRaisesRegex(ValueError, "cannot give recall@3"):
      evaluation.rankings_recall([[0], [1]], texts, answers, ks=(1, 3))

  def test_first_hits_given_by_the_caller_are_used_as_searched(self):
    texts = ["Tallis was born in 1802.", "Rome lies on the Tiber.", "nothing here"]
    rows, answers = [[2, 1, 0], [0, 2, 1]], [["Tiber"], ["1802"]]
    first_hits = evaluation.answer_first_hits(rows, texts, answers)
    self.assertEqual(first_hits.tolist(), [2, 1])
    self.assertEqual(evaluation.rankings_recall(rows, texts, answers, ks=(1, 2), first_hits=first_hits),
                     evaluation.rankings_recall(rows, texts, answers, ks=(1, 2)))
    with self.assertRaisesRegex(ValueError, "1 first hits for 2 questions"):
      evaluation.rankings_recall(rows, texts, answers, ks=(1,), first_hits=[2])


class EvaluatePredictionsTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.examples = [
        qa.QAExample("q1", ["Eiffel Tower"]),
        qa.QAExample("q2", ["Paris"]),
        qa.QAExample("q3", ["Sept?(ember)?"], answer_is_regex=True),
        qa.QAExample("q4", ["China"], answer_is_regex=True),
    ]

  def test_scores_in_order(self):
    result = evaluation.evaluate_predictions(self.examples,
                                             ["the eiffel tower", "Paris France", "September", "in China"])
    self.assertEqual(result["num_examples"], 4)
    self.assertEqual(result["num_string_examples"], 2)
    self.assertEqual(result["num_regex_examples"], 2)
    self.assertEqual(result["num_missing_predictions"], 0)
    self.assertEqual(result["exact_match"], 50.0)
    self.assertAlmostEqual(result["f1"], 100 * (1 + 2 / 3) / 2)  # "paris france" vs "paris": 2/3
    self.assertEqual(result["regex_match"], 50.0)
    self.assertEqual(result["accuracy"], 50.0)  # q1 and q3 of four

  def test_mapping_and_missing(self):
    result = evaluation.evaluate_predictions(self.examples[:2], {"q2": "paris"})
    self.assertEqual(result["num_missing_predictions"], 1)
    self.assertEqual(result["exact_match"], 50.0)
    self.assertNotIn("regex_match", result)
    only_regex = evaluation.evaluate_predictions(self.examples[2:], ["Sep", "Chinatown"])
    self.assertNotIn("exact_match", only_regex)
    self.assertEqual(only_regex["accuracy"], 100.0)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "3 predictions for 4 examples"):
      evaluation.evaluate_predictions(self.examples, ["a", "b", "c"])
    with self.assertRaisesRegex(ValueError, "no gold answers"):
      evaluation.evaluate_predictions([qa.QAExample("q", [])], ["a"])


class PredictionsFileTest(tf.test.TestCase):

  def test_write_and_read_back(self):
    path = os.path.join(self.create_tempdir().full_path, "predictions.jsonl")
    records = [{"question": "q1", "prediction": "Café"}, {"question": "q2", "prediction": "", "score": 1.5}]
    self.assertEqual(evaluation.write_predictions_jsonl(path, iter(records)), 2)
    with open(path, encoding="utf-8") as f:
      self.assertEqual([json.loads(line) for line in f], records)
    self.assertEqual(evaluation.read_predictions_jsonl(path), {"q1": "Café", "q2": ""})

  def test_bad_record_writes_nothing(self):
    directory = self.create_tempdir().full_path
    path = os.path.join(directory, "predictions.jsonl")
    with self.assertRaisesRegex(ValueError, "record 1"):
      evaluation.write_predictions_jsonl(path, [{"question": "q", "prediction": "p"}, {"question": "q"}])
    self.assertEqual(os.listdir(directory), [])

  def test_read_names_line(self):
    path = os.path.join(self.create_tempdir().full_path, "p.jsonl")
    with open(path, "w", encoding="utf-8") as f:
      f.write('{"question": "q", "prediction": "p"}\n{"question": "r"}\n')
    with self.assertRaisesRegex(qa.InputError, f"{path}:2:"):
      evaluation.read_predictions_jsonl(path)


if __name__ == "__main__":
  tf.test.main()
