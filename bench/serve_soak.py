r"""Serving soak: a real bin/serve process under valid and hostile traffic at once, for a bounded time.

  nice -n 10 python bench/serve_soak.py --minutes=10            # writes bench/results/serve_soak.json

The export is the one bin/serve_test serves (realm_tf.testing.random_orqa's random-weight model over
--num_docs testdata documents, exported once into --work_dir and reused). The phases:

  1. reference: each testdata test question asked once, alone: the answers every later request must get;
  2. quiet: --clients valid clients for --quiet_seconds (their latency without attack);
  3. attack: the same valid clients plus --attackers hostile ones for --minutes: fuzzed and invalid-UTF-8
     JSON, JSON nested too deep or with numbers too long, huge bodies (announced and sent), bodies and
     headers drip-fed slower than the server's timeout, half-closed connections, requests dropped before
     their answer, bursts of connections opened and dropped (some reset), wrong methods, paths, headers
     and request lines;
  4. settle: --request_timeout_s plus a margin with no traffic, then every reference question again, and
     SIGTERM (the exit code is recorded).

A sampler reads the server's RSS, thread and open-file counts from /proc every 0.25 s. All traffic goes
to 127.0.0.1; every client loop stops at its deadline or after --max_actions, and every socket has a
timeout, so the soak ends by itself. Seeded (--seed): each client has its own random.Random. The clients
run in this process, on the cores the server uses: latencies on a loaded machine are the machine's too
(the load average is in the JSON). The invariants (each a number and held: true/false in the JSON) are
what bench/serve_soak_test asserts; the exit status is 1 when one fails.
"""

import collections
import http.client
import json
import math
import os
import random
import socket
import struct
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib import parse

from absl import app
from absl import flags

import numpy as np

from bench import throughput_lib
from realm_tf import io_utils
from realm_tf.export import saved_models
from realm_tf.runs import orqa_model
from realm_tf.serving import page
from realm_tf.testing import random_orqa
from realm_tf.testing import serve_process as process
from realm_tf.testing import test_paths

PREDICT = "/v1/models/open_qa:predict"
_HOST = "127.0.0.1"  # the only address any request of this file goes to

# --------------------------------------------------------------------------------------------------
# The server under test


def export_model(work_dir: str, num_docs: int = 40) -> str:
  """bin/serve_test's export (random_orqa over num_docs documents) under work_dir, made once."""
  path = os.path.join(work_dir, f"open_qa_{num_docs}")
  if not os.path.exists(os.path.join(path, "saved_model.pb")):
    made = random_orqa.write_model_dir(os.path.join(work_dir, f"random_{num_docs}"), num_docs=num_docs)
    saved_models.export_open_qa(orqa_model.load_trained(made.model_dir), path)
  return path


def test_questions() -> List[str]:
  with open(os.path.join(test_paths.repo_root(), "testdata", "qa.test.jsonl"), encoding="utf-8") as f:
    return [json.loads(line)["question"] for line in f]


class _Sampler:
  """The server process's RSS (MB), threads and open files, every period_s until stop()."""

  def __init__(self, pid: int, period_s: float = 0.25):
    self._pid, self._period_s = pid, period_s
    self.samples: List[Tuple[float, float, int, int]] = []  # (time, rss_mb, threads, fds)
    self._stop = threading.Event()
    self.sample()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self._thread.start()

  def sample(self) -> Tuple[float, float, int, int]:
    rss_mb, threads = float("nan"), -1
    try:
      with open(f"/proc/{self._pid}/status", encoding="ascii") as f:
        for line in f:
          if line.startswith("VmRSS:"):
            rss_mb = int(line.split()[1]) / 1024
          elif line.startswith("Threads:"):
            threads = int(line.split()[1])
      fds = len(os.listdir(f"/proc/{self._pid}/fd"))
    except OSError:  # the process has exited
      fds = -1
    sample = (time.monotonic(), rss_mb, threads, fds)
    self.samples.append(sample)
    return sample

  def _run(self):
    while not self._stop.wait(self._period_s):
      self.sample()

  def stop(self):
    self._stop.set()
    self._thread.join()

  def max(self, column: int) -> float:
    return max(s[column] for s in self.samples)


