"""Fault soak of REALM pre-training: the real bin/train_realm and bin/refresh_doc_embeds processes under a
seeded random schedule of faults, restarted as an operator would, then checked against a fault-free run.

  PYTHONPATH=. TF_USE_LEGACY_KERAS=1 .venv/bin/python bench/fault_soak.py --seed=0 --max_faults=20

Both processes are started as bin/demo_pipeline starts them (binary_command, binary_env, the corpora of
prepare_corpora and run_realm's trainer and refresher flags) on a one-layer, hidden-32 BERT
(tiny_inputs.write_small_bert_config, the sizes of bin/demo_pipeline_test), the brute-force index, no
XLA and fixed index swaps (--index_swap_steps = --save_checkpoints_steps), so that a run is
deterministic and a minute or two long. First a fault-free run of the same seed (MODEL_DIR clean/), then
the faulted run (faulted/) under a schedule drawn from --seed:

  sigkill, sigterm     of the trainer or the refresher at a random moment;
  sigstop              of either, SIGCONT after a random pause;
  damage_checkpoint    deletion or truncation of the newest checkpoint's ckpt-N.data-* file;
  damage_index         deletion or truncation of a file of the newest published index (index/<step>/...);
  second_refresher     a second bin/refresh_doc_embeds on the same model dir, which must exit non-zero
                       naming the first's pid (MODEL_DIR/.refresher.lock);
  disk_full            for 2 to --max_disk_full_seconds, the trainer or the refresher cannot write a file
                       beyond DISK_FULL_HEADROOM bytes past its log's size (RLIMIT_FSIZE: the write fails
                       with EFBIG), then the limit is lifted, as an operator freeing space would; it must
                       stop with a documented error (CheckpointWriteError, IndexWriteError) or carry on.
                       With --disk_full_mode=tmpfs (root only) the faulted run's model dir is a tmpfs of
                       --tmpfs_mb that the soak mounts (and always unmounts), and disk_full writes a filler
                       file that takes all its free space (a real ENOSPC for both processes) for the
                       fault's seconds, then deletes it;
  update_index         a bin/update_index on the live model dir, as an operator would run it (UPDATE_MODES:
                       a "reingest" of unchanged documents, or, once the last fixed swap's index is
                       published, an "edit" adding, changing and removing a document), SIGKILLed after a
                       random delay with --update_kill_probability; it must publish an index that verifies,
                       refuse with its one-line message, or (killed) leave nothing the invariants reject.

A process that stops is restarted with the same command (at most --max_restarts times each). Every fault
is recorded (time, kind, target, the processes' last log lines). The invariants at the end, each a number
or a boolean in --output_json (and printed as a table):

  1. reached_step: training_state.latest_step == --num_train_steps and TRAINING_DONE exists;
  2. weights: max |faulted - clean| over every variable of the final checkpoints (<= --tolerance), or the
     difference explained by the trainer's "was not published" warnings (fixed swaps fell back to a
     later index), by an update_index edit whose corpus the trainer read (named in the JSON:
     edits_read_by_trainer), or, with --dropout above 0, by a resume (the dropout stream restarts with
     the process); --dropout=0 makes every other resume exact, so a difference there is a finding;
  3. every checkpoint the `checkpoint` file lists restores (tf.train.load_checkpoint reads every
     variable), except those the soak itself damaged and nothing rewrote (counted apart);
  4. every published index verifies (published_index.verify_published) and its published.json names its
     step, its checkpoint and its corpus (the run's, or one an update_index of the soak derived), except
     those the soak damaged (counted apart); every update_index run published, refused with its
     message, or was killed by the soak (updates_unexpected counts the rest);
  5. no `.tmp-*` or `*_temp` leftovers under the model dir;
  6. no hang: progress (a checkpoint saved, an index published) within --hang_seconds of every restart
     and throughout; each process exited within --exit_seconds of its stop condition;
  7. no traceback in the logs but the documented named errors (docs/reliability.md);
  8. no exit that no signal caused (unexpected_exits), except a documented error after the soak damaged
     a file or while its disk was full, counted apart (exits_on_documented_errors_after_damage,
     exits_on_documented_errors_on_full_disk). When the soak has damaged every checkpoint there was,
     the trainer's ResumeError names the fix (delete them and start over); the soak applies it, as an
     operator would, and counts it (operator_fixes).
"""

import argparse
import errno
import glob
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# pylint: disable=g-import-not-at-top,wrong-import-position
from bench import throughput_lib
from realm_tf import demo_pipeline
from realm_tf import io_utils
from realm_tf.checkpoints import training_state
from realm_tf.testing import tiny_inputs
# pylint: enable=g-import-not-at-top,wrong-import-position

FAULT_KINDS = ("sigkill", "sigterm", "sigstop", "damage_checkpoint", "damage_index", "second_refresher",
               "disk_full", "update_index")
# update_index: the soak's bin/update_index runs. "reingest" sends documents the corpus already holds
# (same id, title and body, --on_existing=replace): the corpus the next refresh embeds has the same rows,
# so the trainer reads what a run without it reads and the weights must still equal the clean run's.
# "edit" adds, changes and removes a document: it changes what the trainer reads, so the soak sends one
# only once the index of the last fixed swap is published (no later index is read under the schedule);
# a trainer that still reads an edited corpus (a restart, a fall-back) is named in the JSON.
UPDATE_MODES = ("reingest", "edit")
# bin/update_index's last line on success, and a trainer's line when it reads a corpus an update derived
# (realm_input.RetrievalState._corpus_of, published_index.current_corpus).
UPDATE_PUBLISHED = re.compile(r"^published (\S+)\s*$")
DERIVED_CORPUS_READ = re.compile(r"embeds (\S+), which bin/update_index derived from")
# A data error of bin/update_index (UpdateError, CorruptIndexError, ...): its message, no traceback.
UPDATE_REFUSAL = "bin/update_index: "
# The tmpfs variant of disk_full: the filler file that takes the free space (deleted when the fault ends).
FILLER_NAME = "soak_disk_filler"
# disk_full: a process may write no file beyond its log's size plus this many bytes. The limit is per
# file (RLIMIT_FSIZE), and the process's stdout/stderr is its appended log: the headroom lets it still log
# (and print its error) while every checkpoint (megabytes) and the index's SavedModel fail. RLIMIT_FSIZE,
# not a small filesystem: a tmpfs or loop mount needs root (or a user namespace) and would move the model
# dir; the limit hits the running process at any moment, with no restart, and needs no privilege.
DISK_FULL_HEADROOM = 64 * 1024
# The named errors docs/reliability.md documents: a traceback ending in one of them is a documented stop.
# ResumeError's message when every checkpoint is damaged: only an operator's action lets the run go on.
NO_READABLE_CHECKPOINT = "ResumeError: no checkpoint in"
DOCUMENTED_ERRORS = ("LockedError", "CheckpointWriteError", "ConfigWriteError", "ResumeError",
                     "NoRefresherError", "IndexWriteError", "CorruptIndexError", "InputError", "TimeoutError")
# The sizes of bin/demo_pipeline_test (its _SIZES and _short_options).
SIZES = dict(projection_size=32, query_seq_len=16, candidate_seq_len=64, max_masks=4, num_candidates=4)
NOT_PUBLISHED_WARNING = "was not published (the refresher embedded a later checkpoint"
# The other fixed-swap fall-back: the index a step needs was damaged after publication, so the trainer
# keeps the index in use until the next swap (realm_input.RetrievalState._fixed_index).
UNUSABLE_INDEX_WARNING = "is unusable (see the warning above); training on the index of step"
# And the third: the refresher could not read the checkpoint of the swap step (damaged after the trainer
# saved it), so no index of that step comes (published_index.record_unreadable_checkpoint).
UNREADABLE_CHECKPOINT_WARNING = "will not be published (the refresher cannot read"


