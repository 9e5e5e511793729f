"""A short seeded serving soak (bench/serve_soak): a real bin/serve under valid and hostile clients for
seconds; every invariant holds (no crash, exit 0 on SIGTERM, every valid answer right, no 5xx, slow
clients cut off in time, no traceback in the log, threads and open files back to their idle count,
bounded RSS growth), and every hostile kind was tried."""

from absl.testing import absltest

from bench import serve_soak


class ServeSoakTest(absltest.TestCase):

  def test_short_soak_holds_every_invariant(self):
    saved_model = serve_soak.export_model(self.create_tempdir().full_path, num_docs=20)
    results = serve_soak.run_soak(saved_model,
                                  seconds=8,
                                  quiet_seconds=2,
                                  clients=2,
                                  attackers=3,
                                  seed=0,
                                  request_timeout_s=1,
                                  max_body_bytes=1 << 16,
                                  questions=serve_soak.test_questions()[:20])
    failed = {name: invariant for name, invariant in results["invariants"].items() if not invariant["held"]}
    self.assertEqual(failed, {}, (results["problems"], results["server"]["first_traceback"]))
    self.assertTrue(results["held"])
    self.assertCountEqual(results["hostile"]["by_kind"], serve_soak.HOSTILE_KINDS)
    for phase in ("quiet", "attack"):
      self.assertGreater(results["valid"][phase]["answered"], 0, phase)
    self.assertEqual(results["server"]["exit_code"], 0)
    self.assertIn("| slow_headers |", serve_soak.table(results))


if __name__ == "__main__":
  absltest.main()
