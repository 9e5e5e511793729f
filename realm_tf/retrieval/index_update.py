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
     (update_published_index here for MODEL_DIR/index/<step>; runs.frozen_index.update_frozen_index).

Removed documents are deleted, not masked: index row i must stay corpus row i for every consumer (the
REALM input pipeline, ORQA's frozen blocks, the exported open-QA model's texts), and a masked row would
keep the removed text in the corpus and in every export made from it. Deleting costs nothing extra
here: the index is rebuilt from the kept embeddings, without embedding them again.

A kill at any point before the publication leaves the previous index in use: the derived corpus is a
new prefix no index refers to yet, and the index appears by the publish path's rename.
"""

import dataclasses
import json
import os
import re
import shutil
import tempfile
import uuid
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from realm_tf import io_utils
from realm_tf.checkpoints import released
from realm_tf.checkpoints import sources
from realm_tf.checkpoints import training_state
from realm_tf.data import corpus as corpus_lib
from realm_tf.data import text_records
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import converted_index
from realm_tf.retrieval import corpus_embedding
from realm_tf.retrieval import index as index_lib
from realm_tf.retrieval import index_format
from realm_tf.retrieval import mips_index
from realm_tf.retrieval import published_index
from realm_tf.retrieval import scann_index

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


def read_change_set(documents_path: Optional[str] = None,
                    remove_ids: Sequence[str] = (),
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
      documents = [
          corpus_lib.Document(r["title"], r["body"], r["doc_id"])
          for r in corpus_lib.read_corpus(documents_path)
      ]
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
  remove_source = " and ".join(
      filter(None, [
          "--remove_ids" if remove_ids else "",
          f"--remove_ids_path={remove_ids_path}" if remove_ids_path else ""
      ]))
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


def apply_change(base: Sequence[dict],
                 base_embeddings: np.ndarray,
                 change: ChangeSet,
                 on_existing: str,
                 tokenizer,
                 featurizer,
                 embed_fn_factory: Callable[[], Callable],
                 source: str,
                 batch_size: int = 128,
                 log: Callable[[str], None] = print):
  """Checks the change against the index's documents and embeds the changed ones; returns (the rows of
  the updated index as corpus records, their embeddings float32 [rows, D], a summary). Writes nothing.

  Args:
    base: the documents of the index's rows, dicts with "title", "body", "doc_id" (read_corpus records;
      when they hold "title_token_ids" / "body_token_ids", the probes' token ids are checked too).
    base_embeddings: float32 [len(base), D], the index's rows.
    embed_fn_factory: returns the index's document tower as embed_fn ((ids, mask, segments) -> [B, D]);
      called only when there is something to embed (a removal needs no tower).
    source: what holds the documents (a corpus prefix, a blocks.jsonl), for messages.
  """
  if len(base) != base_embeddings.shape[0]:
    raise UpdateError(f"the index has {base_embeddings.shape[0]} rows but {source} holds {len(base)} "
                      "documents; it does not embed those documents")
  plan = plan_rows([r["doc_id"] for r in base], change, on_existing, source)
  new_rows: List[dict] = []
  position: Dict[int, int] = {}
  new_embeddings = np.zeros([0, base_embeddings.shape[1]], np.float32)
  if change.documents:
    changed = {i for origin, i in plan.rows if origin == "new"}
    documents = [change.documents[i] for i in sorted(changed)]
    kept = [i for origin, i in plan.rows if origin == "base"]
    probes = [kept[j * len(kept) // NUM_PROBES] for j in range(min(NUM_PROBES, len(kept)))]
    probes = sorted(set(probes))
    probe_docs = [corpus_lib.Document(base[r]["title"], base[r]["body"], base[r]["doc_id"]) for r in probes]
    scratch = tempfile.mkdtemp(prefix="update_index-")
    try:
      prefix = os.path.join(scratch, "changes")
      corpus_lib.write_corpus(lambda: documents + probe_docs, tokenizer, prefix, num_shards=1)
      # XLA compiles one program per length bucket (seconds each for a MiniLM tower, and most of a
      # small update's time); below a few batches per bucket the compiled programs do not pay back.
      embeddings = corpus_embedding.embed_corpus(embed_fn_factory(),
                                                 prefix,
                                                 featurizer,
                                                 batch_size=batch_size,
                                                 log=log,
                                                 jit_compile=len(documents) + len(probes)
                                                 >= JIT_COMPILE_MIN_DOCUMENTS)
      tokenized = list(corpus_lib.read_corpus(prefix))
    finally:
      shutil.rmtree(scratch, ignore_errors=True)
    for probe, row, embedding in zip(tokenized[len(documents):], probes, embeddings[len(documents):]):
      if "body_token_ids" in base[row] and (probe["title_token_ids"] != base[row]["title_token_ids"] or
                                            probe["body_token_ids"] != base[row]["body_token_ids"]):
        raise UpdateError(f"the tokenizer does not reproduce the token ids of {source}'s document "
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
  records = [base[i] if origin == "base" else new_rows[position[i]] for origin, i in plan.rows]
  embeddings = np.stack([
      base_embeddings[i] if origin == "base" else new_embeddings[position[i]] for origin, i in plan.rows
  ]).astype(np.float32)
  summary = {
      "added": len(plan.added),
      "replaced": len(plan.replaced),
      "removed": len(plan.removed),
      "embedded": len(new_rows),
      "base_documents": len(base),
      "documents": len(records),
      "documents_source": change.documents_source,
      "remove_source": change.remove_source
  }
  return records, embeddings, summary


def _check_change_vocab(change: ChangeSet, vocab_sha256: str, what: str) -> None:
  """Refuses a change set given as a corpus tokenized with another vocab than vocab_sha256 (the tower's):
  its documents were meant for another model. what names the index's vocab holder, for the message."""
  source = change.documents_source
  if source and tf.io.gfile.exists(source + corpus_lib.MANIFEST_SUFFIX):
    recorded = corpus_lib.read_manifest(source).get("vocab_sha256")
    if recorded and recorded != vocab_sha256:
      raise UpdateError(f"--documents={source} was tokenized with another vocab than {what}; pass its "
                        "JSONL/TSV source instead")


def rebuild_like(mips: mips_index.MipsIndex,
                 embeddings: np.ndarray,
                 implementation: Optional[str] = None) -> mips_index.MipsIndex:
  """An index of embeddings of the same kind as mips (a compressed ScaNN index stays compressed), so an
  update does not change how the index searches."""
  implementation = implementation or mips.implementation
  options = {}
  if implementation == scann_index.ScannIndex.implementation and "rescoring" in mips.parameters:
    options["rescoring"] = mips.parameters["rescoring"]
  return index_lib.build_index(embeddings, implementation=implementation, **options)


def update_corpus(base_prefix: str,
                  base_embeddings: np.ndarray,
                  change: ChangeSet,
                  on_existing: str,
                  tokenizer,
                  featurizer,
                  embed_fn_factory: Callable[[], Callable],
                  output_prefix: Optional[str] = None,
                  batch_size: int = 128,
                  log: Callable[[str], None] = print) -> UpdateResult:
  """Checks the change, embeds the changed documents (apply_change), writes the derived corpus; returns
  it with the embeddings of its rows (publishing them is the caller's part).

  Args:
    base_prefix: the corpus the index embeds (row i = document i).
    base_embeddings: float32 [N, D], the index's rows.
    embed_fn_factory: see apply_change.
    output_prefix: the derived corpus (default next_version_prefix(base_prefix)).
  """
  output_prefix = output_prefix or next_version_prefix(base_prefix)
  if tf.io.gfile.exists(output_prefix + corpus_lib.MANIFEST_SUFFIX):
    raise UpdateError(f"{output_prefix} already holds a corpus; pass another --output_corpus_prefix "
                      "(a published index may point at that one)")
  records, embeddings, summary = apply_change(list(corpus_lib.read_corpus(base_prefix)), base_embeddings,
                                              change, on_existing, tokenizer, featurizer, embed_fn_factory,
                                              base_prefix, batch_size, log)
  num_shards = len(corpus_lib.read_manifest(base_prefix)["shards"])
  corpus_lib.write_derived_corpus(base_prefix, lambda: records, len(records), output_prefix, num_shards, {
      k: v for k, v in summary.items() if k != "embedded"
  })
  log(f"wrote the updated corpus {output_prefix}: {len(records)} documents ({summary['added']} added, "
      f"{summary['replaced']} replaced, {summary['removed']} removed; {summary['embedded']} embedded)")
  return UpdateResult(output_prefix, embeddings, summary)


# -------------------------------------------------------------------------------------------------
# A REALM run's published index (MODEL_DIR/index/<step>/).


def update_published_index(index_path: str,
                           change: ChangeSet,
                           on_existing: str = "error",
                           checkpoint: Optional[str] = None,
                           output_corpus_prefix: Optional[str] = None,
                           keep: int = 3,
                           batch_size: int = 128,
                           log: Callable[[str], None] = print) -> str:
  """Publishes MODEL_DIR/index/<newest + 1>/: the newest published index with the change applied.

  The new version carries the same query tower (copied) and is built with the same implementation;
  published.json records the derived corpus and its fingerprint (so watchers accept it for that corpus),
  the checkpoint the embeddings come from, and "update" (the base index and the counts). It is numbered
  one above the newest published step, so that watchers, which take the newest, swap it in (a running
  REALM trainer loads the derived corpus with it: realm_input.RetrievalState); a trainer's staleness
  then counts from that number, one step later than the checkpoint.
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
  newer = published_index.current_corpus(model_dir, base_prefix, log=lambda message: None)
  if newer != base_prefix:
    # A refresh that began before an earlier update published this index of the older corpus. An update
    # of it would branch the history: the earlier update's changes would be missing from this one.
    raise UpdateError(f"{index_path} embeds {base_prefix}, but an earlier bin/update_index derived "
                      f"{newer} from it, and an index of that corpus is published: the newest index "
                      "comes from a refresh that began before that update. Wait for the next refresh "
                      "(it embeds the updated corpus), then run bin/update_index on the newest index")
  recorded = record.get("corpus_fingerprint")
  if recorded is not None and recorded != corpus_lib.fingerprint(base_prefix):
    raise UpdateError(f"{base_prefix} changed after {index_path} embedded it (fingerprint "
                      f"{recorded[:16]} recorded); its rows no longer match. Wait for the next refresh")
  config = realm_config_lib.RealmConfig.load(os.path.join(model_dir, realm_config_lib.CONFIG_NAME))
  vocab = corpus_lib.check_vocab(config.vocab_path,
                                 base_prefix,
                                 config.vocab_sha256,
                                 os.path.join(model_dir, realm_config_lib.CONFIG_NAME),
                                 source="realm_config.json's vocab_path")
  _check_change_vocab(change, vocab, f"the index's corpus {base_prefix}")
  mips = index_lib.load_index(os.path.join(index_path, published_index.MIPS_DIR), verify=False)
  tower_checkpoint = checkpoint or record.get("checkpoint")

  def embed_fn_factory():
    if not tower_checkpoint:
      raise UpdateError(f"{index_path} records no checkpoint (an index of a fresh retriever?), so its "
                        "document tower cannot be rebuilt; pass --checkpoint")
    retriever = config.build_retriever()
    try:
      training_state.restore_retriever(retriever, tower_checkpoint)
    except (ValueError, FileNotFoundError, tf.errors.OpError) as e:
      raise UpdateError(f"cannot restore the document tower from {tower_checkpoint}, the checkpoint "
                        f"{index_path} was built from ({str(e).splitlines()[0]}); pass --checkpoint with "
                        "that checkpoint (or wait for the next refresh)") from e
    return lambda inputs: retriever.embed_documents(inputs, training=False)

  result = update_corpus(base_prefix, np.asarray(mips.embeddings), change, on_existing, config.tokenizer(),
                         config.featurizer(), embed_fn_factory, output_corpus_prefix, batch_size, log)
  implementation = record.get("implementation") or mips.implementation
  new_mips = rebuild_like(mips, result.embeddings, implementation)
  update_id = uuid.uuid4().hex
  info = {
      k: v for k, v in record.items() if k not in ("step", "num_docs", "dim", "published_unix_time", "update",
                                                   "embed_seconds", "build_seconds", "bootstrap")
  }
  info.update(corpus_prefix=result.corpus_prefix,
              corpus_fingerprint=corpus_lib.fingerprint(result.corpus_prefix),
              implementation=implementation,
              checkpoint=tower_checkpoint,
              checkpoint_step=record.get("checkpoint_step", record["step"]),
              update=dict(result.summary,
                          id=update_id,
                          base_index=index_path,
                          base_step=record["step"],
                          base_corpus=base_prefix))
  step = steps[-1] + 1
  path = published_index.publish_index(model_dir,
                                       step,
                                       new_mips,
                                       os.path.join(index_path, published_index.QUERY_EMBEDDER_DIR),
                                       info=info,
                                       keep=keep,
                                       log=log)
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


# -------------------------------------------------------------------------------------------------
# A converted index: bin/convert_checkpoint --layout=block_emb's OUTPUT_DIR (mips/ + blocks.jsonl).


def converted_index_dir(path: str) -> Optional[str]:
  """The directory of a converted block_emb index when --index names it or its mips/, else None."""
  path = os.path.abspath(path.rstrip("/"))
  mips_dir = converted_index.MIPS_DIR
  for candidate in (path, os.path.dirname(path) if os.path.basename(path) == mips_dir else None):
    if candidate and tf.io.gfile.exists(os.path.join(candidate, converted_index.CONVERSION_NAME)) and \
        tf.io.gfile.exists(os.path.join(candidate, mips_dir, index_format.MANIFEST_NAME)):
      return candidate
  return None


def _converted_blocks(index_dir: str, num_rows: int) -> List[dict]:
  """The documents of a converted index's rows: blocks.jsonl line i is row i. A block's doc_id is its
  "id" (written by an update) or, for a block of the released corpus, its row number there: what ORQA
  retrieves, and how a change set names it."""
  path = os.path.join(index_dir, converted_index.BLOCKS_NAME)
  if not tf.io.gfile.exists(path):
    raise UpdateError(f"{index_dir} has no {converted_index.BLOCKS_NAME}: an update needs the block "
                      "texts (the rows it keeps, and unchanged blocks it re-embeds to check the tower). "
                      "Convert the block_emb again with --blocks_path=<ORQA's blocks.tfr> (and "
                      "--titles_path)")
  records = converted_index.load_block_texts(path)
  if len(records) != num_rows:
    raise UpdateError(f"{path} has {len(records)} records but "
                      f"{index_dir}/{converted_index.MIPS_DIR} has {num_rows} rows; they must come "
                      "from one conversion")
  documents = []
  for i, record in enumerate(records):
    if record.get("row") != i or not isinstance(record.get("text"), str):
      raise UpdateError(f"{path}:{i + 1}: expected {{\"row\": {i}, \"text\": ...}} (line i is row i); "
                        "the file is not bin/convert_checkpoint's, or was edited")
    documents.append({
        "title": record.get("title") or "",
        "body": record["text"],
        "doc_id": str(record.get("id", i))
    })
  return documents


def _tower_config_dir(checkpoint: str) -> str:
  """The directory holding realm_config.json for --checkpoint (a converted dir, or a checkpoint file in
  one)."""
  directory = checkpoint if tf.io.gfile.isdir(checkpoint) else os.path.dirname(checkpoint)
  if not tf.io.gfile.exists(os.path.join(directory, realm_config_lib.CONFIG_NAME)):
    raise UpdateError(f"--checkpoint={checkpoint}: no {realm_config_lib.CONFIG_NAME} in {directory}; pass "
                      "the bin/convert_checkpoint output whose document tower computed block_emb (for "
                      "the release: the converted cc_news_pretrained/embedder)")
  return directory


def update_converted_index(index_dir: str,
                           change: ChangeSet,
                           checkpoint: Optional[str] = None,
                           on_existing: str = "error",
                           output_dir: Optional[str] = None,
                           batch_size: int = 128,
                           log: Callable[[str], None] = print) -> str:
  """Writes `<index_dir>-v<k>/` (or output_dir): the converted index with the change applied, in the
  same layout (mips/, blocks.jsonl, conversion.json), so every reader of a converted index reads it.

  The released block_emb comes without its tower: checkpoint names the converted model whose document
  tower computed it (for the release the converted cc_news_pretrained/embedder; an ORQA checkpoint holds
  only its query tower), which embeds the new blocks; an update records it, so later updates of the
  new version need no --checkpoint. Unchanged blocks are re-embedded as probes (apply_change) and must
  reproduce their released embeddings. The new directory is written under a temporary name and renamed
  (index_dir is never modified; a kill leaves it and at most a temporary directory). Its blocks.jsonl
  gives every block its "id" (a released block keeps its row number there), and line i is row i again.
  Returns the new directory.
  """
  index_dir = os.path.abspath(index_dir.rstrip("/"))
  with tf.io.gfile.GFile(os.path.join(index_dir, converted_index.CONVERSION_NAME)) as f:
    conversion = json.load(f)
  if conversion.get("layout") != released.BLOCK_EMB:
    raise UpdateError(f"{index_dir}/{converted_index.CONVERSION_NAME} is of layout "
                      f"{conversion.get('layout')!r}, not {released.BLOCK_EMB}: only a converted index "
                      "(mips/ and blocks.jsonl) has documents to change")
  mips = index_lib.load_index(os.path.join(index_dir, converted_index.MIPS_DIR))
  base = _converted_blocks(index_dir, mips.num_docs)
  checkpoint = checkpoint or conversion.get("update", {}).get("checkpoint")
  output_dir = os.path.abspath(output_dir) if output_dir else next_version_prefix(index_dir)
  if tf.io.gfile.exists(output_dir):
    raise UpdateError(f"{output_dir} exists already; pass another --output_dir")

  config_holder = []

  def embed_fn_factory():
    if not checkpoint:
      raise UpdateError(f"{index_dir} holds released block embeddings without their document tower: pass "
                        "--checkpoint=<the bin/convert_checkpoint output of the embedder that computed "
                        "them>, e.g. /conv/embedder")
    retriever = config_holder[0].build_retriever()
    try:
      training_state.restore_retriever(retriever, checkpoint)
    except (ValueError, FileNotFoundError, tf.errors.OpError) as e:
      raise UpdateError(f"cannot restore a document tower from --checkpoint={checkpoint} "
                        f"({str(e).splitlines()[0]})") from e
    return lambda inputs: retriever.embed_documents(inputs, training=False)

  tokenizer = featurizer = None
  if change.documents:
    if not checkpoint:
      embed_fn_factory()  # raises the message that says what to pass
    config_dir = _tower_config_dir(checkpoint)
    config = realm_config_lib.RealmConfig.load(config_dir)
    config_path = os.path.join(config_dir, realm_config_lib.CONFIG_NAME)
    vocab = corpus_lib.check_vocab(config.vocab_path,
                                   None,
                                   config.vocab_sha256,
                                   config_path,
                                   source=f"{config_path}'s vocab_path")
    _check_change_vocab(change, vocab, f"the tower of --checkpoint={checkpoint} ({config.vocab_path})")
    config_holder.append(config)
    tokenizer, featurizer = config.tokenizer(), config.featurizer()
  records, embeddings, summary = apply_change(base, np.asarray(mips.embeddings), change, on_existing,
                                              tokenizer, featurizer, embed_fn_factory,
                                              os.path.join(index_dir,
                                                           converted_index.BLOCKS_NAME), batch_size, log)
  new_mips = rebuild_like(mips, embeddings)
  update = dict(summary,
                base_index_dir=index_dir,
                checkpoint=checkpoint and sources.resolve_checkpoint(checkpoint))
  tmp = io_utils.temporary_path(output_dir)
  try:
    tf.io.gfile.makedirs(tmp)
    new_mips.save(os.path.join(tmp, converted_index.MIPS_DIR),
                  extra=dict(mips.manifest.get("extra", {}), update=update))
    io_utils.write_jsonl_atomic(os.path.join(tmp, converted_index.BLOCKS_NAME), ({
        "row": row,
        "id": r["doc_id"],
        "text": r["body"],
        "title": r["title"]
    } for row, r in enumerate(records)))
    outputs = {
        "index": os.path.join(output_dir, converted_index.MIPS_DIR),
        "blocks": os.path.join(output_dir, converted_index.BLOCKS_NAME)
    }
    # Last: conversion.json marks the directory a converted index.
    io_utils.write_json_atomic(
        os.path.join(tmp, converted_index.CONVERSION_NAME),
        dict(conversion, num_blocks=new_mips.num_docs, dim=new_mips.dim, outputs=outputs, update=update))
    for directory, _, files in os.walk(tmp):
      for name in files:
        io_utils.fsync_path(os.path.join(directory, name))
    os.rename(tmp, output_dir)
    io_utils.fsync_path(os.path.dirname(output_dir))
  finally:
    if tf.io.gfile.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)
  log(f"wrote the updated index {output_dir}: {new_mips.num_docs} blocks ({summary['added']} added, "
      f"{summary['replaced']} replaced, {summary['removed']} removed; {summary['embedded']} embedded)")
  return output_dir
