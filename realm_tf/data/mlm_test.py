"""Tests of BERT masked-LM example creation: pair packing, the 80/10/10 rule, whole words, resume."""

import json
import os

import numpy as np
import tensorflow as tf

from realm_tf import tokenization
from realm_tf.data import mlm

_TESTDATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "testdata")


def _tokenizer():
  return tokenization.Tokenizer(os.path.join(_TESTDATA, "vocab.txt"))


class PackPairsTest(tf.test.TestCase):

  def test_pairs_keep_sentence_order_and_fit(self):
    document = [[10 + i] * 7 for i in range(12)]  # 12 sentences of 7 pieces: [10]*7, [11]*7, ...
    options = mlm.MaskingOptions(max_seq_len=32, short_seq_prob=0.0)
    pairs = mlm.pack_pairs(document, options, np.random.default_rng(0))
    self.assertGreater(len(pairs), 1)
    flat = []
    for pair in pairs:
      self.assertLessEqual(len(pair.a) + len(pair.b), 32 - 3)
      self.assertNotEmpty(pair.a)
      self.assertNotEmpty(pair.b)
      # b follows a in the document: its sentences come later.
      self.assertLess(max(pair.a), min(pair.b))
      flat += pair.a + pair.b
    self.assertEqual(flat, sorted(flat))  # pairs follow the document, none repeats a sentence

  def test_long_pair_is_truncated_from_the_longer_side(self):
    document = [list(range(200, 205)), list(range(100, 140))]
    options = mlm.MaskingOptions(max_seq_len=20, short_seq_prob=0.0)
    for seed in range(5):
      (pair,) = mlm.pack_pairs(document, options, np.random.default_rng(seed))
      self.assertEqual(len(pair.a) + len(pair.b), 17)
      self.assertEqual(pair.a, list(range(200, 205)))  # the shorter side is untouched
      self.assertEqual(pair.b, list(range(pair.b[0], pair.b[0] + 12)))  # a contiguous piece of b

  def test_random_next_takes_b_from_another_document_and_puts_unused_sentences_back(self):
    # Document d's sentences are [100 d + i] * 5: the ids tell the document and the sentence.
    corpus = [[[100 * d + i] * 5 for i in range(8)] for d in range(6)]
    options = mlm.MaskingOptions(max_seq_len=32, short_seq_prob=0.0, random_next_rate=0.5)
    random_b = following_b = 0
    for seed in range(20):
      pairs = mlm.pack_pairs(corpus[2], options, np.random.default_rng(seed), corpus, 2)
      a_sentences = []
      for pair in pairs:
        self.assertLessEqual(len(pair.a) + len(pair.b), 32 - 3)
        self.assertEqual({t // 100 for t in pair.a}, {2})  # a is always the document's own
        a_sentences += sorted(set(pair.a))
        if pair.b and pair.b[0] // 100 != 2:
          random_b += 1
          self.assertLen({t // 100 for t in pair.b}, 1)  # one other document, consecutive sentences
          self.assertEqual(sorted(set(pair.b)), list(range(min(pair.b), max(pair.b) + 1)))
        elif pair.b:
          following_b += 1
          self.assertLess(max(pair.a), min(pair.b))
      # Every sentence of the document is some pair's a or b exactly once in order of a: the sentences a
      # random b left unused were put back, none dropped and none seen twice as a.
      self.assertEqual(a_sentences, sorted(a_sentences))
      self.assertLen(set(a_sentences), len(a_sentences))
    self.assertGreater(random_b, 10)
    self.assertGreater(following_b, 10)

  def test_random_next_rate_zero_keeps_the_draws_of_pairs_without_it(self):
    corpus = [[[100 * d + i] * 5 for i in range(8)] for d in range(3)]
    options = mlm.MaskingOptions(max_seq_len=32, short_seq_prob=0.1)
    for seed in range(5):
      self.assertEqual(mlm.pack_pairs(corpus[1], options, np.random.default_rng(seed), corpus, 1),
                       mlm.pack_pairs(corpus[1], options, np.random.default_rng(seed)))

  def test_one_sentence_document_gives_an_empty_b(self):
    (pair,) = mlm.pack_pairs([[5, 6, 7]], mlm.MaskingOptions(short_seq_prob=0.0), np.random.default_rng(0))
    self.assertEqual((pair.a, pair.b), ([5, 6, 7], []))


class MaskPairTest(tf.test.TestCase):

  def test_layout_and_targets(self):
    tokenizer = _tokenizer()
    pair = mlm.Pair(a=list(range(10, 40)), b=list(range(50, 80)))
    options = mlm.MaskingOptions(max_seq_len=80, max_predictions=12)
    example = mlm.mask_pair(pair, tokenizer, options, np.random.default_rng(3))
    ids = example[mlm.TOKEN_IDS]
    original = [tokenizer.cls_id] + pair.a + [tokenizer.sep_id] + pair.b + [tokenizer.sep_id]
    self.assertEqual(int(example[mlm.MASK].sum()), len(original))
    self.assertEqual(example[mlm.SEGMENT_IDS][:64].tolist(), [0] * 32 + [1] * 31 + [0])
    weights = example[mlm.MLM_WEIGHTS]
    count = int(weights.sum())
    self.assertEqual(count, 9)  # round(60 real pieces * 0.15)
    positions = example[mlm.MLM_POSITIONS][:count]
    self.assertEqual(positions.tolist(), sorted(set(positions.tolist())))
    for position, target in zip(positions, example[mlm.MLM_TARGETS][:count]):
      self.assertEqual(target, original[position])
      self.assertNotIn(position, (0, 31, 62))  # never [CLS] or [SEP]
    unmasked = [i for i in range(len(original)) if i not in set(positions.tolist())]
    self.assertEqual([ids[i] for i in unmasked], [original[i] for i in unmasked])

  def test_80_10_10_rule(self):
    tokenizer = _tokenizer()
    rng = np.random.default_rng(0)
    options = mlm.MaskingOptions(max_seq_len=128, max_predictions=20)
    pair = mlm.Pair(a=list(range(10, 70)), b=list(range(70, 130)))
    counts = {"mask": 0, "random": 0, "same": 0}
    for _ in range(400):
      example = mlm.mask_pair(pair, tokenizer, options, rng)
      count = int(example[mlm.MLM_WEIGHTS].sum())
      for position, target in zip(example[mlm.MLM_POSITIONS][:count], example[mlm.MLM_TARGETS][:count]):
        value = example[mlm.TOKEN_IDS][position]
        if value == tokenizer.mask_id:
          counts["mask"] += 1
        elif value == target:
          counts["same"] += 1
        else:
          counts["random"] += 1
    total = sum(counts.values())
    self.assertEqual(total, 400 * 18)  # 15% of 120 pieces
    # 7,200 draws: each share within 4 standard deviations of BERT's 80/10/10 (sd of 10%: 0.35%).
    self.assertAllClose([counts["mask"] / total, counts["random"] / total + counts["same"] / total],
                        [0.8, 0.2],
                        atol=0.02)
    # A random replacement can draw the original piece (1 in 285), so "same" is a hair above 10%.
    self.assertAllClose([counts["random"] / total, counts["same"] / total], [0.1, 0.1], atol=0.015)

  def test_whole_word_masking_masks_all_pieces_of_a_word(self):
    tokenizer = _tokenizer()
    continuation = [i for i, t in enumerate(tokenizer.vocab) if t.startswith("##")]
    starts = [i for i, t in enumerate(tokenizer.vocab) if not t.startswith("##") and not t.startswith("[")]
    self.assertNotEmpty(continuation)
    words = [[starts[i % len(starts)], continuation[i % len(continuation)]] for i in range(30)]
    pair = mlm.Pair(a=[t for w in words[:15] for t in w], b=[t for w in words[15:] for t in w])
    options = mlm.MaskingOptions(max_seq_len=64, max_predictions=20, whole_word_masking=True)
    for seed in range(20):
      example = mlm.mask_pair(pair, tokenizer, options, np.random.default_rng(seed))
      count = int(example[mlm.MLM_WEIGHTS].sum())
      chosen = set(example[mlm.MLM_POSITIONS][:count].tolist())
      self.assertEqual(count % 2, 0)
      for position in chosen:
        # Positions 1..30 are a's words (1-2, 3-4, ...), 32..61 b's (32-33, ...).
        partner = position + 1 if (position - (1 if position < 31 else 32)) % 2 == 0 else position - 1
        self.assertIn(partner, chosen)


class StreamTest(tf.test.TestCase):

  def _documents(self):
    tokenizer = _tokenizer()
    path = os.path.join(self.get_temp_dir(), "docs.jsonl")
    with open(os.path.join(_TESTDATA, "corpus.jsonl")) as f, open(path, "w") as out:
      for line in list(f)[:20]:
        record = json.loads(line)
        out.write(json.dumps({"title": record["title"], "text": record["body"]}) + "\n")
    return tokenizer, mlm.read_document_sentences(path, tokenizer)

  def test_reads_sentences_of_each_document(self):
    tokenizer, documents = self._documents()
    self.assertLen(documents, 20)
    with open(os.path.join(_TESTDATA, "corpus.jsonl")) as f:
      first = json.loads(f.readline())["body"]
    first_sentence = first.split(". ")[0] + "."
    self.assertEqual(documents[0][0], tokenizer.tokenize_texts([first_sentence])[0].ids)

  def test_resume_by_examples_continues_the_same_stream(self):
    tokenizer, documents = self._documents()
    options = mlm.MaskingOptions(max_seq_len=64, max_predictions=10)
    whole = list(_take(mlm.example_stream(documents, tokenizer, options, seed=7), 150))
    resumed = list(_take(mlm.example_stream(documents, tokenizer, options, seed=7, skip_examples=60), 90))
    for a, b in zip(whole[60:], resumed):
      for name in a:
        self.assertAllEqual(a[name], b[name])
    other = next(mlm.example_stream(documents, tokenizer, options, seed=8))
    self.assertNotAllEqual(other[mlm.TOKEN_IDS], whole[0][mlm.TOKEN_IDS])

  def test_epochs_draw_new_masks(self):
    tokenizer, documents = self._documents()
    options = mlm.MaskingOptions(max_seq_len=64, max_predictions=10)
    first = mlm.epoch_examples(documents, tokenizer, options, seed=0, epoch=0)
    second = mlm.epoch_examples(documents, tokenizer, options, seed=0, epoch=1)
    self.assertNotEqual([e[mlm.MLM_POSITIONS].tolist() for e in first],
                        [e[mlm.MLM_POSITIONS].tolist() for e in second])

  def test_dataset_batches_have_static_shapes(self):
    tokenizer, documents = self._documents()
    options = mlm.MaskingOptions(max_seq_len=64, max_predictions=10)
    batch = next(iter(mlm.mlm_dataset(documents, tokenizer, options, batch_size=4)))
    self.assertEqual(batch[mlm.TOKEN_IDS].shape, (4, 64))
    self.assertEqual(batch[mlm.MLM_WEIGHTS].shape, (4, 10))

  def test_held_out_split_is_stable_and_about_the_share(self):
    documents = [[[i, i + 1]] for i in range(2000)]
    held = [mlm.is_held_out(d, 5.0) for d in documents]
    self.assertEqual(held, [mlm.is_held_out(d, 5.0) for d in documents])
    self.assertBetween(sum(held), 60, 140)
    self.assertFalse(any(mlm.is_held_out(d, 0.0) for d in documents))


def _take(iterator, n):
  for _ in range(n):
    yield next(iterator)


if __name__ == "__main__":
  tf.test.main()
