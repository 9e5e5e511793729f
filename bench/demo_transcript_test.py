"""bench/demo_transcript.py reads the numbers of a bin/demo transcript (its summary lines as
bin/run_demo.py prints them) and refuses one that did not finish."""

from absl.testing import absltest

from bench import demo_transcript

_TRANSCRIPT = """== 1. testdata
  step 300/300: examples_per_second=25.9, loss=3.28
== summary
  REALM loss: 5.313 at the first step -> 3.280 at step 300
  retrieval_utility (last step): 0.6998; null document share 0.0001
  indexes trained on (steps): [0, 50, 100] (refresher exit code 0)
  retriever recall@1 on 200 testdata questions (gold document): 4.5% (ICT warm start) -> 6.0% (after REALM)
  retriever recall@5 on 200 testdata questions (gold document): 19.5% (ICT warm start) -> 21.0% (after REALM)
  ORQA on 100 test questions after 400 steps: exact match 48.0, F1 49.3, retriever recall@1/5/20/100 63 / 88 / 99 / 100
  seconds by stage: corpora 9 s, REALM 371 s, recall 8 s, ORQA, eval, export, answer 93 s
  total 481 s; logs and checkpoints under /x/demo_output/pipeline
demo done.
"""


class DemoTranscriptTest(absltest.TestCase):

  def test_reads_the_summary(self):
    result = demo_transcript.parse(_TRANSCRIPT)
    self.assertEqual(result["recall"], {"@1": [4.5, 6.0], "@5": [19.5, 21.0]})
    self.assertEqual(result["realm_loss"], [5.313, 3.28])
    self.assertEqual(result["indexes_trained_on"], [0, 50, 100])
    self.assertEqual(result["orqa"], {
        "exact_match": 48.0,
        "f1": 49.3,
        "recall@1/5/20/100": [63, 88, 99, 100]
    })
    # A stage's name may hold commas ("ORQA, eval, export, answer").
    self.assertEqual(result["stage_seconds"], {
        "corpora": 9.0,
        "REALM": 371.0,
        "recall": 8.0,
        "ORQA, eval, export, answer": 93.0
    })
    self.assertEqual(result["total_seconds"], 481.0)

  def test_refuses_an_unfinished_run(self):
    with self.assertRaisesRegex(ValueError, "not a finished bin/demo transcript"):
      demo_transcript.parse(_TRANSCRIPT.split("== summary")[0])


if __name__ == "__main__":
  absltest.main()
