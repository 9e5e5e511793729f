r"""Writes realm_tf's testdata/ (tiny vocab, synthetic corpus, pre-training sentences, QA), byte for byte.

  python bin/generate_testdata.py --output_dir=testdata
"""

from absl import app
from absl import flags
from absl import logging

from realm_tf.data import synthetic

_OUTPUT_DIR = flags.DEFINE_string("output_dir", "testdata", "Directory to write the files into.")
_SEED = flags.DEFINE_integer("seed", 20200812, "Random seed of the synthetic world.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  counts = synthetic.write_testdata(_OUTPUT_DIR.value, seed=_SEED.value)
  for name, count in counts.items():
    logging.info("wrote %s/%s (%d lines)", _OUTPUT_DIR.value, name, count)


if __name__ == "__main__":
  app.run(main)
