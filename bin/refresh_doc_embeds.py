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

Every option is also a key of a config file (realm_tf/config/refresh_doc_embeds.py; docs/configuration.md);
the refresher writes them all to MODEL_DIR/refresh_doc_embeds.yaml, from which --config_file restarts it.
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

import os

from absl import app
from absl import logging

from realm_tf import process_lock
from realm_tf.config import refresh_doc_embeds
from realm_tf.config import run_config
from realm_tf.modeling import realm_config as realm_config_lib
from realm_tf.retrieval import published_index
from realm_tf.retrieval import refresher

_CONFIG = run_config.define_flags(refresh_doc_embeds.RefreshDocEmbedsConfig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  config = _CONFIG.resolve()
  if config.device.strategy == "multi_worker_mirrored":
    # Each host would embed only its share of every batch; hosts split the corpus by rows instead.
    raise app.UsageError("--strategy=multi_worker_mirrored is not supported by the refresher: run one "
                         "refresher per host with --num_workers=W --worker_index=i (worker 0 merges "
                         "and publishes), each with a single-host strategy")
  index = config.index
  if index.index_rescoring != "float32" and index.index_implementation != "scann":
    raise app.UsageError(f"--index_rescoring={index.index_rescoring} needs --index_implementation=scann")
  chosen = config.with_precision_chosen(logging.info)
  # Before any model is built: Keras layers take the global policy when they are created.
  strategy = chosen.device.setup()
  options = chosen.refresher_options()
  bootstrap = config.bootstrap
  with run_config.saved_for_the_run(config,
                                    config.model_dir,
                                    config.file_stem,
                                    logging.info,
                                    progress=published_index.published_steps):
    try:
      if bootstrap.once:
        config_path = bootstrap.config_path or os.path.join(config.model_dir, realm_config_lib.CONFIG_NAME)
        refresher.bootstrap(realm_config_lib.RealmConfig.load(config_path),
                            bootstrap.init_checkpoint,
                            options,
                            strategy,
                            log=logging.info)
      else:
        refresher.run(options, strategy, log=logging.info)
    except process_lock.LockedError as e:
      raise app.UsageError(str(e)) from None


if __name__ == "__main__":
  app.run(main)
