"""bin/serve's server: one process holds an open-QA SavedModel and answers over HTTP.

  GET  /                                  the page (realm_tf.serving.page); GET /?q=QUESTION answers it
  POST /v1/models/NAME[/versions/1]:predict   TF Serving's REST predict (realm_tf.serving.rest_api)
  GET  /v1/models/NAME[/versions/1]            TF Serving's model status
  GET  /v1/models/NAME[/versions/1]/metadata   TF Serving's model metadata (the serving_default signature)

Python's ThreadingHTTPServer: a thread per connection, so a slow client holds only its own thread, and
model calls from several threads run concurrently (a loaded SavedModel function is thread-safe).
A client that goes away before its answer (a reset, a closed socket) ends its connection's thread
quietly: no traceback in the log. Every refused request gets {"error": "..."} and a 4xx status, and the
server goes on serving:
  - a body over ServerOptions.max_body_bytes: 413, answered from Content-Length without reading it;
  - a body not complete within request_timeout_s: 408; a request line and headers not complete within
    request_timeout_s of their first byte (however fast each byte comes): the connection closed;
  - a request target that is not a URL (GET http://[x): 400;
  - more than max_batch_size questions: 400; what else is wrong with a request: see rest_api.
"""

import dataclasses
import http
import http.server
import io
import json
import logging
import re
import socket
import time
from typing import Any, Dict, Optional, Tuple
from urllib import parse

import numpy as np
import tensorflow as tf

from realm_tf.export import loader
from realm_tf.serving import page
from realm_tf.serving import rest_api

MODEL_VERSION = 1  # TF Serving numbers versions by directory; one export is served, as version 1
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_MODEL_PATH = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?"
                         r"(?:(?P<metadata>/metadata)|:(?P<method>[A-Za-z]+))?$")


@dataclasses.dataclass(frozen=True)
class ServerOptions:
  """The limits bin/serve states (README, --help).

  Attributes:
    max_body_bytes: the largest request body read; larger ones are refused with 413.
    max_batch_size: the most questions in one :predict request.
    request_timeout_s: how long a request's body may take to arrive in all, and how long the request
      line or headers may stall (http.server's per-read socket timeout); also how long an idle
      keep-alive connection is kept.
    num_passages: passages shown on the page.
    access_log: one stderr line per request.
  """
  max_body_bytes: int = 1 << 20
  max_batch_size: int = 64
  request_timeout_s: float = 10.0
  num_passages: int = 5
  access_log: bool = True

  def __post_init__(self):
    for field in ("max_body_bytes", "max_batch_size", "num_passages"):
      if getattr(self, field) < 1:
        raise ValueError(f"{field} must be at least 1, got {getattr(self, field)}")
    if not self.request_timeout_s > 0:
      raise ValueError(f"request_timeout_s must be positive, got {self.request_timeout_s}")


def _dtype_name(dtype: tf.DType) -> str:
  from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  return types_pb2.DataType.Name(dtype.as_datatype_enum)


class OpenQaService:
  """The loaded open-QA model: questions -> the serving_default signature's outputs (numpy).

  Args:
    saved_model: an open_qa export (bin/export_saved_model's OUTPUT_DIR/open_qa).
    model_name: the NAME in /v1/models/NAME.
  """

  def __init__(self, saved_model: str, model_name: str = loader.OPEN_QA):
    if not _MODEL_NAME.match(model_name):
      raise ValueError(f"model name {model_name!r} must be letters, digits, '_', '.' or '-' (it is "
                       "part of the URL /v1/models/NAME)")
    self.model_name = model_name
    self.saved_model = saved_model
    self.info = loader.export_info(saved_model)
    # What retrieves the passages (bin/export_saved_model --retriever): named in every answer.
    self.retriever = loader.retriever_of(self.info)
    self._model = loader.load_open_qa(saved_model)
    self._signature = self._model.signatures[rest_api.SIGNATURE_NAME]

  def predict(self, questions) -> Dict[str, np.ndarray]:
    return loader.answer_questions(self._model, questions)

  def metadata(self) -> Dict[str, Any]:
    """TF Serving's GET .../metadata answer, from the signature's own input and output specs."""
    _, input_specs = self._signature.structured_input_signature
    inputs = {
        key:
            rest_api.tensor_info(spec.name or key, _dtype_name(spec.dtype),
                                 [-1 if d is None else d for d in spec.shape.as_list()])
        for key, spec in input_specs.items()
    }
    outputs = {
        key:
            rest_api.tensor_info(key, _dtype_name(spec.dtype),
                                 [-1 if d is None else d for d in spec.shape.as_list()])
        for key, spec in self._signature.structured_outputs.items()
    }
    return rest_api.model_metadata(self.model_name, MODEL_VERSION, inputs, outputs, self.retriever)


