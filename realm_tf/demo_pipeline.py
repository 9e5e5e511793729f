"""bin/run_demo.py's pipeline: REALM pre-training and ORQA fine-tuning as separate bin/ processes, the
way a user runs them.

It drives the bin/ programs of this checkout (REPO/bin) through subprocesses, as a user runs them;
bin/run_demo.py, the benches and the process tests import it (`from realm_tf import demo_pipeline`) for
the same runs and for binary_command / binary_env, which start one bin/ program as a user would. It is
the top of the library's layers (tools/import_graph_test.py): it imports any layer, and nothing in the
library imports it.

  1. corpora: bin/generate_retrieval_corpus and bin/generate_pretraining_corpus;
  2. BERT pre-training of the reader: bin/train_mlm on the retrieval corpus's text (the original starts
     REALM's reader, and ORQA's ICT, from pre-trained BERT; testdata's vocabulary has none);
     ICT warm start of the retriever from that BERT: bin/train_ict (skippable);
  3. bin/refresh_doc_embeds in the background, waiting for checkpoints;
  4. bin/train_realm, which publishes the bootstrap index from its warm-start weights (--bootstrap_index)
     and trains while the refresher publishes fresher indexes beside it; it writes the done marker at
     the end, on which the refresher exits.
  5. open-domain QA: bin/train_orqa fine-tunes the REALM retriever's query tower and a span reader on the
     training questions, bin/eval_orqa evaluates the test split, bin/export_saved_model writes the
     SavedModels and bin/answer answers a question through the exported open-QA model.
bin/run_demo.py runs it on testdata with a tiny BERT; demo_pipeline_test runs a shorter version.
"""

import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

from realm_tf.checkpoints import training_state
from realm_tf.data import qa as qa_lib
from realm_tf.data import synthetic
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.tasks import realm_trainer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The demo's reader BERT and ICT start, shipped so that bin/demo need not train them (about 11 minutes on
# 2 cores); bin/generate_testdata.py --models writes them (write_models) and `bin/demo --from_scratch`
# trains its own.
SHIPPED_MODELS = os.path.join(REPO, "testdata", "models")
MODELS_MANIFEST = "models.json"
READER_BERT = "reader_bert"
ICT_START = "ict"


