"""Adding, replacing and removing documents of a published index without re-embedding the rest
(bin/update_index).

A change set names documents to add or replace (JSONL/TSV in the corpus formats, or a corpus written by
bin/generate_retrieval_corpus) and doc_ids to remove. An update
  1. checks the change set against the index's corpus before anything is written: an id to remove that
     the corpus lacks, an id given twice, an id both removed and added, a document whose id exists
     already (replaced only with on_existing="replace"), a change set of another vocabulary;
  2. embeds only the added and replaced documents, with the index's own document tower; a few unchanged
     documents are embedded beside them and must reproduce their stored embeddings and token ids, which
     stops a wrong checkpoint or tokenizer before anything is published;
  3. writes a NEW corpus derived from the index's corpus (default prefix `<base>-v<k>`): the kept rows
     in their order, a replaced document in its own row, added documents appended, removed rows
     deleted. The base corpus is never modified, since the index in use points at its rows; the new
     manifest records its base (corpus_lib.write_derived_corpus), so refreshers and trainers started
     on the base can follow it (published_index.current_corpus);
  4. hands back the new rows' embeddings for the caller to publish through the usual path
     (update_published_index here for MODEL_DIR/index/<step>; orqa_trainer.update_frozen_index).

Removed documents are deleted, not masked: index row i must stay corpus row i for every consumer (the
REALM input pipeline, ORQA's frozen blocks, the exported open-QA model's texts), and a masked row would
keep the removed text in the corpus and in every export made from it. Deleting costs nothing extra
here: the index is rebuilt from the kept embeddings, without embedding them again.

A kill at any point before the publication leaves the previous index in use: the derived corpus is a
new prefix no index refers to yet, and the index appears by the publish path's rename.
"""

import dataclasses
import os
import re
import shutil
import tempfile
import uuid
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from realm_tf.data import corpus as corpus_lib
from realm_tf.data import text_records
from realm_tf.modeling import checkpoints
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import corpus_embedding
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import published_index

ON_EXISTING = ("error", "replace")
# Unchanged documents embedded beside the changes to check the document tower and the tokenizer.
NUM_PROBES = 4
# Largest ||new - stored|| / ||stored|| of a probe: float32 re-embedding differs by ~1e-6, a bfloat16
# tower by ~1e-3; another checkpoint or another tower by far more.
PROBE_TOLERANCE = 2e-2
# Documents to embed from which the embedding is compiled with XLA (as the refresher always does).
JIT_COMPILE_MIN_DOCUMENTS = 2048


class UpdateError(ValueError):
  """The change set does not fit the index; nothing was written."""


@dataclasses.dataclass
class ChangeSet:
  """Documents to add or replace (by doc_id) and doc_ids to remove."""
  documents: List[corpus_lib.Document]
  remove_ids: List[str]
  documents_source: str = ""
  remove_source: str = ""


@dataclasses.dataclass
class UpdateResult:
  """The derived corpus and its embeddings [num_docs, D], row i = document i."""
  corpus_prefix: str
  embeddings: np.ndarray
  summary: Dict


def _duplicates(values: Sequence[str]) -> List[str]:
  seen, repeated = set(), []
  for value in values:
    if value in seen and value not in repeated:
      repeated.append(value)
    seen.add(value)
  return repeated


