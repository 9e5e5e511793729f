r"""Writes realm_tf's testdata/ (tiny vocab, synthetic corpus, pre-training sentences, QA), byte for byte;
with --models also the demo's reader BERT and ICT start under testdata/models/ (about 11 minutes on 2
cores: bin/train_mlm and bin/train_ict as bin/demo --from_scratch runs them).

  python bin/generate_testdata.py --output_dir=testdata
  python bin/generate_testdata.py --output_dir=testdata --models
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

import os
import shutil
import tempfile

from absl import app
from absl import flags
from absl import logging

from realm_tf import demo_pipeline
from realm_tf.data import synthetic

_OUTPUT_DIR = flags.DEFINE_string("output_dir", "testdata", "Directory to write the files into.")
_SEED = flags.DEFINE_integer("seed", 20200812, "Random seed of the synthetic world.")
_MODELS = flags.DEFINE_bool(
    "models", False, "Also train the demo's reader BERT and ICT start into OUTPUT_DIR/models/ "
    "(replaced in one rename when done).")
_WORK_DIR = flags.DEFINE_string(
    "work_dir", None, "Where --models trains (its logs stay there); default: a temporary "
    "directory, removed afterwards.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  counts = synthetic.write_testdata(_OUTPUT_DIR.value, seed=_SEED.value)
  for name, count in counts.items():
    logging.info("wrote %s/%s (%d lines)", _OUTPUT_DIR.value, name, count)
  if _MODELS.value:
    work = _WORK_DIR.value or tempfile.mkdtemp(prefix="generate_testdata_")
    options = demo_pipeline.PipelineOptions(output_dir=work, testdata_dir=os.path.abspath(_OUTPUT_DIR.value))
    demo_pipeline.write_models(options, os.path.join(_OUTPUT_DIR.value, "models"), echo=logging.info)
    if not _WORK_DIR.value:
      shutil.rmtree(work)


if __name__ == "__main__":
  app.run(main)
