"""Checks README.md and docs/ for paths outside the repository and for flags that no program defines.

A user copies the commands of the README and the guides as they are written, so each finding names
FILE:LINE:

  - a path outside the repository: `../shared/...`, or an absolute path under /work, /home or /tmp/fc
    (the development machine's folders, which a clone does not have);
  - a link or a section reference that leads nowhere: a Markdown link to a file the repository does not
    have (or to a heading that file lacks, `#anchor`), or a reference to a section by its title,
    `docs/results.md ("Scale-out estimate")` or `(README, "Status")`, when no heading of that file
    starts with the title;
  - a `--flag` (or `--noflag`) in a fenced code block or an inline code span that the program it is
    passed to does not define (`bin/train_realm.py --index=...`), or, where no program of the project
    runs it (a flag named alone in prose), that no bin/, bench/ or tools/ program defines. `--noname`
    needs a boolean `name`.

Flags are collected statically, without importing anything, so the test takes a fraction of a second:
every `flags.DEFINE_<kind>("name", ...` of a program, of the shared helpers of
realm_tf/config/trainer_flags.py it calls (`trainer_flags.define_trainer_flags(...)` and the helpers
those call), and of the project's modules it imports (bench/minilm_lib.py); the options of a
configuration tree it imports (`name: type = option(...`, realm_tf/config/); the `add_argument("--name"`
of the argparse scripts; and the options bin/demo (bin/run_demo.py's flags) and bin/test (`"--quick"`;
the rest are Bazel's) handle themselves.

Not checked: the flags of other programs' commands (a command that starts with bazel, pip, git, apt-get,
curl, docker, saved_model_cli, gsutil, ...; and a few of those tools' flags named alone in inline code),
and the flags of what is marked as history by the line `<!-- docs_test: historical -->` right above it:
a fenced block (a benchmark's command kept as it was run at an older commit), or a heading and its
section. Paths are checked everywhere. docs/experiments/ (history) is not read.
"""

import glob
import os
import re
from typing import Dict, Iterable, List, Optional, Set, Tuple

from absl.testing import absltest

_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_PROGRAM_DIRS = ("bin", "bench", "tools")
_TRAINER_FLAGS = "realm_tf/config/trainer_flags.py"
# History, not instructions: docs/experiments/benchmarks_notebook.md keeps benchmark commands as they were
# run, with flags since retired. Links and section references into it are still checked.
_SKIPPED_DOC_DIRS = ("docs/experiments/",)
HISTORICAL_MARKER = "<!-- docs_test: historical -->"

Flags = Dict[str, Set[str]]  # flag name -> its kinds ("bool", "string", ..., "argparse")

# flags.DEFINE_integer("name", ...) and flags.DEFINE_string(\n    "name", ...): the name is the first
# argument, a string literal, in every definition of this project.
_DEFINE = re.compile(r"\bDEFINE_([a-z_]+)\(\s*\"([A-Za-z0-9_]+)\"")
_ARGPARSE = re.compile(r"\badd_argument\(\s*\"--([A-Za-z0-9_-]+)\"")
# An option of a configuration tree (realm_tf/config/), `name: type = option(`: a flag of the binary whose
# tree has it (realm_tf.config.run_config.define_flags generates one per option).
_OPTION = re.compile(r"^\s+(\w+): ([^=\n]+?) = option\(", re.MULTILINE)
_HELPER_DEF = re.compile(r"^def (define_\w+)\(", re.MULTILINE)
_HELPER_CALL = re.compile(r"\b(define_\w+)\(")
# from bench import minilm_lib, x / import bench.minilm_lib / from realm_tf.data import corpus /
# import demo_pipeline (a sibling of bin/run_demo.py).
_IMPORT = re.compile(r"^\s*(?:from ([\w.]+) import ([\w, ]+)|import ([\w.]+))", re.MULTILINE)
# bin/test handles --quick itself and hands every other option to `bazel test`.
_BIN_TEST_OPTIONS = {"quick": {"bool"}}
# The shell scripts' own options (they parse them by hand): script -> its options.
_SCRIPT_OPTIONS = {"bin/test": _BIN_TEST_OPTIONS, "tools/format.sh": {"check": {"bool"}}}