def _shown(ids: Sequence[str], limit: int = 5) -> str:
  listed = ", ".join(repr(i) for i in ids[:limit])
  return listed + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def read_change_set(documents_path: Optional[str] = None, remove_ids: Sequence[str] = (),
                    remove_ids_path: Optional[str] = None,
                    vocab_sha256: Optional[str] = None) -> ChangeSet:
  """Reads and checks a change set on its own (against the index: plan_rows).

  Args:
    documents_path: documents to add or replace: a .jsonl of {"id", "title", "body" (or "text")}, a DPR
      .tsv (id, text, title), or the prefix of a corpus from bin/generate_retrieval_corpus. Every
      document needs its own id (it is how later updates name it).
    remove_ids, remove_ids_path: doc_ids to remove, given directly and/or one per line in a file.
    vocab_sha256: the index corpus's vocab; a corpus prefix tokenized with another vocab is refused.
  Raises:
    UpdateError (or text_records.InputError naming FILE:LINE for a malformed record).
  """
  documents: List[corpus_lib.Document] = []
  if documents_path:
    if tf.io.gfile.exists(documents_path + corpus_lib.MANIFEST_SUFFIX):
      recorded = corpus_lib.read_manifest(documents_path).get("vocab_sha256")
      if vocab_sha256 and recorded and recorded != vocab_sha256:
        raise UpdateError(
            f"--documents={documents_path} was tokenized with another vocab (sha256 {recorded[:16]}...) "
            f"than the index's corpus ({vocab_sha256[:16]}...); pass its JSONL/TSV source, or regenerate "
            "it with bin/generate_retrieval_corpus --vocab_path=<the index corpus's vocab>")
      documents = [corpus_lib.Document(r["title"], r["body"], r["doc_id"])
                   for r in corpus_lib.read_corpus(documents_path)]
    else:
      documents = list(corpus_lib.read_documents(documents_path))
      if documents_path.lower().endswith((".jsonl", ".json")):
        for line_number, record in text_records.read_jsonl(documents_path):
          if "id" not in record:
            raise text_records.InputError(
                f"{documents_path}:{line_number}: a document to add or replace needs an \"id\" (later "
                "updates and removals name documents by it); add one")
    if not documents:
      raise UpdateError(f"--documents={documents_path} holds no documents")
    repeated = _duplicates([d.doc_id for d in documents])
    if repeated:
      raise UpdateError(f"--documents={documents_path} gives the ids {_shown(repeated)} more than once; "
                        "keep one document per id")
  ids = [str(i).strip() for i in remove_ids if str(i).strip()]
  if remove_ids_path:
    if not tf.io.gfile.exists(remove_ids_path):
      raise UpdateError(f"--remove_ids_path={remove_ids_path} does not exist; pass a file of doc_ids, "
                        "one per line")
    with tf.io.gfile.GFile(remove_ids_path) as f:
      ids += [line.strip() for line in f if line.strip()]
  remove_source = " and ".join(filter(None, ["--remove_ids" if remove_ids else "",
                                             f"--remove_ids_path={remove_ids_path}"
                                             if remove_ids_path else ""]))
  repeated = _duplicates(ids)
  if repeated:
    raise UpdateError(f"{remove_source} names the ids {_shown(repeated)} more than once; name each "
                      "document to remove once")
  both = sorted({d.doc_id for d in documents} & set(ids))
  if both:
    raise UpdateError(f"the ids {_shown(both)} are both removed ({remove_source}) and added "
                      f"(--documents={documents_path}); to change a document, only add it with "
                      "--on_existing=replace")
  if not documents and not ids:
    raise UpdateError("the change set is empty: pass --documents and/or --remove_ids / "
                      "--remove_ids_path")
  return ChangeSet(documents, ids, documents_path or "", remove_source)


@dataclasses.dataclass
class RowPlan:
  """The derived corpus as sources: ("base", base row) or ("new", position in change.documents)."""
  rows: List[tuple]
  added: List[str]
  replaced: List[str]
  removed: List[str]


def plan_rows(base_doc_ids: Sequence[str], change: ChangeSet, on_existing: str,
              corpus_prefix: str) -> RowPlan:
  """Where each row of the derived corpus comes from; raises UpdateError for a change that does not
  fit the base corpus (nothing is written before this check)."""
  if on_existing not in ON_EXISTING:
    raise UpdateError(f"--on_existing must be one of {ON_EXISTING}, got {on_existing!r}")
  rows_of: Dict[str, List[int]] = {}
  for row, doc_id in enumerate(base_doc_ids):
    rows_of.setdefault(doc_id, []).append(row)
  touched = [d.doc_id for d in change.documents] + change.remove_ids
  ambiguous = [i for i in touched if len(rows_of.get(i, ())) > 1]
  if ambiguous:
    raise UpdateError(f"the corpus {corpus_prefix} holds several documents with the ids "
                      f"{_shown(ambiguous)}, so they cannot be named for a change; regenerate it with "
                      "unique ids")
  unknown = [i for i in change.remove_ids if i not in rows_of]
  if unknown:
    raise UpdateError(f"{change.remove_source} names {len(unknown)} id(s) that the index's corpus "
                      f"{corpus_prefix} does not hold: {_shown(unknown)}; check the ids (they are the "
                      "corpus's doc_id: the TSV id column or the JSONL \"id\")")
  existing = [d.doc_id for d in change.documents if d.doc_id in rows_of]
  if existing and on_existing == "error":
    raise UpdateError(f"--documents={change.documents_source} holds {len(existing)} documents whose id "
                      f"the corpus {corpus_prefix} already holds: {_shown(existing)}; pass "
                      "--on_existing=replace to replace them, or give them new ids")
  replacement = {rows_of[d.doc_id][0]: i for i, d in enumerate(change.documents) if d.doc_id in rows_of}
  removed = {rows_of[i][0] for i in change.remove_ids}
  rows = []
  for row in range(len(base_doc_ids)):
    if row in removed:
      continue
    rows.append(("new", replacement[row]) if row in replacement else ("base", row))
  added = [d.doc_id for d in change.documents if d.doc_id not in rows_of]
  rows += [("new", i) for i, d in enumerate(change.documents) if d.doc_id not in rows_of]
  if not rows:
    raise UpdateError(f"the change removes every document of {corpus_prefix}; an index needs at least "
                      "one")
  return RowPlan(rows, added, existing, list(change.remove_ids))


