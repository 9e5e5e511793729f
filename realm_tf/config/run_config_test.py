"""Tests of run_config: the layers (defaults, files, flags, --params_override), the errors a config file's
mistakes get, the file a run writes and the flags a tree generates (with bin/train_realm's tree)."""

import contextlib
import dataclasses
import errno
import json
import os
import sys
from typing import Optional, Tuple
from unittest import mock

from absl import app
from absl import flags
from absl.testing import absltest
import yaml

from realm_tf.config import refresh_doc_embeds
from realm_tf.config import run_config
from realm_tf.config import train_fid_kd
from realm_tf.config import train_ict
from realm_tf.config import train_mlm
from realm_tf.config import train_orqa
from realm_tf.config import train_realm
from realm_tf.config.run_config import option
from realm_tf.config.run_config import section
from realm_tf.modeling import bert as bert_lib


@dataclasses.dataclass(frozen=True)
class _Inner:
  steps: int = option(10, "Steps.", lower_bound=1)
  rate: float = option(0.5, "Rate.", lower_bound=0.0, upper_bound=1.0)
  kind: str = option("a", "Kind.", choices=("a", "b"))
  ks: Tuple[int, ...] = option((1, 5), "Cut-offs.")


@dataclasses.dataclass(frozen=True)
class _Tree:
  path: Optional[str] = option(None, "A path.", required=True, daily=True)
  flag: bool = option(False, "A switch.")
  inner: _Inner = section(_Inner, steps=20)


_REQUIRED = {"path": "/p"}


def _quiet(_):
  pass


