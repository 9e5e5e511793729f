r"""Downloads the public QA data sets the loaders and benches read, checks each file's size and
sha256, and lays them out under --data_dir as the loaders and benches read them.

  .venv/bin/python bin/download_data.py               # squad, nq_open, webquestions, curatedtrec
  .venv/bin/python bin/download_data.py --data_dir=/data/qa --datasets=squad,nq_open
  python bench/squad_open_bench.py --squad_dir=data/squad

Layout under --data_dir (default: data/ under the current directory):
  squad/         train-v1.1.json, dev-v1.1.json (SQuAD v1.1, official names) and
                 squad-v1.1-paragraphs.tsv, derived here from the two: every paragraph of train,
                 then of dev, as id<TAB>text<TAB>title<TAB>split, numbered from 1 as
                 realm_tf.data.qa.load_squad_paragraphs numbers them (the SQuAD-open corpus)
  nq_open/       NQ-open train and dev, EfficientQA dev and test 1.1 (with and without annotations)
  webquestions/  trainmodel/val/devtest/test.json, the `qText` packaging of WebQuestions
  curatedtrec/   curated-{full,train,test}.tsv, large2180-{train,test}.tsv,
                 large2470-{train,test}.tsv
  webquestions/  webquestions.examples.{train,test}.json, Berant et al.'s original files (only with
                 --datasets=webquestions_original: served by CodaLab, which the benches do not need)

Where the addresses and expected checksums come from:
  - SQuAD: the SQuAD explorer's dataset/ folder; sizes and sha256 from TensorFlow Datasets'
    url_checksums/squad.txt.
  - NQ-open: google-research-datasets/natural-questions on GitHub, nq_open/ at a fixed commit (a
    commit, not master, so the checksums stay valid). train and dev: TensorFlow Datasets'
    natural_questions_open/checksums.tsv (same files at that commit); the EfficientQA files: the
    sha256 of the repository's files at that commit.
  - WebQuestions (`qText`) and CuratedTREC: brmson/dataset-factoid-webquestions (main/) and
    brmson/dataset-factoid-curated, at fixed commits (large2180-* were renamed large2470-* later, so
    theirs is the last commit that has them); sha256 of the repository's files at those commits.
  - Original WebQuestions: the CodaLab bundles TensorFlow Datasets' web_questions builder downloads,
    with its url_checksums/web_questions.txt.

Each file is streamed into a temporary file beside its target, its size and sha256 are checked, and
only then is it renamed into place: a failed or mismatching download leaves nothing behind. A file
already present with the expected sha256 is not downloaded again. --base_url fetches from a mirror
laid out like --data_dir instead; --checksums_file replaces expected checksums (another version).
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

import csv
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple
import urllib.error
import urllib.request

from absl import app
from absl import flags
from absl import logging


@dataclasses.dataclass(frozen=True)
class RemoteFile:
  """One file of a data set: where it goes under --data_dir, where it comes from, what it is."""
  path: str  # relative to --data_dir, "/"-separated: "squad/train-v1.1.json"
  url: str  # the official address
  size: int
  sha256: str


def _github_raw(repo: str, commit: str, folder: str = "") -> str:
  return f"https://raw.githubusercontent.com/{repo}/{commit}/{folder}"


_SQUAD_URL = "https://rajpurkar.github.io/SQuAD-explorer/dataset/"
_NQ_URL = _github_raw("google-research-datasets/natural-questions",
                      "fb26a3073b1fe636c97302890a27b491d6530130", "nq_open/")
_WEBQUESTIONS_URL = _github_raw("brmson/dataset-factoid-webquestions",
                                "668890853388010fe6ae9a5eb035a7917b88933b", "main/")
_CURATED_URL = _github_raw("brmson/dataset-factoid-curated", "3b757bfe8e88cdadbd070ecbb5d030df720d2a3a")
# The last commit with large2180-*: the next one renamed them large2470-* and added questions.
_CURATED_2180_URL = _github_raw("brmson/dataset-factoid-curated", "087375a260f713cd5991b6cd615e55f972d50989")
_CODALAB_URL = "https://worksheets.codalab.org/rest/bundles/"

# The file names the SQuAD-open loaders look for first (realm_tf.data.squad_open.find_squad_files).
SQUAD_TRAIN = "squad/train-v1.1.json"
SQUAD_DEV = "squad/dev-v1.1.json"
SQUAD_PARAGRAPHS = "squad/squad-v1.1-paragraphs.tsv"

# {data set: its files}; the module docstring says where each address and checksum comes from.
DATASETS: Dict[str, Tuple[RemoteFile, ...]] = {
    "squad": (
        RemoteFile(SQUAD_TRAIN, _SQUAD_URL + "train-v1.1.json", 30288272,
                   "3527663986b8295af4f7fcdff1ba1ff3f72d07d61a20f487cb238a6ef92fd955"),
        RemoteFile(SQUAD_DEV, _SQUAD_URL + "dev-v1.1.json", 4854279,
                   "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"),
    ),
    "nq_open": (
        RemoteFile("nq_open/NQ-open.train.jsonl", _NQ_URL + "NQ-open.train.jsonl", 8522298,
                   "0c93aaf13b12f855628489665e4ef85ffb8573ad444646f11f4fabdc57a0aabf"),
        RemoteFile("nq_open/NQ-open.dev.jsonl", _NQ_URL + "NQ-open.dev.jsonl", 391316,
                   "f15567f38099f3615f5b8a685c0aef449c11ad90d3da3735e8d1b98115b40616"),
        RemoteFile("nq_open/NQ-open.efficientqa.dev.1.1.jsonl", _NQ_URL + "NQ-open.efficientqa.dev.1.1.jsonl",
                   194998, "0ad45e2fa9fd32d10b3cf08c63e6d22f97ba1a0ce44ea98040f4c18bce7e268d"),
        RemoteFile("nq_open/NQ-open.efficientqa.dev.1.1.no-annotations.jsonl",
                   _NQ_URL + "NQ-open.efficientqa.dev.1.1.no-annotations.jsonl", 116642,
                   "98db3591bf61106a8d5f3fa16c55b1a5d4294bb3009f838b01a217dd15be4198"),
        RemoteFile("nq_open/NQ-open.efficientqa.test.1.1.jsonl",
                   _NQ_URL + "NQ-open.efficientqa.test.1.1.jsonl", 595322,
                   "c37b3cb2069632dfef219fa770d7910ac77ff6d12a08e8f3d5f058b388aca8a6"),
        RemoteFile("nq_open/NQ-open.efficientqa.test.1.1.no-annotations.jsonl",
                   _NQ_URL + "NQ-open.efficientqa.test.1.1.no-annotations.jsonl", 113800,
                   "eef2c7f0197dd26cd837b05acdd19c92fbb716cb9d7d4208cb11e577577f74d0"),
    ),
    "webquestions": (
        RemoteFile("webquestions/trainmodel.json", _WEBQUESTIONS_URL + "trainmodel.json", 377322,
                   "eef8b21e5b65697b643f3904c4f1122f077a8afdf3dc91a2058d3cf7d34baa50"),
        RemoteFile("webquestions/val.json", _WEBQUESTIONS_URL + "val.json", 102028,
                   "eece8cddb324972d55bae4ac05eb06d728bc6e4111585509391efcff5c29e063"),
        RemoteFile("webquestions/devtest.json", _WEBQUESTIONS_URL + "devtest.json", 25148,
                   "2541838645f7b8a6f24c4f409f12568b1616095f2edb6280eec924ea3df123c8"),
        RemoteFile("webquestions/test.json", _WEBQUESTIONS_URL + "test.json", 274219,
                   "de320953700cd08300b9bcd2e60399da43b458a1be02db3f93c40344729fed39"),
    ),
    "curatedtrec": (
        RemoteFile("curatedtrec/curated-full.tsv", _CURATED_URL + "curated-full.tsv", 66910,
                   "9493707b255ec56ad36656eaad132d9a5827ee7eb7904c6558e94dc6a32e316a"),
        RemoteFile("curatedtrec/curated-train.tsv", _CURATED_URL + "curated-train.tsv", 33058,
                   "988ee456852a5c96b9081968e16e34932569f020ad0583ab8eec957bd0054c18"),
        RemoteFile("curatedtrec/curated-test.tsv", _CURATED_URL + "curated-test.tsv", 33320,
                   "d1b405b48727640d079bce609052e81f6e4444d35fda060aa23acec74bb33488"),
        RemoteFile("curatedtrec/large2180-train.tsv", _CURATED_2180_URL + "large2180-train.tsv", 163728,
                   "694f83edacce11b2444c8644fa07a73702b8c862707edc325bf528ada4cf9463"),
        RemoteFile("curatedtrec/large2180-test.tsv", _CURATED_2180_URL + "large2180-test.tsv", 66204,
                   "ae0208134dfa4067f505ff0da3925f401758c175d1fcfeb7d629edfc91d76ee9"),
        RemoteFile("curatedtrec/large2470-train.tsv", _CURATED_URL + "large2470-train.tsv", 179495,
                   "b3c731a970a0f642dc50ea60395d22a520299fc462d046863e64df3dfbb0d176"),
        RemoteFile("curatedtrec/large2470-test.tsv", _CURATED_URL + "large2470-test.tsv", 71065,
                   "b112e749015566b67836de592d129e315821de6238a9ff1289a9d3e0b21ca0ac"),
    ),
    "webquestions_original": (
        RemoteFile("webquestions/webquestions.examples.train.json",
                   _CODALAB_URL + "0x4a763f8cde224c2da592b75f29e2f5c2/contents/blob/", 825320,
                   "fb1797e4554a1b1be642388367de1379f8c0d5afc609ac171492c67f7b70cb1e"),
        RemoteFile("webquestions/webquestions.examples.test.json",
                   _CODALAB_URL + "0xe7bac352fce7448c9ef238fb0a297ec2/contents/blob/", 447645,
                   "e3d4550e90660aaabe18458ba34b59f2624857273f375af7353273ce8b84ce6e"),
    ),
}
# What the loaders' tests and the benches read.
DEFAULT_DATASETS = ("squad", "nq_open", "webquestions", "curatedtrec")

_DATA_DIR = flags.DEFINE_string(
    "data_dir", "data",
    "Directory the data sets go into (created if absent), one folder per data set. Default: data/ "
    "under the current directory.")
_DATASETS = flags.DEFINE_list("datasets", list(DEFAULT_DATASETS),
                              f"Comma-separated data sets to fetch, of: {', '.join(DATASETS)}.")
_BASE_URL = flags.DEFINE_string(
    "base_url", None,
    "Fetch every file from BASE_URL/<path under --data_dir> (e.g. BASE_URL/squad/dev-v1.1.json: a "
    "mirror laid out like --data_dir, http(s):// or file://) instead of its official address. The "
    "size and sha256 checks still apply; see --checksums_file for a mirror of other versions.")
_CHECKSUMS_FILE = flags.DEFINE_string(
    "checksums_file", None,
    "Text file of `PATH SIZE SHA256` lines (PATH as under --data_dir, e.g. squad/dev-v1.1.json; "
    "'#' starts a comment) replacing the built-in expected size and sha256 of those files.")
_TIMEOUT_S = flags.DEFINE_float("timeout_s", 60.0,
                                "Seconds a connection may wait for the server before the download fails.")

_CHUNK_BYTES = 1 << 20  # streamed: SQuAD train is 30 MB, and a wrong URL may serve far more
_USER_AGENT = "realm_tf-download_data"


class DownloadError(Exception):
  """A file could not be fetched, verified or derived; the message names it and what to do."""


@dataclasses.dataclass
class Summary:
  """What a run did, by path under --data_dir."""
  downloaded: List[str] = dataclasses.field(default_factory=list)
  present: List[str] = dataclasses.field(default_factory=list)  # already there, right sha256
  derived: List[str] = dataclasses.field(default_factory=list)
  failures: List[str] = dataclasses.field(default_factory=list)  # error messages


def read_checksums_file(path: str) -> Dict[str, Tuple[int, str]]:
  """{path under --data_dir: (size, sha256)} from `PATH SIZE SHA256` lines; DownloadError naming
  FILE:LINE for a malformed line or an unknown PATH."""
  known = {f.path for files in DATASETS.values() for f in files}
  checksums = {}
  try:
    with open(path, encoding="utf-8") as f:
      lines = list(f)
  except OSError as e:
    raise DownloadError(f"--checksums_file={path}: cannot read it ({e}); pass an existing file of "
                        "`PATH SIZE SHA256` lines") from None
  for number, line in enumerate(lines, 1):
    fields = line.split("#", 1)[0].split()
    if not fields:
      continue
    where = f"--checksums_file={path}:{number}"
    if (len(fields) != 3 or not fields[1].isdigit() or len(fields[2]) != 64 or
        any(c not in "0123456789abcdef" for c in fields[2].lower())):
      raise DownloadError(f"{where}: expected `PATH SIZE SHA256` (SIZE in bytes, SHA256 as 64 hex "
                          f"digits), got {line.strip()!r}; fix the line")
    if fields[0] not in known:
      raise DownloadError(f"{where}: {fields[0]!r} is no file this binary fetches; use a path as "
                          f"under --data_dir, e.g. {SQUAD_DEV}")
    checksums[fields[0]] = (int(fields[1]), fields[2].lower())
  return checksums


def resolve(datasets: Sequence[str],
            *,
            base_url: Optional[str] = None,
            checksums: Optional[Mapping[str, Tuple[int, str]]] = None) -> List[RemoteFile]:
  """The files of datasets, from base_url when given, with checksums' sizes and sha256 instead."""
  unknown = [d for d in datasets if d not in DATASETS]
  if unknown:
    raise DownloadError(f"--datasets: unknown data set(s) {', '.join(unknown)}; choose from "
                        f"{', '.join(DATASETS)}")
  files = []
  for dataset in dict.fromkeys(datasets):  # each once, in the order given
    for remote in DATASETS[dataset]:
      if base_url:
        remote = dataclasses.replace(remote, url=f"{base_url.rstrip('/')}/{remote.path}")
      if checksums and remote.path in checksums:
        size, sha256 = checksums[remote.path]
        remote = dataclasses.replace(remote, size=size, sha256=sha256)
      files.append(remote)
  return files


