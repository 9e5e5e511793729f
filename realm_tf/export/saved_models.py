"""SavedModels with raw-text signatures: the query embedder, the document embedder and open-domain QA.

Each takes UTF-8 strings; tokenization runs inside (realm_tf.tokenization.Tokenizer, tensorflow_text
ops; the vocab file becomes an asset), so TF Serving or `tf.saved_model.load` needs nothing else:

  query_embedder/     serving_default(questions: string [B]) -> {embeddings: float32 [B, D]}
                      the fine-tuned query tower; [CLS] question [SEP] at the run's query_seq_len
  document_embedder/  serving_default(titles: string [B], bodies: string [B]) -> {embeddings: [B, D]}
                      the (frozen) document tower that embedded the index: new documents embedded with
                      it are comparable with the index's
  open_qa/            serving_default(questions: string [B]) -> {answers: string [B], scores: float32 [B],
                      block_ids: int32 [B, K] (corpus rows, best first), doc_ids, block_titles,
                      block_texts: string [B, K], retriever_scores: float32 [B, K]}
                      K = the reader beam. It carries the whole index and the block texts: brute force
                      over the embedded blocks (exact; fine for small corpora), or a ScaNN searcher
                      (index="scann", ScaNN's TF ops, serialized with the model) whose candidates are
                      re-ranked by their exact inner product, as ORQA re-scored ScaNN's ids.

A ScaNN model can only be loaded where `import scann` has run first (its ops must be registered), and
every model needs tensorflow_text's ops: `load_saved_model` does both, reading which it needs from
assets.extra/realm_tf_export.json. Exports are written into a temporary sibling directory and renamed
into place, so a reader sees no model or a complete one.
"""

import json
import os
import shutil
from typing import Callable, Dict, Optional

import tensorflow as tf

from realm_tf import featurization
from realm_tf import io_utils
from realm_tf import tokenization
from realm_tf.data import orqa_features
from realm_tf.modeling import checkpoints
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import index as index_lib
from realm_tf.training import orqa_trainer

EXPORT_INFO = os.path.join("assets.extra", "realm_tf_export.json")
QUERY_EMBEDDER = "query_embedder"
DOCUMENT_EMBEDDER = "document_embedder"
OPEN_QA = "open_qa"
INDEX_CHOICES = ("brute_force", "scann")


class QueryEmbedderModule(tf.Module):
  """Questions -> query embeddings (see the module docstring).

  Args:
    tokenizer: the run's Tokenizer (its vocab is saved as an asset).
    featurizer: packs [CLS] question [SEP] to its query_seq_len.
    query_embedder: a RetrieverEmbedder (Keras) with restored weights.
  """

  def __init__(self, tokenizer: tokenization.Tokenizer, featurizer: featurization.Featurizer,
               query_embedder):
    super().__init__(name="query_embedder_module")
    self.tokenizer = tokenizer
    self.query_embedder = query_embedder
    self._featurizer = featurizer

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="questions")], autograph=False)
  def embed(self, questions):
    inputs = self._featurizer.query_inputs(self.tokenizer.tokenize(questions))
    return {"embeddings": tf.cast(self.query_embedder(tuple(inputs), training=False), tf.float32)}


class DocumentEmbedderModule(tf.Module):
  """(titles, bodies) -> document embeddings, [CLS] title [SEP] body [SEP] at candidate_seq_len."""

  def __init__(self, tokenizer: tokenization.Tokenizer, featurizer: featurization.Featurizer,
               doc_embedder):
    super().__init__(name="document_embedder_module")
    self.tokenizer = tokenizer
    self.doc_embedder = doc_embedder
    self._featurizer = featurizer

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="titles"),
                                tf.TensorSpec([None], tf.string, name="bodies")], autograph=False)
  def embed(self, titles, bodies):
    # One tokenizer call for both fields: each traced call adds thousands of ops to the graph.
    count = tf.shape(titles, out_type=tf.int64)[0]
    pieces = self.tokenizer.tokenize(tf.concat([titles, bodies], 0))
    inputs = self._featurizer.candidate_inputs(pieces[:count], pieces[count:])
    return {"embeddings": tf.cast(self.doc_embedder(tuple(inputs), training=False), tf.float32)}


