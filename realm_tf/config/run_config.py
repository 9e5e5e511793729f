"""A run's options as one frozen dataclass tree: loaded from files, overridden, written, turned into flags.

Model Garden's convention (official/core/train_utils.ExperimentParser), for a tree of frozen dataclasses:

  1. the tree's defaults (the binary's: bin/train_realm trains 1,000 steps at batch 16 by default);
  2. each --config_file in order (YAML or JSON; any subset of the keys);
  3. the flags given on the command line (each option is also a flag, named by its last key);
  4. --params_override: a YAML/JSON string, `a.b=1,c.d=x`, or a YAML file.

A later layer wins. Every layer is checked against the tree before it is applied: an unknown key, a value
of the wrong type or out of range is a ConfigError naming the file (or flag), the key and what is allowed.
The resolved tree is written in full to MODEL_DIR/<binary>.yaml (save), and `--config_file=` that file
repeats or resumes the run.

What comes from Model Garden (official.modeling.hyperparams): its YAML loader (which reads 1e-5 as a
number, unlike plain YAML 1.1), its parser of --params_override (nested `a.b=1` CSV, YAML, JSON or a file)
and ParamsDict's strict merge of one layer over another. Its `Config` base class is not used: it keeps
options mutable and takes any type for any key, while this project's options are frozen dataclasses and a
config file's typo must fail; so the checks of keys, types and ranges are done here, with the file's name.
Its save_params_dict_to_yaml writes in place, so the file is written with realm_tf.io_utils' atomic writer.

A tree's leaves are declared with option() (default, help, choices, bounds); sections with section().
define_flags() turns every leaf into an absl flag of the same name: the options marked daily (model dir,
data, strategy) and --config_file / --params_override are the binary's key flags, listed by --help; the
rest are listed by --helpfull.
"""

import contextlib
import dataclasses
import functools
import os
import typing
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from absl import app
from absl import flags
from official.modeling.hyperparams import params_dict
import tensorflow as tf
import yaml

from realm_tf import io_utils

# Flags defined here belong to the binary that calls define_flags (the daily ones are its key flags);
# see realm_tf.config.trainer_flags, which does the same.
flags.disclaim_key_flags()

_HELP, _CHOICES, _LOWER, _UPPER, _REQUIRED, _DAILY = ("help", "choices", "lower_bound", "upper_bound",
                                                      "required", "daily")


class ConfigError(ValueError):
  """A configuration that cannot run: names the file or flag, the key and what is allowed."""


class ConfigWriteError(RuntimeError):
  """MODEL_DIR/<binary>.yaml could not be written (a full disk, a read-only MODEL_DIR): names the file."""


def option(default: Any,
           help_text: str,
           *,
           choices: Optional[Sequence[str]] = None,
           lower_bound: Optional[float] = None,
           upper_bound: Optional[float] = None,
           required: bool = False,
           daily: bool = False):
  """A leaf of a configuration tree.

  Args:
    default: its value when no layer sets it (None for a required option).
    help_text: what it means, for --help and the docs.
    choices: the allowed strings, if any.
    lower_bound, upper_bound: the smallest and largest allowed numbers, if any.
    required: the run cannot start while it is None (a path, the model dir).
    daily: one of the handful a user types daily; --help lists it.
  """
  return dataclasses.field(default=default,
                           metadata={
                               _HELP: help_text,
                               _CHOICES: tuple(choices) if choices else None,
                               _LOWER: lower_bound,
                               _UPPER: upper_bound,
                               _REQUIRED: required,
                               _DAILY: daily
                           })


def section(cls, **defaults):
  """A nested section of a tree; defaults: this tree's own defaults for some of its options."""
  return dataclasses.field(default_factory=functools.partial(cls, **defaults))


@dataclasses.dataclass(frozen=True)
class Leaf:
  """An option of a tree: its path of keys, its dataclass field (default and option() metadata), its
  type."""
  path: Tuple[str, ...]
  field: dataclasses.Field
  kind: type  # str, int, float, bool, or tuple (of int)
  optional: bool  # None is allowed while resolving (required ones are checked at the end)

  @property
  def key(self) -> str:
    return ".".join(self.path)

  @property
  def flag(self) -> str:
    return self.path[-1]


def _is_tree(kind) -> bool:
  return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _leaf_kind(annotation) -> Tuple[type, bool]:
  optional = False
  if typing.get_origin(annotation) is typing.Union:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional, annotation = True, args[0]
  if typing.get_origin(annotation) is tuple:
    return tuple, optional
  if annotation not in (str, int, float, bool):
    raise TypeError(f"a configuration option must be str, int, float, bool, a tuple of int or Optional "
                    f"of one, got {annotation}")
  return annotation, optional