def sha256_of(path: str) -> Tuple[int, str]:
  """(size, sha256 hex digest) of a file, read in chunks."""
  digest, size = hashlib.sha256(), 0
  with open(path, "rb") as f:
    while chunk := f.read(_CHUNK_BYTES):
      digest.update(chunk)
      size += len(chunk)
  return size, digest.hexdigest()


def _remove_quietly(path: str) -> None:
  try:
    os.remove(path)
  except FileNotFoundError:
    pass


def _chunks(url: str, timeout_s: float) -> Iterator[bytes]:
  """The body of url in chunks; network failures become a DownloadError naming url. (A generator:
  errors of the caller's writes are raised in the caller, not mistaken for network errors here.)"""
  request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
  try:
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
      while chunk := response.read(_CHUNK_BYTES):
        yield chunk
  except urllib.error.HTTPError as e:
    raise DownloadError(f"{url}: HTTP {e.code} {e.reason}; check that the address still serves the "
                        "file (or pass --base_url=<a mirror>) and run again") from None
  except (urllib.error.URLError, OSError) as e:
    raise DownloadError(f"{url}: cannot fetch it ({getattr(e, 'reason', e)}); check the address "
                        "and the network connection (or pass --base_url=<a mirror>) and run "
                        "again") from None


def _file_mode() -> int:
  """The mode open() gives a new file: mkstemp's are private (0600), data files need not be."""
  mask = os.umask(0)
  os.umask(mask)
  return 0o666 & ~mask


