"""Running tf.functions eagerly inside a test, where tracing would cost more than the run."""

import contextlib
import functools
from typing import Callable

import tensorflow as tf


@contextlib.contextmanager
def functions_run_eagerly():
  """Inside, every tf.function (training steps, decoding, scores) runs its Python eagerly: no tracing.

  Tracing a training step costs several CPU seconds even on the tests' tiny models, one eager step a
  fraction of a second. For a run of a path that the same test traced already (or whose checks do not
  depend on graph execution), e.g. a restart or a second round; XLA (jit_compile) does not apply inside.
  """
  previous = tf.config.functions_run_eagerly()
  tf.config.run_functions_eagerly(True)
  try:
    yield
  finally:
    tf.config.run_functions_eagerly(previous)


def eagerly(function: Callable) -> Callable:
  """function, run inside functions_run_eagerly() (for mock.patch.object of one phase of a run)."""

  @functools.wraps(function)
  def wrapper(*args, **kwargs):
    with functions_run_eagerly():
      return function(*args, **kwargs)

  return wrapper