def options_for(args, output_dir: str, bert_config: str) -> demo_pipeline.PipelineOptions:
  return demo_pipeline.PipelineOptions(output_dir=output_dir,
                                       realm_steps=args.num_train_steps,
                                       save_checkpoints_steps=args.save_checkpoints_steps,
                                       realm_batch_size=args.batch_size,
                                       index_swap_steps=args.save_checkpoints_steps,
                                       realm_learning_rate=1e-3,
                                       index_implementation="brute_force",
                                       realm_bert_config=bert_config,
                                       realm_jit_compile=False,
                                       seed=args.seed,
                                       **SIZES)


def tail(path: str, n: int = 4) -> List[str]:
  """The last n meaningful lines of a log (absl lines without their prefix)."""
  if not os.path.exists(path):
    return []
  with open(path, errors="replace") as f:
    lines = [line.rstrip() for line in f if line.strip() and "controller.py" not in line]
  return [_strip_log_prefix(line)[:300] for line in lines[-n:]]


# absl's prefix: "I1128 10:16:52.819792 140475982478208 loop.py:210] ".
_ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^ \]]+:\d+\] ")


def _strip_log_prefix(line: str) -> str:
  """line without absl's prefix. Only that prefix: splitting at the first "] " also cut a traceback's
  final line such as "IndexWriteError: ... [Errno 28] No space left", losing the error's name (the tmpfs
  soak then counted a documented IndexWriteError as an unexpected exit)."""
  return _ABSL_PREFIX.sub("", line, count=1)


def checkpoint_mtime(model_dir: str) -> Optional[float]:
  path = os.path.join(model_dir, "checkpoint")
  try:
    return os.stat(path).st_mtime_ns
  except OSError:
    return None


def index_steps(model_dir: str) -> List[int]:
  root = os.path.join(model_dir, "index")
  if not os.path.isdir(root):
    return []
  return sorted(int(n) for n in os.listdir(root) if n.isdigit())


class Process:
  """One bin/ program run under the soak: the same command on every (re)start, one appended log."""

  def __init__(self,
               name: str,
               command: List[str],
               log_path: str,
               env: Optional[Dict[str, str]] = None,
               disk_full_mode: str = "rlimit"):
    self.name, self.command, self.log_path = name, command, log_path
    self.env = env or demo_pipeline.binary_env()
    # rlimit: disk_full limits this process's file size; tmpfs: the soak fills the model dir's
    # filesystem, and this process only records that it ran while it was full.
    self.disk_full_mode = disk_full_mode
    self.popen: Optional[subprocess.Popen] = None
    self.starts: List[Dict] = []
    self.stopped_until: Optional[float] = None  # SIGSTOPped: SIGCONT due then
    self.exit_codes: List[int] = []
    self.stop_sent: Optional[Dict] = None  # the sigkill/sigterm fault this process has not exited on yet
    self.disk_full_until: Optional[float] = None  # a disk_full fault: its limit is lifted then
    self.disk_full_seen = False  # this start ran under a disk_full limit (an exit then may be its error)

  def fsize_limit(self) -> int:
    return os.path.getsize(self.log_path) + DISK_FULL_HEADROOM

  def set_disk_full(self, full: bool) -> None:
    """Sets (full) or lifts the running process's file size limit. CPython ignores SIGXFSZ at start-up,
    so a write beyond the limit fails with EFBIG instead of killing the process."""
    if self.alive() and self.disk_full_mode == "rlimit":
      _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
      try:
        resource.prlimit(self.popen.pid, resource.RLIMIT_FSIZE, (self.fsize_limit() if full else hard, hard))
      except ProcessLookupError:  # exited meanwhile: its restart sets the limit (start)
        pass
    if full:
      self.disk_full_seen = True

  def start(self, state: Dict) -> None:
    log_file = demo_pipeline._open_log(self.log_path, self.command)  # pylint: disable=protected-access
    preexec = None
    self.disk_full_seen = False
    if self.disk_full_until is not None:  # restarted while the disk is still full: it stays full
      if self.disk_full_mode == "rlimit":
        preexec = disk_full_preexec(self.fsize_limit())
      self.disk_full_seen = True
    self.popen = subprocess.Popen(self.command,
                                  stdout=log_file,
                                  stderr=subprocess.STDOUT,
                                  env=self.env,
                                  preexec_fn=preexec)
    log_file.close()
    if self.starts:
      self.starts[-1]["lived_seconds"] = round(time.time() - self.starts[-1]["time"], 2)
    self.starts.append(dict(time=time.time(), pid=self.popen.pid, state=state, progress_seconds=None))

  def alive(self) -> bool:
    return self.popen is not None and self.popen.poll() is None

  def signal(self, sig) -> None:
    if self.alive():
      self.popen.send_signal(sig)


def disk_full_preexec(limit: int):
  """A preexec_fn: the child may write no file beyond limit bytes, and such a write fails with EFBIG
  rather than killing it (SIGXFSZ ignored, as CPython also does at start-up)."""

  def preexec():
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

  return preexec


def mount_tmpfs(path: str, megabytes: int) -> None:
  """Mounts a tmpfs of `megabytes` on path (made if missing): a small filesystem the soak can fill."""
  os.makedirs(path, exist_ok=True)
  subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "realm_fault_soak", path],
                 check=True,
                 capture_output=True,
                 text=True)


def unmount(path: str) -> None:
  """Unmounts path; lazily when a process still holds a file there, so the mount never outlives the soak."""
  if subprocess.run(["umount", path], capture_output=True, check=False).returncode != 0:
    subprocess.run(["umount", "-l", path], capture_output=True, check=False)


def fill_filesystem(directory: str) -> Dict:
  """Writes FILLER_NAME in directory until its filesystem has no free byte (ENOSPC). Returns its record."""
  path = os.path.join(directory, FILLER_NAME)
  chunk = b"\0" * (1 << 20)
  written = 0
  with open(path, "wb") as f:
    while True:
      try:
        f.write(chunk)
        f.flush()
        written += len(chunk)
      except OSError as e:
        if e.errno != errno.ENOSPC:
          raise
        # The last chunk did not fit: fill the rest byte-exactly (a tmpfs counts pages, so a few bytes
        # may remain; a write of any checkpoint or index needs more than that).
        f.seek(0, os.SEEK_END)
        written = f.tell()
        break
  free = os.statvfs(directory)
  return {"filler": path, "filled_bytes": written, "free_bytes_after": free.f_bavail * free.f_frsize}


def free_filesystem(directory: str) -> None:
  try:
    os.remove(os.path.join(directory, FILLER_NAME))
  except FileNotFoundError:
    pass


