"""Tests for realm_tf.tokenization: ids, byte offsets into the original text, vocab errors, export."""

import os
import string
import tempfile
import unicodedata

from hypothesis import configuration as hypothesis_configuration
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import tensorflow as tf
import tensorflow_text as text

from realm_tf import tokenization

# Hypothesis caches under ./.hypothesis by default; keep its writes in the temporary directory (Bazel's
# TEST_TMPDIR), not in the source tree or the runfiles.
hypothesis_configuration.set_hypothesis_home_dir(
    os.path.join(os.environ.get("TEST_TMPDIR") or tempfile.gettempdir(), "realm_tf_hypothesis"))

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [
    "the", "cafe", "##s", "hello", "world", "Hello", "un", "##aff", "##able", "fi", "ss", "zu", "##rich", "中",
    "国", "日", "本", ",", ".", "!", "?", "'", "-", "(", ")", ":", ";", "\"", "&"
]
LETTERS = list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase]


def _dedupe(tokens):
  seen = set()
  return [t for t in tokens if not (t in seen or seen.add(t))]


VOCAB = _dedupe(SPECIALS + WORDS + LETTERS)


def write_vocab(directory, tokens=None, name="vocab.txt"):
  path = os.path.join(directory, name)
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(t + "\n" for t in (VOCAB if tokens is None else tokens)))
  return path


def _is_char_boundary(data: bytes, offset: int) -> bool:
  return offset == len(data) or (0 <= offset < len(data) and (data[offset] & 0xC0) != 0x80)


# Characters the fuzz test draws from: ASCII, accented (precomposed and combining), ligature, sharp s,
# dotted capital I, CJK (in and out of the vocab), Cyrillic, Arabic, punctuation, whitespace (ASCII and
# Unicode), control and format characters, emoji with skin tone, variation selector and ZWJ.
FUZZ_ALPHABET = (list(string.ascii_letters[:10]) + list("XYZxyz") + list("éÉèàçñüÜöÅøßİ") +
                 ["\u0301", "\u0308", "ﬁ"] + list("中国日本語") + list("жЖд") + list("مر") +
                 list(".,!?'-()\"&:;") + [" ", "\t", "\n", "\u00a0", "\u3000"] +
                 ["\u200b", "\u200d", "\x01", "\x7f"] +
                 ["\U0001F600", "\U0001F44D", "\U0001F3FD", "\u2764", "\ufe0f"])


def _bert_clean(value: str) -> str:
  """BERT's _clean_text, written from the published algorithm: NUL, U+FFFD and every character of a
  Unicode category C* other than tab, newline and carriage return are deleted; whitespace (those three,
  the space and category Zs) becomes a space."""
  return "".join(
      " " if c in "\t\n\r " or unicodedata.category(c) == "Zs" else c
      for c in value
      if ord(c) not in (0, 0xFFFD) and not unicodedata.category(c).startswith("C") or c in "\t\n\r")


def _bert_normalize(value: str) -> str:
  """The reference: Google BERT's uncased BasicTokenizer normalization, per whitespace token
  (tokenization.py's _clean_text, then _run_strip_accents after token.lower())."""
  return " ".join("".join(c
                          for c in unicodedata.normalize("NFD", token.lower())
                          if unicodedata.category(c) != "Mn")
                  for token in _bert_clean(value).split(" "))


def _bert_reference_ids(vocab_path, texts):
  """BERT's uncased ids: the normalization above, then tensorflow_text's BasicTokenizer (punctuation, CJK
  and whitespace splitting) and WordPiece with lower casing off."""
  reference = text.BertTokenizer(vocab_path, lower_case=False, token_out_type=tf.int64)
  normalized = tf.constant([_bert_normalize(t) for t in texts])
  return reference.tokenize(normalized).merge_dims(1, 2).to_list()


class TokenizationTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.vocab_dir = self.create_tempdir().full_path
    self.vocab_path = write_vocab(self.vocab_dir)
    self.tokenizer = tokenization.Tokenizer(self.vocab_path, do_lower_case=True)

  def assertTokens(self, tokenizer, text_value, tokens, spans):
    (row,) = tokenizer.tokenize_texts([text_value])
    self.assertEqual(tokenizer.ids_to_tokens(row.ids), tokens)
    self.assertEqual(list(zip(row.starts, row.limits)), spans)

  def test_special_ids_and_vocab(self):
    tok = self.tokenizer
    self.assertEqual((tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id), (0, 1, 2, 3, 4))
    self.assertEqual(tok.vocab_size, len(VOCAB))
    self.assertEqual(tok.token_to_id("cafe"), VOCAB.index("cafe"))
    self.assertEqual(tok.token_to_id("no-such-token"), tok.unk_id)
    self.assertEqual(tok.ids_to_tokens([2, 3]), ["[CLS]", "[SEP]"])

  def test_accented_spans_cover_original_bytes(self):
    # "Café" is 5 bytes (é is 2); the normalized "cafe" is 4, tf_text's own offsets would end at 4.
    self.assertTokens(self.tokenizer, "Café", ["cafe"], [(0, 5)])
    self.assertTokens(self.tokenizer, "cafés", ["cafe", "##s"], [(0, 5), (5, 6)])
    # Zürich: "zu" covers z + ü (1 + 2 bytes), "##rich" the rest.
    self.assertTokens(self.tokenizer, "the Zürich cafés", ["the", "zu", "##rich", "cafe", "##s"], [(0, 3),
                                                                                                   (4, 7),
                                                                                                   (7, 11),
                                                                                                   (12, 17),
                                                                                                   (17, 18)])
    # Text before the accented word shifts nothing: offsets are into the original string.
    text_value = "hello, Café!"
    (row,) = self.tokenizer.tokenize_texts([text_value])
    data = text_value.encode("utf-8")
    self.assertEqual([data[s:l].decode("utf-8") for s, l in zip(row.starts, row.limits)],
                     ["hello", ",", "Café", "!"])

  def test_lower_casing_is_berts_not_nfkc(self):
    # BERT lower-cases without NFKC: ß and the ligature ﬁ stay themselves (not "ss", "fi"), so they are
    # [UNK] in a vocab without them, spanning the whole original character.
    self.assertTokens(self.tokenizer, "ß", ["[UNK]"], [(0, 2)])
    self.assertTokens(self.tokenizer, "ﬁ", ["[UNK]"], [(0, 3)])
    # Decomposed "é" (e + combining acute) inside a word: the accent is dropped from the ids.
    (row,) = self.tokenizer.tokenize_texts(["cafe\u0301s"])
    self.assertEqual(self.tokenizer.ids_to_tokens(row.ids), ["cafe", "##s"])
    self.assertEqual((row.starts, row.limits[1]), ([0, 6], 7))

  def test_ids_equal_berts_on_the_characters_nfkc_changes(self):
    characters = ["½", "ß", "ς", "²", "…", "ﬁ", "é", "Å", "ＡＢＣ", "ö"]
    vocab = _dedupe(SPECIALS + [
        "1", "2", "⁄", ".", "…", "ss", "ß", "σ", "ς", "½", "²", "fi", "ﬁ", "e", "a", "b", "c", "o", "abc",
        "ａｂｃ", "x", "##ß", "##ς", "##x"
    ])
    path = write_vocab(self.create_tempdir().full_path, vocab)
    tokenizer = tokenization.Tokenizer(path)
    texts = [f"x{c}x {c} {c.upper()}" for c in characters] + [" ".join(characters)]
    self.assertEqual(tokenizer.tokenize(tf.constant(texts)).to_list(), _bert_reference_ids(path, texts))
    # What NFKC would have given is different for each of them: the check is not vacuous.
    nfkc = text.BertTokenizer(path, lower_case=True, token_out_type=tf.int64)
    self.assertNotEqual(
        nfkc.tokenize(tf.constant(texts)).merge_dims(1, 2).to_list(), _bert_reference_ids(path, texts))
    # Offsets still point at the original characters ("…" is punctuation: a word of its own).
    ids, starts, limits = tokenizer.tokenize_with_offsets(tf.constant(["a½ß²… Ｘ"]))
    data = "a½ß²… Ｘ".encode("utf-8")
    self.assertEqual([data[s:l].decode("utf-8") for s, l in zip(starts[0].numpy(), limits[0].numpy())],
                     ["a½ß²", "…", "Ｘ"])
    self.assertEqual(tokenizer.ids_to_tokens(ids[0].numpy()), ["[UNK]", "…", "[UNK]"])

  def test_cjk_characters_are_single_tokens_with_three_byte_spans(self):
    self.assertTokens(self.tokenizer, "中国日本", ["中", "国", "日", "本"], [(0, 3), (3, 6), (6, 9), (9, 12)])
    # A CJK character outside the vocab is its own [UNK], still 3 bytes.
    self.assertTokens(self.tokenizer, "日本語 the", ["日", "本", "[UNK]", "the"], [(0, 3), (3, 6), (6, 9),
                                                                              (10, 13)])

  def test_non_latin_words_are_unk_spanning_whole_word(self):
    # Cyrillic: 6 letters * 2 bytes, then a space, then 3 letters * 2 bytes.
    self.assertTokens(self.tokenizer, "Привет мир", ["[UNK]", "[UNK]"], [(0, 12), (13, 19)])
    # Arabic: 5 letters * 2 bytes.
    self.assertTokens(self.tokenizer, "مرحبا the", ["[UNK]", "the"], [(0, 10), (11, 14)])

  def test_lower_case_flag(self):
    lower = self.tokenizer
    cased = tokenization.Tokenizer(self.vocab_path, do_lower_case=False)
    self.assertFalse(cased.do_lower_case)
    self.assertTokens(lower, "Hello world", ["hello", "world"], [(0, 5), (6, 11)])
    self.assertTokens(cased, "Hello world", ["Hello", "world"], [(0, 5), (6, 11)])
    self.assertNotEqual(lower.tokenize_texts(["Hello"])[0].ids, cased.tokenize_texts(["Hello"])[0].ids)
    # Cased keeps the accent and the capital: no such piece, one [UNK] over the whole word.
    self.assertTokens(cased, "Café", ["[UNK]"], [(0, 5)])
    self.assertTokens(cased, "HELLO", ["[UNK]"], [(0, 5)])
    self.assertTokens(lower, "HELLO", ["hello"], [(0, 5)])

  def test_wordpiece_continuations(self):
    self.assertTokens(self.tokenizer, "unaffable", ["un", "##aff", "##able"], [(0, 2), (2, 5), (5, 9)])
    # Letter-by-letter fallback; the capital and the accent are folded away under lower casing.
    self.assertTokens(self.tokenizer, "Éab", ["e", "##a", "##b"], [(0, 2), (2, 3), (3, 4)])

  def test_empty_and_whitespace_strings(self):
    ids, starts, limits = self.tokenizer.tokenize_with_offsets(tf.constant(["", "  \t\n", "the"]))
    self.assertEqual(ids.to_list(), [[], [], [VOCAB.index("the")]])
    self.assertEqual(starts.to_list(), [[], [], [0]])
    self.assertEqual(limits.to_list(), [[], [], [3]])
    self.assertEqual(self.tokenizer.tokenize_texts([""]), [tokenization.TokenizedText([], [], [])])
    self.assertEqual(self.tokenizer.tokenize_texts([]), [])

  def test_batch_with_rows_of_different_lengths(self):
    texts = ["cafés", "", "中国 unaffable Zürich", "!"]
    ids, starts, limits = self.tokenizer.tokenize_with_offsets(tf.constant(texts))
    self.assertEqual(ids.dtype, tf.int64)
    self.assertEqual(starts.dtype, tf.int64)
    self.assertEqual(ids.row_lengths().numpy().tolist(), [2, 0, 7, 1])
    self.assertEqual(starts.to_list(), [[0, 5], [], [0, 3, 7, 9, 12, 17, 20], [0]])
    self.assertEqual(limits.to_list(), [[5, 6], [], [3, 6, 9, 12, 16, 20, 24], [1]])
    # Each row alone gives the same answer: rows do not leak offsets into each other.
    for i, t in enumerate(texts):
      (row,) = self.tokenizer.tokenize_texts([t])
      self.assertEqual(row.ids, ids[i].numpy().tolist())
      self.assertEqual(row.starts, starts[i].numpy().tolist())
      self.assertEqual(row.limits, limits[i].numpy().tolist())
    self.assertEqual(self.tokenizer.tokenize(tf.constant(texts)).to_list(), ids.to_list())

  def test_ids_equal_bert_reference(self):
    tricky = [
        "", "Café", "cafés", "CAFÉS", "cafe\u0301", "ﬁ ß İ", "中国日本語", "Привет, мир!", "مرحبا",
        "hello\u200bworld", "tab\there\nnewline", "a\u00a0b", "x\u3000y",
        "\U0001F600 emoji \U0001F44D\U0001F3FD \u2764\ufe0f", "don't-stop (now)", "\x01\x7f",
        "un\u200daffable a\x01b\ufffdc", "\U0001F469\u200d\U0001F469\u200d\U0001F467 the",
        "   leading and trailing   ", "unaffable" * 15, "ÅNGSTRÖM ñandú"
    ]
    expected = _bert_reference_ids(self.vocab_path, tricky)
    self.assertEqual(self.tokenizer.tokenize(tf.constant(tricky)).to_list(), expected)
    # Not vacuous: the strings produce real pieces, not only [UNK]s.
    self.assertGreater(sum(1 for row in expected for i in row if i > 4), 30)

  def test_control_and_format_characters_are_deleted_as_berts(self):
    # BERT deletes them (a joiner inside a word keeps it one word); tensorflow_text makes them spaces.
    (row,) = self.tokenizer.tokenize_texts(["un\u200daffable"])
    self.assertEqual(self.tokenizer.ids_to_tokens(row.ids), ["un", "##aff", "##able"])
    self.assertEqual((row.starts, row.limits), ([0, 5, 8], [5, 8, 12]))  # the joiner is in "un"'s span
    self.assertEqual(self.tokenizer.tokenize_texts(["\x00\x01\ufffd"])[0].ids, [])
    # And Unicode spaces separate words, as BERT's \p{Zs} whitespace (RE2's \s is ASCII only).
    (row,) = self.tokenizer.tokenize_texts(["the\u00a0cafe\u3000the"])
    self.assertEqual(self.tokenizer.ids_to_tokens(row.ids), ["the", "cafe", "the"])
    self.assertEqual(row.starts, [0, 5, 12])

  def test_invalid_utf8(self):
    with self.assertRaises(tf.errors.InvalidArgumentError):
      self.tokenizer.tokenize_with_offsets(tf.constant([b"ok", b"bad \xff byte"]))
    with self.assertRaisesRegex(ValueError, "text 1 is not valid UTF-8"):
      self.tokenizer.tokenize_texts([b"ok", b"bad \xff byte"])
    # Valid bytes are accepted as they are.
    self.assertEqual(self.tokenizer.tokenize_texts([b"caf\xc3\xa9"])[0].limits, [5])

  def test_tf_function_with_string_signature(self):

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(texts):
      ids, starts, limits = self.tokenizer.tokenize_with_offsets(texts)
      return ids.to_tensor(-1), starts.to_tensor(-1), limits.to_tensor(-1)

    texts = tf.constant(["Café 中国", "", "unaffable"])
    ids, starts, limits = tokenize(texts)
    eager = self.tokenizer.tokenize_with_offsets(texts)
    self.assertAllEqual(ids, eager[0].to_tensor(-1))
    self.assertAllEqual(starts, [[0, 6, 9], [-1, -1, -1], [0, 2, 5]])
    self.assertAllEqual(limits, [[5, 9, 12], [-1, -1, -1], [2, 5, 9]])

  def test_saved_model_carries_vocab_as_asset(self):
    vocab_dir = self.create_tempdir().full_path
    vocab_path = write_vocab(vocab_dir, name="export_vocab.txt")
    tokenizer = tokenization.Tokenizer(vocab_path)

    class Exported(tf.Module):

      def __init__(self, tok):
        super().__init__()
        self.tok = tok

      @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
      def __call__(self, texts):
        return self.tok.tokenize(texts).to_tensor()

    texts = tf.constant(["Café unaffable", "中国", "Привет the"])
    module = Exported(tokenizer)
    expected = module(texts).numpy()
    export_dir = os.path.join(self.create_tempdir().full_path, "saved_model")
    tf.saved_model.save(module, export_dir)
    os.remove(vocab_path)
    self.assertFalse(os.path.exists(vocab_path))
    del module, tokenizer

    loaded = tf.saved_model.load(export_dir)
    self.assertAllEqual(loaded(texts), expected)
    self.assertAllEqual(expected,
                        [[VOCAB.index(t) for t in ("cafe", "un", "##aff", "##able")],
                         [VOCAB.index("中"), VOCAB.index("国"), 0, 0], [1, VOCAB.index("the"), 0, 0]])
    self.assertIn("export_vocab.txt", os.listdir(os.path.join(export_dir, "assets")))

  def test_missing_vocab_file(self):
    path = os.path.join(self.get_temp_dir(), "no_such_dir", "vocab.txt")
    with self.assertRaises(tokenization.VocabError) as ctx:
      tokenization.Tokenizer(path)
    self.assertIn(path, str(ctx.exception))
    self.assertIsInstance(ctx.exception, ValueError)

  def test_vocab_missing_special_token(self):
    path = write_vocab(self.vocab_dir, [t for t in VOCAB if t != "[MASK]"], name="no_mask.txt")
    with self.assertRaisesRegex(tokenization.VocabError, r"\[MASK\]") as ctx:
      tokenization.load_vocab(path)
    self.assertIn(path, str(ctx.exception))
    self.assertIn("lacks the special tokens ['[MASK]']", str(ctx.exception))

  def test_vocab_duplicate_token_names_line(self):
    tokens = VOCAB[:8] + ["the"] + VOCAB[8:]  # "the" is line 6; its duplicate is line 9.
    path = write_vocab(self.vocab_dir, tokens, name="dup.txt")
    with self.assertRaisesRegex(tokenization.VocabError, r"dup\.txt:9: duplicate token 'the'"):
      tokenization.Tokenizer(path)

  def test_vocab_empty_line_names_line(self):
    path = write_vocab(self.vocab_dir, VOCAB[:6] + [""] + VOCAB[6:], name="blank.txt")
    with self.assertRaisesRegex(tokenization.VocabError, r"blank\.txt:7: empty token"):
      tokenization.load_vocab(path)

  def test_vocab_not_utf8(self):
    path = os.path.join(self.vocab_dir, "latin1.txt")
    with open(path, "wb") as f:
      f.write("\n".join(SPECIALS + ["caf\xe9"]).encode("latin-1"))
    with self.assertRaisesRegex(tokenization.VocabError, "not UTF-8"):
      tokenization.load_vocab(path)

  def test_load_vocab_handles_crlf_and_missing_final_newline(self):
    path = os.path.join(self.vocab_dir, "crlf.txt")
    with open(path, "wb") as f:
      f.write("\r\n".join(SPECIALS + ["the", "cafe"]).encode("utf-8"))
    self.assertEqual(tokenization.load_vocab(path), SPECIALS + ["the", "cafe"])

  def test_word_of_max_length(self):
    # WordPiece splits words of up to 100 characters; a longer one is a single [UNK] (as in BERT).
    ids, starts, limits = self.tokenizer.tokenize_with_offsets(tf.constant(["ab" * 50, "ab" * 51]))
    self.assertEqual(ids[0].numpy().tolist(), [VOCAB.index("a")] +
                     [VOCAB.index("##b"), VOCAB.index("##a")] * 49 + [VOCAB.index("##b")])
    self.assertEqual(starts[0].numpy().tolist(), list(range(100)))
    self.assertEqual(limits[0].numpy().tolist(), list(range(1, 101)))
    self.assertEqual(ids[1].numpy().tolist(), [1])

  def test_over_long_word_unk_spans_whole_word(self):
    # Regression: for a word longer than max_chars_per_token (100), tf_text's WordPiece
    # returns the [UNK] with limit = start + len("[UNK]") instead of the end of the word, and the
    # tokenizer must not pass that on ("ab" * 51 gave (0, 5); "é" * 101 gave (2, 12), not (2, 204)).
    self.assertTokens(self.tokenizer, "ab" * 51, ["[UNK]"], [(0, 102)])

  def test_trailing_combining_mark_is_inside_last_piece_span(self):
    # Regression: a combining mark at the end of a word normalizes to no bytes, so the span
    # of the word's last piece stopped before it: decomposed "cafe\u0301" gave (0, 4), not (0, 6), and
    # an [UNK] over "e\u0301" gave (0, 1).
    self.assertTokens(self.tokenizer, "cafe\u0301", ["cafe"], [(0, 6)])
    self.assertTokens(self.tokenizer, "cafe\u0301s", ["cafe", "##s"], [(0, 6), (6, 7)])


class TokenizationFuzzTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._dir = tf.compat.v1.test.get_temp_dir()
    cls.vocab_path = write_vocab(cls._dir, name="fuzz_vocab.txt")
    cls.tokenizers = {lc: tokenization.Tokenizer(cls.vocab_path, do_lower_case=lc) for lc in (True, False)}
    cls.reference = text.BertTokenizer(cls.vocab_path, lower_case=False, token_out_type=tf.int64)

  def _normalize(self, texts, lower_case):
    """BERT's normalization (the reference's), on a batch of strings."""
    return [_bert_normalize(t) if lower_case else _bert_clean(t) for t in texts]

  @settings(max_examples=50, deadline=None, derandomize=True, database=None)
  @given(texts=st.lists(st.text(alphabet=st.sampled_from(FUZZ_ALPHABET), max_size=40), min_size=1,
                        max_size=4),
         lower_case=st.booleans())
  def test_fuzz_ids_and_offsets(self, texts, lower_case):
    tokenizer = self.tokenizers[lower_case]
    ids, starts, limits = tokenizer.tokenize_with_offsets(tf.constant(texts))
    expected = (_bert_reference_ids(self.vocab_path, texts) if lower_case else self.reference.tokenize(
        tf.constant([_bert_clean(t) for t in texts])).merge_dims(1, 2).to_list())
    # (a) the ids are the reference's.
    self.assertEqual(ids.to_list(), expected)

    span_texts, pieces = [], []
    for text_value, row_ids, row_starts, row_limits in zip(texts, ids.to_list(), starts.to_list(),
                                                           limits.to_list()):
      data = text_value.encode("utf-8")
      self.assertEqual(len(row_ids), len(row_starts))
      self.assertEqual(len(row_ids), len(row_limits))
      for i, (s, l) in enumerate(zip(row_starts, row_limits)):
        # (b) inside the original bytes, non-empty, ordered.
        self.assertTrue(0 <= s < l <= len(data), (text_value, s, l))
        if i:
          self.assertLessEqual(row_starts[i - 1], s, text_value)
          self.assertLessEqual(row_limits[i - 1], l, text_value)
        # (c) on UTF-8 character boundaries.
        self.assertTrue(_is_char_boundary(data, s), (text_value, s))
        self.assertTrue(_is_char_boundary(data, l), (text_value, l))
        span_texts.append(data[s:l].decode("utf-8"))
        pieces.append(tokenizer.vocab[row_ids[i]])
    # (d) the span, normalized, holds the piece's text: offsets point at the right characters.
    if span_texts:
      for span, piece, normalized in zip(span_texts, pieces, self._normalize(span_texts, lower_case)):
        self.assertNotEqual(normalized.strip(), "", (span, piece))
        if piece != "[UNK]":
          self.assertIn(piece[2:] if piece.startswith("##") else piece, normalized, (span, piece))


if __name__ == "__main__":
  tf.test.main()
