"""Checks the import graph of realm_tf/, bin/ and bench/ against the declared layers (docs/architecture.md).

Every .py file is parsed (ast; nothing is imported, so the test takes a second or two) and each import of
a project module, wherever it stands in the file, is an arrow. The test fails on:
  - an import cycle between packages of realm_tf (a subpackage, or a module directly in realm_tf/);
  - an arrow from a lower layer to a higher one (LAYERS, below);
  - product code importing test scaffolding (TESTING: realm_tf.testing.test_paths, realm_tf.testing, ...);
  - realm_tf/ or bench/ importing bin/ (bin/ holds programs, which nothing imports; what several programs
    and benchmarks share lives in the package);
  - an import of a project module that does not exist (one that moved, imported from its old place);
  - a realm_tf module that no layer claims (a new package must be given its place here).
Product code is every module of realm_tf/ and bin/ that is not a test (*_test.py) and not a testing
module; bin/'s programs stand above every layer. Tests are leaves of the graph (nothing but other tests
imports them), so they may import across layers (a modeling test may run training's train step) without
creating a cycle the product can see; they may not import bin/ from realm_tf/ or bench/.

KNOWN_EXCEPTIONS lists the arrows still to be removed; an entry that no longer matches an arrow fails the
test, so the list only shrinks.
"""

import ast
import collections
import os
from typing import Dict, Iterable, List, Mapping, Optional, Set, Tuple

from absl.testing import absltest

_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_SCANNED = ("realm_tf", "bin", "bench")

# The layers of realm_tf, lowest first: a product module may import its own layer and the layers below
# it. Each entry names packages or modules (a name claims the modules under it; the longest name wins).
# Why this order (each layer imports only what is below it):
LAYERS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    # Text and files, no model: WordPiece tokenization and packing, atomic writes, JSON configs, locks.
    ("utilities",
     ("realm_tf.io_utils", "realm_tf.json_config", "realm_tf.process_lock", "realm_tf.process_start",
      "realm_tf.stopping", "realm_tf.traced_once", "realm_tf.tokenization", "realm_tf.featurization")),
    # Readers and writers of corpora and examples: they tokenize and pack (utilities).
    ("data", ("realm_tf.data",)),
    # Answer matching and scores; evaluation reads QA and FiD example files (data).
    ("metrics", ("realm_tf.evaluation", "realm_tf.answer_index")),
    # Keras models, their configs and the SavedModel modules that wrap a tower (query_embedder_module);
    # they take packed features (data) and never read weights from files.
    ("modeling", ("realm_tf.modeling",)),
    # The one place that reads weights (TF1/TF2 checkpoints, safetensors, releases) into the models, so
    # it is above modeling; fid_warm_start is the FiD reader's share of it.
    ("checkpoints", ("realm_tf.checkpoints",)),
    # MIPS indexes, corpus embedding, published and converted index directories and their refresh: they
    # restore towers (checkpoints) and embed with them (modeling). retriever_eval scores a retriever.
    ("retrieval", ("realm_tf.retrieval", "realm_tf.retriever_eval")),
    # bin/convert_checkpoint's job: released checkpoints into realm_tf checkpoints AND MIPS indexes, so it
    # is above retrieval (its index format) and checkpoints (the release readers).
    ("conversion", ("realm_tf.conversion",)),
    # What a training run leaves on disk and how to load it (an ORQA run's model, frozen index, best
    # checkpoint and evaluation; warm starts from checkpoints): it reads indexes and converted releases,
    # and export (which loads a run) and training (which writes one) are above it.
    ("runs", ("realm_tf.runs",)),
    # SavedModels of trained and converted runs, and the loader that clients import. Below training: an
    # export is made from the files a run wrote, and bin/answer and bin/serve load one without the
    # training stack (issue 39, item 4).
    ("export", ("realm_tf.export",)),
    # bin/serve: serves an export through export.loader.
    ("serving", ("realm_tf.serving",)),
    # The one training loop (orbit), its train step, strategies, optimizer and the Task interface.
    ("training", ("realm_tf.training",)),
    # The methods as Tasks on that loop: they use every layer below (models, checkpoints, indexes,
    # converted checkpoints, run artifacts), and nothing below may need them.
    ("tasks", ("realm_tf.tasks",)),
    # A run's options as one dataclass tree, read from a config file and the flags (issue 39, item 2):
    # it names the trainers' options, so it is above training.
    ("config", ("realm_tf.config",)),
    # bin/demo's driver: runs the binaries (as processes) in order, reading what they wrote.
    ("demo", ("realm_tf.demo_pipeline",)),
)