class OpenQaModule(tf.Module):
  """Questions -> answers, with retrieval over the carried index and the span reader.

  Args:
    model: an OrqaModel with restored weights (its query tower, reader and frozen corpus are saved; its
      document tower is not needed here).
    tokenizer, featurizer: the run's.
    titles, bodies, doc_ids: the corpus, row i = block i of the index.
    index: "brute_force" or "scann".
    scann_options: realm_tf.retrieval.index.ScannOptions for index="scann" (below tree_min_docs
      documents ScaNN scores by brute force).
  """

  def __init__(self, model, tokenizer: tokenization.Tokenizer, featurizer: featurization.Featurizer,
               titles, bodies, doc_ids, index: str = "brute_force",
               scann_options: Optional[index_lib.ScannOptions] = None):
    super().__init__(name="open_qa_module")
    if index not in INDEX_CHOICES:
      raise ValueError(f"index must be one of {INDEX_CHOICES}, got {index!r}")
    self.tokenizer = tokenizer
    self.query_embedder = model.retriever.query_embedder
    self.reader = model.reader
    self.block_embeddings = model.corpus.embeddings
    self.block_token_ids = model.corpus.token_ids
    self.block_lengths = model.corpus.lengths
    self.block_titles = tf.Variable(list(titles), dtype=tf.string, trainable=False)
    self.block_texts = tf.Variable(list(bodies), dtype=tf.string, trainable=False)
    self.block_doc_ids = tf.Variable(list(doc_ids), dtype=tf.string, trainable=False)
    self._model = model
    self._featurizer = featurizer
    self.index = index
    self.scann_parameters = None
    self._candidate_fn = None
    if index == "scann":
      self._candidate_fn = self._build_scann(model, scann_options or index_lib.ScannOptions())

  def _build_scann(self, model, options: index_lib.ScannOptions) -> Callable:
    import scann  # pylint: disable=g-import-not-at-top,import-outside-toplevel  (only for this index)
    embeddings = model.corpus.embeddings.numpy()
    params = options.resolve(embeddings.shape[0])
    num_candidates = min(embeddings.shape[0], max(params["num_candidates"], model.reader_beam))
    builder = scann.scann_ops.builder(tf.constant(embeddings), num_candidates, "dot_product")
    if params["mode"] == "tree_ah":
      builder = builder.tree(num_leaves=params["num_leaves"],
                             num_leaves_to_search=params["num_leaves_to_search"],
                             training_sample_size=params["training_sample_size"])
      threshold = params["anisotropic_quantization_threshold"]
      builder = builder.score_ah(params["dimensions_per_block"],
                                 anisotropic_quantization_threshold=(
                                     float("nan") if threshold is None else float(threshold)))
    else:
      builder = builder.score_brute_force()
    self.scann_state = builder.build().serialize_to_module()
    self.scann_parameters = dict(params, num_candidates=num_candidates)

    def candidates(query):
      # The searcher is rebuilt from the saved state's tensors on each call (ScaNN's own
      # searcher_from_module); this is measured at well under a millisecond for 200k x 64.
      searcher = scann.scann_ops.searcher_from_module(self.scann_state)
      rows, _ = searcher.search_batched(query, final_num_neighbors=num_candidates)
      return rows

    return candidates

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="questions")], autograph=False)
  def answer(self, questions):
    model = self._model
    features = orqa_features.question_features(self.tokenizer, self._featurizer, questions,
                                               model.orqa.reader_seq_len)
    outputs = model.predict_answers(features, training=False, candidate_fn=self._candidate_fn)
    rows = outputs["block_rows"]
    answers = orqa_features.extract_answers(self.tokenizer,
                                            tf.gather(self.block_texts, outputs["predicted_row"]),
                                            outputs["first_piece"], outputs["last_piece"])
    return {"answers": answers, "scores": outputs["score"], "block_ids": rows,
            "doc_ids": tf.gather(self.block_doc_ids, rows),
            "block_titles": tf.gather(self.block_titles, rows),
            "block_texts": tf.gather(self.block_texts, rows),
            "retriever_scores": outputs["retriever_logits"]}


def _save(module: tf.Module, signature, path: str, info: Dict) -> str:
  """Saves module with one serving signature into path atomically (temporary sibling, then rename)."""
  path = os.path.abspath(path)
  if os.path.exists(path):
    raise FileExistsError(f"{path} already exists; export into a new directory (or delete it first)")
  parent = os.path.dirname(path)
  os.makedirs(parent, exist_ok=True)
  tmp = io_utils.temporary_path(path)
  try:
    tf.saved_model.save(module, tmp, signatures={"serving_default": signature})
    os.makedirs(os.path.join(tmp, os.path.dirname(EXPORT_INFO)), exist_ok=True)
    io_utils.write_json_atomic(os.path.join(tmp, EXPORT_INFO), info)
    for directory, _, files in os.walk(tmp):
      for name in files:
        io_utils.fsync_path(os.path.join(directory, name))
    os.rename(tmp, path)
    io_utils.fsync_path(parent)
  finally:
    if os.path.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)
  return path


def export_query_embedder(config: realm_config_lib.RealmConfig, query_embedder, path: str,
                          info: Optional[Dict] = None) -> str:
  tokenizer = config.tokenizer()
  module = QueryEmbedderModule(tokenizer, config.featurizer(tokenizer), query_embedder)
  return _save(module, module.embed, path, dict(info or {}, kind=QUERY_EMBEDDER,
                                                 query_seq_len=config.query_seq_len,
                                                 dim=config.projection_size))