class Updates:
  """The soak's bin/update_index runs against the live model dir, one at a time, as an operator sends
  change sets: each a new Process (its own change file and log), possibly SIGKILLed by the soak."""

  def __init__(self, args, model_dir: str, log_dir: str, corpus_prefix: str, refresher_flags: Dict):
    self.args, self.model_dir, self.log_dir = args, model_dir, log_dir
    self.corpus_prefix, self.keep = corpus_prefix, refresher_flags.get("keep")
    # Derived corpora and the updates' scratch space live beside the logs, outside the model dir (whose
    # leftovers are an invariant) and apart from the run's original corpus.
    self.root = os.path.join(log_dir, "updates")
    self.tmp = os.path.join(self.root, "tmp")
    os.makedirs(self.tmp, exist_ok=True)
    self.records: List[Dict] = []
    self.running: Optional[Process] = None
    self.record: Optional[Dict] = None
    self.kill_at: Optional[float] = None
    self._intact: Optional[List[Dict]] = None  # original documents no edit has touched

  def intact(self) -> List[Dict]:
    if self._intact is None:
      from realm_tf.data import corpus as corpus_lib  # pylint: disable=g-import-not-at-top
      self._intact = [{
          "id": d["doc_id"],
          "title": d["title"],
          "body": d["body"]
      } for d in corpus_lib.read_corpus(self.corpus_prefix)]
    return self._intact

  def start(self, rng: random.Random, fault: Dict, last_swap_published: bool) -> None:
    n = len(self.records)
    intact = self.intact()
    mode = "edit" if last_swap_published and len(intact) > 4 and rng.random() < 0.5 else "reingest"
    documents, remove = [], []
    if mode == "reingest":
      documents = rng.sample(intact, 2)
    else:
      changed, removed = rng.sample(intact, 2)
      for doc in (changed, removed):
        intact.remove(doc)
      documents = [
          dict(changed, body=changed["body"] + " The fault soak revised this document."), {
              "id": f"fault-soak-{n}",
              "title": f"Fault soak addition {n}",
              "body": "The fault soak added this document. " + intact[n % len(intact)]["body"]
          }
      ]
      remove = [removed["id"]]
    change = os.path.join(self.root, f"change-{n}.jsonl")
    io_utils.write_jsonl_atomic(change, documents)
    prefix = os.path.join(self.root, f"corpus-{n}", "corpus")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    command = demo_pipeline.binary_command("update_index",
                                           index=self.model_dir,
                                           documents=change,
                                           remove_ids=",".join(remove) or None,
                                           on_existing="replace",
                                           output_corpus_prefix=prefix,
                                           keep=self.keep)
    env = dict(demo_pipeline.binary_env(), TMPDIR=self.tmp)
    self.running = Process(f"update_index-{n}", command, os.path.join(self.root, f"update_index-{n}.log"),
                           env)
    self.running.start({})
    self.kill_at = None
    if rng.random() < self.args.update_kill_probability:
      delay = rng.uniform(0.5, self.args.max_update_kill_seconds)
      self.kill_at = time.time() + delay
      fault["kill_after_s"] = round(delay, 2)
    fault.update(update=n,
                 mode=mode,
                 pid=self.running.popen.pid,
                 replaced=[d["id"] for d in documents if not d["id"].startswith("fault-soak-")],
                 added=[d["id"] for d in documents if d["id"].startswith("fault-soak-")],
                 removed=remove,
                 corpus_prefix=prefix,
                 started_unix_time=time.time())
    self.record = fault
    self.records.append(fault)

  def poll(self, now: float) -> None:
    """Sends a due SIGKILL; records the outcome of an update that ended."""
    proc = self.running
    if proc is None:
      return
    if self.kill_at is not None and now >= self.kill_at and proc.alive():
      proc.signal(signal.SIGKILL)
      self.record["killed"] = True
      self.kill_at = None
    if proc.alive():
      return
    code = proc.popen.returncode
    with open(proc.log_path, errors="replace") as f:
      lines = [line.rstrip() for line in f if line.strip()]
    published = next((UPDATE_PUBLISHED.match(l).group(1) for l in lines if UPDATE_PUBLISHED.match(l)), None)
    refusal = next((l[len(UPDATE_REFUSAL):][:400] for l in lines if l.startswith(UPDATE_REFUSAL)), None)
    self.record.update(exit_code=code, seconds=round(now - self.record.pop("started_unix_time"), 2))
    if code == 0 and published:
      self.record.update(outcome="published", index=published)
      try:
        with open(os.path.join(published, "published.json")) as f:
          self.record["published_step"] = json.load(f).get("step")
      except OSError:  # already pruned by a later publication (--keep)
        self.record["published_step"] = None
    elif code == -signal.SIGKILL and self.record.get("killed"):
      self.record["outcome"] = "killed"
    elif code != 0 and refusal:
      # A documented refusal: e.g. the newest index is a refresh that began before an earlier update,
      # or the newest index was damaged; nothing is published.
      self.record.update(outcome="refused", message=refusal)
    else:
      self.record.update(outcome="unexpected", log_tail=lines[-15:])
    self.running, self.record = None, None

  def stop(self) -> None:
    if self.running is not None and self.running.alive():  # after a hang or a give-up
      self.running.signal(signal.SIGKILL)
      self.record.update(killed=True, killed_at_soak_end=True)
      self.running.popen.wait()
    self.poll(time.time())


