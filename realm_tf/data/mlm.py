"""BERT masked-LM pre-training examples: sentence pairs, 15% masked by BERT's rule.

As Google BERT's create_pretraining_data.py (Devlin et al. 2019), without the next-sentence loss:
  - a document's sentences are gathered into chunks of about max_seq_len - 3 wordpieces (with
    probability short_seq_prob a shorter random target, so short inputs are seen too); each chunk is split
    after a random number of its sentences into a (before) and b (after), both from the same document, so
    the model learns to use the second segment, as REALM's reader reads [CLS] query [SEP] document [SEP];
  - with probability random_next_rate (BERT's 0.5) b is instead a run of sentences from another random
    document and the chunk's unused sentences go back into the stream, as BERT's random next sentences:
    a reader that has only seen related second segments copies from whatever document it is given,
    while REALM's reader is mostly given documents that do not hold the masked span;
  - the pair is truncated to fit by dropping wordpieces from the longer side, at its front or back at
    random;
  - 15% of the wordpieces (at most max_predictions) are chosen for prediction, whole words together with
    whole_word_masking; of those 80% become [MASK], 10% a random wordpiece, 10% stay as they are.
Masking is redrawn every epoch (RoBERTa's dynamic masking) from (seed, epoch), so the stream is a pure
function of the seed and a resumed run continues it exactly by skipping the examples already seen.
"""

import dataclasses
import hashlib
from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from realm_tf import tokenization
from realm_tf.data import pretraining
from realm_tf.data import salient_spans
from realm_tf.data import text_records

# Feature names of a batch (int32 [B, L] and [B, P]; mlm_weights float32 [B, P]).
TOKEN_IDS = "token_ids"
MASK = "mask"
SEGMENT_IDS = "segment_ids"
MLM_POSITIONS = "mlm_positions"
MLM_TARGETS = "mlm_targets"
MLM_WEIGHTS = "mlm_weights"

_TOKENIZE_BATCH = 4096


@dataclasses.dataclass(frozen=True)
class MaskingOptions:
  """How pairs are packed and masked (BERT's defaults).

  Attributes:
    max_seq_len: L, packed length including [CLS] and the two [SEP].
    max_predictions: P, predicted positions per example.
    mask_rate: share of wordpieces predicted.
    short_seq_prob: probability of a shorter random target length.
    whole_word_masking: predict all wordpieces of a word together (a word: a piece and its ## pieces).
    random_next_rate: share of pairs whose b comes from another document (BERT's 0.5; 0: b always
      follows a).
  """
  max_seq_len: int = 128
  max_predictions: int = 20
  mask_rate: float = 0.15
  short_seq_prob: float = 0.1
  whole_word_masking: bool = False
  random_next_rate: float = 0.0

  def __post_init__(self):
    if self.max_seq_len < 8:
      raise ValueError(f"max_seq_len {self.max_seq_len} is too short for [CLS] a [SEP] b [SEP]")
    if not 0.0 < self.mask_rate < 1.0:
      raise ValueError(f"mask_rate {self.mask_rate} must be in (0, 1)")
    if self.max_predictions < 1:
      raise ValueError(f"max_predictions {self.max_predictions} must be at least 1")
    if not 0.0 <= self.random_next_rate <= 1.0:
      raise ValueError(f"random_next_rate {self.random_next_rate} must be in [0, 1]")


@dataclasses.dataclass(frozen=True)
class Pair:
  """Wordpiece ids of segments a and b, before masking."""
  a: List[int]
  b: List[int]


def read_document_sentences(path: str,
                            tokenizer: tokenization.Tokenizer,
                            splitter: Optional[salient_spans.SentenceSplitter] = None,
                            skipped: Optional[text_records.SkipCounter] = None) -> List[List[List[int]]]:
  """Each document of a JSONL/TSV file (the corpora's inputs) as a list of tokenized sentences.

  Pre-annotated "sentences" offsets are used when present, else the splitter's. Documents without text
  are left out.
  """
  texts: List[bytes] = []
  bounds: List[int] = [0]
  for doc in pretraining.read_raw_documents(path, skipped):
    sentences = doc.sentences
    if sentences is None:
      sentences = salient_spans.split_sentences(doc.text, splitter)
    data = doc.text.encode("utf-8")
    texts.extend(data[start:limit] for start, limit in sentences)
    bounds.append(len(texts))
  ids: List[List[int]] = []
  for start in range(0, len(texts), _TOKENIZE_BATCH):  # one graph call per batch, not per document
    ids.extend(tokenizer.tokenize(tf.constant(texts[start:start + _TOKENIZE_BATCH])).to_list())
  documents = []
  for begin, end in zip(bounds[:-1], bounds[1:]):
    document = [[int(t) for t in sentence] for sentence in ids[begin:end] if len(sentence)]
    if document:
      documents.append(document)
  if not documents:
    raise text_records.InputError(f"{path}: no document with text; nothing to pre-train on")
  return documents


