"""The open-QA system of bench/squad_open_qa_bench.py: a SpanReader with all-MiniLM-L6-v2's BERT, its
training batches (ORQA's reader loss over several paragraphs is realm_tf.modeling.orqa_reader's), and
answering questions from retrieved paragraphs.

Why a module of its own: the bench defines absl flags, and its tests (imported into one pytest process
with other benches' tests) must not define them twice; everything here takes its settings as arguments.
"""

import json
import os
import shutil
import tempfile
import time
from typing import Callable, Dict, List, Sequence

import numpy as np
import tensorflow as tf

from bench import minilm_lib
from realm_tf import evaluation
from realm_tf.data import orqa_features
from realm_tf.modeling import orqa_reader
from realm_tf.modeling import reader as reader_lib

SPAN_HIDDEN_SIZE = 256  # ORQA's
_log = minilm_lib.log


def build_reader(directory: str, seq_len: int, max_span_width: int):
  """(SpanReader with all-MiniLM-L6-v2's encoder weights and a fresh span head, tokenizer)."""
  embedder, tokenizer = minilm_lib.load(directory)
  reader = reader_lib.SpanReader(embedder.config,
                                 seq_len=seq_len,
                                 span_hidden_size=SPAN_HIDDEN_SIZE,
                                 max_span_width=max_span_width)
  dummy = tf.zeros([1, 1, seq_len], tf.int32)
  reader(((dummy, dummy, dummy), dummy, tf.zeros([1, 1])))
  reader.encoder.set_weights(embedder.encoder.get_weights())
  return reader, tokenizer


_READER_CHECKPOINT = "reader"
_READER_SETTINGS = "reader_settings.json"


def save_reader(reader: reader_lib.SpanReader, directory: str, settings: Dict) -> None:
  """Writes reader's weights and the settings that made it into directory, all at once: a temporary
  directory beside it is renamed into place, so a crash leaves no half-written reader behind."""
  from realm_tf import io_utils  # pylint: disable=g-import-not-at-top
  if os.path.exists(directory):
    raise FileExistsError(f"{directory} exists; remove it or pass another --reader_dir")
  parent = os.path.dirname(os.path.abspath(directory))
  os.makedirs(parent, exist_ok=True)
  work = tempfile.mkdtemp(prefix=".tmp-reader-", dir=parent)
  try:
    tf.train.Checkpoint(reader=reader).write(os.path.join(work, _READER_CHECKPOINT))
    io_utils.write_json_atomic(os.path.join(work, _READER_SETTINGS), settings)
    os.rename(work, directory)
  except BaseException:
    shutil.rmtree(work, ignore_errors=True)
    raise


def restore_reader(reader: reader_lib.SpanReader, directory: str, settings: Dict) -> bool:
  """Restores a reader save_reader wrote into directory; False if there is none. Raises ValueError
  naming the difference if it was trained with other settings (its weights would not be this run's)."""
  path = os.path.join(directory, _READER_SETTINGS)
  if not os.path.exists(path):
    if os.path.exists(directory) and os.listdir(directory):
      raise ValueError(f"{directory} holds no {_READER_SETTINGS}; it is not a reader this bench saved. "
                       "Pass another --reader_dir")
    return False
  with open(path) as f:
    saved = json.load(f)
  differs = {k: (saved.get(k), v) for k, v in settings.items() if saved.get(k) != v}
  if differs:
    raise ValueError(f"{directory}: the reader there was trained with other settings (saved, asked): "
                     f"{differs}; pass the same flags or another --reader_dir")
  tf.train.Checkpoint(reader=reader).read(os.path.join(directory, _READER_CHECKPOINT)).assert_consumed()
  return True


def make_featurizer(tokenizer, seq_len: int):
  """tf.function: (questions [B], paragraphs [B, K], answers ragged [B, (A)]) -> reader features
  (orqa_reader.FEATURES, and the byte offsets and retriever_correct that answering reads)."""

  @tf.function
  def featurize(questions, paragraphs, answers):
    f = orqa_features.reader_inputs_from_texts(tokenizer, questions, paragraphs, seq_len, answers=answers)
    token_ids, mask, segment_ids = orqa_reader.READER_FIELDS
    return {
        token_ids: f.inputs.token_ids,
        mask: f.inputs.mask,
        segment_ids: f.inputs.segment_ids,
        orqa_reader.BLOCK_MASK: f.inputs.block_mask,
        orqa_reader.GOLD_STARTS: f.gold_starts,
        orqa_reader.GOLD_ENDS: f.gold_ends,
        "byte_starts": f.byte_starts,
        "byte_limits": f.byte_limits,
        "retriever_correct": f.retriever_correct
    }

  return featurize