def run(args, model_dir: str, trainer_flags: Dict, refresher_flags: Dict, log_dir: str, faults: bool) -> Dict:
  """One run of both processes; with faults, under the seeded schedule. Returns its record."""
  rng = random.Random(args.seed)
  os.makedirs(log_dir, exist_ok=True)
  mode = args.disk_full_mode
  refresher = Process("refresher",
                      demo_pipeline.binary_command("refresh_doc_embeds",
                                                   model_dir=model_dir,
                                                   **refresher_flags),
                      os.path.join(log_dir, "refresh_doc_embeds.log"),
                      disk_full_mode=mode)
  trainer = Process("trainer",
                    demo_pipeline.binary_command("train_realm", model_dir=model_dir, **trainer_flags),
                    os.path.join(log_dir, "train_realm.log"),
                    disk_full_mode=mode)
  updates = Updates(args, model_dir, log_dir, trainer_flags["retrieval_corpus_path"], refresher_flags) \
      if faults and "update_index" in args.fault_kinds else None
  # The last fixed swap's step: once its index is published, no later index is read (UPDATE_MODES).
  last_swap = args.save_checkpoints_steps * ((args.num_train_steps - 1) // args.save_checkpoints_steps)
  filled_until = [None]  # tmpfs disk_full: when the filler file is deleted
  second = [None]  # the second refresher running now, if any

  def second_refresher_done(now: float, stop: bool = False) -> None:
    """Judges the second refresher once it exits (killed after --exit_seconds: not refused in time)."""
    pending = second[0]
    if pending is None:
      return
    popen, fault = pending["popen"], pending["fault"]
    if popen.poll() is None:
      if not stop and now - pending["started"] <= args.exit_seconds:
        return
      popen.kill()
      popen.wait()
      fault["timed_out"] = True
    with open(pending["log_path"], errors="replace") as f:
      f.seek(pending["offset"])
      text = f.read()
    first_pid = fault["first_pid"]
    fault.update(
        exit_code=popen.returncode,
        exit_seconds_second=round(now - pending["started"], 2),
        names_first=f"is held by pid {first_pid}" in text,
        message=next(
            (_strip_log_prefix(line)[:300] for line in reversed(text.splitlines()) if "is held by" in line),
            None))
    fault["ok"] = popen.returncode != 0 and fault["names_first"] and not fault.get("timed_out")
    second[0] = None

  procs = {"trainer": trainer, "refresher": refresher}
  started = time.time()
  record: Dict = {
      "model_dir": model_dir,
      "faults": [],
      "unexpected_exits": [],
      "exits_on_documented_errors": [],
      "exits_on_full_disk": [],
      "operator_fixes": [],
      "hang": None,
      "damaged": {
          "checkpoints": [],
          "indexes": []
      }
  }

  def state():
    return dict(checkpoint_mtime=checkpoint_mtime(model_dir),
                indexes=index_steps(model_dir),
                latest_step=training_state.latest_step(model_dir) if os.path.isdir(model_dir) else None)

  def note(msg):
    print(f"[{time.time() - started:7.1f}s] {msg}", flush=True)

  refresher.start(state())
  trainer.start(state())
  last = state()
  # Progress is the high-water mark: a checkpoint of a step beyond every earlier one, or an index of a
  # step beyond every earlier one (a trainer that falls back to an earlier checkpoint and saves the same
  # steps again, or restarts, does not count).
  high_water = [-1, -1]
  last_progress = time.time()
  record["quiet_periods"] = 0
  was_quiet = False
  next_fault = time.time() + rng.uniform(args.min_gap_seconds, args.max_gap_seconds)
  trainer_done_at = None
  exit_at = {"trainer": None, "refresher": None}  # when each exited for good after the done marker
  deadline = started + 60 * args.max_minutes

  def inject(kind: str, target: str) -> Dict:
    fault = {
        "time_s": round(time.time() - started, 2),
        "kind": kind,
        "target": target,
        "latest_step": training_state.latest_step(model_dir),
        "indexes": index_steps(model_dir)
    }
    proc = procs.get(target)
    if kind in ("sigkill", "sigterm"):
      fault["pid"] = proc.popen.pid
      proc.signal(signal.SIGKILL if kind == "sigkill" else signal.SIGTERM)
      fault["sent_unix_time"] = time.time()
      proc.stop_sent = fault
    elif kind == "sigstop":
      pause = rng.uniform(0.5, args.max_pause_seconds)
      fault.update(pid=proc.popen.pid, pause_s=round(pause, 2))
      proc.signal(signal.SIGSTOP)
      proc.stopped_until = time.time() + pause
    elif kind == "damage_checkpoint":
      step = fault["latest_step"]
      files = sorted(glob.glob(os.path.join(model_dir, f"ckpt-{step}.data-*")))
      if step is None or not files or step >= args.num_train_steps:
        fault["skipped"] = "no checkpoint to damage (or the final one)"
      else:
        fault.update(_damage(rng, files[0]))
        record["damaged"]["checkpoints"].append(
            dict(path=os.path.join(model_dir, f"ckpt-{step}"), file=files[0], time=time.time()))
    elif kind == "damage_index":
      steps = fault["indexes"]
      files = []
      if steps:
        root = os.path.join(model_dir, "index", str(steps[-1]))
        files = sorted(os.path.join(d, n) for d, _, names in os.walk(root) for n in names)
      if not files:
        fault["skipped"] = "no published index"
      else:
        fault.update(_damage(rng, rng.choice(files)))
        record["damaged"]["indexes"].append(dict(step=steps[-1], file=fault["file"]))
    elif kind == "second_refresher":
      # Started in the background and judged when it exits (second_refresher_done): under load its
      # TensorFlow import alone takes tens of seconds, and waiting for it held back every other fault.
      log_path = os.path.join(log_dir, "second_refresher.log")
      offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
      with open(log_path, "a") as log_file:
        popen = subprocess.Popen(refresher.command,
                                 stdout=log_file,
                                 stderr=subprocess.STDOUT,
                                 env=demo_pipeline.binary_env())
      fault.update(first_pid=refresher.popen.pid, second_pid=popen.pid)
      second[0] = dict(fault=fault, popen=popen, log_path=log_path, offset=offset, started=time.time())
    elif kind == "disk_full" and mode == "tmpfs":
      # A real ENOSPC for every process writing the model dir, until the filler is deleted.
      seconds = rng.uniform(2.0, args.max_disk_full_seconds)
      fault.update(fill_filesystem(model_dir), seconds=round(seconds, 2))
      filled_until[0] = time.time() + seconds
      for each in procs.values():
        each.disk_full_until = filled_until[0]
        each.set_disk_full(True)
    elif kind == "disk_full":
      seconds = rng.uniform(2.0, args.max_disk_full_seconds)
      fault.update(pid=proc.popen.pid, seconds=round(seconds, 2), limit_bytes=proc.fsize_limit())
      proc.disk_full_until = time.time() + seconds
      proc.set_disk_full(True)
    elif kind == "update_index":
      if not fault["indexes"]:  # bin/update_index updates a published index
        fault["skipped"] = "no published index"
      else:
        updates.start(rng, fault, last_swap in fault["indexes"])
    fault["log_tails"] = {name: tail(p.log_path) for name, p in procs.items()}
    return fault

  while True:
    now = time.time()
    # Pauses end; full disks are freed; an update ends (or is killed).
    if filled_until[0] is not None and now >= filled_until[0]:
      free_filesystem(model_dir)
      filled_until[0] = None
    if updates is not None:
      updates.poll(now)
    second_refresher_done(now)
    for proc in procs.values():
      if proc.stopped_until is not None and now >= proc.stopped_until:
        proc.signal(signal.SIGCONT)
        proc.stopped_until = None
      if proc.disk_full_until is not None and now >= proc.disk_full_until:
        proc.disk_full_until = None
        proc.set_disk_full(False)
    # A restart's first progress: a checkpoint saved (the `checkpoint` file rewritten), an index published.
    current = state()
    if current["checkpoint_mtime"] != last["checkpoint_mtime"] or \
        set(current["indexes"]) - set(last["indexes"]):
      for proc, changed in ((trainer, current["checkpoint_mtime"] != last["checkpoint_mtime"]),
                            (refresher, bool(set(current["indexes"]) - set(last["indexes"])))):
        if changed and proc.starts and proc.starts[-1]["progress_seconds"] is None:
          proc.starts[-1]["progress_seconds"] = round(now - proc.starts[-1]["time"], 2)
    last = current
    mark = [
        current["latest_step"] if current["latest_step"] is not None else -1,
        max(current["indexes"], default=-1)
    ]
    if mark[0] > high_water[0] or mark[1] > high_water[1]:
      high_water = [max(a, b) for a, b in zip(mark, high_water)]
      last_progress = now
    done = training_state.training_done(model_dir)
    if done and trainer_done_at is None:
      trainer_done_at = now
    # Exits and restarts.
    gave_up = False
    for name, process in (("trainer", trainer), ("refresher", refresher)):
      if exit_at[name] is not None or process.alive():
        continue
      code = process.popen.returncode
      process.exit_codes.append(code)
      if code == 0 and done:
        exit_at[name] = now
        note(f"trainer finished (step {training_state.latest_step(model_dir)})" if name ==
             "trainer" else "refresher finished")
      elif len(process.starts) > args.max_restarts:
        record["gave_up"] = f"{name} restarted {args.max_restarts} times"
        gave_up = True
        break
      else:
        if process.stop_sent is None:
          # An exit on a documented error after the soak damaged a file is the process refusing that
          # damage (e.g. CorruptIndexError for an unusable bootstrap index, which its restart rebuilds);
          # any other exit that no signal caused is a finding.
          log_tail = tail(process.log_path, 15)
          named = next((line for line in reversed(log_tail) if _documented_error(line)), None)
          damaged = record["damaged"]["checkpoints"] or record["damaged"]["indexes"]
          exit_record = dict(target=name, code=code, time_s=now - started, log_tail=log_tail)
          if named and process.disk_full_seen:
            record["exits_on_full_disk"].append(dict(exit_record, error=named))
          elif named and damaged:
            record["exits_on_documented_errors"].append(dict(exit_record, error=named))
            if name == "trainer" and NO_READABLE_CHECKPOINT in named:
              # The soak damaged every checkpoint there was (the only one, saved by a SIGTERM before
              # the first periodic save): the same command cannot succeed, and the error says what an
              # operator does. The soak does it, then restarts.
              removed = _start_over(model_dir)
              record["operator_fixes"].append(
                  dict(time_s=round(now - started, 2), error=named, removed=removed))
              note(f"operator: followed ResumeError's fix, removed {len(removed)} checkpoint files")
          else:
            record["unexpected_exits"].append(exit_record)
        else:  # how long the signal took to stop it (SIGTERM: the step in flight, the save)
          process.stop_sent["exit_seconds"] = round(now - process.stop_sent.pop("sent_unix_time"), 2)
          process.stop_sent = None
        note(f"{name} exited {code}: restarting")
        process.start(current)
    if gave_up:
      break
    if exit_at["trainer"] is not None and exit_at["refresher"] is not None and \
        (updates is None or updates.running is None) and second[0] is None:
      break
    # Hangs: no progress for hang_seconds while training is unfinished; or an exit overdue.
    if not done and now - last_progress > args.hang_seconds:
      record["hang"] = dict(time_s=now - started,
                            what="no checkpoint or index beyond step "
                            f"{high_water[0]} / {high_water[1]} for {args.hang_seconds} s (no fault "
                            f"in the last {args.hang_seconds / 2:.0f} s)",
                            high_water=high_water,
                            latest_step=current["latest_step"],
                            indexes=current["indexes"],
                            log_tails={
                                n: tail(p.log_path, 15) for n, p in procs.items()
                            })
      note(f"HANG: {record['hang']['what']}")
      break
    overdue = [
        p.name
        for p in procs.values()
        if p.stop_sent is not None and now - p.stop_sent["sent_unix_time"] > args.exit_seconds
    ]
    if overdue:
      record["hang"] = dict(time_s=now - started,
                            what=f"{overdue} not exited {args.exit_seconds} s "
                            "after a SIGTERM",
                            log_tails={
                                n: tail(p.log_path, 15) for n, p in procs.items()
                            })
      note(f"HANG: {record['hang']['what']}")
      break
    if done and now - trainer_done_at > args.exit_seconds:
      record["hang"] = dict(time_s=now - started,
                            what=f"not exited {args.exit_seconds} s after the "
                            "done marker",
                            alive=[n for n, p in procs.items() if p.alive()],
                            log_tails={
                                n: tail(p.log_path, 15) for n, p in procs.items()
                            })
      note(f"HANG: {record['hang']['what']}")
      break
    # Faults.
    # No progress for half the hang bound: no more faults until there is (a hang, not faults too dense).
    quiet = now - last_progress > args.hang_seconds / 2
    if quiet and faults and not was_quiet:
      record["quiet_periods"] += 1
    was_quiet = quiet
    if faults and not done and not quiet and now >= next_fault and \
        len(record["faults"]) < args.max_faults and now < deadline:
      kind = rng.choice(args.fault_kinds)
      per_process = ("sigkill", "sigterm", "sigstop") + (("disk_full",) if mode == "rlimit" else ())
      target = rng.choice(["trainer", "refresher"]) if kind in per_process \
          else ("refresher" if kind == "second_refresher" else "files")
      busy = [p for p in procs.values() if not p.alive() or p.stopped_until is not None]
      if (target in procs and (not procs[target].alive() or procs[target].stopped_until or
                               procs[target].disk_full_until)) or \
          (kind == "second_refresher" and (refresher in busy or second[0] is not None)) or \
          (target == "refresher" and second[0] is not None) or \
          (kind == "update_index" and updates.running is not None) or \
          (kind == "disk_full" and filled_until[0] is not None):
        next_fault = now + 0.5  # the target is down or paused: draw again shortly
        continue
      fault = inject(kind, target)
      if "skipped" in fault:  # nothing to damage yet: draw again shortly, the fault not counted
        next_fault = now + 0.5
        continue
      record["faults"].append(fault)
      note(
          f"fault {len(record['faults'])}: {kind} {target} "
          f"{fault.get('skipped') or fault.get('action') or fault.get('mode') or ''} (step {fault['latest_step']}, "
          f"indexes {fault['indexes']})")
      next_fault = time.time() + rng.uniform(args.min_gap_seconds, args.max_gap_seconds)
    time.sleep(0.2)

  for proc in procs.values():  # after a hang or a give-up: nothing is left running
    if proc.alive():
      proc.signal(signal.SIGCONT)
      proc.signal(signal.SIGKILL)
      proc.popen.wait()
  second_refresher_done(time.time(), stop=True)
  if filled_until[0] is not None:
    free_filesystem(model_dir)
  if updates is not None:
    updates.stop()
    record["updates"] = updates.records
    record["update_logs"] = [
        os.path.join(updates.root, f"update_index-{r['update']}.log") for r in updates.records
    ]
    # What a SIGKILLed update left in its TMPDIR (its scratch corpus): outside the model dir, reported.
    record["update_scratch_left"] = sorted(os.listdir(updates.tmp))
  record["seconds"] = round(time.time() - started, 1)
  for name in ("trainer", "refresher"):
    record[f"{name}_exit_after_done_s"] = (None if exit_at[name] is None or trainer_done_at is None else
                                           round(exit_at[name] - trainer_done_at, 2))
  record["starts"] = {n: p.starts for n, p in procs.items()}
  record["exit_codes"] = {n: p.exit_codes for n, p in procs.items()}
  record["logs"] = {n: p.log_path for n, p in procs.items()}
  return record


def _damage(rng: random.Random, path: str) -> Dict:
  size = os.path.getsize(path)
  if rng.random() < 0.5:
    os.remove(path)
    return {"file": path, "action": "deleted", "size": size}
  with open(path, "r+b") as f:
    f.truncate(size // 2)
  return {"file": path, "action": f"truncated {size} -> {size // 2} bytes", "size": size}


# Invariants ---------------------------------------------------------------------------------------------


def compare_weights(clean_ckpt: str, faulted_ckpt: str) -> Dict:
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a, b = tf.train.load_checkpoint(clean_ckpt), tf.train.load_checkpoint(faulted_ckpt)
  # save_counter counts saves, not training: a SIGTERM's extra save raises it by one.
  skip = {"_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter/.ATTRIBUTES/VARIABLE_VALUE"}
  names_a = set(a.get_variable_to_shape_map()) - skip
  names_b = set(b.get_variable_to_shape_map()) - skip
  max_diff, worst = 0.0, None
  for name in sorted(names_a & names_b):
    x, y = a.get_tensor(name), b.get_tensor(name)
    if np.shape(x) != np.shape(y):
      return {"max_abs_diff": float("inf"), "worst_variable": name, "shape_mismatch": True}
    if np.issubdtype(np.asarray(x).dtype, np.number):
      diff = float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))) if np.size(x) \
          else 0.0
    else:
      diff = 0.0 if np.array_equal(x, y) else float("inf")
    if diff > max_diff:
      max_diff, worst = diff, name
  return {
      "max_abs_diff": max_diff,
      "worst_variable": worst,
      "variables": len(names_a & names_b),
      "only_in_one": sorted(names_a ^ names_b)
  }


