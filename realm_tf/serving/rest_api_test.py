"""TF Serving's REST predict format: both request formats parse to the same questions, responses have TF
Serving's shapes, and every malformed request is refused with a 4xx naming the field."""

import json

import numpy as np
from absl.testing import absltest

from realm_tf.serving import rest_api


def _parse(request, max_batch_size=8):
  return rest_api.parse_predict(request, max_batch_size)


class RestApiTest(absltest.TestCase):

  def test_row_and_columnar_requests(self):
    for request in ({
        "instances": ["a?", "b?"]
    }, {
        "instances": [{
            "questions": "a?"
        }, {
            "questions": "b?"
        }]
    }, {
        "instances": ["a?", {
            "questions": "b?"
        }],
        "signature_name": "serving_default"
    }):
      self.assertEqual(_parse(request), rest_api.PredictRequest(["a?", "b?"], False))
    for request in ({"inputs": ["a?", "b?"]}, {"inputs": {"questions": ["a?", "b?"]}}):
      self.assertEqual(_parse(request), rest_api.PredictRequest(["a?", "b?"], True))
    self.assertEqual(_parse({"instances": ["é?"] * 8}).questions, ["é?"] * 8)

  def test_responses_have_tf_serving_shapes(self):
    outputs = {
        "answers": np.array([b"Lunene", "Zo\u00eb".encode("utf-8")], object),
        "scores": np.array([1.5, -2.0], np.float32),
        "block_ids": np.array([[3, 1], [0, 2]], np.int32)
    }
    rows = rest_api.format_predictions(outputs, columnar=False)
    self.assertEqual(
        rows, {
            "predictions": [{
                "answers": "Lunene",
                "block_ids": [3, 1],
                "scores": 1.5
            }, {
                "answers": "Zo\u00eb",
                "block_ids": [0, 2],
                "scores": -2.0
            }]
        })
    columns = rest_api.format_predictions(outputs, columnar=True)
    self.assertEqual(columns, {
        "outputs": {
            "answers": ["Lunene", "Zo\u00eb"],
            "block_ids": [[3, 1], [0, 2]],
            "scores": [1.5, -2.0]
        }
    })
    json.dumps(rows)  # JSON-serializable as it is
    self.assertEqual(rest_api.model_status(1)["model_version_status"][0]["state"], "AVAILABLE")

  def test_bad_bodies(self):
    for body, expected in ((b"\xff{}", r"not valid UTF-8 \(byte 0"), (b'{"instances": ["a"]', "not JSON"),
                           (b"", "not JSON")):
      with self.assertRaisesRegex(rest_api.RequestError, expected) as e:
        rest_api.decode_body(body)
      self.assertEqual(e.exception.status, 400)
    self.assertEqual(rest_api.decode_body('{"inputs": ["é"]}'.encode("utf-8")), {"inputs": ["é"]})

  def test_bodies_json_cannot_read_are_400_not_500(self):
    # Found by bench/serve_soak: json.loads raises RecursionError and a plain ValueError for these, not
    # JSONDecodeError; the server answered them 500 with a traceback in its log.
    for body, expected in ((b"[" * 100000 + b"]" * 100000, "nests lists or objects too deeply"),
                           (b'{"a":' * 50000, "nests lists or objects too deeply"),
                           (b'{"instances": [' + b"7" * 5000 + b"]}", "holds a value JSON cannot be read into"
                            r" \(Exceeds the limit")):
      with self.assertRaisesRegex(rest_api.RequestError, expected) as e:
        rest_api.decode_body(body)
      self.assertEqual(e.exception.status, 400)

  def test_bad_requests_name_the_problem(self):
    cases = [
        (["a?"], "the request is a list; send a JSON object"),
        ({}, "send exactly one of 'instances'"),
        ({
            "instances": ["a"],
            "inputs": ["a"]
        }, "not both"),
        ({
            "instance": ["a"]
        }, "unknown field 'instance'"),
        ({
            "instances": ["a"],
            "signature_name": "x"
        }, "signature_name 'x' is not served"),
        ({
            "instances": "a?"
        }, "instances is a string; send a list of questions"),
        ({
            "instances": []
        }, "instances is empty"),
        ({
            "instances": ["a?"] * 9
        }, r"instances holds 9 questions; this server answers at most 8"),
        ({
            "instances": ["a?", 3]
        }, r"instances\[1\] is a number; each question must be a string"),
        ({
            "instances": ["a?", None]
        }, r"instances\[1\] is null"),
        ({
            "instances": [" \t"]
        }, r"instances\[0\] is an empty question"),
        ({
            "instances": ["\ud800"]
        }, r"instances\[0\] holds a lone UTF-16 surrogate"),
        ({
            "instances": [{
                "question": "a?"
            }]
        }, r"instances\[0\] has the fields \['question'\]"),
        ({
            "instances": [{
                "questions": 1
            }]
        }, r"instances\[0\].questions is a number"),
        ({
            "inputs": {
                "question": ["a"]
            }
        }, "inputs has the field 'question'"),
        ({
            "inputs": {}
        }, "inputs has no 'questions' field"),
        ({
            "inputs": {
                "questions": [""]
            }
        }, r"inputs.questions\[0\] is an empty question"),
        ({
            "inputs": [{
                "questions": "a"
            }]
        }, r"inputs\[0\] is an object"),
    ]
    for request, expected in cases:
      with self.subTest(request=request):
        with self.assertRaisesRegex(rest_api.RequestError, expected) as e:
          _parse(request)
        self.assertEqual(e.exception.status, 400)


if __name__ == "__main__":
  absltest.main()