# --------------------------------------------------------------------------------------------------
# Valid clients


def _close(a: Any, b: Any) -> bool:
  """JSON values equal, floats to a relative 1e-4 (the same request answered twice)."""
  if isinstance(a, float) or isinstance(b, float):
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(
        a, b, rel_tol=1e-4, abs_tol=1e-5)
  if isinstance(a, list) and isinstance(b, list):
    return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
  if isinstance(a, dict) and isinstance(b, dict):
    return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
  return a == b


def _valid_request(kind: str, question: str) -> Tuple[str, str, Optional[bytes]]:
  if kind == "page":
    return "GET", "/?q=" + parse.quote_plus(question), None
  value = {"instances": [question]} if kind == "row" else {"inputs": {"questions": [question]}}
  return "POST", PREDICT, json.dumps(value).encode("utf-8")


def _answer_is(kind: str, data: bytes, expected: Dict[str, Any]) -> bool:
  """Whether a 200 response carries expected (the reference row format prediction)."""
  if kind == "page":
    return page.shows_answer(data.decode("utf-8"), expected["answers"])
  value = json.loads(data)
  if kind == "row":
    return _close(value["predictions"][0], expected)
  return _close({name: column[0] for name, column in value["outputs"].items()}, expected)


class _Tally:
  """Counts by (kind, outcome) and valid latencies, shared by the client threads of one phase."""

  def __init__(self):
    self.lock = threading.Lock()
    self.counts: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    self.latencies: List[float] = []
    self.wrong = self.failed = 0
    self.problems: List[str] = []

  def valid(self, kind: str, outcome: str, ok: bool, latency: Optional[float], detail: str = ""):
    with self.lock:
      self.counts["valid_" + kind][outcome] += 1
      if outcome != "200":
        self.failed += 1
        self.problems.append(f"valid {kind}: {outcome} {detail}"[:300])
      elif not ok:
        self.wrong += 1
        self.problems.append(f"valid {kind}: a wrong answer {detail}"[:300])
      else:
        self.latencies.append(latency)

  def hostile(self, kind: str, outcome: str, problem: Optional[str] = None):
    with self.lock:
      self.counts[kind][outcome] += 1
      if problem:
        self.problems.append(f"{kind}: {problem}"[:300])


def ask(port: int, question: str, timeout_s: float = 120.0) -> Dict[str, Any]:
  """One row-format question on a new connection: the prediction (RuntimeError for a non-200)."""
  connection = http.client.HTTPConnection(_HOST, port, timeout=timeout_s)
  try:
    connection.request("POST", PREDICT, *_valid_request("row", question)[2:])
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
      raise RuntimeError(f"{question!r}: {response.status} {data[:300]!r}")
    return json.loads(data)["predictions"][0]
  finally:
    connection.close()


def _valid_client(port: int, questions: List[str], expected: List[Dict], rng: random.Random, deadline: float,
                  max_actions: int, tally: _Tally):
  """Keep-alive requests (row, columnar or page, at random), each answer checked against expected."""
  connection = None
  for _ in range(max_actions):
    if time.monotonic() >= deadline:
      break
    i = rng.randrange(len(questions))
    kind = rng.choice(("row", "row", "columnar", "page"))
    method, path, body = _valid_request(kind, questions[i])
    start = time.perf_counter()
    try:
      if connection is None:
        connection = http.client.HTTPConnection(_HOST, port, timeout=60)
      connection.request(method, path, body)
      response = connection.getresponse()
      data = response.read()
      latency = time.perf_counter() - start
      if response.will_close:
        connection.close()
        connection = None
      ok = response.status == 200 and _answer_is(kind, data, expected[i])
      tally.valid(kind, str(response.status), ok, latency, f"{questions[i]!r}: {data[:200]!r}")
    except (OSError, http.client.HTTPException, ValueError) as e:
      tally.valid(kind, type(e).__name__, False, None, f"{questions[i]!r}: {e}")
      if connection is not None:
        connection.close()
      connection = None
  if connection is not None:
    connection.close()