class ResolveTest(absltest.TestCase):

  def _file(self, content, suffix=".yaml") -> str:
    path = self.create_tempfile(file_path=None).full_path + suffix
    with open(path, "w") as f:
      f.write(content if isinstance(content, str) else json.dumps(content))
    return path

  def test_defaults_are_the_trees_own(self):
    tree = run_config.resolve(_Tree, flags_given=_REQUIRED)
    self.assertEqual(tree, _Tree(path="/p", inner=_Inner(steps=20)))

  def test_later_layers_win_files_then_flags_then_params_override(self):
    first = self._file("inner:\n  steps: 30\n  rate: 1e-5\n  kind: b\nflag: true\n")
    second = self._file({"inner": {"steps": 40}}, ".json")
    tree = run_config.resolve(_Tree, [first, second], {
        "path": "/p",
        "rate": 0.25
    }, "inner.kind=a,inner.ks=[2, 3]")
    # Model Garden's YAML loader reads 1e-5 as a number; the second file overrides only steps.
    self.assertEqual(tree, _Tree(path="/p", flag=True, inner=_Inner(steps=40, rate=0.25, kind="a",
                                                                    ks=(2, 3))))
    tree = run_config.resolve(_Tree, [first], {"path": "/p", "steps": 50}, "inner: {steps: 60}")
    self.assertEqual(tree.inner.steps, 60)

  def test_unknown_key_names_the_file_the_key_and_the_keys_there_are(self):
    path = self._file("inner:\n  step: 3\n")
    with self.assertRaisesRegex(
        run_config.ConfigError, f"{path}: unknown key 'inner.step'; the keys of inner are: steps, rate, "
        "kind, ks"):
      run_config.resolve(_Tree, [path], _REQUIRED)

  def test_wrong_type_and_out_of_range_name_the_file_key_and_allowed_values(self):
    for content, message in (
        ("inner: {steps: ten}", "inner.steps: 'ten' is not allowed: an integer >= 1"),
        ("inner: {steps: 0}", "inner.steps: 0 is out of range; allowed: an integer >= 1"),
        ("inner: {steps: 2.5}", "inner.steps: 2.5 is not allowed: an integer >= 1"),
        ("inner: {kind: c}", "inner.kind: 'c' is not allowed: one of a, b"),
        ("inner: {rate: 1.5}", "inner.rate: 1.5 is out of range; allowed: a number >= 0.0, <= 1.0"),
        ("flag: 1", "flag: 1 is not allowed: true or false"),
        ("inner: {ks: [1, x]}", r"inner.ks: \[1, 'x'\] is not allowed: a list of integers"),
        ("inner: 3", "inner must be a mapping of keys to values, got 3"),
        ("path: null", "no value for path \\(--path\\)"),
    ):
      path = self._file(content)
      with self.subTest(content), self.assertRaisesRegex(run_config.ConfigError, message):
        run_config.resolve(_Tree, [path])

  def test_file_that_is_not_a_mapping_or_not_there(self):
    path = self._file("- a\n- b\n")
    with self.assertRaisesRegex(run_config.ConfigError, f"{path}: must be a mapping"):
      run_config.resolve(_Tree, [path], _REQUIRED)
    with self.assertRaisesRegex(run_config.ConfigError, "--config_file=/no/such.yaml: no such file"):
      run_config.resolve(_Tree, ["/no/such.yaml"], _REQUIRED)

  def test_params_override_errors_name_it(self):
    with self.assertRaisesRegex(run_config.ConfigError,
                                "--params_override: unknown key 'inner.nope'; the keys of inner are"):
      run_config.resolve(_Tree, (), _REQUIRED, "inner.nope=1")
    with self.assertRaisesRegex(run_config.ConfigError, "--params_override: inner.steps: -1 is out of"):
      run_config.resolve(_Tree, (), _REQUIRED, "inner.steps=-1")

  def test_flag_errors_name_the_flag(self):
    with self.assertRaisesRegex(run_config.ConfigError, "--steps: 0 is out of range"):
      run_config.resolve(_Tree, (), {"path": "/p", "steps": 0})
    with self.assertRaisesRegex(run_config.ConfigError, "--ks=1,x: allowed: a list of integers"):
      run_config.resolve(_Tree, (), {"path": "/p", "ks": ["1", "x"]})

  def test_the_written_file_resolves_to_the_same_tree(self):
    tree = run_config.resolve(_Tree, (), {"path": "/p", "rate": 3e-5, "ks": ["7"]})
    model_dir = self.create_tempdir().full_path
    path = run_config.save(tree, model_dir, "train_x")
    self.assertEqual(path, os.path.join(model_dir, "train_x.yaml"))
    self.assertEqual(run_config.resolve(_Tree, [path]), tree)
    with open(path) as f:
      self.assertIn(f"--config_file={path}", f.read())
    self.assertEqual(os.listdir(model_dir), ["train_x.yaml"])  # atomic: no temporary left

  def test_a_full_disk_is_a_named_error_naming_the_file(self):
    # bench/fault_soak's ENOSPC: the write of MODEL_DIR/<binary>.yaml fails; the user reads the file and
    # what to do, not TensorFlow's ResourceExhaustedError, and no temporary is left.
    tree = run_config.resolve(_Tree, (), {"path": "/p"})
    model_dir = self.create_tempdir().full_path

    class _FullDisk:

      def write(self, _):
        raise OSError(errno.ENOSPC, "No space left on device")

    @contextlib.contextmanager
    def full_disk(path, mode="w"):
      del path, mode
      yield _FullDisk()

    with mock.patch.object(run_config.io_utils, "atomic_write", full_disk):
      with self.assertRaisesRegex(
          run_config.ConfigWriteError, f"cannot write bin/train_x's configuration {model_dir}/train_x.yaml: "
          r".*No space left on device; free space"):
        run_config.save(tree, model_dir, "train_x")
    self.assertEqual(os.listdir(model_dir), [])

  def test_a_refused_run_leaves_the_model_dir_as_it_was(self):
    tree = run_config.resolve(_Tree, flags_given=_REQUIRED)
    root = self.create_tempdir().full_path
    new_dir = os.path.join(root, "new")
    with self.assertRaises(ValueError):
      with run_config.saved_for_the_run(tree, new_dir, "train_x", _quiet):
        raise ValueError("refused")
    self.assertFalse(os.path.exists(new_dir))
    old = run_config.save(tree, root, "train_x")
    with open(old) as f:
      before = f.read()
    with self.assertRaises(ValueError):
      with run_config.saved_for_the_run(dataclasses.replace(tree, flag=True), root, "train_x", _quiet):
        raise ValueError("refused")
    with open(old) as f:
      self.assertEqual(f.read(), before)
    logged = []
    with run_config.saved_for_the_run(dataclasses.replace(tree, flag=True), root, "train_x", logged.append):
      pass
    self.assertTrue(run_config.resolve(_Tree, [old]).flag)
    self.assertEqual(logged[-1], "changed since the run's last start: flag False -> True")

  def test_changed_keys(self):
    self.assertEqual(
        run_config.changed_keys({
            "a": 1,
            "s": {
                "b": [1],
                "c": None
            }
        }, {
            "a": 1,
            "s": {
                "b": [1, 2],
                "c": "x"
            },
            "d": 2
        }), ["s.b [1] -> [1, 2]", "s.c None -> 'x'", "d None -> 2"])


