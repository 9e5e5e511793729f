"""WordPiece tokenization in the TensorFlow graph, with byte offsets into the original text.

One tokenizer serves every path: corpus generation, the pre-training input pipeline (salient-span masking
needs the byte span of each wordpiece), the reader, and SavedModels that take raw strings. It is built from
tensorflow_text ops only, so it runs eagerly, inside tf.data and inside an exported SavedModel (the vocab
file becomes an asset).

The normalization is Google BERT's uncased BasicTokenizer (and Hugging Face's BertTokenizer): lower case
(Unicode lower casing, core TensorFlow's tf.strings.lower), NFD, drop \\p{Mn}; control, format and
private-use characters, NUL and U+FFFD are deleted and \\p{Zs} made a space (BERT's _clean_text). It
is applied one character at a time, which gives a map from normalized bytes back to original characters;
the normalized text then goes through a non-lower-casing tensorflow_text BasicTokenizer + WordPiece whose
offsets are mapped back. Not `text.BertTokenizer(lower_case=True)`: its offsets point into the normalized
string ("Café" -> bytes 0..4 of "cafe", one byte short of the original 5), and its case folding applies
NFKC, which BERT's does not: 1/2-as-one-character becomes "1⁄2", ß "ss", ς "σ", ² "2", … "...", ligatures
split, full-width letters become ASCII. On 13 of the first 1,000 SQuAD dev paragraphs that changed the
wordpieces, so one checkpoint embedded the same documents differently here and in the original tools.
tensorflow_text's own BasicTokenizer also turns control and format characters into spaces, where BERT
deletes them: a zero-width joiner would split an emoji sequence into words. One difference remains, rarer:
a capital sigma at a word's end lowers to σ here (Python's str.lower gives ς by context).
"""

from typing import List, NamedTuple, Sequence

import tensorflow as tf
import tensorflow_text as text
# BertTokenizer = BasicTokenizer + WordpieceTokenizer; the two are composed here (BasicTokenizer is not
# re-exported at the top level) to get word offsets, which fix the spans of [UNK] words.
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)

# Offsets of different examples are kept apart by this stride when searching one flat array.
_ROW_STRIDE = 1 << 40


class VocabError(ValueError):
  """The vocab file is missing or unusable."""


class TokenizedText(NamedTuple):
  """Host-side view of one tokenized text.

  Attributes:
    ids: wordpiece ids, [num_wordpieces].
    starts: byte offset in the original UTF-8 text where each wordpiece starts (inclusive).
    limits: byte offset where each wordpiece ends (exclusive). Continuation pieces of one word get
      disjoint spans where the normalization kept one byte per character; a character that normalizes
      into several (the ligature "ﬁ" -> "fi") gives every piece the span of that whole character.
  """
  ids: List[int]
  starts: List[int]
  limits: List[int]


def load_vocab(vocab_path: str) -> List[str]:
  """Reads a BERT vocab file (one token per line) and checks the special tokens are there."""
  if not tf.io.gfile.exists(vocab_path):
    raise VocabError(f"vocab file {vocab_path} does not exist; pass --vocab_path pointing at the "
                     "vocab.txt of your BERT checkpoint (testdata/vocab.txt for the bundled tiny model)")
  with tf.io.gfile.GFile(vocab_path, "rb") as f:
    raw = f.read()
  try:
    tokens = [line.rstrip("\r") for line in raw.decode("utf-8").split("\n")]
  except UnicodeDecodeError as e:
    raise VocabError(f"vocab file {vocab_path} is not UTF-8 ({e}); regenerate it") from e
  if tokens and tokens[-1] == "":
    tokens.pop()
  missing = [t for t in SPECIAL_TOKENS if t not in tokens]
  if missing:
    raise VocabError(f"vocab file {vocab_path} lacks the special tokens {missing}; a BERT vocab needs "
                     f"all of {list(SPECIAL_TOKENS)}")
  seen = set()
  for line_number, token in enumerate(tokens, start=1):
    if not token:
      raise VocabError(f"{vocab_path}:{line_number}: empty token; every line must hold one token")
    if token in seen:
      raise VocabError(f"{vocab_path}:{line_number}: duplicate token {token!r}; each token once")
    seen.add(token)
  return tokens