@dataclasses.dataclass(frozen=True)
class PipelineOptions:
  """Sizes of a pipeline run (defaults: the demo on testdata, a few minutes on 2 cores)."""
  output_dir: str
  testdata_dir: str = os.path.join(REPO, "testdata")
  ict_steps: int = 400
  # BERT pre-training of the reader (and of ICT's embedder) on corpus.jsonl; 0 starts both from random
  # weights. The BERT's packed length covers the reader's [CLS] query [SEP] document [SEP].
  # 6,000 steps with whole-word masking: the BERT then predicts a masked fact better from the article
  # that states it than from no document (84% of REALM's news statements) and than from other articles
  # (74%); 3,000 steps: 74% and 59%; 2,000 without whole-word masking on text stating each fact once
  # (the earlier default): 0% and 64% (bench/realm_reader_bench.py,
  # docs/experiments/benchmarks_notebook.md).
  mlm_steps: int = 6000
  mlm_batch_size: int = 32
  mlm_learning_rate: float = 1e-3
  mlm_whole_word_masking: bool = True
  mlm_random_next_rate: float = 0.0
  # Default: testdata/bert_pretraining.jsonl, another world in the same language. A BERT pre-trained on
  # corpus.jsonl itself memorizes the facts REALM masks, and its reader never needs the retrieved
  # documents (measured: recall@5 46.0 -> 23.0, the null document taking 83% of the posterior).
  mlm_input_path: Optional[str] = None
  realm_steps: int = 300
  # BERT of bin/train_realm's retriever and reader: a preset or a bert_config.json path (the tests run a
  # smaller one than the demo's tiny preset); and XLA for its train step.
  realm_bert_config: str = "tiny"
  realm_jit_compile: bool = True
  save_checkpoints_steps: int = 50
  keep_checkpoint_max: int = 5
  # REALM's pre-training examples per step (the paper's: 512). At 8 the questions' recall@5 fell on one
  # of three seeds (-8.0) while REALM's own statements rose; at 32 it rose on all three (+3.0 to +5.0),
  # at 64 by 5.5 to 11.5 points (docs/experiments/benchmarks_notebook.md, 2026-11-26 (batch)). A step
  # costs about batch / 8 times more: 32 keeps the demo within 12 minutes on 2 cores (at 64 REALM alone
  # took 705 s); from the shipped ICT start it raised recall@5 19.5 -> 21.0 (README).
  realm_batch_size: int = 32
  orqa_batch_size: int = 8
  ict_batch_size: int = 32
  ict_learning_rate: float = 1e-3
  # ICT from the reader's pre-trained tiny BERT (the paper's warm start) gave weaker, seed-dependent
  # starts than ICT from random weights (gold recall@5 of the testdata questions: 15.0 at 1e-3; 38.0 and
  # 14.0 for two seeds at 1e-4; from random weights at 1e-3: 35.0-46.0), so the demo's ICT starts from
  # random weights; True warm-starts it from the BERT (then use ict_learning_rate=1e-4).
  ict_from_bert: bool = False
  # The paper's 3e-5. At batch 64 it raised the questions' recall@5 on every draw measured (three bench
  # seeds +5.5 to +11.5, fresh-clone demos +2.0, +8.5, +1.5). 1e-4 gained more on the bench's seeds
  # (+9.5 to +25.5) but lost 2.0 on the fresh-clone demo's own draw, and at batch 8 lost on every seed
  # (docs/experiments/benchmarks_notebook.md, 2026-11-27).
  realm_learning_rate: float = 3e-5
  # What REALM pre-trains on (ICT always uses all of testdata's pretraining.jsonl): "news", its news
  # items alone (facts only their subject's article holds, about subjects no dev or test question asks
  # about), as REALM pre-trained on CC-News while retrieving from Wikipedia (an article's own
  # sentences find their facts in no other article once their own is excluded, so they teach the
  # retriever to find documents that merely mention a name); "all", the whole file; or a file of raw
  # text given by realm_pretraining_path.
  realm_pretraining: str = "news"
  realm_pretraining_path: Optional[str] = None
  projection_size: int = 64
  query_seq_len: int = 32
  candidate_seq_len: int = 128
  max_masks: int = 8
  num_candidates: int = 8
  # Fixed index swaps (bin/train_realm --index_swap_steps): each step trains on the index of the
  # checkpoint its number fixes, so two demos print the same recall (with the newest index instead, the
  # demo's recall@5 varied by up to 3 points run to run with the refresher's timing). A bench that wants
  # the newest index sets this to None and max_index_staleness_steps to its bound.
  index_swap_steps: Optional[int] = 50
  max_index_staleness_steps: Optional[int] = None
  # The reader BERT pre-trained on restated facts needs more than 200 steps to extract spans: test
  # exact match 32.0 at 200 and 72.0 at 400 from a fresh-clone demo's REALM retriever
  # (docs/experiments/benchmarks_notebook.md, 2026-11-26 (batch)).
  orqa_steps: int = 400
  orqa_learning_rate: float = 3e-4
  index_implementation: str = "scann"
  # Mean pooling: the tiny BERT learns name matches through it far sooner (realm_tf.modeling.embedder).
  embedder_pooling: str = "mean"
  seed: int = 0
  # A directory write_models wrote (reader_bert/, ict/, models.json): the pipeline starts from its
  # reader BERT and ICT start instead of training them (None: it trains them).
  models_dir: Optional[str] = None


def binary_env() -> Dict[str, str]:
  """The environment a bin/ program runs in: this checkout importable, TensorFlow's start-up logs off."""
  return dict(os.environ,
              PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
              TF_CPP_MIN_LOG_LEVEL="3",
              TF_USE_LEGACY_KERAS="1",
              PYTHONUNBUFFERED="1")


def binary_command(binary: str, **flags) -> List[str]:
  """The command line of bin/<binary>.py with flags (booleans as --name / --noname, None left out)."""
  args = [sys.executable, os.path.join(REPO, "bin", binary + ".py")]
  for name, value in flags.items():
    if isinstance(value, bool):
      args.append(f"--{name}" if value else f"--no{name}")
    elif value is not None:
      args.append(f"--{name}={value}")
  return args