@functools.lru_cache(maxsize=None)
def _hints(cls) -> Dict[str, Any]:
  return typing.get_type_hints(cls)


def _children(cls) -> Iterator[Tuple[dataclasses.Field, Any]]:
  hints = _hints(cls)
  for f in dataclasses.fields(cls):
    yield f, hints[f.name]


def leaves(cls, prefix: Tuple[str, ...] = ()) -> List[Leaf]:
  """Every option of a tree, depth first; option names (the flags) are unique within a tree."""
  found = []
  for f, kind in _children(cls):
    if _is_tree(kind):
      found += leaves(kind, prefix + (f.name,))
    else:
      found.append(Leaf(prefix + (f.name,), f, *_leaf_kind(kind)))
  if not prefix:
    names = [leaf.flag for leaf in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
      raise TypeError(f"{cls.__name__}: option names must be unique in a tree (they are its flags): {twice}")
  return found


def to_dict(tree) -> Dict[str, Any]:
  """The tree as nested dicts of plain values (tuples as lists), as written to a file."""
  values = {}
  for f in dataclasses.fields(tree):
    value = getattr(tree, f.name)
    if dataclasses.is_dataclass(value):
      value = to_dict(value)
    elif isinstance(value, tuple):
      value = list(value)
    values[f.name] = value
  return values


def _describe(leaf: Leaf) -> str:
  meta = leaf.field.metadata
  if meta[_CHOICES]:
    allowed = "one of " + ", ".join(meta[_CHOICES])
  elif leaf.kind is tuple:
    allowed = "a list of integers"
  else:
    allowed = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}[leaf.kind]
    if meta[_LOWER] is not None:
      allowed += f" >= {meta[_LOWER]}"
    if meta[_UPPER] is not None:
      allowed += f"{',' if meta[_LOWER] is not None else ''} <= {meta[_UPPER]}"
  return allowed + (" or null" if leaf.optional else "")


def _checked_value(leaf: Leaf, value: Any, where: str) -> Any:
  """value as the leaf's type (an integer where a number is allowed becomes a float, a list of integers a
  tuple), if the leaf allows it; ConfigError otherwise."""

  def fail(problem: str = "is not"):
    raise ConfigError(f"{where}: {value!r} {problem} allowed: {_describe(leaf)}")

  if value is None:
    if not leaf.optional:
      fail()
    return None
  kind = leaf.kind
  if kind is bool:
    if not isinstance(value, bool):
      fail()
  elif kind is int:
    if isinstance(value, bool) or not isinstance(value, int):
      fail()
  elif kind is float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      fail()
    value = float(value)
  elif kind is str:
    if not isinstance(value, str):
      fail()
  elif kind is tuple:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value):
      fail()
    value = tuple(value)
  meta = leaf.field.metadata
  if meta[_CHOICES] and value not in meta[_CHOICES]:
    fail()
  if (meta[_LOWER] is not None and value < meta[_LOWER]) or (meta[_UPPER] is not None and
                                                             value > meta[_UPPER]):
    fail("is out of range;")
  return value


def check_layer(cls, values: Any, source: str, prefix: Tuple[str, ...] = ()) -> Dict[str, Any]:
  """One layer (a file's contents, an override) checked against the tree: returns it with its values
  converted to the options' types; ConfigError names the source, the key and what is allowed."""
  where = ".".join(prefix) or "the top level"
  if not isinstance(values, dict):
    raise ConfigError(f"{source}: {where} must be a mapping of keys to values, got {values!r}")
  children = dict((f.name, (f, kind)) for f, kind in _children(cls))
  checked = {}
  for key, value in values.items():
    if key not in children:
      dotted = ".".join(prefix + (str(key),))
      raise ConfigError(f"{source}: unknown key {dotted!r}; the keys of {where} are: "
                        f"{', '.join(children)}")
    f, kind = children[key]
    if _is_tree(kind):
      checked[key] = check_layer(kind, value, source, prefix + (key,))
    else:
      leaf = Leaf(prefix + (key,), f, *_leaf_kind(kind))
      checked[key] = _checked_value(leaf, value, f"{source}: {leaf.key}")
  return checked


def _build(cls, values: Dict[str, Any]):
  return cls(**{
      f.name: _build(kind, values[f.name]) if _is_tree(kind) else values[f.name] for f, kind in _children(cls)
  })


def _nested(flat: Dict[Tuple[str, ...], Any]) -> Dict[str, Any]:
  nested: Dict[str, Any] = {}
  for path, value in flat.items():
    node = nested
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = value
  return nested