def export_document_embedder(config: realm_config_lib.RealmConfig, doc_embedder, path: str,
                             info: Optional[Dict] = None) -> str:
  tokenizer = config.tokenizer()
  module = DocumentEmbedderModule(tokenizer, config.featurizer(tokenizer), doc_embedder)
  return _save(module, module.embed, path, dict(info or {}, kind=DOCUMENT_EMBEDDER,
                                                 candidate_seq_len=config.candidate_seq_len,
                                                 dim=config.projection_size))


def export_open_qa(trained, path: str, index: str = "brute_force",
                   scann_options: Optional[index_lib.ScannOptions] = None,
                   info: Optional[Dict] = None) -> str:
  """Exports a realm_tf.training.orqa_trainer.TrainedOrqa (load_trained) as the open-QA SavedModel."""
  blocks = trained.blocks
  module = OpenQaModule(trained.model, trained.tokenizer, trained.featurizer, blocks.titles,
                        blocks.bodies, blocks.doc_ids, index, scann_options)
  return _save(module, module.answer, path, dict(
      info or {}, kind=OPEN_QA, index=index, scann_parameters=module.scann_parameters,
      num_blocks=trained.model.num_blocks, reader_beam=trained.model.reader_beam,
      checkpoint=trained.checkpoint))


def export_all(model_dir: str, output_dir: str, checkpoint: Optional[str] = None,
               index: str = "brute_force", scann_options: Optional[index_lib.ScannOptions] = None,
               log: Callable[[str], None] = print) -> Dict[str, str]:
  """Exports a model dir into output_dir/{query_embedder, document_embedder[, open_qa]}.

  A bin/train_orqa model dir (orqa_config.json) gives all three, from its best checkpoint by default.
  Any other run with a realm_config.json (bin/train_realm, bin/train_ict, a converted checkpoint) gives
  the two embedders, from its latest checkpoint by default.
  """
  config = realm_config_lib.RealmConfig.load(model_dir)
  paths = {}
  if tf.io.gfile.exists(os.path.join(model_dir, "orqa_config.json")):
    trained = orqa_trainer.load_trained(model_dir, checkpoint)
    info = {"model_dir": os.path.abspath(model_dir), "checkpoint": trained.checkpoint}
    log(f"exporting {trained.checkpoint}")
    paths[QUERY_EMBEDDER] = export_query_embedder(
        config, trained.model.retriever.query_embedder, os.path.join(output_dir, QUERY_EMBEDDER), info)
    paths[DOCUMENT_EMBEDDER] = export_document_embedder(
        config, trained.model.retriever.doc_embedder, os.path.join(output_dir, DOCUMENT_EMBEDDER), info)
    paths[OPEN_QA] = export_open_qa(trained, os.path.join(output_dir, OPEN_QA), index, scann_options,
                                    info)
  else:
    retriever = config.build_retriever()
    resolved = checkpoints.restore_retriever(retriever, checkpoint or model_dir)
    info = {"model_dir": os.path.abspath(model_dir), "checkpoint": resolved}
    log(f"exporting the retriever of {resolved} (not an ORQA run: no open-QA model)")
    paths[QUERY_EMBEDDER] = export_query_embedder(
        config, retriever.query_embedder, os.path.join(output_dir, QUERY_EMBEDDER), info)
    paths[DOCUMENT_EMBEDDER] = export_document_embedder(
        config, retriever.doc_embedder, os.path.join(output_dir, DOCUMENT_EMBEDDER), info)
  for kind, path in paths.items():
    log(f"wrote {kind} SavedModel to {path}")
  return paths


def export_info(path: str) -> Dict:
  """The realm_tf_export.json of an exported SavedModel ({} for another SavedModel)."""
  info_path = os.path.join(path, EXPORT_INFO)
  if not tf.io.gfile.exists(info_path):
    return {}
  with tf.io.gfile.GFile(info_path) as f:
    return json.load(f)


def load_saved_model(path: str):
  """tf.saved_model.load after registering the ops the model needs (tensorflow_text, and ScaNN for an
  index="scann" export)."""
  if not tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
    raise FileNotFoundError(f"{path} holds no saved_model.pb; pass a directory written by "
                            "bin/export_saved_model (e.g. EXPORT_DIR/open_qa)")
  import tensorflow_text  # pylint: disable=g-import-not-at-top,import-outside-toplevel,unused-import
  if export_info(path).get("index") == "scann":
    import scann  # pylint: disable=g-import-not-at-top,import-outside-toplevel,unused-import
  return tf.saved_model.load(path)