def fetch(remote: RemoteFile, target: str, *, timeout_s: float = 60.0) -> None:
  """Streams remote.url into a temporary file beside target and renames it to target once its size
  and sha256 are the expected ones; on any failure the temporary file is removed and target is left
  as it was."""
  directory = os.path.dirname(target)
  os.makedirs(directory, exist_ok=True)
  # Beside the target, so the rename is atomic (same file system); hidden, so a reader listing the
  # folder never takes it for data.
  fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(target)}.", suffix=".part")
  try:
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "wb") as out:
      for chunk in _chunks(remote.url, timeout_s):
        digest.update(chunk)
        size += len(chunk)
        # Past the expected size the file is wrong anyway: keep hashing, so the error can name the
        # actual sha256, but stop filling the disk.
        if size <= remote.size:
          out.write(chunk)
      out.flush()
      os.fsync(out.fileno())
    actual = digest.hexdigest()
    if size != remote.size or actual != remote.sha256:
      raise DownloadError(
          f"{remote.url}: checksum mismatch for {remote.path}: expected sha256 {remote.sha256} "
          f"({remote.size} bytes), got sha256 {actual} ({size} bytes); nothing was written to "
          f"{target}. The download was corrupted or the server now serves another version: run "
          "again; if it persists, fetch the file from another mirror (--base_url), or, if you "
          "trust this version, pass its size and sha256 with --checksums_file")
    os.chmod(temp, _file_mode())
    os.replace(temp, target)
  except BaseException:
    # Also on KeyboardInterrupt: a half-written .part file must not outlive the run.
    _remove_quietly(temp)
    raise


