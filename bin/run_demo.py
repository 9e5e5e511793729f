r"""The main job on the bundled defaults (run it through bin/demo, which sets up the environment).

On testdata with a tiny BERT, in a few minutes on 2 cores:
  1. regenerates the synthetic testdata and checks it matches the committed files byte for byte;
  2. writes the retrieval corpus and shows how REALM featurizes a pre-training sentence (one salient
     span masked; query, null document, candidate and joint BERT inputs);
  3. runs REALM pre-training as separate processes (realm_tf/demo_pipeline.py): bin/refresh_doc_embeds in the
     background and bin/train_realm, which bootstraps the first index from the ICT start, trains and
     swaps in the refresher's newer indexes at fixed steps; then prints loss, retrieval utility, the
     indexes trained on, and the retriever's recall@5 on the testdata questions before and after. The
     reader BERT and the ICT start come from testdata/models/ (bin/generate_testdata.py --models wrote
     them); --from_scratch trains them first (bin/train_mlm, bin/train_ict), about 11 minutes more;
  4. fine-tunes ORQA-style from the REALM retriever, evaluates the test questions (exact match,
     recall@k), exports the SavedModels and answers one test question through the exported model.
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

import contextlib
import filecmp
import os
import random
import sys

from absl import app
from absl import flags

from realm_tf import demo_pipeline
from realm_tf import featurization
from realm_tf import tokenization
from realm_tf.data import corpus
from realm_tf.data import synthetic

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OUTPUT_DIR = flags.DEFINE_string("output_dir", os.path.join(_REPO, "demo_output"),
                                  "Where the demo writes its files.")
_QUERY_SEQ_LEN = flags.DEFINE_integer("query_seq_len", 32, "Q: packed query length.")
_CANDIDATE_SEQ_LEN = flags.DEFINE_integer("candidate_seq_len", 80, "C: packed candidate length.")
_MAX_MASKS = flags.DEFINE_integer("max_masks", 6, "M: predicted positions per query.")
_SKIP_ICT = flags.DEFINE_bool("skip_ict", False, "Start REALM from an untrained retriever.")
_FROM_SCRATCH = flags.DEFINE_bool(
    "from_scratch", False,
    "Train the reader BERT and the ICT start too (about 11 minutes more on 2 cores) instead of starting "
    "from those shipped in testdata/models/.")
_MLM_STEPS = flags.DEFINE_integer(
    "mlm_steps", demo_pipeline.PipelineOptions.mlm_steps,
    "With --from_scratch: BERT pre-training steps of the reader (0: a reader "
    "from random weights).")
_ICT_STEPS = flags.DEFINE_integer("ict_steps", demo_pipeline.PipelineOptions.ict_steps,
                                  "With --from_scratch: ICT steps.")
_REALM_STEPS = flags.DEFINE_integer("realm_steps", demo_pipeline.PipelineOptions.realm_steps,
                                    "REALM pre-training steps.")
_ORQA_STEPS = flags.DEFINE_integer("orqa_steps", demo_pipeline.PipelineOptions.orqa_steps,
                                   "ORQA fine-tuning steps (0 skips fine-tuning, evaluation and export).")
_FEATURES_ONLY = flags.DEFINE_bool("features_only", False,
                                   "Stop after the data and featurization part (seconds, not minutes).")


def _show(tokenizer, title, inputs):
  tokens = tokenizer.ids_to_tokens([i for i, m in zip(inputs.token_ids, inputs.mask) if m])
  segments = "".join(str(s) for s, m in zip(inputs.segment_ids, inputs.mask) if m)
  print(f"  {title:10s} {' '.join(tokens)}")
  print(f"  {'segments':10s} {segments}")


@contextlib.contextmanager
def _stderr_to(path: str):
  """Sends this process's stderr (TensorFlow's C++ start-up lines, XLA's "Compiled cluster", absl's
  pre-init notice: none of it for a person reading the demo) to a log file; an error is shown again."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  sys.stderr.flush()
  saved = os.dup(2)
  with open(path, "w") as log:
    os.dup2(log.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  for flag in (_MLM_STEPS, _ICT_STEPS):
    if flag.present and not _FROM_SCRATCH.value:
      raise app.UsageError(f"--{flag.name} sets how the reader BERT and ICT start are trained, which "
                           "only --from_scratch does (otherwise they come from testdata/models/); add "
                           "--from_scratch")
  with _stderr_to(os.path.join(_OUTPUT_DIR.value, "demo_stderr.log")):
    _demo()


def _demo():
  out = _OUTPUT_DIR.value
  testdata = os.path.join(_REPO, "testdata")

  print("== 1. testdata")
  regenerated = os.path.join(out, "testdata")
  counts = synthetic.write_testdata(regenerated)
  same = all(
      filecmp.cmp(os.path.join(regenerated, n), os.path.join(testdata, n), shallow=False) for n in counts)
  for name, count in counts.items():
    print(f"  {name:18s} {count:5d} lines")
  print(f"  regenerated files identical to the committed testdata/: {same}")
  if not same:
    raise app.UsageError("testdata/ differs from what the generator writes; run "
                         "`python bin/generate_testdata.py --output_dir=testdata` and commit it")

  print("== 2. retrieval corpus")
  tokenizer = tokenization.Tokenizer(os.path.join(testdata, "vocab.txt"))
  prefix = os.path.join(out, "corpus", "blocks")
  stats = corpus.write_corpus(lambda: corpus.read_documents(os.path.join(testdata, "corpus.jsonl")),
                              tokenizer,
                              prefix,
                              num_shards=4)
  print(f"  {stats.num_documents} documents in {stats.num_shards} shards under {prefix}-*")
  print(f"  body length in wordpieces: mean {stats.mean_body_wordpieces:.1f}, "
        f"max {stats.max_body_wordpieces}; duplicate uids: {stats.num_duplicate_uids}")
  docs = {d["uid"]: d for d in corpus.read_corpus(prefix)}

  print("== 3. featurization of pre-training sentences")
  featurizer = featurization.Featurizer.from_tokenizer(tokenizer,
                                                       query_seq_len=_QUERY_SEQ_LEN.value,
                                                       candidate_seq_len=_CANDIDATE_SEQ_LEN.value,
                                                       max_masks=_MAX_MASKS.value)
  rng = random.Random(0)
  sentences, spans, owners = [], [], []
  for record in synthetic.load_jsonl(os.path.join(testdata, "pretraining.jsonl")):
    text = record["text"].encode("utf-8")
    for start, limit in record["sentences"]:
      inside = [(s - start, e - start) for s, e in record["spans"] if s >= start and e <= limit]
      if inside:
        sentences.append(text[start:limit])
        spans.append(rng.choice(inside))
        owners.append(corpus.document_uid(record["title"], record["text"]))
  ids, starts, limits = tokenizer.tokenize_with_offsets(sentences)
  masked = featurizer.mask_salient_span(ids, starts, limits, [s for s, _ in spans], [e for _, e in spans])
  status = masked.status.numpy()
  print(f"  {len(sentences)} sentences with a salient span; maskable: "
        f"{int((status == featurization.MaskingStatus.OK).sum())}")
  for code, reason in featurization.SKIP_REASONS.items():
    print(f"  skipped ({reason}): {int((status == code).sum())}")

  example = 1
  query = featurizer.query_inputs(masked.token_ids[example:example + 1])
  owner = docs[owners[example]]
  other = next(d for uid, d in docs.items() if uid != owners[example])
  candidates = featurizer.candidate_inputs([[], other["title_token_ids"]], [[], other["body_token_ids"]])
  joint = featurizer.joint_inputs(masked.token_ids[example:example + 1], [other["body_token_ids"]])
  span = sentences[example][spans[example][0]:spans[example][1]].decode("utf-8")
  print(f"  example: {sentences[example].decode('utf-8')!r}, salient span {span!r} "
        f"(its own document {owner['title']!r} is excluded from the candidates)")
  _show(tokenizer, "query", featurization.BertInputs(*(t[0].numpy() for t in query)))
  print(f"  {'mlm':10s} positions {masked.mlm_positions[example].numpy().tolist()} targets "
        f"{tokenizer.ids_to_tokens(masked.mlm_targets[example].numpy().tolist())}")
  _show(tokenizer, "null doc", featurization.BertInputs(*(t[0].numpy() for t in candidates)))
  _show(tokenizer, "candidate", featurization.BertInputs(*(t[1].numpy() for t in candidates)))
  _show(tokenizer, "joint", featurization.BertInputs(*(t[0].numpy() for t in joint)))
  if _FEATURES_ONLY.value:
    print("demo done.")
    return

  starts = ("BERT pre-training of the reader, ICT warm start of the retriever"
            if _FROM_SCRATCH.value else "the reader BERT and ICT start of testdata/models")
  print(f"== 4. REALM pre-training ({starts}; the refresher beside the trainer)")
  options = demo_pipeline.PipelineOptions(
      output_dir=os.path.join(out, "pipeline"),
      mlm_steps=_MLM_STEPS.value,
      ict_steps=_ICT_STEPS.value,
      realm_steps=_REALM_STEPS.value,
      orqa_steps=_ORQA_STEPS.value,
      models_dir=None if _FROM_SCRATCH.value else demo_pipeline.SHIPPED_MODELS)
  result = demo_pipeline.run(options, skip_ict=_SKIP_ICT.value, echo=lambda line: print("  " + line))
  realm = result["realm"]
  final = realm["final"]
  before, after = result["recall_before"], result["recall_after"]
  start = "ICT warm start" if not _SKIP_ICT.value else "untrained retriever"
  print("== summary")
  if "mlm" in result:
    where = "testdata/models, " if result["mlm"].get("shipped") else ""
    print(f"  reader BERT ({where}bin/train_mlm, {result['mlm']['steps']} steps): held-out masked-token "
          f"accuracy {100 * result['mlm']['masked_lm_accuracy']:.1f}%")
  print(f"  REALM loss: {realm['first_loss']:.3f} at the first step -> {final['loss']:.3f} at step "
        f"{options.realm_steps}")
  print(f"  retrieval_utility (last step): {final['retrieval_utility']:.4f}; null document share "
        f"{final['null_document_share']:.4f}")
  print(f"  indexes trained on (steps): {realm['indexes_used']} (refresher exit code "
        f"{realm['refresher_exit_code']})")
  for k in (1, 5, 20):
    print(f"  retriever recall@{k} on {int(before['num_questions'])} testdata questions (gold "
          f"document): {before[f'gold_recall@{k}']:.1f}% ({start}) -> {after[f'gold_recall@{k}']:.1f}% "
          "(after REALM)")
  if "orqa" in result:
    orqa = result["orqa"]
    m = orqa["metrics"]
    print(f"  ORQA on {m['num_examples']} test questions after {options.orqa_steps} steps: exact match "
          f"{m['exact_match']:.1f}, F1 {m['f1']:.1f}, retriever recall@1/5/20/100 {m['recall@1']:.0f} / "
          f"{m['recall@5']:.0f} / {m['recall@20']:.0f} / {m['recall@100']:.0f}")
    print(f"  exported SavedModels under {orqa['export_dir']}; bin/answer.py through the open-QA model "
          f"(gold answer {orqa['gold_answers']}):")
    for line in orqa["answer_output"].splitlines():
      print("    " + line)
  stages = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in result["stage_seconds"].items())
  print(f"  seconds by stage: {stages}")
  print(f"  total {result['seconds']:.0f} s; logs and checkpoints under {options.output_dir}")
  print("demo done.")
  if "orqa" in result:
    # Last, so it is on screen when the demo ends: the command that serves the export.
    serve = (f"{sys.executable} {os.path.join(_REPO, 'bin', 'serve.py')} "
             f"--saved_model={os.path.join(result['orqa']['export_dir'], 'open_qa')}")
    print(f"Ask it in a browser: run\n  {serve}\nand open http://127.0.0.1:8501/ (docs/open_qa.md: serving)")


if __name__ == "__main__":
  app.run(main)