class TrainRealmFlagsTest(absltest.TestCase):
  """bin/train_realm's tree: its flags keep their names and defaults; --help lists the daily ones."""

  def setUp(self):
    super().setUp()
    self.flag_values = flags.FlagValues()
    self.config_flags = run_config.define_flags(train_realm.TrainRealmConfig, self.flag_values)

  def _resolve(self, *argv):
    self.flag_values(["train_realm", *argv])
    return self.config_flags.resolve()

  def test_flags_have_the_old_names_and_the_binarys_defaults(self):
    config = self._resolve("--model_dir=/m", "--vocab_path=v.txt", "--pretraining_corpus_path=/s",
                           "--retrieval_corpus_path=/b", "--batch_size=4", "--nobootstrap_index",
                           "--index_swap_steps=200")
    self.assertEqual((config.train.batch_size, config.train.learning_rate, config.train.num_train_steps,
                      config.train.save_checkpoints_steps), (4, 3e-5, 1000, 100))
    self.assertEqual((config.retriever.query_seq_len, config.retriever.candidate_seq_len), (96, 288))
    self.assertEqual(config.index.index_swap_steps, 200)
    options = config.trainer_options(None)
    self.assertEqual(options.loop.global_batch_size, 4)
    self.assertEqual(options.loop.model_dir, "/m")
    self.assertEqual(options.config.query_seq_len, 96)
    self.assertEqual(options.pretraining_corpus_path, "/s")
    self.assertEqual(options.index_swap_steps, 200)

  def test_missing_paths_are_a_usage_error_naming_flag_and_key(self):
    with self.assertRaisesRegex(
        app.UsageError, r"no value for model_dir \(--model_dir\), "
        r"data.pretraining_corpus_path \(--pretraining_corpus_path\)"):
      self._resolve("--vocab_path=v.txt", "--retrieval_corpus_path=/b")

  def test_help_lists_the_daily_flags_and_helpfull_the_rest(self):
    # absl names the module that defined the flags (this one) by its file when it runs as __main__.
    module = sys.argv[0] if __name__ == "__main__" else __name__
    key = {flag.name for flag in self.flag_values.get_key_flags_for_module(module)}
    self.assertEqual(
        key, {
            "config_file", "params_override", "model_dir", "vocab_path", "pretraining_corpus_path",
            "retrieval_corpus_path", "strategy", "tpu", "mixed_precision", "batch_size", "num_train_steps"
        })
    self.assertIn("--index_swap_steps", self.flag_values.get_help())
    self.assertIn("[train.batch_size]", self.flag_values["batch_size"].help)

  def test_written_file_keys_and_flags_are_one_set(self):
    tree = run_config.resolve(train_realm.TrainRealmConfig,
                              flags_given={
                                  "model_dir": "/m",
                                  "vocab_path": "v",
                                  "pretraining_corpus_path": "s",
                                  "retrieval_corpus_path": "b"
                              })
    path = run_config.save(tree, self.create_tempdir().full_path, tree.BINARY)
    with open(path) as f:
      written = yaml.safe_load(f)
    names = {leaf.flag for leaf in run_config.leaves(train_realm.TrainRealmConfig)}
    flat = {
        k for section_values in written.values() if isinstance(section_values, dict) for k in section_values
    } | {k for k, v in written.items() if not isinstance(v, dict)}
    self.assertEqual(flat, names)
    self.assertEqual(names - set(self.flag_values), set())