def is_held_out(document: Sequence[Sequence[int]], eval_percent: float) -> bool:
  """A stable split by the document's content: the same documents are held out in every run."""
  digest = hashlib.sha1(np.asarray([t for s in document for t in s], np.int64).tobytes()).digest()
  return int.from_bytes(digest[:4], "big") % 10000 < eval_percent * 100


def _truncate_pair(a: List[int], b: List[int], max_tokens: int, rng: np.random.Generator) -> None:
  """BERT's truncate_seq_pair: drop from the longer side, at its front or back at random."""
  while len(a) + len(b) > max_tokens:
    longer = a if len(a) > len(b) else b
    if rng.random() < 0.5:
      del longer[0]
    else:
      longer.pop()


def _random_segment(corpus: Sequence[Sequence[Sequence[int]]], index: int, target: int,
                    rng: np.random.Generator) -> List[int]:
  """BERT's random next: sentences of another document, from a random one on, until target wordpieces."""
  other = int(rng.integers(0, len(corpus) - 1))
  other += other >= index  # uniform over the documents other than index
  document = corpus[other]
  segment: List[int] = []
  for sentence in document[int(rng.integers(0, len(document))):]:
    segment.extend(sentence)
    if len(segment) >= target:
      break
  return segment


def pack_pairs(document: Sequence[Sequence[int]],
               options: MaskingOptions,
               rng: np.random.Generator,
               corpus: Sequence[Sequence[Sequence[int]]] = (),
               index: int = -1) -> List[Pair]:
  """BERT's create_instances_from_document without the next-sentence loss. b follows a in the same
  document, or with options.random_next_rate comes from another document of corpus (document is
  corpus[index]); a document of one sentence gives pairs whose b is empty (or random)."""
  max_tokens = options.max_seq_len - 3
  random_next = options.random_next_rate > 0 and len(corpus) > 1
  target = max_tokens
  if rng.random() < options.short_seq_prob:
    target = int(rng.integers(2, max_tokens + 1))
  pairs: List[Pair] = []
  chunk: List[Sequence[int]] = []
  length = 0
  i = 0
  while i < len(document):
    sentence = document[i]
    chunk.append(sentence)
    length += len(sentence)
    if i == len(document) - 1 or length >= target:
      split = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
      a = [t for s in chunk[:split] for t in s]
      if random_next and (len(chunk) == 1 or rng.random() < options.random_next_rate):
        b = _random_segment(corpus, index, max(1, target - len(a)), rng)
        i -= len(chunk) - split  # BERT puts the sentences b did not use back
      else:
        b = [t for s in chunk[split:] for t in s]
      _truncate_pair(a, b, max_tokens, rng)
      if a:
        pairs.append(Pair(a=a, b=b))
      chunk, length = [], 0
      target = max_tokens
      if rng.random() < options.short_seq_prob:
        target = int(rng.integers(2, max_tokens + 1))
    i += 1
  return pairs


def _word_starts(tokens: Sequence[str], candidates: Sequence[int], whole_word: bool) -> List[List[int]]:
  """Positions grouped into units that are masked together."""
  units: List[List[int]] = []
  for position in candidates:
    if whole_word and units and tokens[position].startswith("##") and units[-1][-1] == position - 1:
      units[-1].append(position)
    else:
      units.append([position])
  return units


