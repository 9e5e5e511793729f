"""Loading an exported SavedModel: what bin/serve, bin/answer and other clients import.

It imports TensorFlow and, when the export needs them, tensorflow_text (the raw-text models tokenize
inside the graph) and ScaNN (an index="scann" open_qa export), as its assets.extra/realm_tf_export.json
says; never the training stack that writes exports (realm_tf.export.saved_models, which imports this
module for the format's names).
"""

import json
import os
from typing import Dict, Sequence

import numpy as np
import tensorflow as tf

# What bin/export_saved_model records beside each SavedModel: its kind, index and sizes.
EXPORT_INFO = os.path.join("assets.extra", "realm_tf_export.json")
OPEN_QA = "open_qa"
TOKEN_IDS_SUFFIX = "_token_ids"  # query_embedder_token_ids/ etc.


def export_info(path: str) -> Dict:
  """The realm_tf_export.json of an exported SavedModel ({} for another SavedModel)."""
  info_path = os.path.join(path, EXPORT_INFO)
  if not tf.io.gfile.exists(info_path):
    return {}
  with tf.io.gfile.GFile(info_path) as f:
    return json.load(f)


# What an open_qa export retrieves by (bin/export_saved_model --retriever), as bin/serve and bin/answer
# name it; exports from before the option retrieve densely.
RETRIEVER_DESCRIPTIONS = {
    "dense": "dense: the model's own query tower over its index",
    "bm25": "bm25: BM25 over the corpus's wordpieces, in the model",
    "hybrid": "hybrid: BM25 and the dense tower fused by reciprocal rank fusion, in the model",
}

# export_info's fusion method of a hybrid that sums weighted z-normalised scores (--hybrid_bm25_weight).
WEIGHTED_FUSION = "weighted sum of z-normalised scores"


def retriever_of(info: Dict) -> str:
  """The retriever an open_qa export's info (export_info) records: dense, bm25 or hybrid."""
  return info.get("retriever", "dense")


def describe_retriever(info: Dict) -> str:
  """retriever_of(info) with what it means, for a person reading bin/answer's output or bin/serve's page."""
  retriever = retriever_of(info)
  fusion = info.get("fusion") or {}
  if retriever == "hybrid" and fusion.get("method") == WEIGHTED_FUSION:
    weight = fusion["bm25_weight"]
    return (f"hybrid: BM25 and the dense tower fused by a weighted sum of z-normalised scores ({weight:g} x "
            f"BM25 + {1 - weight:g} x dense), in the model")
  return RETRIEVER_DESCRIPTIONS.get(retriever, retriever)


def load_saved_model(path: str):
  """tf.saved_model.load after registering the ops the model needs (tensorflow_text for a raw-text model,
  and ScaNN for an index="scann" export)."""
  if not tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
    raise FileNotFoundError(f"{path} holds no saved_model.pb; pass a directory written by "
                            "bin/export_saved_model (e.g. EXPORT_DIR/open_qa)")
  info = export_info(path)
  if not info.get("kind", "").endswith(TOKEN_IDS_SUFFIX):  # the token-id models need core ops only
    import tensorflow_text  # pylint: disable=g-import-not-at-top,import-outside-toplevel,unused-import
  if info.get("index") == "scann":
    import scann  # pylint: disable=g-import-not-at-top,import-outside-toplevel,unused-import
  return tf.saved_model.load(path)


def load_open_qa(path: str):
  """load_saved_model for a raw-text open_qa export; ValueError naming the path when it is another kind
  of model (an embedder, or a token-id twin that takes wordpiece ids instead of questions)."""
  kind = export_info(path).get("kind", OPEN_QA)
  if kind != OPEN_QA:
    raise ValueError(f"{path} is a {kind} model; pass a raw-text open_qa SavedModel "
                     "(bin/export_saved_model's OUTPUT_DIR/open_qa)")
  return load_saved_model(path)


def answer_questions(model, questions: Sequence[str]) -> Dict[str, np.ndarray]:
  """The outputs of a loaded open_qa model's serving_default signature for questions, as numpy arrays
  (strings as bytes)."""
  outputs = model.signatures["serving_default"](questions=tf.constant(list(questions), tf.string))
  return {key: value.numpy() for key, value in outputs.items()}