# The flags each binary had before its options became a tree (git show ce8a58b:bin/...), which keep
# working; train_mlm no longer takes the retriever's --embedder_pooling and --cosine_score_scale, which
# it accepted and ignored.
_COMMON = {
    "model_dir", "vocab_path", "do_lower_case", "bert_config", "seed", "strategy", "tpu", "num_cpu_devices",
    "mixed_precision", "jit_compile", "batch_size", "learning_rate", "adam_bias_correction",
    "num_train_steps", "save_checkpoints_steps", "keep_checkpoint_max", "log_every_steps", "steps_per_loop",
    "gradient_accumulation_steps"
}
_RETRIEVER = {
    "embedder_pooling", "cosine_score_scale", "projection_size", "query_seq_len",
    "embedder_layer_norm_epsilon", "candidate_seq_len", "retrieval_corpus_path"
}
_FLAGS_BEFORE = {
    train_realm.TrainRealmConfig:
        _COMMON | _RETRIEVER | {
            "pretraining_corpus_path",
            "share_embedders",
            "max_masks",
            "num_candidates",
            "init_retriever_checkpoint",
            "init_reader_checkpoint",
            "bootstrap_index",
            "index_implementation",
            "max_index_staleness_steps",
            "check_index_every_batches",
            "index_swap_steps",
            "wait_for_index_seconds",
            "retrieval",  # added since (issue 42: --retrieval=in_step)
        },
    train_mlm.TrainMlmConfig:
        _COMMON | {
            "input_path", "init_checkpoint", "max_seq_len", "max_predictions_per_seq", "masked_lm_prob",
            "short_seq_prob", "whole_word_masking", "random_next_rate", "warmup_steps", "eval_percent"
        },
    train_ict.TrainIctConfig:
        _COMMON | {
            "pretraining_corpus_path", "init_bert_checkpoint", "projection_size", "layer_norm_epsilon",
            "dropout_rate", "query_seq_len", "block_seq_len", "mask_rate", "embedder_pooling",
            "cosine_score_scale"
        },
    train_orqa.TrainOrqaConfig:
        _COMMON | _RETRIEVER | {
            "train_path",
            "dev_path",
            "max_eval_examples",
            "index_dir",
            "retriever_checkpoint",
            "reader_checkpoint",
            "embedder_dropout_rate",
            "reader_seq_len",
            "span_hidden_size",
            "max_span_width",
            "retriever_beam_size",
            "reader_beam_size",
            "max_answers",
            "max_num_answers",
            "max_answer_len",
            "eval_every_steps",
            "eval_batch_size",
            "embed_batch_size",
            "skip_invalid",
            "retriever",
            "hybrid_bm25_weight",  # added since (issue 41: train on BM25's or the hybrid's rows)
            "retriever_learning_rate",  # added since (issue 41: the query tower's own rate)
        },
    train_fid_kd.TrainFidKdConfig:
        _RETRIEVER | {
            "model_dir", "vocab_path", "do_lower_case", "bert_config", "seed", "jit_compile", "train_path",
            "dev_path", "max_eval_examples", "max_train_examples", "retriever_checkpoint", "initial_passages",
            "embed_batch_size", "reader_init_checkpoint", "reader_hidden_size", "reader_share_embeddings",
            "reader_copy_attention", "reader_num_heads", "reader_encoder_layers", "reader_decoder_layers",
            "reader_intermediate_size", "reader_dropout_rate", "passage_seq_len", "answer_seq_len",
            "iterations", "num_passages", "reader_steps", "reader_single_passage_steps", "retriever_steps",
            "reader_batch_size", "retriever_batch_size", "reader_learning_rate", "retriever_learning_rate",
            "reader_score_aggregation", "reader_temperature", "retriever_temperature",
            "reader_answer_substitution_rate", "distill_answer_bearing_only", "keep_better_retriever",
            "selection_metric", "recall_ks"
        },
}
_REFRESHER_FLAGS_BEFORE = {
    "model_dir", "retrieval_corpus_path", "index_implementation", "index_rescoring", "keep", "batch_size",
    "embed_length_buckets", "embed_jit_compile", "max_refreshes", "poll_seconds", "start_at_step", "once",
    "init_checkpoint", "config_path", "num_workers", "worker_index", "merge_timeout_seconds", "wait_for_lock",
    "strategy", "tpu", "num_cpu_devices", "mixed_precision"
}


