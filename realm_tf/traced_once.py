"""tf.functions traced once per process for each value of what they compute.

Featurizing (the tokenizer, tensorflow_text's trimmer and combiner) traces thousands of ops, seconds of
CPU, and a process builds input pipelines more than once: the refresher one per refresh, a trainer's
restart in-process, the in-step path beside the host path, the benches and tests. A tf.data map that
calls a traced tf.function records a call to it instead of tracing its ops again. The cache is keyed by
what the ops compute (a vocabulary's tokens, casing, lengths, special ids), not by the objects: another
Tokenizer or Featurizer of the same settings builds the same graph, so it gets the same function.
"""

import threading
from typing import Callable, Dict

_FUNCTIONS: Dict[tuple, Callable] = {}
_LOCK = threading.Lock()


def function(key: tuple, build: Callable[[], Callable]) -> Callable:
  """The function cached under key, built by build() the first time (under a lock: pipelines are built
  from several threads). key must hold everything the built function's ops depend on."""
  with _LOCK:
    if key not in _FUNCTIONS:
      _FUNCTIONS[key] = build()
    return _FUNCTIONS[key]
