"""TF Serving's REST predict format for a one-input model, so a client can move to TF Serving unchanged.

Requests (https://www.tensorflow.org/tfx/serving/api_rest), for the open-QA signature's one input
`questions` (string [B]):

  row format       {"instances": ["q1", "q2"]}  or  {"instances": [{"questions": "q1"}, ...]}
  columnar format  {"inputs": ["q1", "q2"]}     or  {"inputs": {"questions": ["q1", "q2"]}}

both optionally with "signature_name": "serving_default". Responses are TF Serving's: the row format
answers {"predictions": [{output: value, ...} per question]}, the columnar one {"outputs": {output:
[value per question], ...}}; strings are JSON strings, numbers JSON numbers. A bad request raises
RequestError, whose message names the field and says what to send; TF Serving answers those with
{"error": message} too.

Pure Python (no TensorFlow): the HTTP server (realm_tf.serving.server) decodes, this module checks.
"""

import json
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence

import numpy as np

SIGNATURE_NAME = "serving_default"
INPUT_NAME = "questions"


class RequestError(Exception):
  """A request the server refuses: status is the HTTP status (4xx), str(self) the message."""

  def __init__(self, status: int, message: str):
    super().__init__(message)
    self.status = status


class PredictRequest(NamedTuple):
  questions: List[str]
  columnar: bool  # answered in the columnar format ({"outputs": ...}) instead of rows


def decode_body(body: bytes) -> Any:
  """The JSON value of a request body; RequestError (400) for bytes that are not UTF-8 or not JSON."""
  try:
    text = body.decode("utf-8")
  except UnicodeDecodeError as e:
    raise RequestError(
        400, f"the request body is not valid UTF-8 (byte {e.start}: "
        f"{body[e.start:e.start + 1]!r}); send JSON encoded as UTF-8") from e
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise RequestError(
        400, f"the request body is not JSON ({e.msg} at line {e.lineno} column "
        f"{e.colno}); send {{\"instances\": [\"a question\"]}}") from e
  except RecursionError as e:  # json's decoder recurses once per [ or {
    raise RequestError(
        400, "the request body nests lists or objects too deeply; send "
        '{"instances": ["a question"]}') from e
  except ValueError as e:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
    raise RequestError(400, f"the request body holds a value JSON cannot be read into ({e})") from e


def _type_name(value: Any) -> str:
  return {
      dict: "an object",
      list: "a list",
      str: "a string",
      bool: "a boolean",
      int: "a number",
      float: "a number",
      type(None): "null"
  }.get(type(value),
        type(value).__name__)


def check_question(value: Any, where: str) -> str:
  """value as a question; RequestError (400) naming where for a non-string, invalid or empty one."""
  if not isinstance(value, str):
    raise RequestError(400, f"{where} is {_type_name(value)}; each question must be a string")
  try:
    value.encode("utf-8")
  except UnicodeEncodeError as e:  # JSON's \ud800 escapes decode to lone surrogates
    raise RequestError(
        400, f"{where} holds a lone UTF-16 surrogate (character {e.start}); send "
        "valid Unicode text") from e
  if not value.strip():
    raise RequestError(400, f"{where} is an empty question; ask something")
  return value