def training_dataset_fn(featurize, seq_len: int, bodies: List[str], train, pairs: np.ndarray,
                        order: np.ndarray, batch_size: int) -> Callable[[int], tf.data.Dataset]:
  """loop.train's dataset_fn: batch i reads questions order[i * batch_size:(i + 1) * batch_size] of
  train, each with its paragraphs pairs[question] (rows of bodies), as OrqaReader's features from
  featurize (make_featurizer's, for seq_len) without retriever features (the reader's loss alone);
  batches are made on the host ahead of the step."""
  num_batches = len(order) // batch_size
  names = orqa_reader.FEATURES
  # Static shapes but for the gold spans per paragraph, which vary: XLA compiles one program per
  # count of them, and the reader checks its length statically.
  reader = tf.TensorSpec([batch_size, pairs.shape[1], seq_len], tf.int32)
  gold = tf.TensorSpec([batch_size, pairs.shape[1], None], tf.int32)
  signature = {
      name: gold if name in (orqa_reader.GOLD_STARTS, orqa_reader.GOLD_ENDS) else reader for name in names
  }

  def dataset_fn(start: int) -> tf.data.Dataset:

    def batches():
      for step in range(start, num_batches):
        chosen = order[step * batch_size:(step + 1) * batch_size]
        features = featurize(tf.constant([train[i].question for i in chosen]),
                             tf.constant([[bodies[r] for r in pairs[i]] for i in chosen]),
                             ragged_answers([train[i].answers for i in chosen]))
        yield {name: tf.cast(features[name], tf.int32).numpy() for name in names}

    return tf.data.Dataset.from_generator(batches, output_signature=signature).prefetch(2)

  return dataset_fn


def ragged_answers(answers: Sequence[Sequence[str]]) -> tf.RaggedTensor:
  return tf.ragged.constant([list(a) for a in answers], dtype=tf.string)


def training_paragraphs(train, train_rows: np.ndarray, bm25_rows: np.ndarray) -> np.ndarray:
  """int64 [len(train), 2]: each question's gold paragraph row and BM25's best-ranked other row."""
  pairs = np.zeros([len(train), 2], np.int64)
  for i, gold in enumerate(train_rows):
    other = next(int(r) for r in bm25_rows[i] if r != gold)
    pairs[i] = (gold, other)
  return pairs


def answer_questions(reader,
                     featurize,
                     bodies: List[str],
                     questions,
                     rows: np.ndarray,
                     ks: Sequence[int],
                     max_span_width: int,
                     batch_size: int = 16,
                     jit_compile: bool = True) -> Dict:
  """Reads rows[:, :max(ks)] for each question; EM/F1 and oracle per k, and the predictions at max(ks).

  At each k the answer is the best span over the first k paragraphs' spans (reader logits compared
  across paragraphs, as the shared-normalisation training makes them comparable).
  """
  forward = tf.function(lambda inputs: reader(inputs, training=False).logits, jit_compile=jit_compile)
  span_starts, span_ends = reader_lib.span_candidates(reader.seq_len, max_span_width)
  read_k = max(ks)
  em = {k: [] for k in ks}
  f1 = {k: [] for k in ks}
  oracle = {k: [] for k in ks}
  predictions = []
  start = time.perf_counter()
  for first in range(0, len(questions), batch_size):
    qs = questions[first:first + batch_size]
    texts = [[bodies[r] for r in rows[first + i, :read_k]] for i in range(len(qs))]
    f = featurize(tf.constant([q.question for q in qs]), tf.constant(texts),
                  ragged_answers([q.answers for q in qs]))
    logits = forward((tuple(f[name] for name in orqa_reader.READER_FIELDS), f[orqa_reader.BLOCK_MASK],
                      tf.zeros([len(qs), read_k]))).numpy()  # [B, K, S]
    correct = f["retriever_correct"].numpy()
    # The featurizer's byte offsets of each reader position in its paragraph: the answer is sliced from
    # the original text without tokenizing the paragraph again.
    byte_starts, byte_limits = f["byte_starts"].numpy(), f["byte_limits"].numpy()
    for k in ks:
      best = logits[:, :k].reshape(len(qs), -1).argmax(axis=-1)
      block, span = best // logits.shape[2], best % logits.shape[2]
      for i, q in enumerate(qs):
        begin = byte_starts[i, block[i], span_starts[span[i]]]
        end = byte_limits[i, block[i], span_ends[span[i]]]
        # -1: the span left the paragraph (only when a paragraph has no wordpiece to offer).
        text = (texts[i][block[i]].encode("utf-8")[begin:end].decode("utf-8")
                if begin >= 0 and end > begin else "")
        em[k].append(evaluation.exact_match(text, q.answers))
        f1[k].append(evaluation.f1_score(text, q.answers))
        oracle[k].append(bool(correct[i, :k].any()))
        if k == read_k:
          predictions.append(text)
    if (first // batch_size) % 100 == 0:
      done = first + len(qs)
      _log(f"  answered {done}/{len(questions)}: EM@{read_k} so far {100 * np.mean(em[read_k]):.1f} "
           f"({done / (time.perf_counter() - start):.1f} questions/s)")
  seconds = time.perf_counter() - start
  return {
      "per_k": {
          str(k): {
              "exact_match": 100 * float(np.mean(em[k])),
              "f1": 100 * float(np.mean(f1[k])),
              "answer_in_read_paragraphs": 100 * float(np.mean(oracle[k]))
          } for k in ks
      },
      "seconds":
          seconds,
      "questions_per_s":
          len(questions) / seconds,
      "predictions_sample": [{
          "question": q.question,
          "answers": q.answers,
          "prediction": p
      } for q, p in list(zip(questions, predictions))[:20]]
  }