def _start_over(model_dir: str) -> List[str]:
  """What ResumeError's "no checkpoint ... can be read" tells an operator to do: delete the checkpoints
  and the `checkpoint` file, so the next start begins from the warm start. Returns what was removed."""
  removed = sorted(glob.glob(os.path.join(
      model_dir, "ckpt-*"))) + [p for p in [os.path.join(model_dir, "checkpoint")] if os.path.exists(p)]
  for path in removed:
    if os.path.isdir(path):  # a save's ckpt-N_temp
      shutil.rmtree(path)
    else:
      os.remove(path)
  return [os.path.basename(p) for p in removed]


def check_checkpoints(model_dir: str, damaged: List[Dict]) -> Dict:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  state = tf.train.get_checkpoint_state(model_dir)
  listed = list(state.all_model_checkpoint_paths) if state else []
  ok, failed, damaged_left = [], [], []
  for path in listed:
    try:
      reader = tf.train.load_checkpoint(path)
      for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)
      ok.append(path)
    except Exception as e:  # pylint: disable=broad-except
      still_damaged = any(
          d["path"] == path and (not os.path.exists(d["file"]) or os.path.getmtime(d["file"]) <= d["time"])
          for d in damaged)
      (damaged_left if still_damaged else failed).append(f"{path}: {type(e).__name__}: {str(e)[:200]}")
  return {
      "listed": len(listed),
      "restored": len(ok),
      "unreadable": failed,
      "damaged_by_soak_still_listed": damaged_left
  }