# Test scaffolding: tests, benchmarks and other testing modules import it; product code never does.
TESTING = ("realm_tf.testing", "realm_tf.run_test_group")

# Arrows against the rules (importer, imported) still in the code; each is exempt from every rule.
# Remove an entry when its arrow goes (the test fails on an entry that matches no arrow).
KNOWN_EXCEPTIONS: Mapping[Tuple[str, str], str] = {}


def _module_name(path: str) -> str:
  """realm_tf/modeling/bert.py -> realm_tf.modeling.bert; realm_tf/data/__init__.py -> realm_tf.data."""
  parts = os.path.splitext(os.path.relpath(path, _ROOT))[0].split(os.sep)
  if parts[-1] == "__init__":
    parts = parts[:-1]
  return ".".join(parts)


def _python_files(root: str) -> Dict[str, str]:
  """{module name: path} of every .py file under the scanned directories."""
  modules = {}
  for top in _SCANNED:
    for directory, subdirs, files in os.walk(os.path.join(root, top)):
      subdirs[:] = [d for d in subdirs if d != "__pycache__" and not d.startswith(".")]
      for name in files:
        if name.endswith(".py"):
          path = os.path.join(directory, name)
          modules[_module_name(path)] = path
  return modules


def _imported_modules(tree: ast.AST, module: str, is_package: bool, known: Set[str]) -> Set[str]:
  """The project modules `tree` imports: `from a import b` is module a.b when there is one, else a name
  in module a. A project name that is neither (a module moved or deleted) is kept, so that the arrow
  shows up as an import of a missing module."""
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative: from the importing module's package
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
      for alias in node.names:
        name = f"{base}.{alias.name}"
        out.add(name if name in known or base not in known else base)
  return {name for name in out if name.split(".")[0] in _SCANNED and name != module}


def import_graph(root: str = _ROOT) -> Dict[str, Set[str]]:
  """{module: the project modules it imports}, for every module under realm_tf/, bin/ and bench/."""
  files = _python_files(root)
  graph = {}
  for module, path in files.items():
    with open(path, encoding="utf-8") as f:
      tree = ast.parse(f.read(), path)
    graph[module] = _imported_modules(tree, module, path.endswith("__init__.py"), set(files))
  return graph


def _claim(module: str, names: Iterable[str]) -> Optional[str]:
  """The longest of names that is module or a package above it."""
  matches = [n for n in names if module == n or module.startswith(n + ".")]
  return max(matches, key=len) if matches else None


def layer_of(module: str) -> Optional[int]:
  best, best_layer = None, None
  for index, (_, names) in enumerate(LAYERS):
    claim = _claim(module, names)
    if claim and (best is None or len(claim) > len(best)):
      best, best_layer = claim, index
  return best_layer


def is_test(module: str) -> bool:
  return module.rsplit(".", 1)[-1].endswith("_test")


def is_testing(module: str) -> bool:
  return _claim(module, TESTING) is not None


def is_product(module: str) -> bool:
  """The library's modules and bin/'s programs, less tests and testing modules."""
  return (module.startswith(("realm_tf.", "bin.")) and not is_test(module) and not is_testing(module))


def package_of(module: str) -> str:
  """realm_tf.modeling.bert -> realm_tf.modeling; realm_tf.io_utils (a module in realm_tf/) -> itself."""
  parts = module.split(".")
  return ".".join(parts[:2])


def _cycles(edges: Mapping[str, Set[str]]) -> List[List[str]]:
  """The strongly connected components of more than one node (Tarjan), each sorted."""
  index, low, on_stack, stack, out = {}, {}, set(), [], []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for nxt in edges.get(node, ()):
      if nxt not in index:
        visit(nxt)
        low[node] = min(low[node], low[nxt])
      elif nxt in on_stack:
        low[node] = min(low[node], index[nxt])
    if low[node] == index[node]:
      component = []
      while True:
        top = stack.pop()
        on_stack.discard(top)
        component.append(top)
        if top == node:
          break
      if len(component) > 1:
        out.append(sorted(component))

  for node in sorted(edges):
    if node not in index:
      visit(node)
  return out


