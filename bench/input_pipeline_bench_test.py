"""A smoke test of bench/input_pipeline_bench.py at toy sizes: both configurations run through
the real pipeline pieces, and the JSON holds every component, positive rates and the scaled index
size."""

import gc
import json
import os
from unittest import mock

from absl.testing import absltest

from bench import input_pipeline_bench


class InputPipelineBenchTest(absltest.TestCase):

  def test_timed_calls_run_with_the_collector_paused_and_it_comes_back(self):
    self.assertTrue(gc.isenabled())
    collector_on = []
    # No minimum duration: exactly the 3 calls asked for.
    with mock.patch.object(input_pipeline_bench, "MIN_SECONDS", [0.0]):
      timing = input_pipeline_bench._timed(lambda: collector_on.append(gc.isenabled()),
                                           calls=3,
                                           examples_per_call=2,
                                           warmup=1)
    # The warm-up call runs with the collector on, the timed calls with it off; afterwards it is on.
    self.assertEqual(collector_on, [True, False, False, False])
    self.assertTrue(gc.isenabled())
    self.assertEqual((timing["calls"], timing["examples"]), (3, 6))

  def test_both_configs_report_every_component_and_positive_rates(self):
    out = self.create_tempdir().full_path
    options = input_pipeline_bench.Options(
        configs=("demo", "paper"),
        paper_index_rows=(1000, 2000),
        queries=8,
        # The demo's path at a batch of 4, not its 32: the same pieces, an eighth of the work (the
        # test checks that the bench runs and reports, not the demo's rates).
        demo_batch_size=4,
        demo_queries=8,
        demo_e2e_batches=1,
        paper_batch_size=8,
        max_resident_rows=1000,
        scann_max_build_rows=1000,
        paper_corpus_stored_rows=500,
        paper_bert="tiny",
        demo_jit_compile=False,
        train_steps=1,
        paper_train_batch_size=1,
        paper_train_steps=1,
        min_seconds=0.02,
        output_json=os.path.join(out, "bench.json"),
        output_png=os.path.join(out, "bench.png"))
    input_pipeline_bench.run_bench(options, "input_pipeline_bench_test")
    with open(options.output_json) as f:
      results = json.load(f)
    self.assertTrue(os.path.getsize(options.output_png) > 0)
    for key in ("command", "date", "machine", "accelerator_anchor", "table"):
      self.assertIn(key, results)
    self.assertLen(results["machine"]["load_average_at_start"], 3)
    self.assertLen(results["machine"]["load_average_at_end"], 3)
    demo, paper = results["configs"]["demo"], results["configs"]["paper"]
    self.assertEqual(demo["settings"]["batch_size"], 4)
    self.assertEqual(demo["train_step"]["batch_size"], 4)
    self.assertGreater(demo["end_to_end"]["examples_per_second"], 0)
    self.assertGreater(demo["train_step"]["median_step_s"], 0)
    self.assertGreater(paper["train_step"]["scaled_step_s"], 0)
    end_to_end = [r for r in demo["pipelines"] if r.get("end_to_end")]
    self.assertLen(end_to_end, 1)
    self.assertGreater(end_to_end[0]["examples_per_second_per_core"], 0)
    rows = [r for r in demo["pipelines"] + paper["pipelines"] if not r.get("end_to_end")]
    # demo: brute force and ScaNN; paper: both at 1000 rows measured, and at 2000 scaled.
    self.assertLen(rows, 6)
    for row in rows:
      for component in input_pipeline_bench.COMPONENTS:
        self.assertGreater(row["cpu_s_per_example"][component], 0, (row["config"], component))
        self.assertGreater(row["wall_s_per_example"][component], 0, (row["config"], component))
      self.assertGreater(row["examples_per_second"], 0)
      self.assertGreater(row["examples_per_second_per_core"], 0)
      self.assertBetween(row["train"]["input_share_of_step"], 0, 1)
    scaled = [r for r in paper["pipelines"] if r["index_rows"] == 2000]
    self.assertTrue(all(r["search_source"].startswith("scaled") for r in scaled))
    self.assertTrue(all(r["host_cores_per_accelerator"] > 0 for r in paper["pipelines"]))
    # The in-step path: a row beside each host-path row; the host keeps only the query featurization,
    # so its host cost per example is below the host path's, and the demo's step was measured with the
    # retrieval inside it.
    self.assertIn("in_step_table", results)
    self.assertGreater(demo["train_step_in_step"]["median_step_s"], 0)
    in_step = demo["in_step_pipelines"] + paper["in_step_pipelines"]
    self.assertLen(in_step, 6)
    for row, host in zip(in_step, rows):
      self.assertEqual((row["config"], row["index_rows"]), (host["config"], host["index_rows"]))
      self.assertLess(row["host_cpu_s_per_example"], host["total_cpu_s_per_example"])
      self.assertBetween(row["train"]["input_share_of_step"], 0, 1)
      self.assertLess(row["train"]["input_s_per_step"], host["train"]["input_s_per_step"])
      # The paper's in-step step is the host path's measured step plus the moved components, so its
      # share is below the host path's by construction; the demo's two steps are measured apart (one
      # step each here), and their order is the machine's noise, not the bench's behaviour.
      if row["config"] == "paper":
        self.assertLess(row["train"]["input_share_of_step"], host["train"]["input_share_of_step"])


if __name__ == "__main__":
  absltest.main()
