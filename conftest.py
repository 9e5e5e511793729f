"""pytest setup for the absltest/tf.test based tests (Bazel runs them through tf.test.main instead).

absltest reads flags such as --test_tmpdir, which only tf.test.main()/absltest.main() parse; under pytest
they are marked parsed with their defaults so that create_tempdir()/get_temp_dir() work.
"""

import os

from absl import flags

# As .bazelrc's test --test_env: XLA's LLVM back end at -O0 (the same values, compiled about 3x faster),
# set before TensorFlow first compiles; an XLA_FLAGS from outside wins.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
# As bin/test: the public data sets' mirror beside the checkout, which the data tests read and skip
# without (realm_tf/testing/test_paths.py); a REALM_TF_SHARED_DATA from outside wins.
os.environ.setdefault(
    "REALM_TF_SHARED_DATA",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shared", "data"))


def pytest_configure(config):
  del config
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