def read_file(path: str) -> Any:
  """A YAML or JSON file's contents (Model Garden's YAML loader); ConfigError names the file."""
  if not tf.io.gfile.exists(path):
    raise ConfigError(f"--config_file={path}: no such file")
  try:
    return params_dict.read_yaml_to_params_dict(path).as_dict()
  except yaml.YAMLError as e:
    raise ConfigError(f"{path}: not YAML or JSON: {e}") from None
  except (TypeError, ValueError, AttributeError):
    # ParamsDict takes only a mapping at the top: a list or a bare value is not a configuration.
    raise ConfigError(f"{path}: must be a mapping of keys to values (a YAML or JSON object)") from None


def parse_override(text: str) -> Any:
  """--params_override as Model Garden reads it: `a.b=1,c=x`, a YAML/JSON string, or a YAML file."""
  try:
    return params_dict.override_params_dict(params_dict.ParamsDict(), text, is_strict=False).as_dict()
  except (yaml.YAMLError, ValueError, TypeError, KeyError, tf.errors.OpError) as e:
    raise ConfigError(f"--params_override={text!r}: neither key=value pairs (a.b=1,c=x), YAML, JSON nor "
                      f"a YAML file ({e})") from None


def resolve(cls,
            config_files: Sequence[str] = (),
            flags_given: Optional[Dict[str, Any]] = None,
            params_override: Optional[str] = None):
  """The tree of cls from its defaults, config_files, flags_given ({option name: value}, the flags
  given on the command line) and params_override, each later layer over the earlier ones (module
  docstring). Raises ConfigError naming the source and the key."""
  layers: List[Dict[str, Any]] = [check_layer(cls, read_file(path), path) for path in config_files]
  if flags_given:
    by_flag = {leaf.flag: leaf for leaf in leaves(cls)}
    flat = {}
    for name, value in flags_given.items():
      leaf = by_flag[name]
      if leaf.kind is tuple and value is not None:  # a list flag's values are strings
        try:
          value = [int(v) for v in value]
        except ValueError:
          raise ConfigError(f"--{name}={','.join(value)}: allowed: {_describe(leaf)}") from None
      flat[leaf.path] = _checked_value(leaf, value, f"--{name}")
    layers.append(_nested(flat))
  if params_override:
    layers.append(check_layer(cls, parse_override(params_override), "--params_override"))
  merged = params_dict.ParamsDict(to_dict(cls()))
  for layer in layers:
    merged.override(layer, is_strict=True)
  values = merged.as_dict()
  missing = [
      leaf for leaf in leaves(cls) if leaf.field.metadata[_REQUIRED] and _get(values, leaf.path) is None
  ]
  if missing:
    raise ConfigError("no value for " + ", ".join(f"{leaf.key} (--{leaf.flag})" for leaf in missing) +
                      ": set it in a --config_file or --params_override, or pass the flag")
  return _build(cls, check_layer(cls, values, "the resolved configuration"))


def _get(values: Dict[str, Any], path: Tuple[str, ...]) -> Any:
  for key in path:
    values = values[key]
  return values


def file_name(binary: str) -> str:
  return f"{binary}.yaml"


def save(tree, model_dir: str, binary: str) -> str:
  """Writes the tree in full, atomically, as MODEL_DIR/<binary>.yaml; returns the path."""
  tf.io.gfile.makedirs(model_dir)
  path = os.path.join(model_dir, file_name(binary))
  header = (f"# bin/{binary}'s configuration, written when the run started. Resume or repeat the run "
            f"with:\n#   bin/{binary}.py --config_file={path}\n")
  try:
    with io_utils.atomic_write(path) as f:
      f.write(header + yaml.safe_dump(to_dict(tree), sort_keys=False, default_flow_style=False))
  except (tf.errors.OpError, OSError) as e:
    # Found by bench/fault_soak's ENOSPC (--disk_full_mode=tmpfs): a restart on a full disk ended in
    # TensorFlow's ResourceExhaustedError, 30 lines of traceback naming no option; this names the file.
    raise ConfigWriteError(f"cannot write bin/{binary}'s configuration {path}: {str(e).splitlines()[0]}; "
                           f"free space in (or make writable) {model_dir} and start bin/{binary} "
                           "again") from e
  return path


def changed_keys(old: Dict[str, Any], new: Dict[str, Any], prefix: str = "") -> List[str]:
  """`key: old -> new` for each option whose value differs between two trees' dicts (to_dict)."""
  changes = []
  for key in dict.fromkeys([*old, *new]):
    a, b = old.get(key), new.get(key)
    if isinstance(a, dict) or isinstance(b, dict):
      changes += changed_keys(a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {},
                              f"{prefix}{key}.")
    elif a != b:
      changes.append(f"{prefix}{key} {a!r} -> {b!r}")
  return changes