def parse_predict(request: Any, max_batch_size: int) -> PredictRequest:
  """Checks a decoded :predict request and returns its questions (1 to max_batch_size of them)."""
  if not isinstance(request, dict):
    raise RequestError(
        400, f"the request is {_type_name(request)}; send a JSON object such as "
        '{"instances": ["a question"]}')
  unknown = sorted(set(request) - {"instances", "inputs", "signature_name"})
  if unknown:
    raise RequestError(
        400, f"unknown field {unknown[0]!r} in the request; send 'instances' (row "
        "format) or 'inputs' (columnar format), optionally with 'signature_name'")
  signature = request.get("signature_name", SIGNATURE_NAME)
  if signature != SIGNATURE_NAME:
    raise RequestError(
        400, f"signature_name {signature!r} is not served; this model has only "
        f"{SIGNATURE_NAME!r}")
  if ("instances" in request) == ("inputs" in request):
    raise RequestError(
        400, "send exactly one of 'instances' (row format) and 'inputs' (columnar "
        "format)" + (", not both" if "instances" in request else ', e.g. {"instances": ["a question"]}'))
  columnar = "inputs" in request
  if columnar:
    values, field = request["inputs"], "inputs"
    if isinstance(values, dict):
      others = sorted(set(values) - {INPUT_NAME})
      if others or INPUT_NAME not in values:
        found = f"the field {others[0]!r}" if others else f"no {INPUT_NAME!r} field"
        raise RequestError(
            400, f"inputs has {found}; the model's only input is {INPUT_NAME!r}: "
            f"{{\"inputs\": {{\"{INPUT_NAME}\": [\"a question\"]}}}}")
      values, field = values[INPUT_NAME], f"inputs.{INPUT_NAME}"
  else:
    values, field = request["instances"], "instances"
  if not isinstance(values, list):
    raise RequestError(400, f"{field} is {_type_name(values)}; send a list of questions")
  if not values:
    raise RequestError(400, f"{field} is empty; send at least one question")
  if len(values) > max_batch_size:
    raise RequestError(
        400, f"{field} holds {len(values)} questions; this server answers at most "
        f"{max_batch_size} per request (bin/serve --max_batch_size)")
  questions = []
  for i, value in enumerate(values):
    where = f"{field}[{i}]"
    if not columnar and isinstance(value, dict):  # a row object {"questions": "..."}
      if set(value) != {INPUT_NAME}:
        raise RequestError(
            400, f"{where} has the fields {sorted(value)}; a row object holds only "
            f"{INPUT_NAME!r}: {{\"{INPUT_NAME}\": \"a question\"}}")
      value, where = value[INPUT_NAME], f"{where}.{INPUT_NAME}"
    questions.append(check_question(value, where))
  return PredictRequest(questions, columnar)


def _json_value(value: Any) -> Any:
  """numpy (from .tolist()) to JSON: bytes decoded as UTF-8, nested lists kept."""
  if isinstance(value, bytes):
    return value.decode("utf-8", errors="replace")
  if isinstance(value, list):
    return [_json_value(v) for v in value]
  return value


def format_predictions(outputs: Mapping[str, np.ndarray],
                       columnar: bool,
                       retriever: Optional[str] = None) -> Dict[str, Any]:
  """TF Serving's response for a signature's outputs (every output batched along axis 0), and with
  retriever a "retriever" key naming what retrieved the passages (dense, bm25, hybrid): TF Serving's
  clients read "predictions" or "outputs" and pass over other keys."""
  columns = {name: _json_value(np.asarray(value).tolist()) for name, value in sorted(outputs.items())}
  size = len(next(iter(columns.values()))) if columns else 0
  response = ({
      "outputs": columns
  } if columnar else {
      "predictions": [{
          name: column[i] for name, column in columns.items()
      } for i in range(size)]
  })
  if retriever is not None:
    response["retriever"] = retriever
  return response


def model_status(version: int) -> Dict[str, Any]:
  """GET /v1/models/<name>: TF Serving's GetModelStatus answer for one loaded version."""
  return {
      "model_version_status": [{
          "version": str(version),
          "state": "AVAILABLE",
          "status": {
              "error_code": "OK",
              "error_message": ""
          }
      }]
  }


def tensor_info(name: str, dtype: str, shape: Sequence[int]) -> Dict[str, Any]:
  """One entry of a signature_def in TF Serving's JSON (dtype like "DT_STRING", -1 for unknown dims)."""
  return {
      "dtype": dtype,
      "name": name,
      "tensor_shape": {
          "dim": [{
              "size": str(d),
              "name": ""
          } for d in shape],
          "unknown_rank": False
      }
  }


def model_metadata(model_name: str,
                   version: int,
                   inputs: Mapping[str, Dict],
                   outputs: Mapping[str, Dict],
                   retriever: Optional[str] = None) -> Dict[str, Any]:
  """GET /v1/models/<name>/metadata: TF Serving's answer, with the one signature served (and with
  retriever, metadata.retriever naming what the model retrieves by)."""
  answer = {
      "model_spec": {
          "name": model_name,
          "signature_name": "",
          "version": str(version)
      },
      "metadata": {
          "signature_def": {
              "signature_def": {
                  SIGNATURE_NAME: {
                      "inputs": dict(inputs),
                      "outputs": dict(outputs),
                      "method_name": "tensorflow/serving/predict"
                  }
              }
          }
      }
  }
  if retriever is not None:
    answer["metadata"]["retriever"] = retriever
  return answer
