"""The tiny REALM, ICT and ORQA tasks the step benches time: models built by a forward pass and synthetic
batches of random wordpieces (a step's time does not depend on the values), at a few BERT sizes."""

import os

import numpy as np
import tensorflow as tf

from realm_tf.modeling import bert
from realm_tf.modeling import ict
from realm_tf.modeling import orqa_reader
from realm_tf.modeling import reader
from realm_tf.modeling import realm

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CLS, _SEP, _MASK = 2, 3, 4
PROJECTION_SIZE = 128
SPAN_HIDDEN_SIZE = 256
MAX_SPAN_WIDTH = 10

# Shapes per config: small but realistic for tiny, and BERT-base cut down to fit a CPU time budget.
SHAPES = {
    "tiny": dict(B=8, N=8, Q=32, C=64, M=4),
    "minilm": dict(B=4, N=8, Q=32, C=128, M=4),
    "bert_base": dict(B=2, N=4, Q=32, C=128, M=4),
}


def _tiny_vocab_size() -> int:
  """The testdata vocab's size (what bin/demo's tiny models use), else 285."""
  path = os.path.join(_ROOT, "testdata", "vocab.txt")
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      return sum(1 for _ in f)
  return 285


def bert_config(name: str) -> bert.BertConfig:
  if name == "tiny":
    return bert.tiny_config(_tiny_vocab_size())
  if name == "minilm":
    return bert.minilm_l6_config()
  if name == "bert_base":
    return bert.bert_base_config()
  raise ValueError(f"unknown config {name!r}; use tiny, minilm or bert_base")


# ------------------------------------------------------------------------------------------------
# Synthetic batches (random wordpieces; the step time does not depend on the values).


def _triple(rng, vocab_size, shape, segment_start):
  token_ids = rng.integers(5, vocab_size, shape).astype(np.int32)
  token_ids[..., 0] = _CLS
  token_ids[..., -1] = _SEP
  segment_ids = np.zeros(shape, np.int32)
  segment_ids[..., segment_start:] = 1
  return token_ids, np.ones(shape, np.int32), segment_ids


def _add(features, prefix, triple):
  for field, value in zip(realm.BERT_FIELDS, triple):
    features[f"{prefix}_{field}"] = value


def _realm_features(vocab_size, B, N, Q, C, M):
  rng = np.random.default_rng(0)
  query = _triple(rng, vocab_size, [B, Q], Q)
  positions = np.tile(np.arange(1, M + 1, dtype=np.int32), [B, 1])
  targets = query[0][:, 1:M + 1].copy()
  query[0][:, 1:M + 1] = _MASK
  candidates = _triple(rng, vocab_size, [B, N, C], C // 4)
  joint_ids = np.concatenate([np.repeat(query[0][:, np.newaxis], N, 1), candidates[0][:, :, 1:]], -1)
  joint = (joint_ids, np.ones_like(joint_ids),
           (np.arange(Q + C - 1) >= Q).astype(np.int32) * np.ones_like(joint_ids))
  features = {
      realm.MLM_POSITIONS: positions,
      realm.MLM_TARGETS: targets,
      realm.MLM_MASK: np.ones([B, M], np.float32)
  }
  _add(features, realm.QUERY, query)
  _add(features, realm.CANDIDATE, candidates)
  _add(features, realm.JOINT, joint)
  return features


def _ict_features(vocab_size, B, N, Q, C, M):
  del N, M
  rng = np.random.default_rng(1)
  features = {ict.MASK_QUERY: (rng.random(B) < 0.9).astype(np.float32)}
  _add(features, ict.QUERY, _triple(rng, vocab_size, [B, Q], Q))
  _add(features, ict.BLOCK, _triple(rng, vocab_size, [B, C], C // 4))
  return features


def _orqa_features(vocab_size, B, N, Q, C, M):
  del M
  rng = np.random.default_rng(2)
  length = Q + C
  block_mask = np.zeros([B, N, length], np.int32)
  block_mask[:, :, Q:-1] = 1
  gold_starts = np.full([B, N, 2], -1, np.int32)
  gold_ends = np.full([B, N, 2], -1, np.int32)
  gold_starts[:, 0, 0], gold_ends[:, 0, 0] = Q + 3, Q + 5
  retriever_beam = 4 * N
  features = {
      "block_mask": block_mask,
      "gold_starts": gold_starts,
      "gold_ends": gold_ends,
      "retriever_logits": rng.normal(size=[B, retriever_beam]).astype(np.float32),
      "retriever_correct": rng.random([B, retriever_beam]) < 0.2
  }
  _add(features, "reader", _triple(rng, vocab_size, [B, N, length], Q))
  return features


def task(name, config, shapes):
  """(model, features) of one task, the model built by a forward pass."""
  vocab = config.vocab_size
  if name == "realm":
    model = realm.RealmPretrainer(config, projection_size=PROJECTION_SIZE)
    features = _realm_features(vocab, **shapes)
  elif name == "ict":
    model = ict.IctModel(config, projection_size=PROJECTION_SIZE)
    features = _ict_features(vocab, **shapes)
  elif name == "orqa":
    # ORQA's loss with the retriever's outputs given as features: the reader's step and the loss.
    model = orqa_reader.OrqaReader(reader.SpanReader(config,
                                                     seq_len=shapes["Q"] + shapes["C"],
                                                     span_hidden_size=SPAN_HIDDEN_SIZE,
                                                     max_span_width=MAX_SPAN_WIDTH),
                                   name="orqa")
    features = _orqa_features(vocab, **shapes)
  else:
    raise ValueError(f"unknown task {name!r}; use realm, ict or orqa")
  features = {k: tf.constant(v) for k, v in features.items()}
  model(features)
  return model, features
