"""pytest setup for the absltest/tf.test based tests (Bazel runs them through tf.test.main instead).

absltest reads flags such as --test_tmpdir, which only tf.test.main()/absltest.main() parse; under pytest
they are marked parsed with their defaults so that create_tempdir()/get_temp_dir() work.
"""

from absl import flags


def pytest_configure(config):
  del config
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