def ensure(remote: RemoteFile,
           data_dir: str,
           *,
           timeout_s: float = 60.0,
           log: Callable[[str], None] = logging.info) -> bool:
  """Makes data_dir/remote.path the expected file; True if it was downloaded, False if it was
  already there."""
  target = os.path.join(data_dir, *remote.path.split("/"))
  if os.path.exists(target):
    size = os.path.getsize(target)
    # The size first: a different size needs no hashing to be known wrong.
    actual = sha256_of(target)[1] if size == remote.size else None
    if actual == remote.sha256:
      log(f"{target}: present, sha256 verified")
      return False
    log(f"{target}: present but {size} bytes, sha256 {actual or 'not computed'} (expected "
        f"{remote.size} bytes, sha256 {remote.sha256}); fetching it again, it is replaced only "
        "once the new copy verifies")
  log(f"{target}: fetching {remote.url}")
  fetch(remote, target, timeout_s=timeout_s)
  log(f"{target}: {remote.size} bytes, sha256 verified")
  return True


def _squad_articles(path: str) -> list:
  try:
    with open(path, encoding="utf-8") as f:
      value = json.load(f)
  except (OSError, ValueError) as e:
    raise DownloadError(f"{path}: cannot read it as JSON ({e}); delete it and run again") from None
  articles = value.get("data") if isinstance(value, dict) else None
  if not isinstance(articles, list) or not all(
      isinstance(a, dict) and isinstance(a.get("title"), str) and isinstance(a.get("paragraphs"), list) and
      all(isinstance(p, dict) and isinstance(p.get("context"), str)
          for p in a["paragraphs"])
      for a in articles):
    raise DownloadError(f"{path}: not SQuAD v1.1 JSON (an object whose \"data\" holds articles "
                        "with a \"title\" and \"paragraphs\" of {\"context\", ...}); delete it "
                        "and run again")
  return articles