def _open_log(log_path: str, command: List[str]):
  """log_path opened to append (line-buffered, so a long run can be followed), the command's header written."""
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  log_file = open(log_path, "a", buffering=1)  # pylint: disable=consider-using-with
  log_file.write(f"===== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n")
  return log_file


def run_binary(binary: str,
               log_path: str,
               show: Optional[Callable[[str], bool]] = None,
               echo: Callable[[str], None] = print,
               **flags) -> None:
  """Runs bin/<binary>.py to completion, appending everything to log_path and echoing chosen lines.

  Appends, under a header line per invocation: a resumed run's log keeps the earlier invocations' lines
  (the steps and losses a resumed benchmark reports would otherwise be lost with them).
  """
  command = binary_command(binary, **flags)
  with _open_log(log_path, command) as log_file:
    process = subprocess.Popen(command,
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT,
                               text=True,
                               env=binary_env())
    for line in process.stdout:
      log_file.write(line)
      if show is not None and show(line):
        echo(line.rstrip().split("] ", 1)[-1])
    if process.wait() != 0:
      raise RuntimeError(f"bin/{binary}.py failed (exit {process.returncode}); see {log_path}")


def _progress_line(line: str) -> bool:
  return "loop.py" in line and ("] step " in line or "trained to step" in line) \
      or "retrieving with the index" in line or "waiting for bin/refresh_doc_embeds" in line


def prepare_corpora(options: PipelineOptions, echo: Callable[[str], None] = print) -> Dict[str, str]:
  data = os.path.join(options.output_dir, "data")
  paths = {
      "retrieval": os.path.join(data, "corpus", "blocks"),
      "pretraining": os.path.join(data, "pretraining", "sentences"),
      "vocab": os.path.join(options.testdata_dir, "vocab.txt")
  }
  run_binary("generate_retrieval_corpus",
             os.path.join(data, "generate_retrieval_corpus.log"),
             input_path=os.path.join(options.testdata_dir, "corpus.jsonl"),
             vocab_path=paths["vocab"],
             output_prefix=paths["retrieval"],
             num_output_shards=2)
  run_binary("generate_pretraining_corpus",
             os.path.join(data, "generate_pretraining_corpus.log"),
             input_path=os.path.join(options.testdata_dir, "pretraining.jsonl"),
             output_prefix=paths["pretraining"],
             num_output_shards=2)
  realm_input = options.realm_pretraining_path
  if realm_input is None and options.realm_pretraining == "news":
    realm_input = os.path.join(data, "news.jsonl")
    synthetic.write_news_items(os.path.join(options.testdata_dir, "pretraining.jsonl"), realm_input)
  elif realm_input is None and options.realm_pretraining != "all":
    raise ValueError(f"realm_pretraining must be 'news' or 'all', got {options.realm_pretraining!r}")
  if realm_input:
    paths["realm_pretraining"] = os.path.join(data, "realm_pretraining", "sentences")
    run_binary("generate_pretraining_corpus",
               os.path.join(data, "generate_realm_pretraining_corpus.log"),
               input_path=realm_input,
               output_prefix=paths["realm_pretraining"],
               num_output_shards=2)
  echo(f"corpora written under {data}")
  return paths


