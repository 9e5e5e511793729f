"""Runs the bin/ programs as a user would: separate processes, flags, exit codes and messages.

A process start costs seconds of CPU: every program here runs at least once as a real process (a failing
one for the exit status and the message on stderr), and the further misconfigurations it must refuse
run its main() in this process (bin/in_process: the program's own flags and wiring)."""

import gc
import json
import os
import subprocess
import sys

import tensorflow as tf

from realm_tf.testing import in_process
from realm_tf.testing import tiny_inputs

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TESTDATA = os.path.join(_REPO, "testdata")


def setUpModule():
  # The objects of the imports (TensorFlow's millions) out of reach of the garbage collector: every
  # in-process main ends with gc.collect() (realm_tf/testing/in_process, training.loop), which otherwise
  # walks all of them each time. They live as long as the process anyway; what the tests make is still
  # collected.
  gc.freeze()


def _run(script, *args):
  env = dict(os.environ, PYTHONPATH=_REPO, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
  return subprocess.run([sys.executable, os.path.join(_REPO, "bin", script), *args],
                        capture_output=True,
                        text=True,
                        env=env,
                        timeout=300,
                        check=False)


class GenerateRetrievalCorpusTest(tf.test.TestCase):

  # A bad line, as a real process: ReadmeCommandsTest.test_a_real_command_runs_without_pythonpath.

  def test_the_testdata_corpus(self):
    # In this process; the binary's real process runs in ReadmeCommandsTest, and on the same testdata
    # in bin/demo_pipeline_corpora_test (prepare_corpora).
    out = self.create_tempdir().full_path
    result = in_process.run_main("generate_retrieval_corpus.py", f"--input_path={_TESTDATA}/corpus.jsonl",
                                 f"--vocab_path={_TESTDATA}/vocab.txt", f"--output_prefix={out}/blocks",
                                 "--num_output_shards=3")
    self.assertIsNone(result.error, result.traceback)
    with open(os.path.join(out, "blocks.manifest.json")) as f:
      manifest = json.load(f)
    self.assertEqual(manifest["num_documents"], 300)
    self.assertEqual([s["num_documents"] for s in manifest["shards"]], [100, 100, 100])
    self.assertIn("wrote 300 documents into 3 shards", result.log)

  def test_skip_invalid_reports_count(self):
    tmp = self.create_tempdir().full_path
    bad = os.path.join(tmp, "docs.tsv")
    with open(bad, "wb") as f:
      f.write(b"id\ttext\ttitle\n1\tgood text\tT1\n2\tonly two columns\n3\t\xff\xfe bad\tT3\n"
              b"4\tmore text\tT4\n5\t\t\n")
    prefix = os.path.join(tmp, "blocks")
    result = in_process.run_main("generate_retrieval_corpus.py", f"--input_path={bad}",
                                 f"--vocab_path={_TESTDATA}/vocab.txt", f"--output_prefix={prefix}",
                                 "--skip_invalid", "--num_output_shards=1")
    self.assertIsNone(result.error, result.traceback)
    self.assertIn("3 invalid documents skipped", result.log)
    with open(prefix + ".manifest.json") as f:
      manifest = json.load(f)
    self.assertEqual(manifest["num_documents"], 2)
    self.assertEqual(manifest["num_skipped"], 3)

  def test_missing_vocab_is_a_clear_error(self):
    tmp = self.create_tempdir().full_path
    result = in_process.run_main("generate_retrieval_corpus.py", f"--input_path={_TESTDATA}/corpus.jsonl",
                                 f"--vocab_path={tmp}/nope.txt", f"--output_prefix={tmp}/blocks")
    self.assertIsNotNone(result.error)
    self.assertIn(f"vocab file {tmp}/nope.txt does not exist", str(result.error))
    self.assertFalse(os.path.exists(f"{tmp}/blocks.manifest.json"))


class TrainRealmFlagsTest(tf.test.TestCase):

  def test_staleness_below_the_checkpoint_interval_is_refused_before_any_work(self):
    # In this process; VocabChecksTest runs bin/train_realm as a failing process.
    tmp = self.create_tempdir().full_path
    result = in_process.run_main("train_realm.py", f"--model_dir={tmp}/realm",
                                 f"--vocab_path={_TESTDATA}/vocab.txt",
                                 f"--pretraining_corpus_path={tmp}/none",
                                 f"--retrieval_corpus_path={tmp}/none", "--bert_config=tiny",
                                 "--save_checkpoints_steps=250", "--max_index_staleness_steps=100")
    self.assertIsNotNone(result.error)
    self.assertIn("--max_index_staleness_steps=100 is below --save_checkpoints_steps=250", str(result.error))
    self.assertFalse(os.path.exists(os.path.join(tmp, "realm")))

  def test_index_swaps_off_the_checkpoint_steps_are_refused_before_any_work(self):
    tmp = self.create_tempdir().full_path
    common = (f"--model_dir={tmp}/realm", f"--vocab_path={_TESTDATA}/vocab.txt",
              f"--pretraining_corpus_path={tmp}/none", f"--retrieval_corpus_path={tmp}/none",
              "--bert_config=tiny", "--save_checkpoints_steps=20")
    result = in_process.run_main("train_realm.py", *common, "--index_swap_steps=30")
    self.assertIn("--index_swap_steps=30 must be a positive multiple of --save_checkpoints_steps=20",
                  str(result.error))
    result = in_process.run_main("train_realm.py", *common, "--index_swap_steps=40",
                                 "--max_index_staleness_steps=40")
    self.assertIn("--index_swap_steps and --max_index_staleness_steps are alternatives", str(result.error))
    self.assertFalse(os.path.exists(os.path.join(tmp, "realm")))


class TrainRealmInputErrorTest(tf.test.TestCase):

  def test_an_input_pipeline_error_reaches_the_user_as_itself(self):
    # Fixed swaps every 2 steps and no refresher: step 3 needs the index of step 2, which never comes.
    # The pipeline's TimeoutError must end the run as itself, not inside TensorFlow's graph-execution
    # error (whose last line is not the cause).
    tmp = self.create_tempdir().full_path
    corpora = tiny_inputs.write_small_realm_corpora(tmp, 20)
    bert_config = tiny_inputs.write_small_bert_config(tmp)
    result = in_process.run_main(
        "train_realm.py", f"--model_dir={tmp}/realm", f"--vocab_path={_TESTDATA}/vocab.txt",
        f"--pretraining_corpus_path={corpora['pretraining']}",
        f"--retrieval_corpus_path={corpora['retrieval']}", f"--bert_config={bert_config}",
        "--jit_compile=false", "--batch_size=2", "--num_candidates=4", "--query_seq_len=16",
        "--candidate_seq_len=32", "--max_masks=4", "--projection_size=16", "--num_train_steps=6",
        "--save_checkpoints_steps=2", "--index_swap_steps=2", "--wait_for_index_seconds=0.5",
        "--bootstrap_index", "--index_implementation=brute_force")
    self.assertIsInstance(result.error, TimeoutError, result.traceback)
    self.assertIn("published no index of step 2 in time", str(result.error))


class TrainFidKdFlagsTest(tf.test.TestCase):

  def _run(self, tmp, *extra):
    return _run("train_fid_kd.py", f"--model_dir={tmp}/fid", f"--vocab_path={_TESTDATA}/vocab.txt",
                f"--retrieval_corpus_path={tmp}/none", f"--train_path={tmp}/none", f"--dev_path={tmp}/none",
                "--bert_config=tiny", *extra)

  def test_shared_embeddings_need_a_pre_trained_encoder_of_the_decoder_width(self):
    tmp = self.create_tempdir().full_path
    result = self._run(tmp, "--reader_share_embeddings")
    self.assertNotEqual(result.returncode, 0)
    self.assertIn(
        "--reader_share_embeddings shares the pre-trained encoder's word embeddings: pass "
        "--reader_init_checkpoint", result.stderr)
    self.assertFalse(os.path.exists(os.path.join(tmp, "fid")))

  def test_bad_reader_shape_names_the_flags(self):
    # In this process; the case above runs bin/train_fid_kd as a failing process.
    tmp = self.create_tempdir().full_path
    result = in_process.run_main("train_fid_kd.py", f"--model_dir={tmp}/fid",
                                 f"--vocab_path={_TESTDATA}/vocab.txt", f"--retrieval_corpus_path={tmp}/none",
                                 f"--train_path={tmp}/none", f"--dev_path={tmp}/none", "--bert_config=tiny",
                                 "--reader_hidden_size=30", "--reader_num_heads=4")
    self.assertIsNotNone(result.error)
    self.assertIn(
        "the reader flags (--reader_*, --passage_seq_len, --answer_seq_len): FidConfig: "
        "hidden_size 30 is not a multiple of num_heads 4", str(result.error))
    self.assertFalse(os.path.exists(os.path.join(tmp, "fid")))


class DemoTest(tf.test.TestCase):

  def test_demo_runs_and_summarizes(self):
    out = self.create_tempdir().full_path
    result = _run("run_demo.py", f"--output_dir={out}", "--features_only")
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn("regenerated files identical to the committed testdata/: True", result.stdout)
    self.assertIn("300 documents in 4 shards", result.stdout)
    self.assertIn("[MASK]", result.stdout)
    self.assertTrue(result.stdout.rstrip().endswith("demo done."))


class TrainMlmSeedTest(tf.test.TestCase):

  def test_one_seed_trains_the_same_bert_in_two_processes_with_gradient_accumulation(self):
    # --seed covers the weights' initialization and dropout, not only the data order: two runs of one
    # seed write the same checkpoint bytes (on one machine; other CPUs round differently).
    # A one-layer BERT from a bert_config.json (GradientAccumulationFlagTest's runs take the tiny preset;
    # shipped_models_test evaluates a tiny-preset BERT through bin/train_mlm's main).
    # The first run is a fresh process, the second bin/train_mlm's main in this test's process, which has
    # another hash seed and has already built and run other models: a process start fewer, and no less
    # strict than two fresh processes. Both accumulate gradients over 2 micro-batches and evaluate on the
    # held-out split after the checkpoint: the in-process run is also the check that
    # --gradient_accumulation_steps trains and that the evaluation runs (one training run fewer).
    bert_config = tiny_inputs.write_small_bert_config(self.create_tempdir().full_path,
                                                      max_position_embeddings=64)
    weights = []
    for run in ("process", "in_process"):
      model_dir = os.path.join(self.create_tempdir().full_path, run)
      flags = (f"--model_dir={model_dir}", f"--input_path={_TESTDATA}/corpus.jsonl",
               f"--vocab_path={_TESTDATA}/vocab.txt", f"--bert_config={bert_config}", "--batch_size=4",
               "--max_seq_len=32", "--max_predictions_per_seq=4", "--num_train_steps=2",
               "--save_checkpoints_steps=2", "--jit_compile=false", "--seed=7",
               "--gradient_accumulation_steps=2")
      if run == "process":
        result = _run("train_mlm.py", *flags)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
      else:
        result = in_process.run_main("train_mlm.py", *flags)
        self.assertIsNone(result.error, result.traceback)
        self.assertIn("held-out masked-token accuracy", result.log)
      with open(os.path.join(model_dir, "ckpt-2.data-00000-of-00001"), "rb") as f:
        weights.append(f.read())
    self.assertEqual(weights[0], weights[1])


class GradientAccumulationFlagTest(tf.test.TestCase):

  def test_the_trainers_name_it_when_it_does_not_divide_the_batch(self):
    # bin/train_mlm's main in this process; TrainMlmSeedTest trains with it (as a process and here).
    model_dir = os.path.join(self.create_tempdir().full_path, "mlm")
    flags = [
        f"--model_dir={model_dir}", f"--input_path={_TESTDATA}/corpus.jsonl",
        f"--vocab_path={_TESTDATA}/vocab.txt", "--bert_config=tiny", "--batch_size=4", "--max_seq_len=32",
        "--max_predictions_per_seq=4", "--num_train_steps=2", "--save_checkpoints_steps=2",
        "--jit_compile=false"
    ]
    result = in_process.run_main("train_mlm.py", *flags, "--gradient_accumulation_steps=3")
    self.assertIsNotNone(result.error)
    self.assertIn("--gradient_accumulation_steps=3 must divide the batch of each replica (4;",
                  str(result.error))
    # 0 steps evaluates a given BERT (bin/shipped_models_test measures the demo's reader so); without
    # one there is nothing to evaluate.
    kept = [f for f in flags if not f.startswith(("--model_dir", "--num_train_steps"))]
    result = in_process.run_main("train_mlm.py", *kept, "--num_train_steps=0",
                                 f"--model_dir={model_dir}_eval")
    self.assertIn("--num_train_steps=0 evaluates and exports --init_checkpoint", str(result.error))


class VocabChecksTest(tf.test.TestCase):
  """bin/train_realm and bin/refresh_doc_embeds stop before any work when the vocab is not the one the
  retrieval corpus (its manifest's vocab_sha256) was tokenized with."""

  def test_vocab_other_than_the_corpus_manifest(self):
    # pylint: disable=g-import-not-at-top,import-outside-toplevel  (this file's other tests need none)
    from realm_tf import tokenization
    from realm_tf.data import corpus as corpus_lib
    from realm_tf.modeling import bert
    from realm_tf.modeling import realm_config as realm_config_lib
    tmp = self.create_tempdir().full_path
    vocab = f"{_TESTDATA}/vocab.txt"
    with open(vocab, encoding="utf-8") as f:
      tokens = f.read().splitlines()
    swapped = f"{tmp}/vocab_swapped.txt"  # the same size, two tokens swapped
    with open(swapped, "w", encoding="utf-8") as f:
      f.write("\n".join(tokens[:-2] + [tokens[-1], tokens[-2]]) + "\n")
    corpus = f"{tmp}/corpus/blocks"  # the first 10 documents: both runs stop at its manifest
    documents = list(corpus_lib.read_documents(f"{_TESTDATA}/corpus.jsonl"))[:10]
    corpus_lib.write_corpus(lambda: documents, tokenization.Tokenizer(vocab), corpus, num_shards=1)

    result = _run("train_realm.py", f"--model_dir={tmp}/realm", f"--vocab_path={swapped}",
                  f"--pretraining_corpus_path={_TESTDATA}/pretraining.jsonl",
                  f"--retrieval_corpus_path={corpus}", "--bert_config=tiny")
    self.assertNotEqual(result.returncode, 0)
    last = result.stderr.strip().splitlines()[-1]
    self.assertIn(f"VocabMismatchError: the vocab {swapped} (--vocab_path", last)
    self.assertIn(f"{corpus}.manifest.json records vocab_sha256", last)
    self.assertFalse(os.path.exists(f"{tmp}/realm"))

    model_dir = f"{tmp}/run"
    realm_config_lib.RealmConfig(retriever_bert=bert.tiny_config(285),
                                 reader_bert=bert.tiny_config(285),
                                 vocab_path=swapped).save(model_dir)
    result = _run("refresh_doc_embeds.py", f"--model_dir={model_dir}", f"--retrieval_corpus_path={corpus}",
                  "--once", "--index_implementation=brute_force")
    self.assertNotEqual(result.returncode, 0)
    last = result.stderr.strip().splitlines()[-1]
    self.assertIn(f"the vocab {swapped} (realm_config.json's vocab_path", last)
    self.assertEqual(os.listdir(model_dir), ["realm_config.json"])


def _run_as_readme(args, cwd):
  """A README command in a clean environment: no PYTHONPATH and none of TensorFlow's variables, only
  what a new shell has. realm_tf must come from the venv's (editable) install, as for a user."""
  env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
  return subprocess.run([sys.executable, *args],
                        capture_output=True,
                        text=True,
                        env=env,
                        cwd=cwd,
                        timeout=300,
                        check=False)


class ReadmeCommandsTest(tf.test.TestCase):

  def test_help_lists_own_and_shared_flags_only(self):
    # One README command as a process (absl's --help and nothing of TensorFlow's start-up); what the
    # others list is absl's help of their module, computed in this process (in_process.help_text).
    for binary, own in (("train_ict.py", "--pretraining_corpus_path"), ("train_realm.py",
                                                                        "--retrieval_corpus_path"),
                        ("train_orqa.py", "--train_path"), ("train_mlm.py", "--input_path")):
      if binary == "train_ict.py":
        result = _run_as_readme([os.path.join(_REPO, "bin", binary), "--help"], self.get_temp_dir())
        listed = result.stdout
        self.assertIn("Try --helpfull", listed, result.stderr)  # absl's help ran (it exits with 1)
        self.assertNotIn("cuda", result.stderr.lower())  # no TensorFlow start-up lines
      else:
        listed = in_process.help_text(binary)
      for flag in (own, "--model_dir", "--batch_size", "--num_train_steps", "--strategy", "--tpu",
                   "--mixed_precision"):
        self.assertIn(f"  {flag}:", listed, f"{binary} --help does not list {flag}")
      for flag in ("logtostderr", "verbosity", "test_srcdir"):  # absl's own: --helpfull only
        self.assertNotRegex(listed, rf"--(\[no\])?{flag}:", f"{binary} --help lists absl's --{flag}")

  def test_a_real_command_runs_without_pythonpath(self):
    # A failing one (a bad line): it gets as far as reading its input, so realm_tf came from the venv's
    # install; the exit status and the message on stderr are app.run's part, which only a process shows,
    # and it must leave no partial shards. GenerateRetrievalCorpusTest.test_the_testdata_corpus runs the
    # binary's main on the testdata corpus (bin/demo_pipeline_corpora_test runs that as a process).
    tmp = self.create_tempdir().full_path
    bad = os.path.join(tmp, "docs.jsonl")
    with open(bad, "w") as f:
      f.write('{"title": "A", "body": "fine"}\n{"title": "B", "body": \n{"title": "C", "body": "x"}\n')
    prefix = os.path.join(tmp, "out", "blocks")
    result = _run_as_readme([
        os.path.join(_REPO, "bin", "generate_retrieval_corpus.py"), f"--input_path={bad}",
        f"--vocab_path={_TESTDATA}/vocab.txt", f"--output_prefix={prefix}"
    ], tmp)
    self.assertNotEqual(result.returncode, 0)
    self.assertIn(f"{bad}:2: not a JSON object", result.stderr)
    self.assertIn("--skip_invalid", result.stderr)
    self.assertFalse(os.path.exists(os.path.dirname(prefix)) and os.listdir(os.path.dirname(prefix)))


if __name__ == "__main__":
  tf.test.main()