class _DeadlineReader(io.RawIOBase):
  """A connection's bytes for the handler's rfile, every read bounded by the request's deadline.

  http.server's socket timeout bounds each read only, so a client sending a byte now and then would
  hold its connection (and thread) for ever: the slow-loris attack. deadline is None while waiting for
  a request (an idle keep-alive connection: one read of timeout_s); a request's first byte starts
  timeout_s for its request line and headers, and _Handler._read_body sets a new one for the body."""

  def __init__(self, sock: socket.socket, timeout_s: float):
    super().__init__()
    self._sock, self._timeout_s = sock, timeout_s
    self.deadline: Optional[float] = None

  def readable(self) -> bool:
    return True

  def readinto(self, buffer) -> int:
    if self.deadline is None:
      self._sock.settimeout(self._timeout_s)
    else:
      remaining = self.deadline - time.monotonic()
      if remaining <= 0:
        raise TimeoutError(f"the request did not arrive within {self._timeout_s:g} s")
      self._sock.settimeout(remaining)
    received = self._sock.recv_into(buffer)
    if received and self.deadline is None:
      self.deadline = time.monotonic() + self._timeout_s
    return received


class _Handler(http.server.BaseHTTPRequestHandler):
  """One connection's requests; service and options are set on a subclass by make_server."""

  service: OpenQaService
  options: ServerOptions
  protocol_version = "HTTP/1.1"  # keep-alive: a client's requests reuse one connection
  # Headers and body go out in two writes; with Nagle's algorithm the body would wait for the client's
  # delayed ACK of the headers (40 ms on Linux) on every keep-alive response.
  disable_nagle_algorithm = True
  server_version = "realm_tf_serve"

  _unread_body = False
  _LINGER_BYTES = 64 << 20  # what finish() reads and discards of a refused body at most

  def setup(self):
    self.timeout = self.options.request_timeout_s  # StreamRequestHandler sets it on the socket
    super().setup()
    self.rfile.close()  # the socket's own reader: replaced by one that keeps the request's deadline
    self._reader = _DeadlineReader(self.connection, self.options.request_timeout_s)
    self.rfile = io.BufferedReader(self._reader)

  def handle_one_request(self):
    self._reader.deadline = None  # the next request's first byte starts its deadline
    super().handle_one_request()

  def handle(self):
    """http.server's loop, but a client that resets or closes its connection before reading its
    answer ends only this connection: socketserver would print a traceback for each."""
    try:
      super().handle()
    except (ConnectionError, TimeoutError) as e:
      self.close_connection = True
      self.log_error("connection ended by the client: %s", e)

  def finish(self):
    """After refusing a body unread (413), reads what the client still sends before the socket closes:
    closing with unread bytes makes the kernel reset the connection, and the client would lose the 413
    it has not read yet. Bounded by request_timeout_s and _LINGER_BYTES."""
    super().finish()
    if not self._unread_body:
      return
    try:
      self.connection.shutdown(socket.SHUT_WR)
      deadline, drained = time.monotonic() + self.options.request_timeout_s, 0
      while drained < self._LINGER_BYTES and time.monotonic() < deadline:
        self.connection.settimeout(max(deadline - time.monotonic(), 0.01))
        chunk = self.connection.recv(1 << 16)
        if not chunk:
          break
        drained += len(chunk)
    except OSError:
      pass  # the client went away first: nothing left to protect

  # ------------------------------------------------------------------------------------------------
  # Responses

  def _send(self, status: int, body: bytes, content_type: str):
    self.send_response(status)
    self.send_header("Content-Type", content_type)
    self.send_header("Content-Length", str(len(body)))
    self.send_header("Cache-Control", "no-store")
    if self.close_connection:
      self.send_header("Connection", "close")
    self.end_headers()
    if self.command != "HEAD":
      self.wfile.write(body)

  def _send_json(self, status: int, value: Any):
    self._send(status,
               json.dumps(value, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8")

  def send_error(self, code, message=None, explain=None):
    """http.server's own refusals (a malformed request line, headers too long, an unknown method) as
    JSON like every other error. The rest of such a request stays unread, so finish() drains it as
    for a 413: the client gets the answer rather than a reset."""
    self.log_error("code %d, message %s", code, message)
    self.close_connection = True
    self._unread_body = True
    self._send_json(code, {"error": message or explain or http.HTTPStatus(code).phrase})

  def log_message(self, format, *args):  # pylint: disable=redefined-builtin  (http.server's name)
    if self.options.access_log:
      super().log_message(format, *args)

  # ------------------------------------------------------------------------------------------------
  # Requests

  def _target(self) -> parse.SplitResult:
    """The request target as a URL; RequestError 400 for one urllib cannot split (GET http://[x)."""
    try:
      return parse.urlsplit(self.path)
    except ValueError as e:
      raise rest_api.RequestError(400, f"the request target {self.path[:200]!r} is not a URL "
                                  f"({e})") from e

  def _route(self) -> Tuple[Optional[str], Optional[str]]:
    """(method, "metadata"/None) of a /v1/models/... path; RequestError 404 for another path, model
    name or version."""
    path = self._target().path
    match = _MODEL_PATH.match(path)
    if not match:
      raise rest_api.RequestError(
          404, f"no such path {path!r}; the API is POST /v1/models/"
          f"{self.service.model_name}:predict, GET /v1/models/"
          f"{self.service.model_name}[/metadata], and the page is at /")
    name = parse.unquote(match["name"])
    if name != self.service.model_name:
      raise rest_api.RequestError(
          404, f"no model named {name!r} is served here; this server serves "
          f"{self.service.model_name!r} (/v1/models/"
          f"{self.service.model_name})")
    if match["version"] is not None and match["version"] != str(MODEL_VERSION):
      raise rest_api.RequestError(
          404, f"model {name!r} has no version {match['version']!r}; the one "
          f"version served is {MODEL_VERSION}")
    return match["method"], match["metadata"]

  def _read_body(self) -> bytes:
    """The request body, within max_body_bytes and request_timeout_s (the whole body, not per read:
    a client trickling a byte at a time is cut off too)."""
    if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
      self.close_connection = True
      raise rest_api.RequestError(411, "chunked request bodies are not accepted; send Content-Length")
    length = self.headers.get("Content-Length")
    if length is None:
      self.close_connection = True
      raise rest_api.RequestError(
          411, "the request has no Content-Length header; send one with the "
          "body's size in bytes")
    try:
      length = int(length)
      if length < 0:
        raise ValueError(length)
    except ValueError as e:
      self.close_connection = True
      raise rest_api.RequestError(400, f"Content-Length {length!r} is not a byte count") from e
    if length > self.options.max_body_bytes:
      self.close_connection = True  # the body stays unread: this connection cannot be reused
      self._unread_body = True
      raise rest_api.RequestError(
          413, f"the request body is {length} bytes; this server reads at most "
          f"{self.options.max_body_bytes} (bin/serve --max_body_bytes)")
    self._reader.deadline = time.monotonic() + self.options.request_timeout_s  # the body's own
    chunks, received = [], 0
    try:
      while received < length:
        chunk = self.rfile.read1(min(length - received, 1 << 16))
        if not chunk:
          self.close_connection = True
          raise rest_api.RequestError(
              400, f"the connection closed after {received} of the "
              f"{length} body bytes Content-Length announced")
        chunks.append(chunk)
        received += len(chunk)
    except (TimeoutError, socket.timeout) as e:
      self.close_connection = True
      raise rest_api.RequestError(
          408, f"the request body did not arrive within "
          f"{self.options.request_timeout_s:g} s ({received} of {length} "
          "bytes); send the whole request at once") from e
    return b"".join(chunks)

  def do_POST(self):  # pylint: disable=invalid-name  (http.server's name)
    # The answer is sent outside the try: a client gone before it is handle()'s, not "predict failed".
    try:
      body = self._read_body()
      method, metadata = self._route()
      if metadata or method is None:
        raise rest_api.RequestError(
            405, f"{self.path} answers GET; predictions are POST /v1/models/"
            f"{self.service.model_name}:predict")
      if method != "predict":
        raise rest_api.RequestError(
            400, f":{method} is not served; this model answers :predict "
            "(TF Serving's classify and regress need another signature)")
      request = rest_api.parse_predict(rest_api.decode_body(body), self.options.max_batch_size)
      outputs = self.service.predict(request.questions)
      status, answer = 200, rest_api.format_predictions(outputs, request.columnar, self.service.retriever)
    except rest_api.RequestError as e:
      status, answer = e.status, {"error": str(e)}
    except ConnectionError:
      raise  # the client reset while sending its body: handle()'s, not the model's failure
    except Exception as e:  # pylint: disable=broad-except  (the server must keep serving)
      logging.exception("predict failed")
      status, answer = 500, {"error": f"the model failed on this request: {type(e).__name__}: {e}"}
    self._send_json(status, answer)

  def do_GET(self):  # pylint: disable=invalid-name
    try:
      url = self._target()
      if url.path == "/":
        self._page(url.query)
        return
      method, metadata = self._route()
      if method is not None:
        raise rest_api.RequestError(405, f":{method} takes POST with a JSON body, not GET")
      status, answer = 200, self.service.metadata() if metadata else rest_api.model_status(MODEL_VERSION)
    except rest_api.RequestError as e:
      status, answer = e.status, {"error": str(e)}
    self._send_json(status, answer)

  def _page(self, query: str):

    def send(status: int, **kwargs):
      self._send(
          status,
          page.render(self.service.model_name,
                      num_passages=self.options.num_passages,
                      retriever=loader.describe_retriever(self.service.info),
                      **kwargs).encode("utf-8"), "text/html; charset=utf-8")

    try:
      fields = parse.parse_qs(query, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
      send(400, error="the question in the address is not valid UTF-8; type it into the box")
      return
    if "q" not in fields:
      send(200)
      return
    question = fields["q"][0]
    try:
      rest_api.check_question(question, "the question")
    except rest_api.RequestError as e:
      send(e.status, question=question, error=str(e))
      return
    start = time.perf_counter()
    try:
      outputs = self.service.predict([question])
    except Exception as e:  # pylint: disable=broad-except
      logging.exception("answering %r failed", question)
      send(500, question=question, error=f"the model failed on this question: {type(e).__name__}: {e}")
      return
    seconds = time.perf_counter() - start
    send(200, question=question, row={key: value[0] for key, value in outputs.items()}, seconds=seconds)


class Server(http.server.ThreadingHTTPServer):
  daemon_threads = True  # a client hanging on a connection does not keep the process from exiting
  # Many clients connecting at once (bench/serve_bench) must not be refused by a short listen queue.
  request_queue_size = 128


def make_server(service: OpenQaService,
                host: str = "127.0.0.1",
                port: int = 0,
                options: ServerOptions = ServerOptions()) -> Server:
  """A bound (not yet serving) server; port 0 lets the OS choose (server.server_address[1])."""
  handler = type("Handler", (_Handler,), {"service": service, "options": options})
  return Server((host, port), handler)
