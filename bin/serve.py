r"""Serves an exported open-QA SavedModel: a page to ask it in a browser, and TF Serving's REST API.

  python bin/serve.py --saved_model=/export/orqa/open_qa [--port=8501] [--host=127.0.0.1]
  then open http://127.0.0.1:8501/ or
  curl -d '{"instances": ["Where was Savix Lunene born?"]}' http://127.0.0.1:8501/v1/models/open_qa:predict

The model is loaded once and answers one question before the server listens, so the first request is
not slow; the line "serving ... at http://HOST:PORT/" says it is ready (--port=0: a free port the OS
chooses, named in that line). See realm_tf/serving/server.py for the API and the limits.
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

import signal
import sys

from absl import app
from absl import flags

from realm_tf.serving import server as server_lib

_SAVED_MODEL = flags.DEFINE_string("saved_model",
                                   None, "An open_qa SavedModel directory "
                                   "(bin/export_saved_model's OUTPUT_DIR/open_qa).",
                                   required=True)
_HOST = flags.DEFINE_string(
    "host", "127.0.0.1", "Address to listen on (0.0.0.0: every interface; the "
    "server has no authentication).")
_PORT = flags.DEFINE_integer("port", 8501, "Port (TF Serving's REST port by default; 0: a free one).")
_MODEL_NAME = flags.DEFINE_string("model_name", "open_qa", "NAME in /v1/models/NAME.")
_MAX_BODY = flags.DEFINE_integer("max_body_bytes", server_lib.ServerOptions.max_body_bytes,
                                 "Largest request body read; larger ones get 413.")
_MAX_BATCH = flags.DEFINE_integer("max_batch_size", server_lib.ServerOptions.max_batch_size,
                                  "Most questions in one :predict request; more get 400.")
_TIMEOUT = flags.DEFINE_float(
    "request_timeout_s", server_lib.ServerOptions.request_timeout_s,
    "Seconds a request may take to arrive (a slow client is cut off after "
    "this; its body gets 408) and an idle connection is kept.")
_PASSAGES = flags.DEFINE_integer("num_passages", server_lib.ServerOptions.num_passages,
                                 "Passages shown on the page.")
_ACCESS_LOG = flags.DEFINE_boolean("access_log", True, "One stderr line per request.")
_WARM_UP = "Who wrote this?"


def _stop(signum, frame):
  """SIGTERM (kill, a supervisor) stops as Ctrl-C does: the listening socket is closed on the way out."""
  del signum, frame
  raise KeyboardInterrupt


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; bin/serve.py takes flags only")
  try:
    options = server_lib.ServerOptions(max_body_bytes=_MAX_BODY.value,
                                       max_batch_size=_MAX_BATCH.value,
                                       request_timeout_s=_TIMEOUT.value,
                                       num_passages=_PASSAGES.value,
                                       access_log=_ACCESS_LOG.value)
    service = server_lib.OpenQaService(_SAVED_MODEL.value, _MODEL_NAME.value)
  except (ValueError, FileNotFoundError) as e:
    raise app.UsageError(str(e)) from e
  service.predict([_WARM_UP])  # the first call builds the function's kernels: not a user's wait
  try:
    server = server_lib.make_server(service, _HOST.value, _PORT.value, options)
  except OSError as e:
    raise app.UsageError(f"cannot listen on {_HOST.value}:{_PORT.value}: {e.strerror}; pass another "
                         "--port (0: any free one)") from e
  signal.signal(signal.SIGTERM, _stop)
  host, port = server.server_address[:2]
  base = f"http://{host}:{port}"
  print(
      f"serving {service.model_name} ({_SAVED_MODEL.value}, retriever {service.retriever}) at {base}/\n"
      f"  API: POST {base}/v1/models/{service.model_name}:predict  "
      '{"instances": ["a question"]}',
      flush=True)
  try:
    server.serve_forever()
  except KeyboardInterrupt:
    print("stopped", file=sys.stderr)
  finally:
    server.server_close()


if __name__ == "__main__":
  app.run(main)
