r"""How long deleting a tf.data iterator takes, with tf.data's autotuning on (its default) and off.

  .venv/bin/python bench/iterator_deletion_bench.py                   # 25 tries of each, 12 s read each
  .venv/bin/python bench/iterator_deletion_bench.py --tries=5 --seconds_read=6

Why: bin/train_realm sat up to 108 s between its last step and its done marker, in the destructor of its
input iterator (docs/reliability.md, "Bugs these tests found"). An autotuned iterator's model thread
waits between tunings for a period that doubles up to 60 s, and TensorFlow 2.20 can wake it for the
cancellation before the cancellation is marked, so it sleeps out its period while the destructor waits.
realm_tf.data.untuned turns autotuning off. This reads the same small pipeline (a py_function per element,
as REALM's retrieval is one) for --seconds_read, deletes its iterator and times the deletion, alternating
the two settings so that both see the same machine. A lost wake-up costs the rest of the period the
iterator was in (after 12 s of reading, periods of 10.24 s: up to 8.5 s). Prints a table and writes
--output (JSON: every deletion's seconds, the command, the machine and its load).
"""

import os
import sys
import time

from absl import app
from absl import flags
import tensorflow as tf

from bench import throughput_lib
from realm_tf import io_utils
from realm_tf.data import untuned

_TRIES = flags.DEFINE_integer("tries", 25, "Iterators deleted with each setting.")
_SECONDS_READ = flags.DEFINE_float("seconds_read", 12.0,
                                   "How long each iterator is read before its deletion.")
_STALL = flags.DEFINE_float("stall_seconds", 1.0, "A deletion longer than this counts as a stall.")
_OUTPUT = flags.DEFINE_string(
    "output",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "iterator_deletion_bench.json"),
    "JSON output path.")

_SETTINGS = ("autotuned", "untuned")


def _element(x):
  time.sleep(0.002)
  return x


def _pipeline(setting: str) -> tf.data.Dataset:
  dataset = tf.data.Dataset.range(10**9).map(lambda x: tf.py_function(_element, [x], tf.int64))
  dataset = dataset.batch(4).prefetch(2)
  return untuned.untuned(dataset) if setting == "untuned" else dataset


def deletion_seconds(setting: str, seconds_read: float) -> float:
  """Reads a new iterator of the setting's pipeline for seconds_read, then times its deletion."""
  iterator = iter(_pipeline(setting))
  start = time.time()
  while time.time() - start < seconds_read:
    next(iterator)
  start = time.time()
  del iterator
  return time.time() - start


def main(argv):
  del argv
  machine = throughput_lib.machine()
  seconds = {setting: [] for setting in _SETTINGS}
  for i in range(_TRIES.value):
    for setting in _SETTINGS:
      seconds[setting].append(deletion_seconds(setting, _SECONDS_READ.value))
      print(f"try {i + 1}/{_TRIES.value} {setting}: deleted in {seconds[setting][-1]:.3f} s", flush=True)
  rows = [{
      "setting": setting,
      "tries": len(seconds[setting]),
      "stalls": sum(s > _STALL.value for s in seconds[setting]),
      "longest_seconds": max(seconds[setting]),
      "deletion_seconds": seconds[setting],
  } for setting in _SETTINGS]
  print(f"\n{'setting':10s} {'tries':>6s} {'stalls > ' + str(_STALL.value) + ' s':>14s} {'longest':>9s}")
  for row in rows:
    print(f"{row['setting']:10s} {row['tries']:6d} {row['stalls']:14d} {row['longest_seconds']:8.2f}s")
  machine["load_average_at_end"] = throughput_lib.load_average()
  io_utils.write_json_atomic(
      _OUTPUT.value, {
          "benchmark": "iterator_deletion_bench",
          "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
          "machine": machine,
          "seconds_read": _SECONDS_READ.value,
          "stall_seconds": _STALL.value,
          "results": rows,
      })
  print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
