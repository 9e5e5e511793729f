"""A training method as the loop sees it (realm_tf.training.loop.train), and the registry of them by name.

In the spirit of Model Garden's base_task and task_factory: a Task states once what differs between the
methods (the model, its optimizer, the batches, the warm start, the evaluation, the host's hook between
loops), and the one loop does the rest (checkpoints, resumption, summaries, the non-finite stop,
SIGTERM). The loss and the metrics are the model's compute_loss (train_lib.TrainStep calls it), so a Task
has no build_losses or train_step of its own.

A Task is made for one run: it keeps what its hooks share (REALM's retrieval state, ORQA's evaluator, the
model it built), and the trainer module that defines it reads them after loop.train returns.

  @task.register("toy")
  class ToyTask(task.Task):
    ...
  loop.train(task.get_task("toy", options, log=print), loop_options, strategy)
"""

import abc
from typing import Callable, Dict, Optional, Type

import orbit
import tensorflow as tf


class Task(abc.ABC):
  """One training method: what loop.train builds, feeds and calls.

  The loop calls, in order: build_model and create_optimizer under strategy.scope(); build_evaluator;
  initialize when the model dir holds no checkpoint yet (else it restores the newest one); build_inputs
  with the number of batches already consumed; after_step between loops; stop_input when training ends
  or fails.

  Attributes:
    eval_every_steps: evaluate every this many steps (and at the end) when build_evaluator returns one;
      a multiple of the loop's steps_per_loop.
    eval_name: the evaluator's output is written to MODEL_DIR/<eval_name>.
  """
  eval_every_steps: Optional[int] = None
  eval_name: str = "eval"

  @abc.abstractmethod
  def build_model(self):
    """The model, with compute_loss and its variables created (a checkpoint restores into them)."""

  @abc.abstractmethod
  def create_optimizer(self):
    """The optimizer; its `iterations` is the global step."""

  @abc.abstractmethod
  def build_inputs(self, batches_done: int) -> tf.data.Dataset:
    """The global batches from the one after the batches_done already trained on, so a resumed run
    continues the data stream of an uninterrupted one."""

  def initialize(self, model) -> None:
    """The warm start of a model dir without a checkpoint (nothing by default: the initialization)."""
    del model

  def build_evaluator(self, model, optimizer,
                      strategy: tf.distribute.Strategy) -> Optional[orbit.AbstractEvaluator]:
    """The evaluator the controller runs every eval_every_steps, or None."""
    del model, optimizer, strategy
    return None

  def step_features(self, features: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Graph ops that complete each replica's batch inside the train step, before the loss (REALM's
    in-step retrieval: the candidates of the queries build_inputs yields). The batch as it is by
    default; a Task that overrides it is fed batches the model cannot read without it."""
    return features

  def after_step(self, step: int, metrics: Dict[str, float]) -> Dict[str, float]:
    """Called on the host after every loop with the loop's mean metrics; returns extra scalars to log."""
    del step, metrics
    return {}

  def stop_input(self) -> None:
    """Ends every wait inside the input pipeline for good (REALM's wait for a fresher index)."""


_REGISTRY: Dict[str, Type[Task]] = {}


def register(name: str) -> Callable[[Type[Task]], Type[Task]]:
  """Class decorator: makes the Task class available as get_task(name, ...)."""

  def add(cls: Type[Task]) -> Type[Task]:
    if name in _REGISTRY and _REGISTRY[name] is not cls:
      raise ValueError(f"task {name!r} is registered twice: {_REGISTRY[name].__qualname__} and "
                       f"{cls.__qualname__}")
    _REGISTRY[name] = cls
    return cls

  return add


def registered() -> Dict[str, Type[Task]]:
  """Every registered task class by name (those of the modules imported so far)."""
  return dict(_REGISTRY)


def get_task(name: str, *args, **kwargs) -> Task:
  """The task registered as `name`, made with the given arguments (its options, log, ...)."""
  try:
    cls = _REGISTRY[name]
  except KeyError:
    raise ValueError(f"no task {name!r}; registered: {', '.join(sorted(_REGISTRY)) or 'none'} (a task "
                     "registers when its module is imported)") from None
  return cls(*args, **kwargs)
