"""Keras models inside an exported tf.Module, held out of the SavedModel's object graph.

tf.saved_model.save writes every Keras model it reaches in Keras's own SavedModel form: it traces each
layer's call functions again (for keras.models.load_model), which took half the time of saving a
1-layer query tower and grows with the layers, and tf.saved_model.load restores all of them. No loader
of these exports calls them: clients call the module's own tf.function (`embed`, `answer`). An exported
module keeps its models behind `Untracked` and tracks the variables that function reads, which the
SavedModel must hold.
"""

from typing import List

import tensorflow as tf


class Untracked:
  """A plain reference to `model`: tf.Module tracks only trackable attributes, and this is not one."""

  def __init__(self, model):
    self.model = model

  def __call__(self, *args, **kwargs):
    return self.model(*args, **kwargs)


def variables_of(*models) -> List[tf.Variable]:
  """The variables of the models, each once (towers may share weights), in a stable order."""
  seen, out = set(), []
  for model in models:
    for variable in model.variables:
      if id(variable) not in seen:
        seen.add(id(variable))
        out.append(variable)
  return out
