"""The frozen index of an ORQA run: MODEL_DIR/frozen_index/, its block embeddings and the corpus they embed.

ORQA fine-tunes the query tower against block embeddings that never change during the run (the original's
"frozen" document tower). They are made ONCE at the start of bin/train_orqa, either by embedding the
retrieval corpus with the document tower of --retriever_checkpoint or copied from --index_dir (a published
REALM index or a saved MIPS index), saved as a brute-force MIPS index (realm_tf.retrieval.index) and reused
when the run restarts. The index records the fingerprint of the corpus it embeds, so that an evaluation or
export after the corpus changed stops instead of pointing rows at other documents. bin/update_index
replaces it with the embeddings of a corpus derived from this one (update_frozen_index); the index, not
the run's configuration, then names that corpus (frozen_index_corpus).
"""

import os
import time
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from realm_tf.data import corpus as corpus_lib
from realm_tf.retrieval import corpus_embedding
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import index_format
from realm_tf.retrieval import index_update
from realm_tf.retrieval import published_index

FROZEN_INDEX_DIR = "frozen_index"


def frozen_index_dir(model_dir: str) -> str:
  return os.path.join(model_dir, FROZEN_INDEX_DIR)


def check_index_corpus(recorded: Optional[str], index_path: str, corpus_prefix: str, fix: str) -> None:
  """Stops when an index records the fingerprint of another corpus than corpus_prefix (row i of the index
  would not be document i: a corpus of the same size, shuffled or edited, passes every shape check).
  Indexes written before fingerprints were recorded pass."""
  if recorded is None:
    return
  expected = corpus_lib.fingerprint(corpus_prefix)
  if recorded != expected:
    raise ValueError(f"{index_path} embeds another corpus (fingerprint {recorded[:16]}) than "
                     f"{corpus_prefix} (fingerprint {expected[:16]}): its rows would point at other "
                     f"documents. {fix}")


def _read_index_dir(index_dir: str, corpus_prefix: str) -> Tuple[np.ndarray, Dict]:
  """Embeddings and provenance of --index_dir: a published MODEL_DIR/index/<step> or a saved MIPS
  index directory (e.g. bin/convert_checkpoint's mips/)."""
  fix = ("Pass --index_dir of an index built from this corpus, or omit it to embed the corpus with "
         "--retriever_checkpoint's document tower")
  if tf.io.gfile.exists(os.path.join(index_dir, published_index.PUBLISHED_NAME)):
    record = published_index.verify_published(index_dir)
    check_index_corpus(record.get("corpus_fingerprint"), index_dir, corpus_prefix, fix)
    mips = index_lib.load_index(os.path.join(index_dir, published_index.MIPS_DIR), verify=False)
    return np.asarray(mips.embeddings), {
        "index_dir": index_dir,
        "index_step": record.get("step"),
        "index_corpus": record.get("corpus_prefix")
    }
  if tf.io.gfile.exists(os.path.join(index_dir, index_format.MANIFEST_NAME)):
    mips = index_lib.load_index(index_dir)
    check_index_corpus(
        mips.manifest.get("extra", {}).get("corpus_fingerprint"), index_dir, corpus_prefix, fix)
    return np.asarray(mips.embeddings), {"index_dir": index_dir, "index_step": mips.step}
  raise FileNotFoundError(f"--index_dir={index_dir} is neither a published index (no "
                          f"{published_index.PUBLISHED_NAME}) nor a saved MIPS index (no "
                          f"{index_format.MANIFEST_NAME}); pass MODEL_DIR/index/<step> of a REALM run")


def _updated_corpus_of(index_dir: str, corpus_prefix: str) -> Optional[str]:
  """The corpus a published --index_dir embeds when bin/update_index derived it from corpus_prefix."""
  if not tf.io.gfile.exists(os.path.join(index_dir, published_index.PUBLISHED_NAME)):
    return None
  found = published_index.verify_published(index_dir).get("corpus_prefix")
  if (found and os.path.abspath(found) != os.path.abspath(corpus_prefix) and
      tf.io.gfile.exists(found + corpus_lib.MANIFEST_SUFFIX) and
      corpus_lib.descends_from(found, corpus_prefix)):
    return found
  return None


