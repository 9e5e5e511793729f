"""Tests of bin/download_data against a local HTTP server (http.server on port 0, in a thread).

The server holds tiny fake files generated here under the paths the binary fetches (no real data-set
text enters the repository); --checksums_file gives the binary their sizes and sha256 instead of the
official ones. Checked: the layout a verified download lands in, a corrupted copy refused with
nothing left behind (not even the temporary file), no second download of a verified file, and the
SQuAD paragraphs TSV, read back by the project's own corpus reader.
"""

import csv
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading

from absl.testing import absltest

from bin import download_data
from realm_tf.data import corpus
from realm_tf.data import qa

_BINARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "download_data.py")

_SQUAD_TRAIN = {
    "version":
        "1.1",
    "data": [
        {
            "title":
                "Fake_Article",
            "paragraphs": [
                {
                    "context":
                        "A first fake paragraph.",
                    "qas": [{
                        "id": "t1",
                        "question": "Which paragraph?",
                        "answers": [{
                            "text": "first",
                            "answer_start": 2
                        }]
                    }]
                },
                # Quotes, a tab and a newline: the TSV must quote them so the corpus reader reads them back.
                {
                    "context": 'A "quoted"\ttab and\na newline.',
                    "qas": []
                }
            ]
        },
        {
            "title": "Other",
            "paragraphs": [{
                "context": "Other text.",
                "qas": []
            }]
        }
    ]
}
_SQUAD_DEV = {
    "version":
        "1.1",
    "data": [{
        "title":
            "Dev_Only",
        "paragraphs": [{
            "context": "Dev paragraph.",
            "qas": [{
                "id": "d1",
                "question": "Which split?",
                "answers": [{
                    "text": "Dev",
                    "answer_start": 0
                }]
            }]
        }]
    }]
}


def _fake_content(path: str) -> bytes:
  """A few bytes per file, parseable where the binary parses them (SQuAD's JSON)."""
  if path == download_data.SQUAD_TRAIN:
    return json.dumps(_SQUAD_TRAIN).encode("utf-8")
  if path == download_data.SQUAD_DEV:
    return json.dumps(_SQUAD_DEV).encode("utf-8")
  return f"fake {path}\n".encode("utf-8")


class _Server:
  """Serves a directory over HTTP on a free port and counts the GET requests per path."""

  def __init__(self, directory):
    self.requests = []
    requests = self.requests

    class Handler(http.server.SimpleHTTPRequestHandler):

      def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=directory, **kwargs)

      def do_GET(self):  # pylint: disable=invalid-name
        requests.append(self.path)
        super().do_GET()

      def log_message(self, *args):  # the test's output stays readable
        pass

    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
    self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
    self.thread.start()

  def close(self):
    self.httpd.shutdown()
    self.httpd.server_close()
    self.thread.join()


class DownloadDataTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.served = self.create_tempdir("served").full_path
    self.data_dir = os.path.join(self.create_tempdir("out").full_path, "data")
    lines = []
    for dataset in ("squad", "nq_open", "curatedtrec"):
      for remote in download_data.DATASETS[dataset]:
        content = _fake_content(remote.path)
        path = os.path.join(self.served, *remote.path.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
          f.write(content)
        lines.append(f"{remote.path} {len(content)} {hashlib.sha256(content).hexdigest()}\n")
    self.checksums_file = self.create_tempfile("checksums.txt", "".join(lines)).full_path
    self.checksums = download_data.read_checksums_file(self.checksums_file)
    self.server = _Server(self.served)
    self.addCleanup(self.server.close)

  def _download(self, datasets):
    return download_data.download(datasets,
                                  self.data_dir,
                                  base_url=self.server.url,
                                  checksums=self.checksums,
                                  timeout_s=30,
                                  log=lambda _: None)

  def _files_under(self, directory):
    """Every file under directory, hidden ones included, relative and "/"-separated."""
    return sorted(
        os.path.relpath(os.path.join(d, f), directory).replace(os.sep, "/")
        for d, _, files in os.walk(directory)
        for f in files)

  def test_verified_download_lands_in_the_layout(self):
    summary = self._download(["nq_open", "curatedtrec"])
    self.assertEqual(summary.failures, [])
    expected = [f.path for d in ("nq_open", "curatedtrec") for f in download_data.DATASETS[d]]
    self.assertEqual(summary.downloaded, expected)
    self.assertEqual(self._files_under(self.data_dir), sorted(expected))
    for path in expected:
      with open(os.path.join(self.data_dir, *path.split("/")), "rb") as f:
        self.assertEqual(f.read(), _fake_content(path), path)
    self.assertLen(self.server.requests, len(expected))

  def test_corrupted_copy_is_refused_and_leaves_nothing(self):
    target = "nq_open/NQ-open.dev.jsonl"
    served = os.path.join(self.served, *target.split("/"))
    with open(served, "rb") as f:
      content = bytearray(f.read())
    content[0] ^= 1  # one byte changed, same size: only the sha256 can tell
    with open(served, "wb") as f:
      f.write(content)
    url = f"{self.server.url}/{target}"
    # As a user meets it: the process fails, naming the URL, both sha256 and what to do.
    result = subprocess.run([
        sys.executable, _BINARY, f"--data_dir={self.data_dir}", "--datasets=nq_open",
        f"--base_url={self.server.url}", f"--checksums_file={self.checksums_file}"
    ],
                            capture_output=True,
                            text=True,
                            timeout=120,
                            check=False)
    self.assertNotEqual(result.returncode, 0)
    self.assertIn(f"{url}: checksum mismatch for {target}: expected sha256 "
                  f"{self.checksums[target][1]}", result.stderr)
    self.assertIn(f"got sha256 {hashlib.sha256(content).hexdigest()}", result.stderr)
    self.assertIn("--checksums_file", result.stderr)
    # The other files of the data set still came; the bad one left no file and no temporary file.
    others = [f.path for f in download_data.DATASETS["nq_open"] if f.path != target]
    self.assertEqual(self._files_under(self.data_dir), sorted(others))

  def test_verified_file_is_not_fetched_again(self):
    first = self._download(["curatedtrec"])
    self.assertLen(first.downloaded, len(download_data.DATASETS["curatedtrec"]))
    requests = len(self.server.requests)
    second = self._download(["curatedtrec"])
    self.assertEqual((second.downloaded, second.failures), ([], []))
    self.assertEqual(second.present, first.downloaded)
    self.assertLen(self.server.requests, requests)
    # A file changed on disk is fetched again and replaced by the verified copy.
    changed = os.path.join(self.data_dir, "curatedtrec", "curated-test.tsv")
    with open(changed, "ab") as f:
      f.write(b"local edit\n")
    third = self._download(["curatedtrec"])
    self.assertEqual(third.downloaded, ["curatedtrec/curated-test.tsv"])
    self.assertLen(self.server.requests, requests + 1)
    with open(changed, "rb") as f:
      self.assertEqual(f.read(), _fake_content("curatedtrec/curated-test.tsv"))

  def test_squad_paragraphs_tsv(self):
    summary = self._download(["squad"])
    self.assertEqual(summary.failures, [])
    self.assertEqual(summary.derived, [download_data.SQUAD_PARAGRAPHS])
    squad = os.path.join(self.data_dir, "squad")
    self.assertEqual(sorted(os.listdir(squad)),
                     ["dev-v1.1.json", "squad-v1.1-paragraphs.tsv", "train-v1.1.json"])
    # The ids, bodies and titles the SQuAD loaders give the JSON files' paragraphs, train then dev.
    train = qa.load_squad_paragraphs(os.path.join(squad, "train-v1.1.json"), first_paragraph_id=1)
    dev = qa.load_squad_paragraphs(os.path.join(squad, "dev-v1.1.json"), first_paragraph_id=1 + len(train))
    tsv = os.path.join(self.data_dir, *download_data.SQUAD_PARAGRAPHS.split("/"))
    documents = list(corpus.read_documents(tsv))
    self.assertEqual(documents, train + dev)
    self.assertEqual([(d.doc_id, d.title) for d in documents], [("1", "Fake Article"), ("2", "Fake Article"),
                                                                ("3", "Other"), ("4", "Dev Only")])
    self.assertEqual(documents[1].body, 'A "quoted"\ttab and\na newline.')
    with open(tsv, encoding="utf-8", newline="") as f:
      self.assertEqual([row[3] for row in csv.reader(f, delimiter="\t")],
                       ["split", "train", "train", "train", "dev"])
    # A second run fetches nothing and leaves the derived file as it is.
    requests = len(self.server.requests)
    modified = os.stat(tsv).st_mtime_ns
    again = self._download(["squad"])
    self.assertEqual((again.downloaded, again.derived, again.failures), ([], [], []))
    self.assertLen(self.server.requests, requests)
    self.assertEqual(os.stat(tsv).st_mtime_ns, modified)

  def test_bad_checksums_file_and_dataset_name(self):
    bad = self.create_tempfile("bad.txt", "squad/dev-v1.1.json 12 not-a-sha\n").full_path
    with self.assertRaisesRegex(download_data.DownloadError, r"bad\.txt:1: expected `PATH SIZE"):
      download_data.read_checksums_file(bad)
    unknown = self.create_tempfile("unknown.txt", "# comment\nsquad/x.json 1 " + "0" * 64).full_path
    with self.assertRaisesRegex(download_data.DownloadError, r"unknown\.txt:2: 'squad/x\.json'"):
      download_data.read_checksums_file(unknown)
    with self.assertRaisesRegex(download_data.DownloadError, r"--datasets: .*nqopen; choose"):
      download_data.resolve(["squad", "nqopen"])


if __name__ == "__main__":
  absltest.main()