def next_version_prefix(base_prefix: str) -> str:
  """`<root>-v<k>` beside the base, k one above every version there (a version left by a killed update
  is skipped, never overwritten); root is the base without its own -v<k>."""
  directory, name = os.path.split(os.path.abspath(base_prefix))
  root = re.sub(r"-v\d+$", "", name)
  pattern = re.compile(re.escape(root) + r"-v(\d+)(\.manifest\.json|-\d{5}-of-\d{5}|$)")
  versions = [int(m.group(1)) for m in map(pattern.match, tf.io.gfile.listdir(directory or ".")) if m]
  own = re.search(r"-v(\d+)$", name)
  versions.append(int(own.group(1)) if own else 0)
  return os.path.join(directory, f"{root}-v{max(versions) + 1}")


def update_corpus(base_prefix: str, base_embeddings: np.ndarray, change: ChangeSet, on_existing: str,
                  tokenizer, featurizer, embed_fn_factory: Callable[[], Callable],
                  output_prefix: Optional[str] = None, batch_size: int = 128,
                  log: Callable[[str], None] = print) -> UpdateResult:
  """Checks the change, embeds the changed documents, writes the derived corpus; returns it with the
  embeddings of its rows (publishing them is the caller's part).

  Args:
    base_prefix: the corpus the index embeds (row i = document i).
    base_embeddings: float32 [N, D], the index's rows.
    embed_fn_factory: returns the index's document tower as embed_fn ((ids, mask, segments) -> [B, D]);
      called only when there is something to embed (a removal needs no tower).
    output_prefix: the derived corpus (default next_version_prefix(base_prefix)).
  """
  base = list(corpus_lib.read_corpus(base_prefix))
  if len(base) != base_embeddings.shape[0]:
    raise UpdateError(f"the index has {base_embeddings.shape[0]} rows but its corpus {base_prefix} "
                      f"{len(base)} documents; it does not embed that corpus")
  plan = plan_rows([r["doc_id"] for r in base], change, on_existing, base_prefix)
  output_prefix = output_prefix or next_version_prefix(base_prefix)
  if tf.io.gfile.exists(output_prefix + corpus_lib.MANIFEST_SUFFIX):
    raise UpdateError(f"{output_prefix} already holds a corpus; pass another --output_corpus_prefix "
                      "(a published index may point at that one)")
  new_rows: List[dict] = []
  position: Dict[int, int] = {}
  new_embeddings = np.zeros([0, base_embeddings.shape[1]], np.float32)
  if change.documents:
    changed = {i for source, i in plan.rows if source == "new"}
    documents = [change.documents[i] for i in sorted(changed)]
    kept = [i for source, i in plan.rows if source == "base"]
    probes = [kept[j * len(kept) // NUM_PROBES] for j in range(min(NUM_PROBES, len(kept)))]
    probes = sorted(set(probes))
    probe_docs = [corpus_lib.Document(base[r]["title"], base[r]["body"], base[r]["doc_id"])
                  for r in probes]
    scratch = tempfile.mkdtemp(prefix="update_index-")
    try:
      prefix = os.path.join(scratch, "changes")
      corpus_lib.write_corpus(lambda: documents + probe_docs, tokenizer, prefix, num_shards=1)
      # XLA compiles one program per length bucket (seconds each for a MiniLM tower, and most of a
      # small update's time); below a few batches per bucket the compiled programs do not pay back.
      embeddings = corpus_embedding.embed_corpus(
          embed_fn_factory(), prefix, featurizer, batch_size=batch_size, log=log,
          jit_compile=len(documents) + len(probes) >= JIT_COMPILE_MIN_DOCUMENTS)
      tokenized = list(corpus_lib.read_corpus(prefix))
    finally:
      shutil.rmtree(scratch, ignore_errors=True)
    for probe, row, embedding in zip(tokenized[len(documents):], probes, embeddings[len(documents):]):
      if (probe["title_token_ids"] != base[row]["title_token_ids"]
          or probe["body_token_ids"] != base[row]["body_token_ids"]):
        raise UpdateError(f"the tokenizer does not reproduce the token ids of {base_prefix}'s document "
                          f"{base[row]['doc_id']!r}: the run's vocab is not the corpus's; nothing was "
                          "written")
      stored = base_embeddings[row]
      error = float(np.linalg.norm(embedding - stored) / max(np.linalg.norm(stored), 1e-12))
      if error > PROBE_TOLERANCE:
        raise UpdateError(f"the document tower does not reproduce the index's embedding of the unchanged "
                          f"document {base[row]['doc_id']!r} (relative error {error:.3g} > "
                          f"{PROBE_TOLERANCE}): it is not the tower the index was built with. Pass the "
                          "checkpoint the index was built from (--checkpoint); nothing was written")
    new_rows = tokenized[:len(documents)]
    new_embeddings = embeddings[:len(documents)]
    position = {i: j for j, i in enumerate(sorted(changed))}
  records = [base[i] if source == "base" else new_rows[position[i]] for source, i in plan.rows]
  embeddings = np.stack([base_embeddings[i] if source == "base" else new_embeddings[position[i]]
                         for source, i in plan.rows]).astype(np.float32)
  summary = {"added": len(plan.added), "replaced": len(plan.replaced), "removed": len(plan.removed),
             "embedded": len(new_rows), "base_documents": len(base), "documents": len(records),
             "documents_source": change.documents_source, "remove_source": change.remove_source}
  num_shards = len(corpus_lib.read_manifest(base_prefix)["shards"])
  corpus_lib.write_derived_corpus(base_prefix, lambda: records, len(records), output_prefix,
                                  num_shards, {k: v for k, v in summary.items() if k != "embedded"})
  log(f"wrote the updated corpus {output_prefix}: {len(records)} documents ({summary['added']} added, "
      f"{summary['replaced']} replaced, {summary['removed']} removed; {len(new_rows)} embedded)")
  return UpdateResult(output_prefix, embeddings, summary)


# -------------------------------------------------------------------------------------------------
# A REALM run's published index (MODEL_DIR/index/<step>/).


def update_published_index(index_path: str, change: ChangeSet, on_existing: str = "error",
                           checkpoint: Optional[str] = None, output_corpus_prefix: Optional[str] = None,
                           keep: int = 3, batch_size: int = 128,
                           log: Callable[[str], None] = print) -> str:
  """Publishes MODEL_DIR/index/<newest + 1>/: the newest published index with the change applied.

  The new version carries the same query tower (copied) and is built with the same implementation;
  published.json records the derived corpus and its fingerprint (so watchers accept it for that corpus),
  the checkpoint the embeddings come from, and "update" (the base index and the counts). It is numbered
  one above the newest published step, so that watchers, which take the newest, swap it in; a
  trainer's staleness then counts from that number, one step later than the checkpoint.
  Returns the published path.
  """
  index_path = os.path.abspath(index_path.rstrip("/"))
  model_dir = os.path.dirname(os.path.dirname(index_path))
  record = published_index.verify_published(index_path)
  steps = published_index.published_steps(model_dir)
  if not steps or os.path.join(published_index.index_root(model_dir), str(steps[-1])) != index_path:
    raise UpdateError(f"{index_path} is not the newest index of {model_dir} (that is step "
                      f"{steps[-1] if steps else None}); update the newest one, or a watcher would keep "
                      "the newer index and never use the update")
  base_prefix = record.get("corpus_prefix")
  if not base_prefix or not tf.io.gfile.exists(base_prefix + corpus_lib.MANIFEST_SUFFIX):
    raise UpdateError(f"{index_path}/{published_index.PUBLISHED_NAME} names the corpus {base_prefix!r}, "
                      "which does not exist (any more); an update needs the corpus the index embeds")
  recorded = record.get("corpus_fingerprint")
  if recorded is not None and recorded != corpus_lib.fingerprint(base_prefix):
    raise UpdateError(f"{base_prefix} changed after {index_path} embedded it (fingerprint "
                      f"{recorded[:16]} recorded); its rows no longer match. Wait for the next refresh")
  config = realm_config_lib.RealmConfig.load(os.path.join(model_dir, realm_config_lib.CONFIG_NAME))
  vocab = corpus_lib.check_vocab(config.vocab_path, base_prefix, config.vocab_sha256,
                                 os.path.join(model_dir, realm_config_lib.CONFIG_NAME),
                                 source="realm_config.json's vocab_path")
  if change.documents_source and tf.io.gfile.exists(change.documents_source + corpus_lib.MANIFEST_SUFFIX):
    recorded_vocab = corpus_lib.read_manifest(change.documents_source).get("vocab_sha256")
    if recorded_vocab and recorded_vocab != vocab:
      raise UpdateError(f"--documents={change.documents_source} was tokenized with another vocab than "
                        f"the index's corpus {base_prefix}; pass its JSONL/TSV source instead")
  mips = index_lib.load_index(os.path.join(index_path, published_index.MIPS_DIR), verify=False)
  tower_checkpoint = checkpoint or record.get("checkpoint")

  def embed_fn_factory():
    if not tower_checkpoint:
      raise UpdateError(f"{index_path} records no checkpoint (an index of a fresh retriever?), so its "
                        "document tower cannot be rebuilt; pass --checkpoint")
    retriever = config.build_retriever()
    try:
      checkpoints.restore_retriever(retriever, tower_checkpoint)
    except (ValueError, FileNotFoundError, tf.errors.OpError) as e:
      raise UpdateError(f"cannot restore the document tower from {tower_checkpoint}, the checkpoint "
                        f"{index_path} was built from ({str(e).splitlines()[0]}); pass --checkpoint with "
                        "that checkpoint (or wait for the next refresh)") from e
    return lambda inputs: retriever.embed_documents(inputs, training=False)

  result = update_corpus(base_prefix, np.asarray(mips.embeddings), change, on_existing,
                         config.tokenizer(), config.featurizer(), embed_fn_factory,
                         output_corpus_prefix, batch_size, log)
  implementation = record.get("implementation") or mips.implementation
  # The same kind of index as the refresher built (a compressed ScaNN index stays compressed).
  options = {}
  if implementation == index_lib.ScannIndex.implementation and "rescoring" in mips.parameters:
    options["rescoring"] = mips.parameters["rescoring"]
  new_mips = index_lib.build_index(result.embeddings, implementation=implementation, **options)
  update_id = uuid.uuid4().hex
  info = {k: v for k, v in record.items()
          if k not in ("step", "num_docs", "dim", "published_unix_time", "update", "embed_seconds",
                       "build_seconds", "bootstrap")}
  info.update(corpus_prefix=result.corpus_prefix,
              corpus_fingerprint=corpus_lib.fingerprint(result.corpus_prefix),
              implementation=implementation, checkpoint=tower_checkpoint,
              checkpoint_step=record.get("checkpoint_step", record["step"]),
              update=dict(result.summary, id=update_id, base_index=index_path, base_step=record["step"],
                          base_corpus=base_prefix))
  step = steps[-1] + 1
  path = published_index.publish_index(model_dir, step, new_mips,
                                       os.path.join(index_path, published_index.QUERY_EMBEDDER_DIR),
                                       info=info, keep=keep, log=log)
  if published_index.verify_published(path).get("update", {}).get("id") != update_id:
    raise UpdateError(f"a refresher published the index of step {step} at {path} while this update ran; "
                      f"the update was not published (its corpus {result.corpus_prefix} is unused): run "
                      "bin/update_index again on the newest index")
  log(f"published the updated index at {path}: {new_mips.num_docs} documents of {result.corpus_prefix}")
  return path


def resolve_published(path: str) -> str:
  """A published index directory from --index: MODEL_DIR/index/<step>, or a REALM MODEL_DIR (its newest
  published index)."""
  path = path.rstrip("/")
  if tf.io.gfile.exists(os.path.join(path, published_index.PUBLISHED_NAME)):
    return path
  steps = published_index.published_steps(path)
  if steps:
    return os.path.join(published_index.index_root(path), str(steps[-1]))
  raise UpdateError(f"--index={path} is neither a published index (no {published_index.PUBLISHED_NAME}) "
                    "nor a model dir with published indexes (MODEL_DIR/index/<step>/)")