class Tokenizer(tf.Module):
  """BERT WordPiece tokenizer from a vocab file; in-graph, with original byte offsets.

  Args:
    vocab_path: BERT vocab file, one token per line (local path or anything tf.io.gfile reads).
    do_lower_case: case-fold and strip accents, as uncased BERT vocabularies expect.
  """

  def __init__(self, vocab_path: str, do_lower_case: bool = True, name: str = "tokenizer"):
    super().__init__(name=name)
    self.vocab = load_vocab(vocab_path)
    self.vocab_path = vocab_path
    self.do_lower_case = do_lower_case
    self._token_to_id = {token: i for i, token in enumerate(self.vocab)}
    self.pad_id = self._token_to_id[PAD_TOKEN]
    self.unk_id = self._token_to_id[UNK_TOKEN]
    self.cls_id = self._token_to_id[CLS_TOKEN]
    self.sep_id = self._token_to_id[SEP_TOKEN]
    self.mask_id = self._token_to_id[MASK_TOKEN]
    self._basic = BasicTokenizer(lower_case=False)
    self._wordpiece = text.WordpieceTokenizer(vocab_path, token_out_type=tf.int64, unknown_token=UNK_TOKEN)

  @property
  def vocab_size(self) -> int:
    return len(self.vocab)

  def token_to_id(self, token: str) -> int:
    return self._token_to_id.get(token, self.unk_id)

  def ids_to_tokens(self, ids: Sequence[int]) -> List[str]:
    return [self.vocab[i] for i in ids]

  def _normalize_chars(self, chars: tf.Tensor) -> tf.Tensor:
    """BasicTokenizer's normalization, applied to a flat tensor of single characters."""
    if self.do_lower_case:
      chars = tf.strings.lower(chars, encoding="utf-8")
      chars = text.normalize_utf8(chars, "NFD")
      chars = tf.strings.regex_replace(chars, r"\p{Mn}", "")
    # BERT's _clean_text: every \p{C} character except tab, newline and carriage return (whitespace) is
    # deleted, not made a space; so are NUL and U+FFFD. (RE2 has no \p{Cn}; \p{Cs} cannot occur in UTF-8.)
    chars = tf.strings.regex_replace(chars,
                                     r"[\x{0}-\x{8}\x{B}\x{C}\x{E}-\x{1F}\x{7F}-\x{9F}\p{Cf}\p{Co}\x{FFFD}]",
                                     "")
    # BERT's whitespace is \p{Zs} too (no-break and ideographic spaces); RE2's \s, which the splitter
    # uses, is ASCII only.
    return tf.strings.regex_replace(chars, r"\p{Zs}", " ")

  def tokenize_with_offsets(self, texts: tf.Tensor):
    """Tokenizes a batch of UTF-8 strings.

    Args:
      texts: tf.string [batch]. Invalid UTF-8 raises InvalidArgumentError.

    Returns:
      (ids, starts, limits): int64 RaggedTensors [batch, (num_wordpieces)]; starts/limits are byte
      offsets into the original strings (limit exclusive).
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    chars, char_starts = tf.strings.unicode_split_with_offsets(texts, "UTF-8", errors="strict")
    char_starts = tf.cast(char_starts, tf.int64)
    char_limits = char_starts + tf.cast(tf.strings.length(chars, unit="BYTE"), tf.int64)
    normalized = chars.with_flat_values(self._normalize_chars(chars.flat_values))
    norm_lengths = tf.cast(tf.strings.length(normalized, unit="BYTE"), tf.int64)
    # Exclusive end, in the normalized string, of each character's normalized bytes: [batch, (chars)].
    norm_ends = tf.math.cumsum(norm_lengths, axis=1)
    norm_text = tf.strings.reduce_join(normalized, axis=1)

    words, word_starts, word_limits = self._basic.tokenize_with_offsets(norm_text)  # [batch, (words)]
    ids, piece_starts, piece_limits = self._wordpiece.tokenize_with_offsets(words)  # [b, (w), (pieces)]
    # Piece offsets are relative to their word. An [UNK] stands for its whole word: WordPiece reports
    # len("[UNK]") as its length, which is wrong for words over 100 bytes. On the flat values (each
    # piece's word by index): ragged broadcasting would put thousands of shape checks into every graph
    # that tokenizes (two thirds of its nodes: seconds of tracing and graph optimization each time).
    piece_word = ids.values.value_rowids()  # [pieces]: the word (flat over the batch) of each piece
    piece_word_starts = tf.gather(word_starts.flat_values, piece_word)
    ids = ids.merge_dims(1, 2)
    flat_ids = ids.flat_values
    norm_starts = piece_starts.flat_values + piece_word_starts
    norm_limits = tf.where(tf.equal(flat_ids, self.unk_id), tf.gather(word_limits.flat_values, piece_word),
                           piece_limits.flat_values + piece_word_starts)

    # Map each normalized byte offset to the original character holding it, for all rows at once: one
    # sorted flat array where row r's offsets are shifted by r * _ROW_STRIDE.
    char_row_base = tf.cast(norm_ends.value_rowids(), tf.int64) * _ROW_STRIDE
    flat_ends = norm_ends.flat_values + char_row_base
    piece_row_base = tf.cast(ids.value_rowids(), tf.int64) * _ROW_STRIDE
    first_char = tf.searchsorted(flat_ends, norm_starts + piece_row_base, side="right")
    # The last character whose normalized bytes end at or before the piece's limit; this includes marks
    # that normalize to nothing (a combining accent after the word's last letter).
    last_char = tf.searchsorted(flat_ends, norm_limits + piece_row_base, side="right") - 1
    starts = ids.with_flat_values(tf.gather(char_starts.flat_values, first_char))
    limits = ids.with_flat_values(tf.gather(char_limits.flat_values, last_char))
    return tf.cast(ids, tf.int64), starts, limits

  def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    """Wordpiece ids, int64 RaggedTensor [batch, (num_wordpieces)]."""
    return self.tokenize_with_offsets(texts)[0]

  def tokenize_texts(self, texts: Sequence[str]) -> List[TokenizedText]:
    """Host-side convenience: Python strings in, Python lists out.

    Raises:
      ValueError: a text is not valid UTF-8 (only possible for bytes input); names its index.
    """
    encoded = []
    for i, t in enumerate(texts):
      if isinstance(t, bytes):
        try:
          t.decode("utf-8")
        except UnicodeDecodeError as e:
          raise ValueError(f"text {i} is not valid UTF-8 ({e})") from e
        encoded.append(t)
      else:
        encoded.append(t.encode("utf-8"))
    if not encoded:
      return []
    ids, starts, limits = self.tokenize_with_offsets(tf.constant(encoded))
    return [TokenizedText(*row) for row in zip(ids.to_list(), starts.to_list(), limits.to_list())]