def run_mlm(options: PipelineOptions,
            paths: Dict[str, str],
            echo: Callable[[str], None] = print,
            init_checkpoint: Optional[str] = None) -> str:
  """Pre-trains the tiny BERT by masked LM (from init_checkpoint when given; options.mlm_steps 0 only
  evaluates it); returns its export (MODEL_DIR/bert, with eval.json)."""
  model_dir = os.path.join(options.output_dir, "mlm")
  show = lambda line: _progress_line(line) or "held-out masked-token accuracy" in line
  run_binary("train_mlm",
             os.path.join(options.output_dir, "train_mlm.log"),
             show,
             echo,
             model_dir=model_dir,
             input_path=options.mlm_input_path or
             os.path.join(options.testdata_dir, "bert_pretraining.jsonl"),
             vocab_path=paths["vocab"],
             bert_config="tiny",
             max_seq_len=options.query_seq_len + options.candidate_seq_len,
             batch_size=options.mlm_batch_size,
             learning_rate=options.mlm_learning_rate,
             whole_word_masking=options.mlm_whole_word_masking,
             random_next_rate=options.mlm_random_next_rate,
             num_train_steps=options.mlm_steps,
             save_checkpoints_steps=max(1, options.mlm_steps),
             log_every_steps=max(1, options.mlm_steps // 4),
             seed=options.seed,
             init_checkpoint=init_checkpoint)
  return os.path.join(model_dir, "bert")


def run_ict(options: PipelineOptions,
            paths: Dict[str, str],
            init_bert: Optional[str] = None,
            echo: Callable[[str], None] = print) -> str:
  model_dir = os.path.join(options.output_dir, "ict")
  run_binary("train_ict",
             os.path.join(options.output_dir, "train_ict.log"),
             _progress_line,
             echo,
             model_dir=model_dir,
             pretraining_corpus_path=paths["pretraining"],
             vocab_path=paths["vocab"],
             bert_config="tiny",
             projection_size=options.projection_size,
             embedder_pooling=options.embedder_pooling,
             query_seq_len=options.query_seq_len,
             block_seq_len=options.candidate_seq_len,
             batch_size=options.ict_batch_size,
             learning_rate=options.ict_learning_rate,
             num_train_steps=options.ict_steps,
             save_checkpoints_steps=options.ict_steps,
             log_every_steps=max(1, options.ict_steps // 4),
             init_bert_checkpoint=init_bert,
             seed=options.seed)
  return model_dir


def run_realm_processes(model_dir: str,
                        log_dir: str,
                        trainer_flags: Dict,
                        refresher_flags: Dict,
                        echo: Callable[[str], None] = print,
                        refresher_timeout_s: float = 300) -> Dict:
  """bin/train_realm with trainer_flags and bin/refresh_doc_embeds with refresher_flags beside it, as two
  processes (logs in log_dir); returns the trainer's summary plus the refresher's exit code.

  Resumable: a run finished earlier and continued to more steps (trainer_flags' num_train_steps above
  its latest checkpoint) has its done marker cleared first, since the trainer clears it only once it has
  started and a refresher started before that would take the marker as the end of training.
  """
  latest = training_state.latest_step(model_dir) if os.path.isdir(model_dir) else None
  if latest is not None and latest < trainer_flags["num_train_steps"]:
    training_state.clear_done_marker(model_dir)
  refresher_command = binary_command("refresh_doc_embeds", model_dir=model_dir, **refresher_flags)
  with _open_log(os.path.join(log_dir, "refresh_doc_embeds.log"), refresher_command) as log_file:
    refresher = subprocess.Popen(refresher_command,
                                 stdout=log_file,
                                 stderr=subprocess.STDOUT,
                                 env=binary_env())
    try:
      run_binary("train_realm",
                 os.path.join(log_dir, "train_realm.log"),
                 _progress_line,
                 echo,
                 model_dir=model_dir,
                 **trainer_flags)
      refresher.wait(timeout=refresher_timeout_s)
    finally:
      if refresher.poll() is None:
        refresher.kill()
        refresher.wait()
  with open(os.path.join(model_dir, realm_trainer.SUMMARY_NAME)) as f:
    summary = json.load(f)
  summary["refresher_exit_code"] = refresher.returncode
  summary["model_dir"] = model_dir
  return summary


def realm_process_flags(options: PipelineOptions,
                        paths: Dict[str, str],
                        init_retriever: Optional[str] = None,
                        init_reader: Optional[str] = None) -> Tuple[Dict, Dict]:
  """The demo's bin/train_realm and bin/refresh_doc_embeds flags (bench/fault_soak.py starts the same
  processes with them)."""
  trainer = dict(pretraining_corpus_path=paths.get("realm_pretraining", paths["pretraining"]),
                 retrieval_corpus_path=paths["retrieval"],
                 vocab_path=paths["vocab"],
                 bert_config=options.realm_bert_config,
                 jit_compile=options.realm_jit_compile,
                 projection_size=options.projection_size,
                 embedder_layer_norm_epsilon=1e-3 if init_retriever else 1e-12,
                 embedder_pooling=options.embedder_pooling,
                 query_seq_len=options.query_seq_len,
                 candidate_seq_len=options.candidate_seq_len,
                 max_masks=options.max_masks,
                 num_candidates=options.num_candidates,
                 batch_size=options.realm_batch_size,
                 learning_rate=options.realm_learning_rate,
                 num_train_steps=options.realm_steps,
                 save_checkpoints_steps=options.save_checkpoints_steps,
                 keep_checkpoint_max=options.keep_checkpoint_max,
                 log_every_steps=25,
                 init_retriever_checkpoint=init_retriever,
                 init_reader_checkpoint=init_reader,
                 bootstrap_index=True,
                 seed=options.seed,
                 index_implementation=options.index_implementation,
                 check_index_every_batches=2,
                 max_index_staleness_steps=options.max_index_staleness_steps,
                 index_swap_steps=options.index_swap_steps)
  # float32 whatever the machine: the refresher's own choice (refresh_precision) depends on the CPU
  # or accelerator, and the demo's numbers must repeat on every machine.
  refresher = dict(retrieval_corpus_path=paths["retrieval"],
                   index_implementation=options.index_implementation,
                   embed_jit_compile=options.realm_jit_compile,
                   mixed_precision="float32",
                   poll_seconds=1,
                   keep=3)
  return trainer, refresher


def run_realm(options: PipelineOptions,
              paths: Dict[str, str],
              init_retriever: Optional[str],
              init_reader: Optional[str] = None,
              echo: Callable[[str], None] = print) -> Dict:
  """The demo's trainer and refresher (run_realm_processes with its flags)."""
  return run_realm_processes(os.path.join(options.output_dir, "realm"), options.output_dir,
                             *realm_process_flags(options, paths, init_retriever, init_reader), echo)


def run_orqa(options: PipelineOptions,
             paths: Dict[str, str],
             retriever_checkpoint: str,
             embedder_layer_norm_epsilon: float,
             reader_checkpoint: Optional[str] = None,
             echo: Callable[[str], None] = print) -> Dict:
  """Fine-tunes, evaluates on the test split, exports and answers one question; returns the metrics."""
  model_dir = os.path.join(options.output_dir, "orqa")
  show = lambda line: _progress_line(line) or "best dev" in line
  run_binary("train_orqa",
             os.path.join(options.output_dir, "train_orqa.log"),
             show,
             echo,
             model_dir=model_dir,
             train_path=os.path.join(options.testdata_dir, "qa.train.jsonl"),
             dev_path=os.path.join(options.testdata_dir, "qa.dev.jsonl"),
             retrieval_corpus_path=paths["retrieval"],
             vocab_path=paths["vocab"],
             bert_config="tiny",
             retriever_checkpoint=retriever_checkpoint,
             reader_checkpoint=reader_checkpoint,
             projection_size=options.projection_size,
             embedder_layer_norm_epsilon=embedder_layer_norm_epsilon,
             embedder_pooling=options.embedder_pooling,
             query_seq_len=options.query_seq_len,
             candidate_seq_len=options.candidate_seq_len,
             reader_seq_len=options.candidate_seq_len,
             span_hidden_size=64,
             retriever_beam_size=50,
             batch_size=options.orqa_batch_size,
             learning_rate=options.orqa_learning_rate,
             num_train_steps=options.orqa_steps,
             eval_every_steps=max(1, options.orqa_steps // 2),
             save_checkpoints_steps=max(1, options.orqa_steps // 2),
             log_every_steps=max(1, options.orqa_steps // 4))
  eval_dir = os.path.join(options.output_dir, "orqa_eval")
  test_path = os.path.join(options.testdata_dir, "qa.test.jsonl")
  run_binary("eval_orqa",
             os.path.join(options.output_dir, "eval_orqa.log"),
             model_dir=model_dir,
             qa_path=test_path,
             output_dir=eval_dir)
  with open(os.path.join(eval_dir, "qa.test.metrics.json")) as f:
    metrics = json.load(f)
  export_dir = os.path.join(options.output_dir, "export")
  run_binary("export_saved_model",
             os.path.join(options.output_dir, "export_saved_model.log"),
             model_dir=model_dir,
             output_dir=export_dir)
  question = qa_lib.load_jsonl(test_path)[0]
  answer_log = os.path.join(options.output_dir, "answer.log")
  with open(answer_log, "w") as log_file:
    result = subprocess.run(
        binary_command("answer", saved_model=os.path.join(export_dir, "open_qa"), num_passages=2) +
        [question.question],
        stdout=subprocess.PIPE,
        stderr=log_file,
        text=True,
        env=binary_env())
  if result.returncode != 0:
    raise RuntimeError(f"bin/answer.py failed (exit {result.returncode}); see {answer_log}")
  return {
      "metrics": metrics,
      "export_dir": export_dir,
      "answer_output": result.stdout,
      "gold_answers": question.answers
  }


def retriever_recall(config_dir: str,
                     checkpoint: Optional[str],
                     corpus_prefix: str,
                     qa_paths: List[str],
                     doc_checkpoint: Optional[str] = None) -> Dict[str, float]:
  """Recall of the retriever of a run (its realm_config.json) at a checkpoint (None: untrained).

  doc_checkpoint, when given, embeds the documents with another checkpoint's document tower while the
  questions go through checkpoint's query tower: REALM trains both towers, and swapping one at a
  time tells which of them moved the questions' recall.
  """
  # pylint: disable=g-import-not-at-top (TF-heavy)
  from realm_tf import retriever_eval
  from realm_tf.data import corpus_table
  # pylint: enable=g-import-not-at-top
  config = realm_config_lib.RealmConfig.load(config_dir)

  def restored(path: Optional[str]):
    retriever = config.build_retriever()
    if path:
      training_state.restore_retriever(retriever, path)
    return retriever

  examples = [e for path in qa_paths for e in qa_lib.load_jsonl(path)]
  return retriever_eval.retriever_recall(restored(checkpoint),
                                         config,
                                         corpus_table.CorpusTable.load(corpus_prefix),
                                         examples,
                                         ks=(1, 5, 20),
                                         doc_retriever=restored(doc_checkpoint) if doc_checkpoint else None)


def question_paths(testdata_dir: str) -> List[str]:
  """The testdata questions every recall here is measured on: the dev and test splits (200)."""
  return [os.path.join(testdata_dir, f"qa.{split}.jsonl") for split in ("dev", "test")]


def load_models_manifest(models_dir: str) -> Dict:
  """models_dir's models.json (what write_models trained and measured); a clear error when absent."""
  path = os.path.join(models_dir, MODELS_MANIFEST)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} does not exist: write the models with `python "
                            "bin/generate_testdata.py --output_dir=testdata --models`, or train them in "
                            "the run (bin/demo --from_scratch)")
  with open(path) as f:
    return json.load(f)


def write_models(options: PipelineOptions, models_dir: str, echo: Callable[[str], None] = print) -> Dict:
  """Trains the reader BERT and the ICT start as run() does (in options.output_dir) and writes them to
  models_dir, replacing it in one rename: reader_bert/ (bin/train_mlm's export), ict/ (the retriever's
  weights alone, `retriever/` layout) and models.json (steps, the BERT's held-out masked-token accuracy,
  the ICT start's recall of the testdata questions, and the retriever's configuration)."""
  # pylint: disable=g-import-not-at-top (TF-heavy)
  import shutil
  import tensorflow as tf
  from realm_tf import io_utils
  # pylint: enable=g-import-not-at-top
  paths = prepare_corpora(options, echo)
  reader = run_mlm(options, paths, echo)
  ict_dir = run_ict(options, paths, reader if options.ict_from_bert else None, echo)
  recall = retriever_recall(ict_dir, ict_dir, paths["retrieval"], question_paths(options.testdata_dir))
  config = realm_config_lib.RealmConfig.load(ict_dir)
  retriever = config.build_retriever()
  training_state.restore_retriever(retriever, ict_dir)
  tmp = io_utils.temporary_path(os.path.abspath(models_dir))
  shutil.copytree(reader, os.path.join(tmp, READER_BERT))
  checkpoint = f"ckpt-{options.ict_steps}"
  tf.train.Checkpoint(retriever=retriever).write(os.path.join(tmp, ICT_START, checkpoint))
  training_state.write_checkpoint_state(os.path.join(tmp, ICT_START), checkpoint)
  with open(os.path.join(reader, "eval.json")) as f:
    reader_eval = {k: v for k, v in json.load(f).items() if k != "seconds"}
  retriever_config = {
      k: v
      for k, v in dataclasses.asdict(config).items()
      if k not in realm_config_lib.RealmConfig.NOT_COMPARED
  }
  manifest = {
      "written_by": "python bin/generate_testdata.py --output_dir=testdata --models",
      "reader_bert": dict(reader_eval, steps=options.mlm_steps),
      "ict": {
          "steps": options.ict_steps,
          "recall": recall,
          "realm_config": retriever_config
      },
      "seed": options.seed
  }
  io_utils.write_json_atomic(os.path.join(tmp, MODELS_MANIFEST), manifest)
  old = None
  if os.path.exists(models_dir):
    old = io_utils.temporary_path(os.path.abspath(models_dir))
    os.rename(models_dir, old)
  os.rename(tmp, models_dir)
  if old:
    shutil.rmtree(old)
  echo(f"wrote the reader BERT ({options.mlm_steps} steps, held-out masked-token accuracy "
       f"{100 * reader_eval['masked_lm_accuracy']:.1f}%) and the ICT start ({options.ict_steps} steps, "
       f"questions' gold recall@5 {recall['gold_recall@5']:.1f}) to {models_dir}")
  return manifest


def run(options: PipelineOptions, skip_ict: bool = False, echo: Callable[[str], None] = print) -> Dict:
  """The whole pipeline; returns what the demo summarizes."""
  started = stage_started = time.time()
  stage_seconds: Dict[str, float] = {}

  def stage_done(name: str) -> None:
    # Where the demo's minutes go, per stage, for the summary and the time budget.
    nonlocal stage_started
    now = time.time()
    stage_seconds[name] = now - stage_started
    stage_started = now

  paths = prepare_corpora(options, echo)
  stage_done("corpora")
  qa_paths = question_paths(options.testdata_dir)
  result: Dict = {"stage_seconds": stage_seconds}
  init = reader = None
  if options.models_dir:
    manifest = load_models_manifest(options.models_dir)
    reader = os.path.join(options.models_dir, READER_BERT)
    result["mlm"] = dict(manifest["reader_bert"], shipped=True)
    if not skip_ict:
      init = os.path.join(options.models_dir, ICT_START)
    echo(f"reader BERT and ICT start from {options.models_dir} ({manifest['reader_bert']['steps']} and "
         f"{manifest['ict']['steps']} steps; written by {manifest['written_by']})")
  elif options.mlm_steps > 0:
    echo(f"BERT pre-training of the reader (masked LM on bert_pretraining.jsonl): {options.mlm_steps} steps")
    reader = run_mlm(options, paths, echo)
    with open(os.path.join(reader, "eval.json")) as f:
      result["mlm"] = dict(json.load(f), steps=options.mlm_steps)
    stage_done("reader BERT")
  if not skip_ict and not options.models_dir:
    echo(f"ICT warm start: {options.ict_steps} steps")
    init = run_ict(options, paths, reader if options.ict_from_bert else None, echo)
    stage_done("ICT")
  echo(f"REALM pre-training: {options.realm_steps} steps, refresher in the background")
  result["realm"] = run_realm(options, paths, init, reader, echo)
  stage_done("REALM")
  model_dir = result["realm"]["model_dir"]
  result["recall_before"] = retriever_recall(model_dir, init, paths["retrieval"], qa_paths)
  result["recall_after"] = retriever_recall(model_dir, model_dir, paths["retrieval"], qa_paths)
  stage_done("recall")
  if options.orqa_steps > 0:
    echo(f"ORQA fine-tuning: {options.orqa_steps} steps from the REALM retriever, then evaluation, "
         "export and one answer through the SavedModel")
    result["orqa"] = run_orqa(options, paths, model_dir, 1e-3 if init else 1e-12, reader, echo)
    stage_done("ORQA, eval, export, answer")
  result["seconds"] = time.time() - started
  return result