def problems(graph: Mapping[str, Set[str]],
             exceptions: Mapping[Tuple[str, str], str] = KNOWN_EXCEPTIONS) -> List[str]:
  """Every arrow of graph that breaks a rule of the module docstring, one line each."""
  found = []
  used_exceptions = set()
  package_edges: Dict[str, Set[str]] = collections.defaultdict(set)
  package_arrows: Dict[Tuple[str, str], List[str]] = collections.defaultdict(list)
  for module in sorted(graph):
    library = is_product(module) and module.startswith("realm_tf.")
    if library and layer_of(module) is None:
      found.append(f"{module}: in no layer of tools/import_graph_test.LAYERS; give it its place")
    for target in sorted(graph[module]):
      arrow = f"{module} -> {target}"
      if (module, target) in exceptions:
        used_exceptions.add((module, target))
        continue
      if module.startswith(("realm_tf", "bench")) and target.startswith("bin."):
        found.append(f"{arrow}: realm_tf/ and bench/ never import bin/ (move what is shared into the "
                     "package or realm_tf/testing/)")
      elif target not in graph:
        found.append(f"{arrow}: no such module (moved or deleted?)")
        continue
      if not is_product(module) or not target.startswith("realm_tf."):
        continue
      if is_testing(target):
        found.append(f"{arrow}: product code imports test scaffolding")
        continue
      if not library:  # bin/'s programs sit above every layer
        continue
      source_layer, target_layer = layer_of(module), layer_of(target)
      if source_layer is not None and target_layer is not None and target_layer > source_layer:
        found.append(f"{arrow}: layer {LAYERS[source_layer][0]} imports the higher layer "
                     f"{LAYERS[target_layer][0]}")
      source_package, target_package = package_of(module), package_of(target)
      if source_package != target_package:
        package_edges[source_package].add(target_package)
        package_arrows[(source_package, target_package)].append(arrow)
  for component in _cycles(package_edges):
    members = set(component)
    arrows = [
        a for (s, t), lines in sorted(package_arrows.items()) if s in members and t in members for a in lines
    ]
    found.append("import cycle between " + ", ".join(component) + ":\n    " + "\n    ".join(arrows))
  for stale in sorted(set(exceptions) - used_exceptions):
    found.append(f"{stale[0]} -> {stale[1]} is in KNOWN_EXCEPTIONS but the arrow is gone: remove the entry")
  return found


class ImportGraphTest(absltest.TestCase):

  def test_the_graph_is_read(self):
    graph = import_graph()
    self.assertGreater(len(graph), 100, "found too few modules; is the repo root right?")
    self.assertIn("realm_tf.modeling.bert", graph["realm_tf.modeling.embedder"])

  def test_every_arrow_follows_the_layers(self):
    found = problems(import_graph())
    if found:
      self.fail(f"{len(found)} import(s) against docs/architecture.md's layers:\n" + "\n".join(found))

  def test_the_checker_reports_what_it_must(self):
    graph = {
        "realm_tf.modeling.bert": {"realm_tf.io_utils"},
        "realm_tf.modeling.embedder": {"realm_tf.modeling.bert", "realm_tf.retrieval.index"},
        "realm_tf.retrieval.index": {"realm_tf.modeling.embedder"},
        "realm_tf.serving.server": {"realm_tf.testing.test_paths", "realm_tf.export.gone"},
        "realm_tf.serving.server_test": {"realm_tf.testing.test_paths", "realm_tf.demo_pipeline"},
        "realm_tf.newpackage.thing": set(),
        "bench.some_bench": {"bin.demo_pipeline"},
        "bin.serve": {"realm_tf.testing.test_paths", "realm_tf.serving.server"},
        "realm_tf.io_utils": set(),
        "realm_tf.testing.test_paths": set(),
        "realm_tf.demo_pipeline": set(),
    }
    found = problems(graph, {("realm_tf.modeling.bert", "realm_tf.data.qa"): "gone"})
    joined = "\n".join(found)
    self.assertIn(
        "realm_tf.modeling.embedder -> realm_tf.retrieval.index: layer modeling imports the "
        "higher layer retrieval", joined)
    self.assertIn("import cycle between realm_tf.modeling, realm_tf.retrieval", joined)
    self.assertIn(
        "realm_tf.serving.server -> realm_tf.testing.test_paths: product code imports test "
        "scaffolding", joined)
    self.assertIn("bench.some_bench -> bin.demo_pipeline: realm_tf/ and bench/ never import bin/", joined)
    self.assertIn("realm_tf.newpackage.thing: in no layer", joined)
    self.assertIn("bin.serve -> realm_tf.testing.test_paths: product code imports test scaffolding", joined)
    self.assertIn("realm_tf.modeling.bert -> realm_tf.data.qa is in KNOWN_EXCEPTIONS but the arrow is gone",
                  joined)
    self.assertIn("realm_tf.serving.server -> realm_tf.export.gone: no such module", joined)
    self.assertNotIn("server_test", joined)  # a test may import across layers and testing modules
    self.assertLen(found, 8, joined)


if __name__ == "__main__":
  absltest.main()