# --------------------------------------------------------------------------------------------------
# Hostile clients: each action is one bounded exchange; it returns (outcome, problem or None).


def _drop(sock: socket.socket, rng: random.Random):
  """Closes sock, half the time with an RST rather than a FIN (SO_LINGER 0): a client vanishing."""
  if rng.random() < 0.5:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
  sock.close()


def _read_response(sock: socket.socket, deadline: float, head_only: bool = False) -> str:
  """The status of the one response the server sends ("closed": it closed without one; "truncated":
  it closed part way; "timeout": nothing by deadline; "reset": the connection was reset; "http/0.9":
  a body without a status line, http.server's answer to an HTTP/0.9 request line "GET /"). head_only:
  the answer to a HEAD request, whose Content-Length announces a body that is not sent."""
  data = b""
  try:
    while b"\r\n\r\n" not in data:
      sock.settimeout(max(deadline - time.monotonic(), 0.001))
      chunk = sock.recv(1 << 16)
      if not chunk:
        return "closed" if not data else "http/0.9" if not data.startswith(b"HTTP/") else "truncated"
      data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1].decode("ascii", "replace")
    length = 0
    for line in head.split(b"\r\n")[1:]:
      name, _, value = line.partition(b":")
      if name.strip().lower() == b"content-length" and not head_only:
        length = int(value)
    while len(body) < length:
      sock.settimeout(max(deadline - time.monotonic(), 0.001))
      chunk = sock.recv(1 << 16)
      if not chunk:
        return "truncated"
      body += chunk
    return status
  except (TimeoutError, socket.timeout):
    return "timeout"
  except ConnectionError:
    return "reset"


def _exchange(port: int, request: bytes, timeout_s: float, shutdown_write: bool = False) -> str:
  """Sends request on a new connection; the status of the answer (_read_response)."""
  with socket.create_connection((_HOST, port), timeout=timeout_s) as sock:
    try:
      sock.sendall(request)
      if shutdown_write:
        sock.shutdown(socket.SHUT_WR)
    except ConnectionError:
      pass  # the server refused part way (413): its answer may still be readable
    return _read_response(sock, time.monotonic() + timeout_s, head_only=request.startswith(b"HEAD "))


def _post(body: bytes, path: str = PREDICT, extra: bytes = b"") -> bytes:
  return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          f"Content-Length: {len(body)}\r\n").encode() + extra + b"\r\n" + body


def _answered(outcome: str, allowed: Tuple[str, ...]) -> Tuple[str, Optional[str]]:
  """(outcome, a problem unless outcome is one of allowed)."""
  return outcome, None if outcome in allowed else f"got {outcome}, expected one of {allowed}"


# Each is a method of _Hostile: one bounded exchange of that kind.
HOSTILE_KINDS = ("fuzzed_json", "invalid_utf8", "deep_or_long_json", "huge_body", "slow_body", "slow_headers",
                 "half_closed", "dropped_before_answer", "connect_and_drop", "wrong_method", "wrong_path",
                 "bad_headers", "bad_request_line")


