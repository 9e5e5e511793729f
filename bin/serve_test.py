"""bin/serve as a user runs it: a real server process on 127.0.0.1 (a port the OS chooses) serving an
open-QA export, exercised over HTTP. Its answers are the SavedModel signature's (what bin/answer prints)
in both of TF Serving's formats; every bad request gets a 4xx JSON error naming the problem while the
server keeps answering others (a slow client included); a headless chromium types a question into the
page and finds the answer there."""

import http.client
import json
import os
import shutil
import socket
import struct
import tempfile
import threading
import time

import numpy as np
import tensorflow as tf

from realm_tf.export import loader
from realm_tf.export import saved_models
from realm_tf.runs import orqa_model
from realm_tf.testing import browser
from realm_tf.testing import random_orqa
from realm_tf.testing import serve_process as process

_QUESTIONS = [
    "Where was Savix Lunene born?", "Où est né Zoë Kelarlé, l'ingénieur?", "What did Wenor found? " * 40
]
_TIMEOUT_S = 3  # the server's --request_timeout_s: short, so the slow-client test is quick
_PATH = "/v1/models/open_qa:predict"


class ServeTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    made = random_orqa.write_model_dir(cls.tmp, num_docs=40)
    cls.saved_model = saved_models.export_open_qa(orqa_model.load_trained(made.model_dir),
                                                  os.path.join(cls.tmp, "export", "open_qa"))
    # What bin/answer.py prints comes from this call on the same export.
    cls.expected = loader.answer_questions(loader.load_open_qa(cls.saved_model), _QUESTIONS)
    cls.server = process.ServeProcess(cls.saved_model, f"--request_timeout_s={_TIMEOUT_S}", "--noaccess_log")
    cls.port = cls.server.port

  @classmethod
  def tearDownClass(cls):
    code = cls.server.stop()
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()
    if code != 0:  # SIGTERM stops the server cleanly
      raise AssertionError(f"bin/serve.py exited with {code} on SIGTERM:\n{cls.server.stderr()[-3000:]}")

  def _request(self, method, path, body=None, headers=None):
    connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
    try:
      connection.request(method, path, body=body, headers=headers or {})
      response = connection.getresponse()
      return response.status, response.getheader("Content-Type"), response.read()
    finally:
      connection.close()

  def _json(self, method, path, value=None, raw=None):
    body = raw if raw is not None else (None if value is None else json.dumps(value).encode("utf-8"))
    status, content_type, data = self._request(method, path, body)
    self.assertEqual(content_type, "application/json; charset=utf-8")
    return status, json.loads(data.decode("utf-8"))

  def _check_outputs(self, columns, indices):
    """columns: {output: [value per question]} for _QUESTIONS[i] for i in indices."""
    expected = self.expected
    self.assertEqual(set(columns), set(expected))
    for name, value in columns.items():
      want = expected[name][indices]
      if want.dtype == object:
        want = np.vectorize(lambda x: x.decode("utf-8"), otypes=[object])(want).tolist()
        self.assertEqual(value, want, name)
      else:
        self.assertAllClose(value, want, rtol=1e-5, atol=1e-5, msg=name)

  def assertServing(self):
    """The server still answers a good request (after a bad one)."""
    status, out = self._json("POST", _PATH, {"instances": [_QUESTIONS[0]]})
    self.assertEqual(status, 200, out)
    self.assertEqual(out["predictions"][0]["answers"], self.expected["answers"][0].decode("utf-8"))

  def test_answers_equal_the_signature_in_both_formats(self):
    status, rows = self._json("POST", _PATH, {"instances": _QUESTIONS})
    self.assertEqual(status, 200, rows)
    self.assertLen(rows["predictions"], len(_QUESTIONS))
    self._check_outputs({name: [row[name] for row in rows["predictions"]] for name in rows["predictions"][0]},
                        [0, 1, 2])
    self.assertNotEqual(rows["predictions"][0]["answers"], "")
    status, columns = self._json("POST", "/v1/models/open_qa/versions/1:predict", {
        "inputs": {
            "questions": _QUESTIONS[1:]
        },
        "signature_name": "serving_default"
    })
    self.assertEqual(status, 200, columns)
    self._check_outputs(columns["outputs"], [1, 2])
    status, rows = self._json("POST", _PATH, {"instances": [{"questions": _QUESTIONS[2]}]})
    self.assertEqual(status, 200, rows)
    self._check_outputs({name: [value] for name, value in rows["predictions"][0].items()}, [2])

  def test_concurrent_clients_get_their_own_answers(self):
    results, errors = {}, []

    def client(i):
      try:
        for _ in range(3):
          status, out = self._json("POST", _PATH, {"instances": [_QUESTIONS[i % 3]]})
          results.setdefault(i, []).append((status, out["predictions"][0]["answers"]))
      except Exception as e:  # pylint: disable=broad-except  (reported below)
        errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join(timeout=300)
    self.assertEqual(errors, [])
    for i, answers in results.items():
      self.assertEqual(answers, [(200, self.expected["answers"][i % 3].decode("utf-8"))] * 3)
    self.assertLen(results, 6)

  def test_model_status_and_metadata(self):
    status, out = self._json("GET", "/v1/models/open_qa")
    self.assertEqual((status, out), (200, {
        "model_version_status": [{
            "version": "1",
            "state": "AVAILABLE",
            "status": {
                "error_code": "OK",
                "error_message": ""
            }
        }]
    }))
    self.assertEqual(self._json("GET", "/v1/models/open_qa/versions/1")[1], out)
    status, out = self._json("GET", "/v1/models/open_qa/metadata")
    self.assertEqual(status, 200)
    signature = out["metadata"]["signature_def"]["signature_def"]["serving_default"]
    self.assertEqual(signature["inputs"]["questions"]["dtype"], "DT_STRING")
    self.assertEqual(set(signature["outputs"]), set(self.expected))
    self.assertEqual(signature["outputs"]["scores"]["dtype"], "DT_FLOAT")

  def test_bad_requests_get_4xx_json_errors(self):
    huge = b'{"instances": ["' + b"a" * (10 << 20) + b'"]}'  # 10 MB
    cases = [
        ("POST", _PATH, b"not json", 400, "the request body is not JSON"),
        ("POST", _PATH, b"{}", 400, "send exactly one of 'instances' (row format) and 'inputs'"),
        ("POST", _PATH, b'{"instance": ["a?"]}', 400, "unknown field 'instance'"),
        ("POST", _PATH, b'{"inputs": {"question": ["a?"]}}', 400, "inputs has the field 'question'"),
        ("POST", _PATH, b'{"instances": ["a?", 7]}', 400,
         "instances[1] is a number; each question must be a string"),
        ("POST", _PATH, b'{"instances": ["\xff\xfe"]}', 400, "the request body is not valid UTF-8"),
        ("POST", _PATH, b'{"instances": ["\\ud800"]}', 400, "instances[0] holds a lone UTF-16 surrogate"),
        ("POST", _PATH, b'{"instances": ["  "]}', 400, "instances[0] is an empty question"),
        ("POST", _PATH, json.dumps({
            "instances": ["Who?"] * 10000
        }).encode(), 400, "instances holds 10000 questions; this server answers at most 64 per request"),
        ("POST", _PATH, huge, 413, f"the request body is {len(huge)} bytes; this server reads at most "
         f"{1 << 20}"),
        ("POST", "/v1/models/open_qb:predict", b'{"instances": ["a?"]}', 404,
         "no model named 'open_qb' is served here; this server serves 'open_qa'"),
        ("POST", "/v1/models/open_qa/versions/2:predict", b'{"instances": ["a?"]}', 404,
         "model 'open_qa' has no version '2'"),
        ("POST", "/v1/models/open_qa:classify", b'{"instances": ["a?"]}', 400, ":classify is not served"),
        ("POST", "/v2/predict", b"{}", 404, "no such path '/v2/predict'"),
        ("GET", _PATH, None, 405, ":predict takes POST"),
        ("GET", "/v1/models/other", None, 404, "no model named 'other'"),
        ("PUT", _PATH, b"{}", 501, "Unsupported method ('PUT')"),
        # Found by bench/serve_soak: these were 500s with a traceback in the log, or (GET) a closed
        # connection with socketserver's traceback.
        ("POST", _PATH, b"[" * 50000, 400, "nests lists or objects too deeply"),
        ("POST", _PATH, b'{"instances": [' + b"7" * 5000 + b"]}", 400, "holds a value JSON cannot be read"),
    ]
    for method, path, body, status, message in cases:
      with self.subTest(path=path, body=(body or b"")[:40]):
        got, out = self._json(method, path, raw=body)
        self.assertEqual(got, status, out)
        self.assertEqual(list(out), ["error"])
        self.assertIn(message, out["error"])
    # A POST without Content-Length cannot be read: 411.
    with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
      s.sendall(f"POST {_PATH} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
      reply = _read_all(s)
    self.assertTrue(reply.startswith(b"HTTP/1.1 411 "), reply[:200])
    self.assertIn(b"has no Content-Length header", reply)
    # A request target urllib cannot split (http.client will not send one): 400, not a traceback.
    for request in (b"GET http://[x/v1/models/open_qa HTTP/1.1\r\n\r\n",
                    b'POST http://[x/v1/models/open_qa:predict HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}'):
      with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        reply = _read_all(s)
      self.assertTrue(reply.startswith(b"HTTP/1.1 400 "), reply[:200])
      self.assertIn(b"is not a URL", reply)
    self.assertServing()

  def test_slow_client_times_out_while_others_are_served(self):
    half_body = socket.create_connection(("127.0.0.1", self.port), timeout=120)
    half_line = socket.create_connection(("127.0.0.1", self.port), timeout=120)
    try:
      start = time.monotonic()
      half_body.sendall(f"POST {_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n"
                        '{"instances": ["Where'.encode())
      half_line.sendall(b"POST /v1/models/open_")
      self.assertServing()  # while both wait
      reply = _read_all(half_body)
      self.assertGreaterEqual(time.monotonic() - start, _TIMEOUT_S - 0.5)  # waited for the rest
      self.assertTrue(reply.startswith(b"HTTP/1.1 408 "), reply[:200])
      error = json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]
      self.assertIn(f"the request body did not arrive within {_TIMEOUT_S} s (21 of 200 bytes)", error)
      self.assertEqual(_read_all(half_line), b"")  # http.server closes a half request line silently
    finally:
      half_body.close()
      half_line.close()
    self.assertServing()

  def test_slow_request_head_is_cut_off(self):
    """A client sending its request line and headers a byte at a time, each byte well within the
    per-read timeout, is cut off _TIMEOUT_S after its first byte (found by bench/serve_soak: it held
    its connection and thread for as long as it kept sending)."""
    request = f"POST {_PATH} HTTP/1.1\r\nHost: x\r\nX-Pad: {'p' * 200}\r\n".encode()
    with socket.create_connection(("127.0.0.1", self.port), timeout=120) as s:
      start = time.monotonic()
      for i in range(len(request)):
        s.sendall(request[i:i + 1])
        s.settimeout(0.5)
        try:
          closed = s.recv(1) == b""
        except socket.timeout:
          closed = False
        except ConnectionError:
          closed = True
        if closed or time.monotonic() - start > 4 * _TIMEOUT_S:
          break
      held = time.monotonic() - start
    self.assertTrue(closed, f"still open after {held:.1f} s")
    self.assertLess(held, _TIMEOUT_S + 2)
    self.assertServing()

  def test_clients_gone_before_their_answer_leave_no_traceback(self):
    """Clients that reset or close before reading their answer end only their own connection: the
    log has no traceback (found by bench/serve_soak: socketserver printed one for each)."""
    for i in range(12):
      s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
      body = json.dumps({"instances": [_QUESTIONS[0]]}).encode()
      s.sendall(f"POST {_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() +
                (body if i % 3 else body[:5]))
      if i % 2:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # an RST
      s.close()
    # A head too long is refused with 431 and the rest of it drained, so the client reads the 431
    # rather than a reset.
    with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
      s.sendall(f"POST {_PATH} HTTP/1.1\r\nX-Long: {'a' * 70000}\r\nContent-Length: 2\r\n\r\n{{}}".encode())
      reply = _read_all(s)
    self.assertTrue(reply.startswith(b"HTTP/1.1 431 "), reply[:200])
    self.assertServing()
    time.sleep(1)  # the dropped connections' threads have written their answers (or failed to)
    self.assertNotIn("Traceback", self.server.stderr())

  def test_page(self):
    status, content_type, data = self._request("GET", "/")
    self.assertEqual((status, content_type), (200, "text/html; charset=utf-8"))
    self.assertIn(b'id="question"', data)
    self.assertNotIn(b'id="answer"', data)
    for query, message in (("?q=++", "the question is an empty question"),
                           ("?q=%ff", "the question in the address is not valid UTF-8")):
      status, _, data = self._request("GET", "/" + query)
      self.assertEqual(status, 400)
      self.assertIn(message, data.decode("utf-8"))
    status, _, data = self._request("GET", "/?q=" + "Where+was+Savix+Lunene+born%3F")
    self.assertEqual(status, 200)
    page = data.decode("utf-8")
    answer = self.expected["answers"][0].decode("utf-8")
    self.assertIn(f'id="answer-text">{answer}<', page)
    self.assertIn(f"<mark>{answer}</mark>", page)
    self.assertIn(self.expected["block_titles"][0][0].decode("utf-8"), page)

  def test_browser_asks_on_the_page(self):
    if browser.find_chromium() is None:
      self.skipTest(browser.missing_reason())
    with browser.HeadlessChromium() as chromium:
      shown = chromium.ask(f"http://127.0.0.1:{self.port}", _QUESTIONS[1])
      self.assertEqual(shown, self.expected["answers"][1].decode("utf-8") or "(no answer)")
      marks = chromium.driver.find_elements("tag name", "mark")
      self.assertEqual([m.text for m in marks], [shown])
      self.assertRegex(chromium.driver.find_element("id", "answer-time").text, r"^\d+ ms$")
      self.assertEqual(chromium.driver.find_element("id", "question").get_attribute("value"), _QUESTIONS[1])


def _read_all(sock: socket.socket) -> bytes:
  """Everything the server sends until it closes the connection."""
  chunks = []
  while True:
    chunk = sock.recv(1 << 16)
    if not chunk:
      return b"".join(chunks)
    chunks.append(chunk)


if __name__ == "__main__":
  tf.test.main()