class TreesTest(absltest.TestCase):
  """Every trainer's tree: the flags it had, and options the library accepts."""

  def test_each_tree_keeps_the_flags_its_binary_had(self):
    for cls, before in _FLAGS_BEFORE.items():
      with self.subTest(cls.__name__):
        self.assertEqual({leaf.flag for leaf in run_config.leaves(cls)}, before)

  def test_the_refresher_keeps_its_flags_and_builds_its_options(self):
    cls = refresh_doc_embeds.RefreshDocEmbedsConfig
    self.assertEqual({leaf.flag for leaf in run_config.leaves(cls)}, _REFRESHER_FLAGS_BEFORE)
    config = run_config.resolve(cls,
                                flags_given={
                                    "model_dir": "/m",
                                    "retrieval_corpus_path": "/c",
                                    "keep": 2,
                                    "num_workers": 2,
                                    "worker_index": 1
                                })
    with self.assertRaisesRegex(ValueError, "with_precision_chosen"):
      config.refresher_options()
    logged = []
    chosen = config.with_precision_chosen(logged.append)
    options = chosen.refresher_options()
    self.assertEqual((options.model_dir, options.corpus_prefix, options.keep, options.worker_index),
                     ("/m", "/c", 2, 1))
    self.assertIn(chosen.device.mixed_precision, ("float32", "mixed_bfloat16"))
    self.assertEqual(options.embed_jit_compile, chosen.device.mixed_precision == "float32")
    self.assertIn("embedding precision:", logged[0])
    # What the user asked for stays in the tree the run writes: a restart elsewhere chooses again.
    self.assertEqual((config.device.mixed_precision, config.index.embed_jit_compile), ("auto", None))
    forced = run_config.resolve(cls,
                                flags_given={
                                    "model_dir": "/m",
                                    "retrieval_corpus_path": "/c",
                                    "mixed_precision": "float32",
                                    "embed_jit_compile": False
                                })
    forced = forced.with_precision_chosen(logged.append)
    self.assertEqual((forced.device.mixed_precision, forced.index.embed_jit_compile), ("float32", False))
    self.assertIn("forced: --mixed_precision=float32 --noembed_jit_compile", logged[-1])
    self.assertEqual(config.file_stem, "refresh_doc_embeds.worker1")

  def test_each_tree_builds_its_trainers_options(self):
    paths = {
        leaf.flag: f"/{leaf.flag}"
        for cls in _FLAGS_BEFORE for leaf in run_config.leaves(cls) if leaf.field.metadata["required"]
    }
    bert = bert_lib.tiny_config(285)
    for cls in _FLAGS_BEFORE:
      with self.subTest(cls.__name__):
        given = {name: paths[name] for name in paths if name in {l.flag for l in run_config.leaves(cls)}}
        options = run_config.resolve(cls, flags_given=given).trainer_options(bert)
        if cls is train_fid_kd.TrainFidKdConfig:  # rounds of two trainers, without one loop
          self.assertEqual((options.model_dir, options.recall_ks), ("/model_dir", (1, 5, 20)))
          continue
        self.assertEqual(options.loop.model_dir, "/model_dir")
        self.assertEqual(options.loop.global_batch_size, options.batch_size)


if __name__ == "__main__":
  absltest.main()