class _Hostile:
  """The hostile request kinds against the server at port; timeout_s is its --request_timeout_s."""

  def __init__(self, port: int, questions: List[str], timeout_s: float, max_body_bytes: int):
    self.port, self.questions, self.timeout_s = port, questions, timeout_s
    self.max_body_bytes = max_body_bytes
    self.held_s: List[float] = []  # how long the server kept each drip-fed connection
    self.reply_s = 3 * timeout_s + 30  # how long any answer may take on a loaded machine
    # A slow client must be cut off within the timeout plus scheduling slack.
    self.slow_bound_s = 1.5 * timeout_s + 3
    self.kinds: Dict[str, Callable[[random.Random], Tuple[str, Optional[str]]]] = {
        kind: getattr(self, kind) for kind in HOSTILE_KINDS
    }

  def _exchange(self, request: bytes, shutdown_write: bool = False) -> str:
    return _exchange(self.port, request, self.reply_s, shutdown_write)

  def _connect(self) -> socket.socket:
    return socket.create_connection((_HOST, self.port), timeout=self.reply_s)

  def _valid_body(self, rng: random.Random) -> bytes:
    return json.dumps({"instances": [rng.choice(self.questions)]}, ensure_ascii=False).encode("utf-8")

  def fuzzed_json(self, rng):
    body = bytearray(self._valid_body(rng))
    for _ in range(rng.randint(1, 6)):
      op, at = rng.randrange(4), rng.randrange(len(body) + 1)
      if op == 0 and body:
        body[min(at, len(body) - 1)] = rng.randrange(256)
      elif op == 1:
        del body[at:at + rng.randint(1, 8)]
      elif op == 2:
        body[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
      else:
        body[at:at] = rng.choice((b"{", b"[", b'"', b"\\", b"\\u", b"\\ud800", b"null", b",", b"1e999",
                                  b'"instances"', b"\x00", b"\xc3", b"\xed\xa0\x80"))
    return _answered(self._exchange(_post(bytes(body))), ("200", "400"))

  def invalid_utf8(self, rng):
    question = rng.choice(self.questions).encode("utf-8")
    at = rng.randrange(len(question))
    bad = rng.choice((b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80", b"\xf8\x88\x80\x80"))
    body = b'{"instances": ["' + question[:at] + bad + question[at:] + b'"]}'
    return _answered(self._exchange(_post(body)), ("400",))

  def deep_or_long_json(self, rng):
    depth = rng.randint(2000, 200000)
    body = rng.choice((b"[" * depth + b"]" * depth, b'{"instances": ' + b"[" * depth,
                       b'{"a":' * depth + b"1" + b"}" * depth,
                       b'{"instances": [' + b"7" * rng.randint(4400, 100000) + b"]}",
                       b'{"instances": ["a?"], "signature_name": ' + b"9" * 5000 + b"}"))
    body = body[:self.max_body_bytes]
    return _answered(self._exchange(_post(body)), ("400",))

  def huge_body(self, rng):
    size = rng.choice((self.max_body_bytes + 1, 4 * self.max_body_bytes, 1 << 30))
    sent = min(size, rng.choice((0, 1 << 16, 4 * self.max_body_bytes)))  # a gigabyte is only announced
    head = (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n").encode()
    return _answered(self._exchange(head + b"a" * sent), ("413",))

  def _drip(self, first: bytes, rest: bytes, rng) -> Tuple[str, float]:
    """Sends first, then rest a byte at a time, each byte well within the server's per-read timeout,
    until the server answers or closes; (outcome, seconds the server kept the connection)."""
    with self._connect() as sock:
      start = time.monotonic()
      give_up = start + 2 * self.slow_bound_s  # past the bound: a finding, and this client stops
      try:
        sock.sendall(first)
        for byte in rest:
          sock.settimeout(self.timeout_s / 4)
          try:
            if sock.recv(1 << 16, socket.MSG_PEEK):
              break  # the server answered (408)
            return "closed", time.monotonic() - start
          except (TimeoutError, socket.timeout):
            pass  # nothing from the server yet: one more byte
          if time.monotonic() > give_up:
            return "held", time.monotonic() - start
          sock.sendall(bytes([byte]))
      except ConnectionError:
        return "reset", time.monotonic() - start
      outcome = _read_response(sock, time.monotonic() + self.reply_s)
      return outcome, time.monotonic() - start

  def _slow(self, outcome: str, held: float, what: str) -> Tuple[str, Optional[str]]:
    self.held_s.append(held)
    if held > self.slow_bound_s:
      return outcome, (f"{what} drip-fed byte by byte held the connection {held:.1f} s "
                       f"(bound {self.slow_bound_s:g} s)")
    return outcome, None if outcome in ("408", "closed", "reset") else f"got {outcome}"

  def slow_body(self, rng):
    body = self._valid_body(rng) + b" " * 4000
    return self._slow(*self._drip(_post(body)[:-len(body)] + body[:5], body[5:], rng), "a body")

  def slow_headers(self, rng):
    request = _post(self._valid_body(rng), extra=b"X-Pad: " + b"p" * 4000 + b"\r\n")
    first = rng.choice((0, 3, 40))  # in the request line, just after it, or among the headers
    return self._slow(*self._drip(request[:first], request[first:], rng), "a request's head")

  def half_closed(self, rng):
    """A whole request, then the client's side shut: the server still answers it."""
    return _answered(self._exchange(_post(self._valid_body(rng)), shutdown_write=True), ("200",))

  def dropped_before_answer(self, rng):
    """A request (whole, or cut in its body) and the connection closed or reset before the answer."""
    sock = self._connect()
    if rng.random() < 0.7:
      request = _post(self._valid_body(rng))
    else:
      request = b"GET /?q=Who+is+it%3F HTTP/1.1\r\n\r\n"
    sock.sendall(request[:-10] if rng.random() < 0.3 else request)
    time.sleep(rng.random() * 0.05)
    _drop(sock, rng)
    return "dropped", None

  def connect_and_drop(self, rng):
    sockets = []
    try:
      for _ in range(rng.randint(20, 100)):
        sockets.append(self._connect())
        if rng.random() < 0.3:
          sockets[-1].sendall(b"POST /v1/mo"[:rng.randint(1, 11)])
    finally:
      for sock in sockets:
        _drop(sock, rng)
    return "dropped", None

  def wrong_method(self, rng):
    method = rng.choice(
        ("PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "HEAD", "get", "FOO", "P\xd3ST"))
    request = f"{method} {rng.choice((PREDICT, '/'))} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}"
    return _answered(self._exchange(request.encode("latin-1")), ("501", "400"))

  def wrong_path(self, rng):
    path = rng.choice(
        ("/v2/predict", "/v1/models/open_qb:predict", "/v1/models/open_qa/versions/9:predict",
         "/v1/models/open_qa:classify", "/v1/models/%ff%fe:predict", "//[/v1",
         "http://[::1/v1/models/open_qa:predict", "/v1/models/open_qa/metadata", "/v1/models/" + "x" * 5000,
         "/?q=%ff", "/?q=" + "%e2%82" * 10, "/../../etc/passwd", "*", "/\x7f"))
    method = rng.choice(("GET", "POST"))
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\n".encode("latin-1")
    request = _post(self._valid_body(rng), path) if method == "POST" else head + b"\r\n"
    return _answered(self._exchange(request), ("200", "400", "404", "405"))

  def bad_headers(self, rng):
    body = self._valid_body(rng)
    case = rng.randrange(7)
    if case == 0:
      length = rng.choice(("-1", "abc", "1e3", "", "0x10"))
      head = f"POST {PREDICT} HTTP/1.1\r\nContent-Length: {length}\r\n\r\n"
      request, allowed = head.encode() + body, ("400",)
    elif case == 1:
      request, allowed = f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\n\r\n".encode() + body, ("411", "closed")
    elif case == 2:
      request = (f"POST {PREDICT} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "5\r\nhello\r\n0\r\n\r\n").encode()
      allowed = ("411",)
    elif case == 3:
      request, allowed = _post(body, extra=b"X-Long: " + b"a" * 70000 + b"\r\n"), ("431",)
    elif case == 4:
      request, allowed = _post(body, extra=b"".join(b"X-%d: 1\r\n" % i for i in range(120))), ("431",)
    elif case == 5:
      extra = b"X-Bytes: \xff\xfe\x00\xc3\r\nContent-Type: \xe2\x82\r\n"  # not Latin-1 text
      request, allowed = _post(body, extra=extra), ("200",)
    else:  # a body longer than announced: the rest is read as the next request line
      request, allowed = _post(body)[:-len(body)].replace(f"Content-Length: {len(body)}".encode(),
                                                          b"Content-Length: 5") + body, ("400",)
    return _answered(self._exchange(request), allowed)

  def bad_request_line(self, rng):
    line = rng.choice(
        (b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"GET /\r\n\r\n", b"\r\n\r\n",
         b"GET / HTTP/1.1 extra\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
         b"GET " + b"/a" * 40000 + b" HTTP/1.1\r\n\r\n", bytes(rng.randrange(256) for _ in range(64))))
    outcome = self._exchange(line, shutdown_write=True)
    # http.server answers 400/414/505 or, for an empty line or no request at all, just closes.
    return _answered(outcome, ("400", "414", "505", "closed", "http/0.9"))

  def act(self, kind: str, rng: random.Random, tally: _Tally):
    try:
      outcome, problem = self.kinds[kind](rng)
    except (OSError, http.client.HTTPException) as e:
      outcome, problem = type(e).__name__, f"the client failed: {e}"
    if outcome.startswith("5") and outcome not in ("501", "505"):
      problem = problem or f"the server answered {outcome}"
    tally.hostile(kind, outcome, problem)


def _hostile_client(hostile: _Hostile, rng: random.Random, deadline: float, max_actions: int, tally: _Tally):
  """The kinds in a seeded order, round and round: a short run still tries every kind."""
  kinds = sorted(hostile.kinds)
  rng.shuffle(kinds)
  for i in range(max_actions):
    if time.monotonic() >= deadline:
      break
    hostile.act(kinds[i % len(kinds)], rng, tally)


# --------------------------------------------------------------------------------------------------
# The run


def _latency_ms(latencies: List[float]) -> Optional[Dict[str, float]]:
  if not latencies:
    return None
  ms = np.array(latencies) * 1000
  return {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)), "max": float(ms.max())}


def _phase(port: int, questions: List[str], expected: List[Dict], seconds: float, clients: int,
           attackers: int, seed: int, max_actions: int, hostile: _Hostile) -> _Tally:
  tally = _Tally()
  deadline = time.monotonic() + seconds
  threads = [
      threading.Thread(target=_valid_client,
                       args=(port, questions, expected, random.Random(f"{seed}-valid-{i}"), deadline,
                             max_actions, tally),
                       daemon=True) for i in range(clients)
  ]
  threads += [
      threading.Thread(target=_hostile_client,
                       args=(hostile, random.Random(f"{seed}-hostile-{i}"), deadline, max_actions, tally),
                       daemon=True) for i in range(attackers)
  ]
  for thread in threads:
    thread.start()
  for thread in threads:  # each loop ends at the deadline; its last exchange is bounded by reply_s
    thread.join(seconds + 2 * hostile.reply_s + 60)
  if any(thread.is_alive() for thread in threads):
    tally.problems.append("a client thread did not finish")
  return tally


def run_soak(saved_model: str,
             *,
             seconds: float,
             quiet_seconds: float,
             clients: int = 4,
             attackers: int = 4,
             seed: int = 0,
             request_timeout_s: float = 2.0,
             max_body_bytes: int = 1 << 20,
             max_actions: int = 1_000_000,
             max_rss_growth_mb: float = 256,
             questions: Optional[List[str]] = None,
             log: Callable[[str], None] = print) -> Dict[str, Any]:
  """The soak against a fresh bin/serve of saved_model; its results (JSON-ready), invariants included."""
  questions = questions or test_questions()
  machine = throughput_lib.machine()  # with the load average before the soak adds its own
  served = process.ServeProcess(saved_model, f"--request_timeout_s={request_timeout_s:g}",
                                f"--max_body_bytes={max_body_bytes}", "--noaccess_log")
  try:
    sampler = _Sampler(served.process.pid)
    start_sample = sampler.samples[0]
    expected = [ask(served.port, q) for q in questions]
    log(f"reference: {len(questions)} questions answered; server RSS {start_sample[1]:.0f} MB")
    hostile = _Hostile(served.port, questions, request_timeout_s, max_body_bytes)
    quiet = _phase(served.port, questions, expected, quiet_seconds, clients, 0, seed, max_actions, hostile)
    after_quiet = sampler.sample()
    log(f"quiet: {len(quiet.latencies)} answers, p99 {(_latency_ms(quiet.latencies) or {}).get('p99')} ms")
    attack = _phase(served.port, questions, expected, seconds, clients, attackers, seed + 1, max_actions,
                    hostile)
    after_attack = sampler.sample()
    log(f"attack: {len(attack.latencies)} valid answers, "
        f"{sum(sum(c.values()) for k, c in attack.counts.items() if not k.startswith('valid_'))} hostile")
    time.sleep(request_timeout_s + 3)  # every connection the attack left is timed out by now
    settled = sampler.sample()
    final_wrong = sum(not _close(ask(served.port, q), e) for q, e in zip(questions, expected))
    alive = served.process.poll() is None
  finally:
    exit_code = served.stop()
    sampler.stop()
  stderr = served.stderr()
  tracebacks = stderr.count("Traceback (most recent call last)")
  rss = [s[1] for s in sampler.samples if not math.isnan(s[1])]
  hostile_counts = {k: dict(c) for k, c in sorted(attack.counts.items()) if not k.startswith("valid_")}
  hostile_problems = [p for p in attack.problems if not p.startswith("valid ")]
  invariants = {
      "server_alive_until_stopped": (alive, alive),
      "exit_code_on_sigterm": (exit_code, exit_code == 0),
      "valid_wrong_answers": (quiet.wrong + attack.wrong, quiet.wrong + attack.wrong == 0),
      "valid_failed_requests": (quiet.failed + attack.failed, quiet.failed + attack.failed == 0),
      "final_pass_wrong_answers": (final_wrong, final_wrong == 0),
      "hostile_requests_misanswered": (len(hostile_problems), not hostile_problems),
      "slow_client_longest_hold_s": (max(hostile.held_s, default=0.0), max(hostile.held_s, default=0.0)
                                     <= hostile.slow_bound_s),
      "tracebacks_in_server_log": (tracebacks, tracebacks == 0),
      "rss_growth_mb": (settled[1] - after_quiet[1], settled[1] - after_quiet[1] <= max_rss_growth_mb),
      "threads_left_after_settle": (settled[2] - after_quiet[2], settled[2] <= after_quiet[2] + 2),
      "open_files_left_after_settle": (settled[3] - after_quiet[3], settled[3] <= after_quiet[3] + 2),
  }
  traceback_at = stderr.find("Traceback (most recent call last)")
  return {
      "command": " ".join([os.path.relpath(sys.argv[0], test_paths.repo_root())] + sys.argv[1:]),
      "machine": machine,
      "load_average_at_end": throughput_lib.load_average(),
      "note": "client and server share this machine's cores with other jobs: latencies are the "
              "loaded machine's (load averages above)",
      "config": {
          "saved_model": saved_model,
          "seconds": seconds,
          "quiet_seconds": quiet_seconds,
          "clients": clients,
          "attackers": attackers,
          "seed": seed,
          "request_timeout_s": request_timeout_s,
          "max_body_bytes": max_body_bytes,
          "max_rss_growth_mb": max_rss_growth_mb,
          "questions": len(questions)
      },
      "invariants": {
          name: {
              "value": value,
              "held": bool(ok)
          } for name, (value, ok) in invariants.items()
      },
      "held": all(ok for _, ok in invariants.values()),
      "server": {
          "exit_code": exit_code,
          "rss_mb": {
              "start": start_sample[1],
              "after_quiet": after_quiet[1],
              "after_attack": after_attack[1],
              "settled": settled[1],
              "max": max(rss)
          },
          "threads": {
              "start": start_sample[2],
              "after_quiet": after_quiet[2],
              "max": sampler.max(2),
              "settled": settled[2]
          },
          "open_files": {
              "start": start_sample[3],
              "after_quiet": after_quiet[3],
              "max": sampler.max(3),
              "settled": settled[3]
          },
          "stderr_lines": stderr.count("\n"),
          "first_traceback": stderr[traceback_at:traceback_at + 3000] if traceback_at >= 0 else None
      },
      "valid": {
          "quiet": {
              "answered": len(quiet.latencies),
              "wrong": quiet.wrong,
              "failed": quiet.failed,
              "latency_ms": _latency_ms(quiet.latencies),
              "by_kind": {
                  k: dict(c) for k, c in sorted(quiet.counts.items())
              }
          },
          "attack": {
              "answered": len(attack.latencies),
              "wrong": attack.wrong,
              "failed": attack.failed,
              "latency_ms": _latency_ms(attack.latencies),
              "by_kind": {
                  k: dict(c) for k, c in sorted(attack.counts.items()) if k.startswith("valid_")
              }
          }
      },
      "hostile": {
          "actions": sum(sum(c.values()) for c in hostile_counts.values()),
          "by_kind": hostile_counts
      },
      "problems": (quiet.problems + attack.problems)[:50],
  }


def table(results: Dict[str, Any]) -> str:
  """Markdown: the invariants, then valid latency quiet vs under attack, then hostile kinds by outcome."""
  lines = ["| invariant | value | held |", "|---|---|---|"]
  for name, invariant in results["invariants"].items():
    value = invariant["value"]
    shown = f"{value:.1f}" if isinstance(value, float) else str(value)
    lines.append(f"| {name} | {shown} | {'yes' if invariant['held'] else 'NO'} |")
  lines += [
      "", "| valid requests | answered | wrong | failed | p50 ms | p99 ms | max ms |",
      "|---|---|---|---|---|---|---|"
  ]
  for phase in ("quiet", "attack"):
    v = results["valid"][phase]
    latency = v["latency_ms"] or {}
    lines.append(f"| {phase} | {v['answered']} | {v['wrong']} | {v['failed']} | "
                 f"{latency.get('p50', float('nan')):.1f} | {latency.get('p99', float('nan')):.1f} | "
                 f"{latency.get('max', float('nan')):.1f} |")
  lines += ["", "| hostile kind | requests | outcomes |", "|---|---|---|"]
  for kind, outcomes in results["hostile"]["by_kind"].items():
    lines.append(f"| {kind} | {sum(outcomes.values())} | " +
                 ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())) + " |")
  rss = results["server"]["rss_mb"]
  lines += [
      "", f"server RSS MB: start {rss['start']:.0f}, after quiet {rss['after_quiet']:.0f}, after "
      f"attack {rss['after_attack']:.0f}, settled {rss['settled']:.0f}, max {rss['max']:.0f}; "
      f"exit code {results['server']['exit_code']}"
  ]
  return "\n".join(lines)


_MINUTES = flags.DEFINE_float("minutes", 10.0, "Length of the attack phase.")
_QUIET = flags.DEFINE_float("quiet_seconds", 60.0, "Valid clients alone, before the attack.")
_CLIENTS = flags.DEFINE_integer("clients", 4, "Valid client threads.")
_ATTACKERS = flags.DEFINE_integer("attackers", 4, "Hostile client threads (during the attack).")
_SEED = flags.DEFINE_integer("seed", 0, "Seeds every client's choices.")
_TIMEOUT = flags.DEFINE_float(
    "request_timeout_s", 2.0, "The server's --request_timeout_s (short, so "
    "slow clients are cut off often).")
_MAX_BODY = flags.DEFINE_integer("max_body_bytes", 1 << 20, "The server's --max_body_bytes.")
_MAX_ACTIONS = flags.DEFINE_integer("max_actions", 1_000_000, "Most requests per client thread.")
_NUM_DOCS = flags.DEFINE_integer("num_docs", 40, "Documents of the random-weight export.")
_WORK_DIR = flags.DEFINE_string("work_dir", os.path.join(tempfile.gettempdir(), "realm_tf_serve_soak"),
                                "Where the export is written (and reused by a later run).")
_OUTPUT = flags.DEFINE_string(
    "output", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "serve_soak.json"),
    "Where to write the JSON results.")


def main(argv):
  del argv
  saved_model = export_model(_WORK_DIR.value, _NUM_DOCS.value)
  results = run_soak(saved_model,
                     seconds=_MINUTES.value * 60,
                     quiet_seconds=_QUIET.value,
                     clients=_CLIENTS.value,
                     attackers=_ATTACKERS.value,
                     seed=_SEED.value,
                     request_timeout_s=_TIMEOUT.value,
                     max_body_bytes=_MAX_BODY.value,
                     max_actions=_MAX_ACTIONS.value)
  print(table(results))
  os.makedirs(os.path.dirname(_OUTPUT.value), exist_ok=True)
  io_utils.write_json_atomic(_OUTPUT.value, results)
  print(f"wrote {_OUTPUT.value}")
  if not results["held"]:
    for problem in results["problems"][:10]:
      print("problem:", problem)
    raise SystemExit("an invariant did not hold (invariants and problems in the JSON)")


if __name__ == "__main__":
  app.run(main)
