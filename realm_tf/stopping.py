"""The error that ends a wait because its process is stopping.

A trainer's input pipeline waits (for a published index, realm_tf.retrieval.published_index) in a layer
below the training loop that decides what a stop means (realm_tf.training.preemption, loop): both name
this one type, so it lives below them (tools/import_graph_test's layers).
"""


class InputStopped(RuntimeError):
  """An input pipeline's wait (REALM's wait for an index) ended because the trainer is stopping: the loop
  turns it into Preempted when SIGTERM asked for the stop."""