def mask_pair(pair: Pair, tokenizer: tokenization.Tokenizer, options: MaskingOptions,
              rng: np.random.Generator) -> Dict[str, np.ndarray]:
  """Packs [CLS] a [SEP] b [SEP] and masks it by BERT's 80/10/10 rule; returns one example."""
  ids = [tokenizer.cls_id] + pair.a + [tokenizer.sep_id] + pair.b + [tokenizer.sep_id]
  segments = [0] * (len(pair.a) + 2) + [1] * (len(pair.b) + 1)
  length = len(ids)
  special = {0, len(pair.a) + 1, length - 1}
  candidates = [i for i in range(length) if i not in special]
  units = _word_starts(tokenizer.ids_to_tokens(ids), candidates, options.whole_word_masking)
  rng.shuffle(units)
  num_to_predict = min(options.max_predictions, max(1, int(round(len(candidates) * options.mask_rate))))
  chosen: List[int] = []
  for unit in units:
    if len(chosen) >= num_to_predict:
      break
    if len(chosen) + len(unit) > num_to_predict:
      continue  # as BERT: a whole word that does not fit is skipped, not cut
    chosen.extend(unit)
  chosen.sort()
  targets = [ids[i] for i in chosen]
  for position in chosen:
    draw = rng.random()
    if draw < 0.8:
      ids[position] = tokenizer.mask_id
    elif draw < 0.9:
      ids[position] = int(rng.integers(0, tokenizer.vocab_size))
  pad = options.max_seq_len - length
  num_pad_predictions = options.max_predictions - len(chosen)
  return {
      TOKEN_IDS: np.asarray(ids + [tokenizer.pad_id] * pad, np.int32),
      MASK: np.asarray([1] * length + [0] * pad, np.int32),
      SEGMENT_IDS: np.asarray(segments + [0] * pad, np.int32),
      MLM_POSITIONS: np.asarray(chosen + [0] * num_pad_predictions, np.int32),
      MLM_TARGETS: np.asarray(targets + [0] * num_pad_predictions, np.int32),
      MLM_WEIGHTS: np.asarray([1.0] * len(chosen) + [0.0] * num_pad_predictions, np.float32),
  }


def epoch_examples(documents: Sequence[Sequence[Sequence[int]]], tokenizer: tokenization.Tokenizer,
                   options: MaskingOptions, seed: int, epoch: int) -> List[Dict[str, np.ndarray]]:
  """One epoch: documents shuffled, packed and masked with a generator seeded by (seed, epoch)."""
  rng = np.random.default_rng([seed, epoch])
  order = rng.permutation(len(documents))
  examples = [
      mask_pair(pair, tokenizer, options, rng)
      for index in order
      for pair in pack_pairs(documents[index], options, rng, documents, int(index))
  ]
  permutation = rng.permutation(len(examples))
  return [examples[i] for i in permutation]


def example_stream(documents: Sequence[Sequence[Sequence[int]]],
                   tokenizer: tokenization.Tokenizer,
                   options: MaskingOptions,
                   seed: int,
                   skip_examples: int = 0) -> Iterator[Dict[str, np.ndarray]]:
  """Examples of epoch after epoch, forever, starting after skip_examples of them."""
  epoch = 0
  while True:
    examples = epoch_examples(documents, tokenizer, options, seed, epoch)
    if not examples:
      raise ValueError("the documents give no pre-training pair")
    if skip_examples >= len(examples):
      skip_examples -= len(examples)
    else:
      yield from examples[skip_examples:]
      skip_examples = 0
    epoch += 1


def _signature(options: MaskingOptions) -> Dict[str, tf.TensorSpec]:
  length, predictions = options.max_seq_len, options.max_predictions
  spec = {name: tf.TensorSpec([length], tf.int32) for name in (TOKEN_IDS, MASK, SEGMENT_IDS)}
  spec.update({
      MLM_POSITIONS: tf.TensorSpec([predictions], tf.int32),
      MLM_TARGETS: tf.TensorSpec([predictions], tf.int32),
      MLM_WEIGHTS: tf.TensorSpec([predictions], tf.float32)
  })
  return spec


def mlm_dataset(documents: Sequence[Sequence[Sequence[int]]],
                tokenizer: tokenization.Tokenizer,
                options: MaskingOptions,
                batch_size: int,
                seed: int = 0,
                skip_examples: int = 0) -> tf.data.Dataset:
  """Endless batches of training examples (static shapes), resumable by the number of examples seen."""
  dataset = tf.data.Dataset.from_generator(
      lambda: example_stream(documents, tokenizer, options, seed, skip_examples),
      output_signature=_signature(options))
  return dataset.batch(batch_size, drop_remainder=True).prefetch(2)


def eval_examples(documents: Sequence[Sequence[Sequence[int]]],
                  tokenizer: tokenization.Tokenizer,
                  options: MaskingOptions,
                  seed: int = 0) -> Dict[str, np.ndarray]:
  """A fixed held-out set: one epoch of the documents masked with a seed of its own, stacked."""
  examples = epoch_examples(documents, tokenizer, options, seed + 1_000_003, 0)
  return {name: np.stack([e[name] for e in examples]) for name in _signature(options)}