# absl's own flags, which every binary takes.
_ABSL_FLAGS = frozenset({
    "help",
    "helpshort",
    "helpfull",
    "helpxml",
    "flagfile",
    "undefok",
    "logtostderr",
    "alsologtostderr",
    "stderrthreshold",
    "log_dir",
    "v",
    "verbosity",
    "vmodule",
    "logger_levels",
    "showprefixforinfo",
    "only_check_args",
    "run_with_pdb",
    "pdb_post_mortem",
    "run_with_profiling",
    "profile_file",
    "use_cprofile_for_profiling",
    "test_srcdir",
    "test_tmpdir",
})

# A command run by one of these programs is another tool's: its flags are not realm_tf's.
_OTHER_PROGRAMS = frozenset({
    "bazel",
    "pip",
    "pip3",
    "git",
    "apt-get",
    "apt",
    "curl",
    "wget",
    "docker",
    "saved_model_cli",
    "gsutil",
    "gcloud",
    "tensorboard",
    "pytest",
    "tar",
    "unzip",
    "mkdir",
    "cp",
    "rm",
    "ls",
    "du",
    "kill",
    "nvidia-smi",
    "sha256sum",
    "echo",
    "cat",
    "ssh",
    "scp",
    "rsync",
})
# Other tools' flags named without their program in inline code, or passed through bin/test to
# `bazel test`; each a real option of the tool in the comment.
_OTHER_TOOLS_FLAGS = frozenset({
    # bazel test
    "test_size_filters",
    "nocache_test_results",
    "cache_test_results",
    "test_output",
    "test_env",
    "override_repository",
    "extra_toolchains",
    "build_event_json_file",
    "local_test_jobs",
    "jobs",
    "test_timeout",
    "nofetch",
    "python_path",
    "nolegacy_external_runfiles",
    "incompatible_default_to_explicit_init_py",
    "test_filter",
    "runs_per_test",
    # XLA_FLAGS
    "xla_backend_optimization_level",
    # saved_model_cli run
    "dir",
    "tag_set",
    "signature_def",
    "input_exprs",
})
_UNCHECKED_LANGUAGES = frozenset({"python", "py", "json", "jsonl", "text", "txt", "starlark"})
# What runs a program: stripped off the front of a command to find the program itself.
_RUNNERS = frozenset({"sudo", "nice", "time", "env", "exec", "timeout", "nohup"})
_PYTHONS = re.compile(r"^(\S*/)?python3?(\.\d+)?$|^\"?\$\{?(P|PYTHON)\}?\"?$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_FLAG = re.compile(r"(?<![\w-])--([A-Za-z][A-Za-z0-9_-]*)")
# Paths of the development machine, not of a clone.
_OUTSIDE_PATH = re.compile(r"\.\./shared\b|(?<![\w./:~-])/(?:work|home)(?=/|\b)|(?<![\w./:~-])/tmp/fc\b")


def _read(path: str) -> str:
  with open(path, encoding="utf-8") as f:
    return f.read()


def _own_flags(source: str) -> Flags:
  defined: Flags = {}
  for kind, name in _DEFINE.findall(source):
    defined.setdefault(name, set()).add("bool" if kind in ("bool", "boolean") else kind)
  for name in _ARGPARSE.findall(source):
    defined.setdefault(name, set()).add("argparse")
  for name, annotation in _OPTION.findall(source):
    defined.setdefault(name, set()).add("bool" if annotation == "bool" else "option")
  return defined


def _merge(into: Flags, other: Flags) -> Flags:
  for name, kinds in other.items():
    into.setdefault(name, set()).update(kinds)
  return into


class FlagIndex:
  """The flags each program of the project defines, found by reading the sources."""

  def __init__(self, root: str = _ROOT):
    self.root = root
    self._helpers = self._helper_flags()
    self._programs: Dict[str, Flags] = {}
    self.all_flags: Flags = {}
    for top in _PROGRAM_DIRS:
      for path in sorted(glob.glob(os.path.join(root, top, "*.py"))):
        _merge(self.all_flags, self.flags_of(os.path.relpath(path, root)))
    for options in _SCRIPT_OPTIONS.values():
      _merge(self.all_flags, options)

  def _helper_flags(self) -> Flags:
    """{helper name: its flags} for trainer_flags' define_* helpers, with the helpers they call."""
    source = _read(os.path.join(self.root, _TRAINER_FLAGS))
    starts = [(m.start(), m.group(1)) for m in _HELPER_DEF.finditer(source)] + [(len(source), "")]
    bodies = {name: source[start:end] for (start, name), (end, _) in zip(starts, starts[1:])}
    resolved: Dict[str, Flags] = {}

    def resolve(name: str, seen: Tuple[str, ...] = ()) -> Flags:
      if name not in resolved:
        body = bodies.get(name, "")
        flags = _own_flags(body)
        for called in _HELPER_CALL.findall(body.split("\n", 1)[-1]):
          if called in bodies and called not in seen + (name,):
            _merge(flags, resolve(called, seen + (name,)))
        resolved[name] = flags
      return resolved[name]

    return {name: resolve(name) for name in bodies}

  def _imported_files(self, program: str, source: str) -> List[str]:
    """The project's Python files that a file imports (trainer_flags aside: its helpers count only
    when called)."""
    candidates = []
    for match in _IMPORT.finditer(source):
      if match.group(1):  # from PACKAGE import a, b: modules a and b, or PACKAGE's own module
        base = match.group(1).replace(".", "/")
        candidates += [f"{base}/{name.strip()}.py" for name in match.group(2).split(",")]
        candidates.append(f"{base}.py")
      else:
        module = match.group(3)
        candidates += [
            module.replace(".", "/") + ".py",
            os.path.join(os.path.dirname(program), module + ".py")
        ]
    return [
        path for path in dict.fromkeys(candidates)
        if path != _TRAINER_FLAGS and os.path.isfile(os.path.join(self.root, path))
    ]

  def flags_of(self, program: str, seen: Tuple[str, ...] = ()) -> Flags:
    """The flags of a program given by its path under the root (bin/train_realm.py): its own, those
    of the trainer_flags helpers it calls, and those of the project's modules it imports."""
    if program in self._programs:
      return self._programs[program]
    source = _read(os.path.join(self.root, program))
    flags = _own_flags(source)
    for helper in re.findall(r"\btrainer_flags\.(define_\w+)\(", source):
      _merge(flags, self._helpers.get(helper, {}))
    for path in self._imported_files(program, source):
      if path not in seen + (program,):
        _merge(flags, self.flags_of(path, seen + (program,)))
    self._programs[program] = flags
    return flags

  def program_file(self, word: str) -> Optional[str]:
    """The project file a command word runs (bin/demo runs bin/run_demo.py), or None."""
    word = word.strip("\"'")
    match = re.search(r"(?:^|/)((?:bin|bench|tools)/\w+)(\.py|\.sh)?$", word)
    if not match:
      return None
    name = match.group(1)
    if name == "bin/demo":
      return "bin/run_demo.py"
    if name + (match.group(2) or "") in _SCRIPT_OPTIONS:
      return name + (match.group(2) or "")
    path = name + ".py"
    return path if os.path.exists(os.path.join(self.root, path)) else None


def _program_word(segment: str) -> str:
  """The program a shell command segment runs (`python -m X` runs X), '' when there is none."""
  words = segment.split()
  while words and (_ASSIGNMENT.match(words[0]) or words[0] in _RUNNERS):
    words.pop(0)
  if words and _PYTHONS.match(words[0]):
    words.pop(0)
    while words and words[0].startswith("-") and words[0] != "-m":
      words.pop(0)  # python -u, -I
    if len(words) >= 2 and words[0] == "-m":
      return words[1]
  return words[0] if words else ""


def _segments(command: str) -> Iterable[str]:
  """The simple commands of a command line (split at &&, ||, ;, |, and before a # comment)."""
  code, _, comment = command.partition(" #")
  if command.lstrip().startswith("#"):
    code, comment = "", command
  for part in re.split(r"&&|\|\||;|\||\$\(|`", code):
    yield part
  if comment:
    yield comment  # prose about the command: its flags must exist too


def flag_findings(command: str, index: FlagIndex) -> List[str]:
  """The flags of a command (a code block's logical line, or an inline code span) that the program
  it runs does not define, each as a short message."""
  problems = []
  for segment in _segments(command):
    word = _program_word(segment)
    if os.path.basename(word) in _OTHER_PROGRAMS:
      continue
    program = index.program_file(word)
    if program in _SCRIPT_OPTIONS:
      defined = _SCRIPT_OPTIONS[program]
      where = "bin/test (or bazel test)" if program == "bin/test" else program
    elif program:
      defined, where = index.flags_of(program), program
    else:
      defined, where = index.all_flags, "no bin/, bench/ or tools/ program"
    for match in _FLAG.finditer(segment):
      name = match.group(1)
      word_start = max(segment.rfind(" ", 0, match.start()), segment.rfind("\t", 0, match.start())) + 1
      if segment[word_start:match.start()].strip("\"'"):
        # Inside another flag's value (--train_fid_kd_flags=--num_passages=3,--reader_steps=9): a
        # flag handed on to another program, which some program must define.
        if name not in index.all_flags and name not in _OTHER_TOOLS_FLAGS:
          problems.append(f"--{name} is defined by no bin/, bench/ or tools/ program")
        continue
      if name in defined or name in _ABSL_FLAGS or name in _OTHER_TOOLS_FLAGS:
        continue
      if name.startswith("no") and "bool" in defined.get(name[2:], ()):
        continue
      if name.startswith("no") and name[2:] in defined:
        problems.append(f"--{name}: --{name[2:]} of {where} is not a boolean flag")
      elif program:
        problems.append(f"--{name} is not a flag of {where}")
      else:
        problems.append(f"--{name} is defined by {where}")
  return problems


def _inline_code(line: str) -> List[str]:
  """The inline code spans of a Markdown line (single- or multi-backtick)."""
  return [m.group(2) for m in re.finditer(r"(`+)(.+?)\1", line)]


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# docs/x.md ("Title ...") or (README, "Title ..."): a section named by the start of its heading.
_SECTION_REFERENCE = re.compile(r"\b((?:docs/[\w/.-]+\.md)|README(?:\.md)?)(?:,\s*|\s*\(\s*)\"([^\"]+)\"")


def _headings(text: str) -> List[str]:
  """The headings of a Markdown text (outside fenced blocks), as written."""
  headings, in_fence = [], False
  for line in text.split("\n"):
    if re.match(r"^\s*(```|~~~)", line):
      in_fence = not in_fence
    elif not in_fence and re.match(r"^#{1,6}\s", line):
      headings.append(line.lstrip("#").strip())
  return headings


def github_anchor(heading: str) -> str:
  """The id GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
  text = re.sub(r"[^\w\- ]", "", heading.lower())
  return text.replace(" ", "-")


def reference_findings(text: str, name: str, root: str = _ROOT) -> List[str]:
  """Links to missing files or anchors, and section references to missing headings, in one file."""
  findings = []
  directory = os.path.dirname(os.path.join(root, name))
  flat = text.replace("\n", " ")  # a reference may wrap onto the next line

  def line_of(offset: int) -> int:
    return text.count("\n", 0, offset) + 1

  def read_target(path: str) -> Optional[str]:
    return _read(path) if os.path.isfile(path) else None

  for match in _LINK.finditer(flat):
    target = match.group(1)
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
      continue
    path, _, anchor = target.partition("#")
    full = os.path.normpath(os.path.join(directory, path)) if path else os.path.join(root, name)
    if not os.path.exists(full):
      findings.append(f"{name}:{line_of(match.start())}: link to {path}, which does not exist")
      continue
    if not path:
      content = text  # an anchor of this file
    else:
      content = read_target(full) if full.endswith(".md") else None
    if anchor and content is not None and anchor not in map(github_anchor, _headings(content)):
      findings.append(f"{name}:{line_of(match.start())}: link to {target}: {path or name} has no "
                      f"heading with that anchor")
  for match in _SECTION_REFERENCE.finditer(flat):
    target, title = match.group(1), match.group(2)
    path = "README.md" if target.startswith("README") else target
    content = read_target(os.path.join(root, path))
    if content is None:
      findings.append(f"{name}:{line_of(match.start())}: {path} does not exist")
      continue
    plain = lambda heading: re.sub(r"[`*]", "", heading).lower()
    if not any(plain(h).startswith(plain(title)) for h in _headings(content)):
      findings.append(f"{name}:{line_of(match.start())}: {path} has no section \"{title}\"")
  return findings


def check_markdown(text: str, index: FlagIndex, name: str = "<text>") -> List[str]:
  """Every finding of one Markdown file, as 'NAME:LINE: message'."""
  findings = []
  lines = text.split("\n")
  in_fence = False
  fence = ""
  unchecked_block = False  # the fence's flags are not checked (historical, or not shell)
  historical_level = 0  # inside a section marked historical: its heading's level
  pending: List[Tuple[int, str]] = []  # a command continued with a trailing backslash

  def check_command(start: int, command: str):
    if historical_level:
      return
    for problem in flag_findings(command, index):
      findings.append(f"{name}:{start}: {problem}")

  def marked(number: int) -> bool:
    previous = next((l.strip() for l in reversed(lines[:number - 1]) if l.strip()), "")
    return previous == HISTORICAL_MARKER

  for number, line in enumerate(lines, start=1):
    for match in _OUTSIDE_PATH.finditer(line):
      findings.append(f"{name}:{number}: {match.group(0)!r} is a path outside the repository; write "
                      "a path a clone has (data/..., --data_dir=data)")
    stripped = line.strip()
    opening = re.match(r"^(`{3,}|~{3,})\s*(\S*)", stripped)
    if not in_fence and opening:
      in_fence, fence = True, opening.group(1)
      unchecked_block = marked(number) or opening.group(2).lower() in _UNCHECKED_LANGUAGES
      continue
    if in_fence:
      if stripped.startswith(fence) and not stripped.strip(fence[0]):
        in_fence = False
        if pending and not unchecked_block:
          check_command(pending[0][0], " ".join(part for _, part in pending))
        pending = []
        continue
      if unchecked_block:
        continue
      pending.append((number, line.rstrip().rstrip("\\")))
      if not line.rstrip().endswith("\\"):
        check_command(pending[0][0], " ".join(part for _, part in pending))
        pending = []
      continue
    heading = re.match(r"^(#{1,6})\s", line)
    if heading:
      level = len(heading.group(1))
      if historical_level and level <= historical_level:
        historical_level = 0
      if marked(number):
        historical_level = level
    for span in _inline_code(line):
      check_command(number, span)
  return findings


def documentation_files(root: str = _ROOT) -> List[str]:
  """README.md and docs/**/*.md, relative to the root (docs/experiments/ excluded)."""
  docs = glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)
  paths = ["README.md"] + sorted(os.path.relpath(p, root) for p in docs)
  return [p for p in paths if not p.startswith(_SKIPPED_DOC_DIRS) and os.path.exists(os.path.join(root, p))]


class DocsTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.index = FlagIndex()

  def test_flags_are_collected(self):
    train_realm = self.index.flags_of("bin/train_realm.py")
    # Its own config tree's options (realm_tf/config/train_realm.py and the sections it imports).
    for name in ("index_swap_steps", "retrieval_corpus_path", "model_dir", "strategy", "jit_compile"):
      self.assertIn(name, train_realm)
    self.assertIn("bool", train_realm["jit_compile"])
    self.assertNotIn("saved_model", train_realm)
    self.assertIn("reader_init_checkpoint", self.index.flags_of("bin/train_fid_kd.py"))  # multi-line
    self.assertIn("testlogs", self.index.flags_of("tools/test_summary.py"))  # argparse
    self.assertIn("features_only", self.index.flags_of(self.index.program_file("bin/demo")))
    for name in ("saved_model", "index_rescoring", "quick"):
      self.assertIn(name, self.index.all_flags)

  def test_the_checker_reports_what_it_must(self):
    text = "\n".join([
        "Run `bin/train_realm.py --no_such_flag_xyz=1` first.",  # 1: inline code
        "```sh",  # 2
        "python bin/train_realm.py --model_dir=runs/a \\",  # 3
        "    --batch_size=8 --saved_model=x",  # 4: another binary's
        "$P bin/serve.py --nosaved_model && bin/test --quick",  # 5: --no of a string
        "bazel test //... --made_up_bazel_flag",  # 6: another tool's
        "bench/fid_kd_learning_bench.py --train_fid_kd_flags=--reader_steps=9,--made_up",  # 7
        "```",  # 8
        "Data in ../shared/data and /work/main/x; `--nojit_compile` is fine.",  # 9
        "Alone in prose: `--made_up_flag`.",  # 10
        HISTORICAL_MARKER,  # 11
        "```sh",  # 12
        "python bench/realm_learning_bench.py --span_substitution_rate=0",  # 13: historical
        "```",  # 14
        HISTORICAL_MARKER,  # 15
        "### Earlier runs",  # 16
        "`--reader_warmup_steps=2500` was a flag then.",  # 17: historical section
        "#### A subsection of it: `--realm_pretraining=news`",  # 18
        "## The next section",  # 19
        "`bench/realm_learning_bench.py --reader_warmup_steps=1` is checked again.",  # 20
    ])
    findings = check_markdown(text, self.index, "t.md")
    fix = "is a path outside the repository; write a path a clone has (data/..., --data_dir=data)"
    self.assertEqual(findings, [
        "t.md:1: --no_such_flag_xyz is not a flag of bin/train_realm.py",
        "t.md:3: --saved_model is not a flag of bin/train_realm.py",
        "t.md:5: --nosaved_model: --saved_model of bin/serve.py is not a boolean flag",
        "t.md:7: --made_up is defined by no bin/, bench/ or tools/ program",
        f"t.md:9: '../shared' {fix}",
        f"t.md:9: '/work' {fix}",
        "t.md:10: --made_up_flag is defined by no bin/, bench/ or tools/ program",
        "t.md:20: --reader_warmup_steps is not a flag of bench/realm_learning_bench.py",
    ])

  def test_the_reference_checker_reports_what_it_must(self):
    text = "\n".join([
        "See [the guide](docs/pretraining.md) and [its step](docs/pretraining.md#no-such-step),",
        "[a file](docs/no_such_file.md), docs/results.md (\"Scale-out",
        "estimate\"), (README, \"No such section\") and [top](#a-heading).",
        "# A heading",
    ])
    self.assertEqual(reference_findings(text, "README.md"), [
        "README.md:1: link to docs/pretraining.md#no-such-step: docs/pretraining.md has no heading "
        "with that anchor",
        "README.md:2: link to docs/no_such_file.md, which does not exist",
        "README.md:3: README.md has no section \"No such section\"",
    ])
    self.assertEqual(github_anchor("SQuAD-open: all-MiniLM-L6-v2 (`bench/x_y.py`)"),
                     "squad-open-all-minilm-l6-v2-benchx_ypy")

  def test_readme_and_docs_name_no_outside_path_and_no_undefined_flag(self):
    files = documentation_files()
    self.assertIn("README.md", files)
    self.assertIn("docs/results.md", files)
    self.assertNotIn("docs/experiments/benchmarks_notebook.md", files)
    findings = []
    for path in files:
      text = _read(os.path.join(_ROOT, path))
      findings += check_markdown(text, self.index, path) + reference_findings(text, path)
    self.assertEqual(findings, [], "\n" + "\n".join(findings))


if __name__ == "__main__":
  absltest.main()
