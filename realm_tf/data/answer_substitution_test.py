"""Tests of answer substitution (realm_tf.data.answer_substitution) on the letter-by-letter test vocab."""

import numpy as np
import tensorflow as tf

from realm_tf import tokenization
from realm_tf.data import answer_substitution
from realm_tf.data import fid_features
from realm_tf.testing import tiny_inputs


class AnswerSubstitutionTest(tf.test.TestCase):
  """AnswerSubstitution and its helpers, on the letter-by-letter test vocab ("ab" is a ##b)."""

  def setUp(self):
    super().setUp()
    self.tokenizer = tokenization.Tokenizer(tiny_inputs.write_vocab(self.get_temp_dir()))

  def _text(self, ids):
    return fid_features.detokenize(self.tokenizer, ids)

  def _normalized(self, text):
    return self._text(self.tokenizer.tokenize_texts([text])[0].ids)

  def _substitution(self, examples):
    return answer_substitution.AnswerSubstitution(examples,
                                                  answer_substitution.continuation_ids(self.tokenizer),
                                                  self.tokenizer.unk_id)

  def test_answer_shape(self):
    self.assertEqual(("d", "X", "d"), answer_substitution.answer_shape("19 October 1793"))
    self.assertEqual(("X", "X"), answer_substitution.answer_shape("Lunithpry Guild"))
    self.assertEqual(("X", "x"), answer_substitution.answer_shape("Briarmer hymn"))

  def test_spans_are_whole_words_leftmost_longest(self):
    continuation = answer_substitution.continuation_ids(self.tokenizer)
    tokenize = lambda text: self.tokenizer.tokenize_texts([text])[0].ids
    ids = tokenize("ab abc xab ab. ab cd")
    patterns = answer_substitution._by_first_piece([tokenize("ab"), tokenize("ab cd")])
    spans = answer_substitution.find_spans(ids, patterns, continuation)
    # "ab" inside "abc" and "xab" is no occurrence; "ab cd" wins over "ab" at the end.
    self.assertEqual([tuple(tokenize("ab"))] * 2 + [tuple(tokenize("ab cd"))], [p for _, p in spans])
    replaced = answer_substitution.replace_spans(ids, spans, {tuple(tokenize("ab")): tokenize("zz")})
    self.assertEqual(self._normalized("zz abc xab zz. ab cd"), self._text(replaced))

  def test_every_occurrence_and_the_target_change(self):
    questions = ["who is w?", "who is x?", "who is y?", "who is z?"]
    passages = [[("t", "ab met ab, not abc or xab."), ("u", "then ab left")],
                [("t", "cd is here"), ("u", "nothing")], [("t", "nothing at all"), ("u", "still nothing")],
                [("t", "ij kl"), ("u", "no")]]
    # Shapes: "Ab" and "Cd" are ("X",), "ef gh" and "ij kl" ("x", "x").
    examples = fid_features.tokenize_examples(self.tokenizer, questions, passages,
                                              ["Ab", "Cd", "ef gh", "ij kl"])
    edited, count = self._substitution(examples).substitute(1.0, np.random.default_rng(0))
    # "Ab" and "Cd" swap (the only other answer of their shape); example 2's answer is in none of its
    # passages, so it is left alone; example 3 takes "ef gh".
    self.assertEqual(3, count)
    self.assertEqual(["cd", "ab", "ef gh", "ef gh"], [self._text(a) for a in edited.answers])
    self.assertEqual(["Cd", "Ab", "ef gh", "ef gh"], edited.answer_texts)
    self.assertEqual([
        self._normalized("question: who is w? title: t context: cd met cd, not abc or xab."),
        self._normalized("question: who is w? title: u context: then cd left")
    ], [self._text(ids) for ids in edited.pairs[0]])
    self.assertEqual(self._normalized("question: who is z? title: t context: ef gh"),
                     self._text(edited.pairs[3][0]))
    self.assertEqual(examples.pairs[2], edited.pairs[2])
    self.assertEqual(examples.answers[2], edited.answers[2])
    self.assertEqual("ab", self._text(examples.answers[0]))  # the input is not modified
    features = fid_features.pad_examples(self.tokenizer, edited, 24, 6)
    self.assertEqual("cd", self._text(features.target_ids[0]))

  def test_other_answers_in_the_passages_are_relabeled_consistently(self):
    # Example 0's passages hold its answer "ab" and example 1's answer "cd" (a distractor's answer).
    passages = [[("t", "ab was here"), ("u", "cd was there, cd again")], [("t", "cd"), ("u", "x")],
                [("t", "ef"), ("u", "x")], [("t", "gh"), ("u", "x")]]
    examples = fid_features.tokenize_examples(self.tokenizer, ["q"] * 4, passages, ["Ab", "Cd", "Ef", "Gh"])
    for seed in range(5):
      edited, _ = self._substitution(examples).substitute(1.0, np.random.default_rng(seed))
      target = self._text(edited.answers[0])
      first, second = (self._text(ids).split(" context : ")[1] for ids in edited.pairs[0])
      self.assertIn(target, ("ef", "gh"))
      self.assertEqual(f"{target} was here", first)
      other = second.split()[0]
      self.assertIn(other, ("ef", "gh"))
      self.assertNotEqual(target, other)
      self.assertEqual(f"{other} was there , {other} again", second)

  def test_deterministic_for_a_seed_and_rate_zero_is_identity(self):
    answers = [f"a{i}" for i in range(12)]
    examples = fid_features.tokenize_examples(self.tokenizer, ["q"] * 12,
                                              [[("t", f"x {a} y")] for a in answers], answers)
    substitution = self._substitution(examples)
    run = lambda seed, rate=1.0: substitution.substitute(rate, np.random.default_rng(seed))
    self.assertEqual(run(3), run(3))
    self.assertNotEqual(run(3)[0].answers, run(4)[0].answers)
    self.assertEqual(12, run(3)[1])
    for ids, target in zip(run(3)[0].pairs, run(3)[0].answers):
      self.assertIn(self._text(target), self._text(ids[0]).split())
    self.assertEqual((examples, 0), run(3, rate=0.0))
    self.assertBetween(run(3, rate=0.5)[1], 1, 11)
    with self.assertRaisesRegex(ValueError, "rate must be in"):
      run(3, rate=1.5)

  def test_single_passage_examples_keep_the_first_answer_bearing_pair(self):
    examples = fid_features.tokenize_examples(
        self.tokenizer, ["q1", "q2", "q3"],
        [[("t", "no"), ("u", "ab here"),
          ("v", "ab again")], [("t", "cd"), ("u", "x"), ("v", "y")], [("t", "n"), ("u", "o"),
                                                                      ("v", "abc")]], ["ab", "cd", "ab"])
    continuation = answer_substitution.continuation_ids(self.tokenizer)
    self.assertEqual([1, 0, -1], answer_substitution.answer_passages(examples, continuation))
    single = answer_substitution.single_passage_examples(examples, continuation)
    self.assertEqual([[examples.pairs[0][1]], [examples.pairs[1][0]]], single.pairs)
    self.assertEqual(["ab", "cd"], single.answer_texts)
    # Only what the reader reads counts: cut the pairs just before the answer's last piece and they no
    # longer hold it (q1's other answer-bearing pair has it at the same place).
    [(start, pattern)
    ] = answer_substitution.find_spans(examples.pairs[0][1],
                                       answer_substitution._by_first_piece([examples.answers[0]]),
                                       continuation)
    cut = start + len(pattern) - 1
    self.assertLess(cut + 1, len(examples.pairs[0][1]))
    self.assertEqual(-1, answer_substitution.answer_passages(examples, continuation, cut)[0])
    self.assertEqual(1, answer_substitution.answer_passages(examples, continuation, cut + 1)[0])
    # q2's answer sits at the same place in its pair: no example keeps a pair.
    self.assertEmpty(answer_substitution.single_passage_examples(examples, continuation, cut).pairs)


if __name__ == "__main__":
  tf.test.main()