def check_indexes(model_dir: str, corpus_prefix: str, damaged: List[Dict], derived: List[str] = ()) -> Dict:
  """Every published index verifies and names its step, checkpoint and corpus: the run's corpus or one
  of `derived` (the corpora the soak's bin/update_index runs wrote; an update's index, and a refresh
  after it, embed those). An update's index names the checkpoint of the index it updated."""
  from realm_tf.retrieval import published_index  # pylint: disable=g-import-not-at-top
  ok, failed, damaged_left, updated = [], [], [], []
  corpora = {os.path.abspath(p) for p in [corpus_prefix, *derived]}
  damaged_steps = {d["step"] for d in damaged}
  for step in index_steps(model_dir):
    path = os.path.join(model_dir, "index", str(step))
    try:
      published = published_index.verify_published(path)
      problems = []
      if published.get("step") != step:
        problems.append(f"published.json names step {published.get('step')}")
      if os.path.abspath(str(published.get("corpus_prefix", published.get("corpus", "")))) not in corpora:
        problems.append(f"published.json names corpus {published.get('corpus_prefix')}")
      checkpoint_step = published.get("checkpoint_step", step) if published.get("update") else step
      if checkpoint_step and not str(published.get("checkpoint", "")).endswith(f"ckpt-{checkpoint_step}"):
        problems.append(f"published.json names checkpoint {published.get('checkpoint')}")
      if problems:
        raise ValueError("; ".join(problems))
      ok.append(step)
      if published.get("update"):
        updated.append(step)
    except Exception as e:  # pylint: disable=broad-except
      (damaged_left
       if step in damaged_steps else failed).append(f"{path}: {type(e).__name__}: {str(e)[:200]}")
  return {
      "published": len(index_steps(model_dir)),
      "verified": len(ok),
      "verified_updates": updated,
      "failed": failed,
      "damaged_by_soak_left": damaged_left
  }


def leftovers(model_dir: str) -> List[str]:
  found = []
  for directory, dirs, files in os.walk(model_dir):
    for name in dirs + files:
      if name.startswith(".tmp-") or name.endswith("_temp") or "_temp/" in name:
        found.append(os.path.relpath(os.path.join(directory, name), model_dir))
  return found


_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Cancelled)):?")


def _documented_error(line: str) -> bool:
  """Whether line is a traceback's final line naming one of DOCUMENTED_ERRORS."""
  match = _EXCEPTION_LINE.match(line)
  return bool(match) and match.group(1).rsplit(".", 1)[-1] in DOCUMENTED_ERRORS


# TensorFlow logs some errors it handles with their traceback and goes on: the SavedModel loader, on a
# truncated fingerprint.pb of a damaged index's query tower (the long soak's fourth run counted it as an
# undocumented traceback). Such a traceback is no stop of the process: counted apart.
_HANDLED_BY_TENSORFLOW = ("Saved model loading will continue.",)


def tracebacks(log_paths: List[str]) -> Dict:
  documented, undocumented, handled = [], [], []
  for path in log_paths:
    if not os.path.exists(path):
      continue
    with open(path, errors="replace") as f:
      lines = f.read().splitlines()
    for i, line in enumerate(lines):
      if not line.startswith("Traceback (most recent call last)"):
        continue
      if i > 0 and lines[i - 1].rstrip().endswith(_HANDLED_BY_TENSORFLOW):
        handled.append(f"{os.path.basename(path)}: {_strip_log_prefix(lines[i - 1]).strip()[:300]}")
        continue
      end = next((j for j in range(i + 1, min(i + 400, len(lines))) if _EXCEPTION_LINE.match(lines[j])), None)
      # A cause ("The above exception was the direct cause ...", "During handling ...") is a link of a
      # chain whose last traceback is what the user reads: the chain is judged by that one (a
      # CheckpointWriteError raised from TensorFlow's OutOfRangeError on EFBIG is documented).
      after = lines[end + 1:end + 6] if end is not None else []
      after = after[:next((k for k, later in enumerate(after) if later.startswith("Traceback")), None)]
      if any(later.startswith(("The above exception", "During handling")) for later in after):
        continue
      text = lines[end][:300] if end is not None else None
      entry = f"{os.path.basename(path)}: {text or 'traceback without a final exception line'}"
      (documented if text and _documented_error(text) else undocumented).append(entry)
  return {"documented": documented, "undocumented": undocumented, "handled_by_tensorflow": handled}


def warnings_of(log_path: str, needle: str) -> List[str]:
  if not os.path.exists(log_path):
    return []
  with open(log_path, errors="replace") as f:
    return [_strip_log_prefix(line).strip()[:400] for line in f if needle in line]


