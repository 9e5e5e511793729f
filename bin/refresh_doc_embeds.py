r"""The index refresher: a process of its own beside bin/train_realm.

Waits for the trainer's checkpoints in --model_dir (blocking; never busy-polls), re-embeds the corpus with
the document tower of the newest one, builds the MIPS index and publishes it atomically as
MODEL_DIR/index/<step>/ with the query tower of the same step; keeps the newest --keep. Exits when the
trainer writes its done marker or after --max_refreshes. One refresher per model dir: it holds
MODEL_DIR/.refresher.lock while it runs, and a second one stops naming the first (or waits, --wait_for_lock).

  python bin/refresh_doc_embeds.py --model_dir=/runs/realm --retrieval_corpus_path=/data/corpus/blocks

Bootstrap index (step 0) from a warm-start checkpoint, before training starts:
  python bin/refresh_doc_embeds.py --once --init_checkpoint=/runs/ict/ckpt-10000 \
      --config_path=/runs/ict/realm_config.json --model_dir=/runs/realm \
      --retrieval_corpus_path=/data/corpus/blocks
"""

import os

from absl import app
from absl import flags
from absl import logging

from realm_tf import process_lock
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import refresher
from realm_tf.training import trainer_flags

_MODEL_DIR = trainer_flags.define_model_dir_flag("The trainer's model directory.")
_CORPUS = trainer_flags.define_retrieval_corpus_flag()
_INDEX = trainer_flags.define_index_implementation_flag("MIPS implementation of the published index.")
_RESCORING = flags.DEFINE_enum(
    "index_rescoring", "float32", ["float32", "int8"],
    "Vectors the ScaNN index re-scores its candidates with: float32, or int8 (a compressed index: 132 "
    "instead of 512 bytes per document at D=128, recall@10 in docs/results.md).")
_KEEP = trainer_flags.define_indexes_kept_flag()
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 128, "Documents per embedding batch (global).")
_LENGTH_BUCKETS = flags.DEFINE_integer(
    "embed_length_buckets", None, "Padded lengths the documents are grouped into (up to candidate_seq_len, "
    "multiples of 8); 1 pads every document to candidate_seq_len. Default: 4 with --embed_jit_compile "
    "(XLA compiles one program per length), one every 8 wordpieces without.", lower_bound=1)
_EMBED_JIT = flags.DEFINE_bool(
    "embed_jit_compile", True, "Compile the embedding step with XLA (needed on TPUs). On CPUs with AMX, "
    "mixed_bfloat16 runs faster without it (TensorFlow's oneDNN kernels; bench/refresh_bench.py).")
_MAX_REFRESHES = flags.DEFINE_integer("max_refreshes", None, "Exit after this many refreshes.")
_POLL_SECONDS = flags.DEFINE_float("poll_seconds", 5.0, "Seconds between looks for a checkpoint.")
_START_AT_STEP = flags.DEFINE_integer("start_at_step", 0, "Ignore checkpoints before this step.")
_ONCE = flags.DEFINE_bool("once", False, "Publish one index from --init_checkpoint (step 0) and exit.")
_INIT_CHECKPOINT = flags.DEFINE_string("init_checkpoint", None,
                                       "With --once: warm-start checkpoint of the retriever.")
_CONFIG_PATH = flags.DEFINE_string("config_path", None,
                                   "With --once: realm_config.json to build the retriever from "
                                   "(default: the one in --model_dir).")
_NUM_WORKERS = flags.DEFINE_integer("num_workers", 1, "Hosts sharing the corpus embedding.")
_WORKER_INDEX = flags.DEFINE_integer("worker_index", 0, "This host's index in [0, num_workers).")
_MERGE_TIMEOUT = flags.DEFINE_float("merge_timeout_seconds", 1800.0,
                                    "Worker 0 gives up a step whose other workers' rows do not arrive "
                                    "within this time (they may have moved on to a newer checkpoint).")
_WAIT_FOR_LOCK = flags.DEFINE_bool(
    "wait_for_lock", False, "When another refresher runs on --model_dir (it holds MODEL_DIR/"
    ".refresher.lock), wait for it to exit instead of stopping with an error naming it.")
_DEVICE = trainer_flags.define_device_flags(
    mixed_precision_help="Precision of the document tower while embedding (and of the query tower "
    "published with the index): mixed_bfloat16 computes in bfloat16 with float32 weights, for TPUs and "
    "CPUs with bfloat16 units (bench/refresh_bench.py measures its speed and its effect on recall). The "
    "index stores float32.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if _DEVICE.strategy.value == "multi_worker_mirrored":
    # Each host would embed only its share of every batch; hosts split the corpus by rows instead.
    raise app.UsageError("--strategy=multi_worker_mirrored is not supported by the refresher: run one "
                         "refresher per host with --num_workers=W --worker_index=i (worker 0 merges "
                         "and publishes), each with a single-host strategy")
  if _RESCORING.value != "float32" and _INDEX.value != "scann":
    raise app.UsageError(f"--index_rescoring={_RESCORING.value} needs --index_implementation=scann")
  # Before any model is built: Keras layers take the global policy when they are created.
  strategy = _DEVICE.setup()
  options = refresher.RefresherOptions(
      model_dir=_MODEL_DIR.value, corpus_prefix=_CORPUS.value, index_implementation=_INDEX.value,
      keep=_KEEP.value, batch_size=_BATCH_SIZE.value, embed_length_buckets=_LENGTH_BUCKETS.value,
      embed_jit_compile=_EMBED_JIT.value, index_rescoring=_RESCORING.value,
      max_refreshes=_MAX_REFRESHES.value,
      poll_seconds=_POLL_SECONDS.value, start_at_step=_START_AT_STEP.value,
      num_workers=_NUM_WORKERS.value, worker_index=_WORKER_INDEX.value,
      merge_timeout_seconds=_MERGE_TIMEOUT.value, wait_for_lock=_WAIT_FOR_LOCK.value)
  if _ONCE.value:
    config_path = _CONFIG_PATH.value or os.path.join(_MODEL_DIR.value, realm_config_lib.CONFIG_NAME)
    config = realm_config_lib.RealmConfig.load(config_path)
    try:
      refresher.bootstrap(config, _INIT_CHECKPOINT.value, options, strategy, log=logging.info)
    except process_lock.LockedError as e:
      raise app.UsageError(str(e)) from None
    return
  try:
    refresher.run(options, strategy, log=logging.info)
  except process_lock.LockedError as e:
    raise app.UsageError(str(e)) from None


if __name__ == "__main__":
  app.run(main)