def write_squad_paragraphs(train_path: str, dev_path: str, output_path: str) -> int:
  """Writes the SQuAD-open paragraph corpus (id, text, title, split) atomically; returns its rows.

  The rows are realm_tf.data.qa.load_squad_paragraphs(train, first_paragraph_id=1) then dev's, which
  continues the numbering: the same ids, bodies and titles (underscores as spaces), so the benches
  that read the TSV and the ones that read the JSON files agree on every doc_id. Quoted as csv
  does, which realm_tf.data.text_records.read_tsv reads back (paragraphs may hold quotes).
  """
  rows = 0
  directory = os.path.dirname(output_path)
  fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(output_path)}.", suffix=".part")
  try:
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
      writer = csv.writer(f, delimiter="\t", lineterminator="\n")
      writer.writerow(["id", "text", "title", "split"])
      for split, path in (("train", train_path), ("dev", dev_path)):
        for article in _squad_articles(path):
          title = article["title"].replace("_", " ")
          for paragraph in article["paragraphs"]:
            rows += 1
            writer.writerow([str(rows), paragraph["context"], title, split])
    os.chmod(temp, _file_mode())
    os.replace(temp, output_path)
  except BaseException:
    _remove_quietly(temp)
    raise
  return rows


def download(datasets: Sequence[str],
             data_dir: str,
             *,
             base_url: Optional[str] = None,
             checksums: Optional[Mapping[str, Tuple[int, str]]] = None,
             timeout_s: float = 60.0,
             log: Callable[[str], None] = logging.info) -> Summary:
  """Fetches the files of datasets into data_dir (see the module docstring). A failing file is
  recorded in the summary's failures and the others are still fetched, so one unreachable server
  does not hold up the rest; the paragraphs TSV is derived only from verified SQuAD files."""
  summary = Summary()
  for remote in resolve(datasets, base_url=base_url, checksums=checksums):
    try:
      if ensure(remote, data_dir, timeout_s=timeout_s, log=log):
        summary.downloaded.append(remote.path)
      else:
        summary.present.append(remote.path)
    except DownloadError as e:
      summary.failures.append(str(e))
  if "squad" in datasets:
    squad = {f.path for f in DATASETS["squad"]}
    tsv = os.path.join(data_dir, *SQUAD_PARAGRAPHS.split("/"))
    if not squad <= set(summary.downloaded + summary.present):
      summary.failures.append(f"{tsv}: not derived, since the SQuAD files above did not verify")
    elif squad & set(summary.downloaded) or not os.path.exists(tsv):
      # Derived again whenever a source changed; otherwise the TSV on disk is the one they gave.
      try:
        rows = write_squad_paragraphs(os.path.join(data_dir, *SQUAD_TRAIN.split("/")),
                                      os.path.join(data_dir, *SQUAD_DEV.split("/")), tsv)
      except DownloadError as e:
        summary.failures.append(str(e))
      else:
        log(f"{tsv}: {rows} paragraphs of train and dev")
        summary.derived.append(SQUAD_PARAGRAPHS)
  return summary


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:
    checksums = read_checksums_file(_CHECKSUMS_FILE.value) if _CHECKSUMS_FILE.value else None
    resolve(_DATASETS.value)  # an unknown name is a usage error before anything is fetched
  except DownloadError as e:
    raise app.UsageError(str(e)) from None
  summary = download(_DATASETS.value,
                     _DATA_DIR.value,
                     base_url=_BASE_URL.value,
                     checksums=checksums,
                     timeout_s=_TIMEOUT_S.value)
  logging.info("%s: %d downloaded, %d already present, %d derived, %d failed", _DATA_DIR.value,
               len(summary.downloaded), len(summary.present), len(summary.derived), len(summary.failures))
  if summary.failures:
    sys.exit("bin/download_data: " + "\nbin/download_data: ".join(summary.failures))


if __name__ == "__main__":
  app.run(main)