def main(argv=None) -> Dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--max_faults", type=int, default=20)
  parser.add_argument("--max_minutes",
                      type=float,
                      default=10.0,
                      help="no new fault after this many minutes of the faulted run")
  parser.add_argument("--num_train_steps", type=int, default=120)
  parser.add_argument("--save_checkpoints_steps", type=int, default=10)
  parser.add_argument("--batch_size", type=int, default=4)
  parser.add_argument("--min_gap_seconds", type=float, default=2.0)
  parser.add_argument("--max_gap_seconds", type=float, default=10.0)
  parser.add_argument("--max_pause_seconds", type=float, default=5.0)
  parser.add_argument("--max_disk_full_seconds", type=float, default=8.0)
  parser.add_argument("--disk_full_mode",
                      choices=("rlimit", "tmpfs"),
                      default="rlimit",
                      help="rlimit: disk_full limits one process's file size (EFBIG; no privilege needed); "
                      "tmpfs: the faulted run's model dir is a tmpfs of --tmpfs_mb the soak mounts (root "
                      "only), and disk_full fills it with a file (a real ENOSPC for every process)")
  parser.add_argument("--tmpfs_mb", type=int, default=256, help="size of --disk_full_mode=tmpfs's filesystem")
  parser.add_argument("--update_kill_probability",
                      type=float,
                      default=0.3,
                      help="chance that the soak SIGKILLs an update_index run")
  parser.add_argument("--max_update_kill_seconds",
                      type=float,
                      default=15.0,
                      help="a killed update_index run is killed after 0.5 s to this many seconds")
  parser.add_argument("--max_restarts", type=int, default=40)
  parser.add_argument("--hang_seconds", type=float, default=120.0)
  parser.add_argument("--exit_seconds", type=float, default=120.0)
  parser.add_argument("--clean_in_parallel",
                      action="store_true",
                      help="run the fault-free run(s) at the same time as the faulted one (their processes "
                      "compete for the CPU: timings differ, the final weights must not)")
  parser.add_argument("--repeat_clean",
                      type=int,
                      default=0,
                      choices=(0, 1),
                      help="1: a second fault-free run, whose difference from the first is the noise floor")
  parser.add_argument("--fault_kinds",
                      type=lambda v: v.split(","),
                      default=list(FAULT_KINDS),
                      help="comma-separated subset of " + ",".join(FAULT_KINDS))
  parser.add_argument("--dropout",
                      type=float,
                      default=0.1,
                      help="the BERT's dropout (0: a resumed run must equal the fault-free one exactly)")
  parser.add_argument("--tolerance", type=float, default=1e-5)
  parser.add_argument("--work_dir", default="/tmp/realm_fault_soak")
  parser.add_argument("--output_json", default=os.path.join(REPO, "bench", "results", "fault_soak.json"))
  args = parser.parse_args(argv)
  machine = throughput_lib.machine()  # the load before the soak's own processes start
  unknown = set(args.fault_kinds) - set(FAULT_KINDS)
  if unknown:
    parser.error(f"unknown --fault_kinds {sorted(unknown)}; choose from {','.join(FAULT_KINDS)}")
  if args.disk_full_mode == "tmpfs" and os.geteuid() != 0:
    parser.error("--disk_full_mode=tmpfs mounts a tmpfs, which needs root; run as root or use "
                 "--disk_full_mode=rlimit")
  if args.tmpfs_mb < 16:
    parser.error(f"--tmpfs_mb={args.tmpfs_mb}: the faulted run's checkpoints and indexes need at least 16")
  if not 0 <= args.update_kill_probability <= 1:
    parser.error(f"--update_kill_probability={args.update_kill_probability} is not in [0, 1]")
  if args.max_update_kill_seconds < 0.5:
    parser.error(f"--max_update_kill_seconds={args.max_update_kill_seconds} is below 0.5")
  started = time.time()
  os.makedirs(args.work_dir, exist_ok=True)
  bert_config = tiny_inputs.write_small_bert_config(args.work_dir)
  with open(bert_config) as f:
    config = json.load(f)
  # --dropout 0: a resumed trainer replays exactly (the dropout masks come from a random stream that
  # restarts with each process, so with dropout a resumed run differs from an uninterrupted one).
  config.update(hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
  io_utils.write_json_atomic(bert_config, config)
  options = options_for(args, args.work_dir, bert_config)
  corpora = os.path.join(args.work_dir, "corpora.json")
  if os.path.exists(corpora):  # written by an earlier soak in this work dir: the corpora are reused
    with open(corpora) as f:
      paths = json.load(f)
  else:
    paths = demo_pipeline.prepare_corpora(options, echo=lambda _: None)
    io_utils.write_json_atomic(corpora, paths)
  trainer_flags, refresher_flags = demo_pipeline.realm_process_flags(options, paths)
  runs = {}
  mounts: List[str] = []  # unmounted whatever happens (the finally below)
  try:
    where = {
        "command": " ".join(sys.argv if argv is None else ["bench/fault_soak.py"] + list(argv)),
        "machine": machine
    }
    return _soak(args, paths, trainer_flags, refresher_flags, runs, mounts, started, where)
  finally:
    for path in mounts:
      unmount(path)


def _soak(args, paths: Dict, trainer_flags: Dict, refresher_flags: Dict, runs: Dict, mounts: List[str],
          started: float, where: Dict) -> Dict:
  """The runs and their invariants (main's body, inside its unmount); where: the command and machine."""

  def one_run(name: str, faults: bool) -> None:
    model_dir = os.path.join(args.work_dir, name)
    flags_path = os.path.join(args.work_dir, name + "_logs", "flags.json")
    flags_now = dict(trainer=trainer_flags, refresher=refresher_flags)
    if not faults and os.path.exists(flags_path) and training_state.training_done(model_dir):
      with open(flags_path) as f:
        if json.load(f) == flags_now:  # a finished fault-free run of these flags: reused
          with open(os.path.join(args.work_dir, name + "_logs", "record.json")) as f:
            runs[name] = json.load(f)
          print(f"{name} run: reusing {model_dir}", flush=True)
          return
    for stale in (model_dir, os.path.join(args.work_dir, name + "_logs")):  # an earlier soak's
      if os.path.ismount(stale):  # an earlier soak killed before its unmount
        unmount(stale)
      if os.path.exists(stale):
        shutil.rmtree(stale)
    if faults and args.disk_full_mode == "tmpfs":
      mount_tmpfs(model_dir, args.tmpfs_mb)
      mounts.append(model_dir)
    print(f"{name} run: {args.num_train_steps} steps in {model_dir}", flush=True)
    runs[name] = run(args, model_dir, trainer_flags, refresher_flags,
                     os.path.join(args.work_dir, name + "_logs"), faults)
    if not faults and runs[name]["hang"] is None:
      io_utils.write_json_atomic(os.path.join(args.work_dir, name + "_logs", "record.json"), runs[name])
      io_utils.write_json_atomic(flags_path, flags_now)

  clean_runs = [("clean", False)] + [("clean_repeat", False)] * args.repeat_clean
  if args.clean_in_parallel:
    # The fault-free runs beside the faulted one: each run's processes mostly wait (for the other
    # process, between faults, in pauses), so together they take little more than the faulted run alone.
    errors = []

    def clean_run(name: str, faults: bool) -> None:
      try:
        one_run(name, faults)
      except BaseException as e:  # pylint: disable=broad-except  (re-raised below, in the main thread)
        errors.append(e)

    threads = [threading.Thread(target=clean_run, args=run_args) for run_args in clean_runs]
    for thread in threads:
      thread.start()
    one_run("faulted", True)
    for thread in threads:
      thread.join()
    if errors:
      raise errors[0]
  else:
    for name, faults in clean_runs + [("faulted", True)]:
      one_run(name, faults)
  clean, faulted = runs["clean"], runs["faulted"]
  model_dir = faulted["model_dir"]
  result: Dict = {
      **where, "args": vars(args),
      "trainer_flags": trainer_flags,
      "refresher_flags": refresher_flags
  }

  by_kind: Dict[str, int] = {}
  for fault in faulted["faults"]:
    if "skipped" not in fault:
      key = fault["kind"] + ("" if fault["target"] == "files" else f" {fault['target']}")
      by_kind[key] = by_kind.get(key, 0) + 1
  latest = training_state.latest_step(model_dir)
  inv: Dict = {}
  inv["reached_step"] = latest == args.num_train_steps and training_state.training_done(model_dir)
  inv["clean_reached_step"] = (training_state.latest_step(clean["model_dir"]) == args.num_train_steps and
                               training_state.training_done(clean["model_dir"]))
  weights = {"max_abs_diff": None}
  if inv["reached_step"] and inv["clean_reached_step"]:
    weights = compare_weights(os.path.join(clean["model_dir"], f"ckpt-{args.num_train_steps}"),
                              os.path.join(model_dir, f"ckpt-{args.num_train_steps}"))
  if "clean_repeat" in runs and inv["clean_reached_step"]:
    # The noise floor: two fault-free runs of the same seed.
    inv["clean_repeat_max_abs_diff"] = compare_weights(
        os.path.join(clean["model_dir"], f"ckpt-{args.num_train_steps}"),
        os.path.join(runs["clean_repeat"]["model_dir"], f"ckpt-{args.num_train_steps}"))["max_abs_diff"]
  updates = faulted.get("updates", [])
  # The corpora bin/update_index derived that the trainer read, and the edit each holds (if any).
  read = sorted(
      set(
          m.group(1)
          for line in warnings_of(faulted["logs"]["trainer"], "bin/update_index derived")
          for m in [DERIVED_CORPUS_READ.search(line)]
          if m))
  edits_read = []
  for prefix in read:
    edit = _content_changed(updates, prefix)
    if edit is not None:
      edits_read.append(dict(corpus_read=prefix, edit_update=edit["update"], edit_time_s=edit["time_s"]))
  not_published = (warnings_of(faulted["logs"]["trainer"], NOT_PUBLISHED_WARNING) +
                   warnings_of(faulted["logs"]["trainer"], UNUSABLE_INDEX_WARNING) +
                   warnings_of(faulted["logs"]["trainer"], UNREADABLE_CHECKPOINT_WARNING))
  resumed = warnings_of(faulted["logs"]["trainer"], "resumed from")
  inv["weights_max_abs_diff"] = weights["max_abs_diff"]
  inv["weights_equal"] = weights["max_abs_diff"] is not None and weights["max_abs_diff"] <= args.tolerance
  inv["not_published_warnings"] = len(not_published)
  # Explained: a fixed swap fell back to a later index (the warning), or dropout with a resumed trainer
  # (its dropout stream restarts with the process, so the replayed steps draw other masks).
  inv["weights_difference_explained_by"] = (
      "equal" if inv["weights_equal"] else
      f"bin/update_index edit(s) {sorted({e['edit_update'] for e in edits_read})} read by the trainer"
      if edits_read else "index not published or unusable"
      if not_published else "dropout after a resume" if args.dropout > 0 and resumed else None)
  inv["weights_equal_or_explained"] = inv["weights_difference_explained_by"] is not None
  checkpoints = check_checkpoints(model_dir, faulted["damaged"]["checkpoints"])
  inv["checkpoints_listed"] = checkpoints["listed"]
  inv["checkpoints_restored"] = checkpoints["restored"]
  inv["checkpoints_unreadable"] = len(checkpoints["unreadable"])
  inv["checkpoints_damaged_by_soak_still_listed"] = len(checkpoints["damaged_by_soak_still_listed"])
  indexes = check_indexes(model_dir, paths["retrieval"], faulted["damaged"]["indexes"],
                          [u["corpus_prefix"] for u in updates])
  inv["indexes_published"] = indexes["published"]
  inv["indexes_verified"] = indexes["verified"]
  inv["indexes_failed"] = len(indexes["failed"])
  inv["indexes_damaged_by_soak_left"] = len(indexes["damaged_by_soak_left"])
  inv["updates"] = len(updates)
  for outcome in ("published", "refused", "killed", "unexpected"):
    inv[f"updates_{outcome}"] = sum(1 for u in updates if u.get("outcome") == outcome)
  inv["updates_edit"] = sum(1 for u in updates if u["mode"] == "edit")
  inv["update_indexes_verified_at_end"] = len(indexes["verified_updates"])
  inv["derived_corpora_read_by_trainer"] = len(read)
  inv["edits_read_by_trainer"] = len(edits_read)
  left = leftovers(model_dir) + leftovers(clean["model_dir"])
  inv["temporary_leftovers"] = len(left)
  progress = [s["progress_seconds"] for p in ("trainer", "refresher") for s in faulted["starts"][p][1:]]
  trainer_restarts = faulted["starts"]["trainer"][1:]
  inv["restarts"] = len(progress)
  inv["max_seconds_restart_to_progress"] = max([p for p in progress if p is not None], default=None)
  # A restart that lived hang_seconds without a checkpoint (one stopped sooner by the next fault is not).
  inv["trainer_restarts_without_progress"] = sum(
      1 for s in trainer_restarts
      if s["progress_seconds"] is None and (s.get("lived_seconds") or 0) > args.hang_seconds)
  stops = [f["exit_seconds"] for f in faulted["faults"] if "exit_seconds" in f]
  inv["max_seconds_signal_to_exit"] = max(stops, default=None)
  inv["quiet_periods"] = faulted["quiet_periods"]
  inv["hang"] = faulted["hang"] is not None or clean["hang"] is not None
  inv["trainer_exit_after_done_s"] = faulted["trainer_exit_after_done_s"]
  inv["refresher_exit_after_done_s"] = faulted["refresher_exit_after_done_s"]
  logs = [p for r in runs.values() for p in r["logs"].values()] + [
      os.path.join(args.work_dir, "faulted_logs", "second_refresher.log")
  ] + faulted.get("update_logs", [])
  traces = tracebacks(logs)
  inv["tracebacks_documented"] = len(traces["documented"])
  inv["tracebacks_undocumented"] = len(traces["undocumented"])
  inv["tracebacks_handled_by_tensorflow"] = len(traces["handled_by_tensorflow"])
  second = [f for f in faulted["faults"] if f["kind"] == "second_refresher"]
  inv["second_refreshers"] = len(second)
  inv["second_refreshers_refused_naming_first"] = sum(1 for f in second if f["ok"])
  inv["unexpected_exits"] = len(faulted["unexpected_exits"])
  inv["exits_on_documented_errors_after_damage"] = len(faulted["exits_on_documented_errors"])
  inv["operator_fixes"] = len(faulted["operator_fixes"])
  inv["exits_on_documented_errors_on_full_disk"] = len(faulted.get("exits_on_full_disk", []))
  inv["all_hold"] = bool(
      inv["reached_step"] and inv["clean_reached_step"] and inv["weights_equal_or_explained"] and
      not inv["checkpoints_unreadable"] and not inv["indexes_failed"] and not left and not inv["hang"] and
      not inv["trainer_restarts_without_progress"] and not inv["tracebacks_undocumented"] and
      inv["second_refreshers_refused_naming_first"] == inv["second_refreshers"] and
      not inv["unexpected_exits"] and not inv["updates_unexpected"] and not faulted.get("gave_up"))
  result.update(faults_injected=sum(by_kind.values()),
                faults_by_kind=by_kind,
                faults_skipped=sum(1 for f in faulted["faults"] if "skipped" in f),
                invariants=inv,
                weights=weights,
                not_published_warnings=not_published,
                edits_read_by_trainer=edits_read,
                derived_corpora_read_by_trainer=read,
                resumed_lines=resumed,
                indexes_used_clean=_indexes_used(clean["model_dir"]),
                indexes_used_faulted=_indexes_used(model_dir),
                checkpoints=checkpoints,
                indexes=indexes,
                leftovers=left,
                tracebacks=traces,
                clean_seconds=clean["seconds"],
                faulted_seconds=faulted["seconds"],
                seconds=round(time.time() - started, 1),
                load_average_at_end=list(throughput_lib.load_average()),
                clean={
                    k: v for k, v in clean.items() if k != "faults"
                },
                faulted=faulted)
  os.makedirs(os.path.dirname(os.path.abspath(args.output_json)), exist_ok=True)
  io_utils.write_json_atomic(args.output_json, result)
  print_table(result)
  print(f"wrote {args.output_json}")
  return result


def _content_changed(updates: List[Dict], prefix: str) -> Optional[Dict]:
  """The edit (an update record) whose changes the corpus `prefix` holds, if any: updates form one
  chain, so a corpus derived after an edit that may have published holds its changes."""
  order = next(
      (i for i, u in enumerate(updates) if os.path.abspath(u["corpus_prefix"]) == os.path.abspath(prefix)),
      None)
  if order is None:  # a corpus no update of this soak wrote: treat it as changed, naming no update
    return {"update": None, "time_s": None}
  return next(
      (u for u in updates[:order + 1] if u["mode"] == "edit" and u.get("outcome") in ("published", "killed")),
      None)


def _indexes_used(model_dir: str):
  path = os.path.join(model_dir, "train_summary.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f).get("indexes_used")


def print_table(result: Dict) -> None:
  print(f"\nfaults injected: {result['faults_injected']} (skipped {result['faults_skipped']}); "
        f"clean run {result['clean_seconds']} s, faulted run {result['faulted_seconds']} s")
  for kind, count in sorted(result["faults_by_kind"].items()):
    print(f"  {kind:32s} {count}")
  print("\n| invariant | value |\n|---|---|")
  for name, value in result["invariants"].items():
    print(f"| {name} | {value} |")


if __name__ == "__main__":
  main()