def latest_checkpoint(model_dir: str) -> Optional[str]:
  """A trainer's progress, for saved_for_the_run: its newest checkpoint."""
  return tf.train.latest_checkpoint(model_dir)


@contextlib.contextmanager
def saved_for_the_run(tree,
                      model_dir: str,
                      binary: str,
                      log: Callable[[str], None],
                      progress: Callable[[str], Any] = latest_checkpoint):
  """save() for the body of a run; undone when the run fails before it made progress(model_dir) change
  (a trainer's newest checkpoint; the refresher's published indexes).

  A trainer refuses some runs only once it looks at MODEL_DIR (another vocab than the corpus's, another
  model than the saved realm_config.json, another batch size than train_state.json) or at its options
  (an index interval that is not a multiple of the checkpoint interval). Such a refused run leaves
  MODEL_DIR as it found it: the file it replaced is put back (or removed, with MODEL_DIR when the run
  created it and nothing else was written there), so that the file keeps describing the configuration the
  checkpoints were made with, and resuming from it works. A run that fails after it made progress
  (preempted, a non-finite loss) keeps the new file: its newest checkpoint was trained with it.
  """
  path = os.path.join(model_dir, file_name(binary))
  created_dir = not tf.io.gfile.isdir(model_dir)
  previous = None
  if tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as f:
      previous = f.read()
  save(tree, model_dir, binary)
  before = progress(model_dir)  # after save: MODEL_DIR exists, and the file is no progress
  log(f"configuration written to {path}")
  if previous is not None:
    changes = changed_keys(yaml.safe_load(previous) or {}, to_dict(tree))
    if changes:
      log(f"changed since the run's last start: {'; '.join(changes)}")
  try:
    yield path
  except BaseException:
    if tf.io.gfile.isdir(model_dir) and progress(model_dir) == before:
      if previous is not None:
        with io_utils.atomic_write(path) as f:
          f.write(previous)
      else:
        tf.io.gfile.remove(path)
        if created_dir and not tf.io.gfile.listdir(model_dir):
          tf.io.gfile.rmtree(model_dir)
    raise


@dataclasses.dataclass(frozen=True)
class ConfigFlags:
  """The flags of a tree (define_flags); resolve() after absl parsed the command line."""
  cls: type
  config_file: flags.FlagHolder
  params_override: flags.FlagHolder
  flag_values: flags.FlagValues

  def given(self) -> Dict[str, Any]:
    """{option name: value} of the option flags given on the command line."""
    return {
        leaf.flag: self.flag_values[leaf.flag].value
        for leaf in leaves(self.cls)
        if self.flag_values[leaf.flag].present
    }

  def resolve(self):
    """The run's tree (module docstring's layers); a ConfigError becomes a usage error."""
    try:
      return resolve(self.cls, self.config_file.value or (), self.given(), self.params_override.value)
    except ConfigError as e:
      raise app.UsageError(str(e)) from None


def define_flags(cls, flag_values: flags.FlagValues = flags.FLAGS) -> ConfigFlags:
  """--config_file, --params_override and one flag per option of the tree cls, with the tree's defaults.

  The daily options and the two config flags are the calling binary's key flags (--help); the others
  are registered as cls's module's (--helpfull lists them under it).
  """
  config_file = flags.DEFINE_multi_string(
      "config_file",
      None,
      "YAML or JSON file of options (any subset of the keys in MODEL_DIR/<this binary>.yaml, which every "
      "run writes); repeatable, later files win. Then the flags given, then --params_override.",
      flag_values=flag_values)
  params_override = flags.DEFINE_string(
      "params_override",
      None, "Options over --config_file and the flags: key=value pairs with dotted keys "
      "(train.batch_size=8,index.bootstrap_index=true), a YAML/JSON string, or a YAML file.",
      flag_values=flag_values)
  defaults = to_dict(cls())
  for leaf in leaves(cls):
    meta = leaf.field.metadata
    default = _get(defaults, leaf.path)
    help_text = f"{meta[_HELP]} [{leaf.key}]"
    module = {} if meta[_DAILY] else {"module_name": cls.__module__}
    kwargs = dict(flag_values=flag_values, **module)
    if meta[_CHOICES]:
      flags.DEFINE_enum(leaf.flag, default, list(meta[_CHOICES]), help_text, **kwargs)
    elif leaf.kind is tuple:
      flags.DEFINE_list(leaf.flag, [str(v) for v in default], help_text, **kwargs)
    else:
      define: Callable = {
          str: flags.DEFINE_string,
          int: flags.DEFINE_integer,
          float: flags.DEFINE_float,
          bool: flags.DEFINE_bool
      }[leaf.kind]
      define(leaf.flag, default, help_text, **kwargs)
  return ConfigFlags(cls, config_file, params_override, flag_values)