def prepare_frozen_index(model_dir: str,
                         corpus_prefix: str,
                         featurizer,
                         projection_size: int,
                         strategy: tf.distribute.Strategy,
                         retriever_fn: Callable[[], object],
                         index_dir: Optional[str] = None,
                         retriever_checkpoint: Optional[str] = None,
                         embed_batch_size: int = 128,
                         log: Callable[[str], None] = print,
                         jit_compile: bool = True) -> np.ndarray:
  """The run's block embeddings float32 [N, D]: reused from MODEL_DIR/frozen_index/ when a restarted run
  made them already, else taken from index_dir (--index_dir) or embedded with the document tower of
  retriever_fn() (an embedder.Retriever, called only then), then saved there.

  Args:
    model_dir: the run's model dir.
    corpus_prefix: the run's retrieval corpus (orqa_config.json's retrieval_corpus_path).
    featurizer: the run's featurizer (RealmConfig.featurizer()), for embedding the corpus.
    projection_size: the retriever's embedding size D.
    strategy: the strategy the document tower was built under.
    retriever_checkpoint: --retriever_checkpoint, recorded in the index's provenance.
    jit_compile: embed with XLA (the run's --jit_compile: a run without XLA does not pay its compiles).
  """
  directory = frozen_index_dir(model_dir)
  base_corpus = corpus_prefix
  num_docs = corpus_lib.read_manifest(corpus_prefix)["num_documents"]
  if tf.io.gfile.exists(os.path.join(directory, index_format.MANIFEST_NAME)):
    embeddings = load_frozen_index(model_dir, frozen_index_corpus(model_dir, corpus_prefix))
    log(f"reusing the frozen index {directory} ({embeddings.shape[0]} blocks)")
    return embeddings
  if index_dir:
    followed = _updated_corpus_of(index_dir, corpus_prefix)
    if followed:
      log(f"--index_dir={index_dir} embeds {followed}, which bin/update_index derived from "
          f"{corpus_prefix}: training on that corpus")
      corpus_prefix = followed
      num_docs = corpus_lib.read_manifest(corpus_prefix)["num_documents"]
    embeddings, provenance = _read_index_dir(index_dir, corpus_prefix)
    if followed:
      provenance["corpus_update"] = {"base_corpus": base_corpus}
    log(f"frozen index from {index_dir}")
  else:
    started = time.time()
    retriever = retriever_fn()
    embeddings = corpus_embedding.embed_corpus(
        lambda inputs: retriever.embed_documents(inputs, training=False),
        corpus_prefix,
        featurizer,
        batch_size=embed_batch_size,
        strategy=strategy,
        jit_compile=jit_compile,
        log=log)
    provenance = {"retriever_checkpoint": retriever_checkpoint, "embed_seconds": time.time() - started}
    log(f"embedded {embeddings.shape[0]} blocks with the document tower in "
        f"{time.time() - started:.1f} s")
  if embeddings.shape != (num_docs, projection_size):
    raise ValueError(f"the index has shape {embeddings.shape} but corpus {corpus_prefix} has {num_docs} "
                     f"documents and projection_size is {projection_size}; the index "
                     "must embed exactly this corpus, row for row, with this retriever")
  index_lib.build_index(embeddings, implementation="brute_force").save(
      directory,
      extra=dict(provenance,
                 corpus_prefix=corpus_prefix,
                 corpus_fingerprint=corpus_lib.fingerprint(corpus_prefix)))
  return embeddings


def frozen_index_corpus(model_dir: str, corpus_prefix: str) -> str:
  """The corpus MODEL_DIR/frozen_index embeds: the run's corpus_prefix (orqa_config.json), or the corpus
  bin/update_index derived from it and recorded in the frozen index (update_frozen_index). The run's
  configuration keeps naming the corpus it was started on; the frozen index, replaced in one rename,
  is what says which rows it holds, so there is no second file to keep in step."""
  directory = frozen_index_dir(model_dir)
  if not tf.io.gfile.exists(os.path.join(directory, index_format.MANIFEST_NAME)):
    return corpus_prefix
  extra = index_format.read_manifest(directory).get("extra", {})
  found = extra.get("corpus_prefix")
  if (extra.get("corpus_update") and found and os.path.abspath(found) != os.path.abspath(corpus_prefix) and
      tf.io.gfile.exists(found + corpus_lib.MANIFEST_SUFFIX) and
      corpus_lib.descends_from(found, corpus_prefix)):
    return found
  return corpus_prefix


def update_frozen_index(model_dir: str,
                        trained,
                        change: index_update.ChangeSet,
                        on_existing: str = "error",
                        output_corpus_prefix: Optional[str] = None,
                        batch_size: int = 128,
                        log: Callable[[str], None] = print) -> str:
  """bin/update_index on an ORQA run: applies a change set (realm_tf.retrieval.index_update) to
  MODEL_DIR/frozen_index with the run's frozen document tower, and saves the new frozen index in its
  place. eval_orqa, export_saved_model and a resumed train_orqa then read the derived corpus
  (frozen_index_corpus). Returns the derived corpus prefix.

  Args:
    trained: the run's model, orqa_model.load_trained(model_dir) (its best or latest checkpoint; ORQA
      never trains the document tower, so any of them embeds like the frozen index).
  """
  corpus_prefix = trained.orqa.retrieval_corpus_path
  directory = frozen_index_dir(model_dir)
  mips = index_lib.load_index(directory)
  retriever = trained.model.retriever
  result = index_update.update_corpus(
      corpus_prefix, np.asarray(mips.embeddings), change, on_existing, trained.tokenizer, trained.featurizer,
      lambda: lambda inputs: retriever.embed_documents(inputs, training=False), output_corpus_prefix,
      batch_size, log)
  extra = dict(mips.manifest.get("extra", {}),
               corpus_prefix=result.corpus_prefix,
               corpus_fingerprint=corpus_lib.fingerprint(result.corpus_prefix),
               corpus_update=dict(result.summary, base_corpus=corpus_prefix, checkpoint=trained.checkpoint))
  # save() renames the complete new directory into place (the old one is moved aside for the
  # instant between two renames, then deleted).
  index_lib.build_index(result.embeddings, implementation="brute_force").save(directory,
                                                                              step=mips.step,
                                                                              extra=extra,
                                                                              overwrite=True)
  log(f"replaced {directory}: {result.embeddings.shape[0]} blocks of {result.corpus_prefix}")
  return result.corpus_prefix


def load_frozen_index(model_dir: str, corpus_prefix: str) -> np.ndarray:
  """MODEL_DIR/frozen_index's embeddings [N, D], after checking they embed corpus_prefix as it is now."""
  directory = frozen_index_dir(model_dir)
  mips = index_lib.load_index(directory)
  check_index_corpus(
      mips.manifest.get("extra", {}).get("corpus_fingerprint"), directory, corpus_prefix,
      "The corpus changed after bin/train_orqa embedded it: put back the corpus the run was trained "
      "on, or train again in a new --model_dir")
  return np.asarray(mips.embeddings)
