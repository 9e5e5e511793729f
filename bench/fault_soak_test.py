"""A short seeded fault soak (bench/fault_soak.py): 8 faults drawn from every kind (disk_full and
update_index included) on the real bin/train_realm and bin/refresh_doc_embeds processes, every invariant
asserted; the fault-free run runs beside the faulted one (--clean_in_parallel), which halves the wall time.

Dropout 0, so that a trainer resumed after SIGKILL or SIGTERM replays its steps exactly and the final
weights must equal the fault-free run's (with dropout its masks come from a stream that restarts with the
process; docs/reliability.md, "Fault soak").
"""

import os

import tensorflow as tf

from bench import fault_soak


class FaultSoakTest(tf.test.TestCase):

  def test_short_soak_holds_every_invariant(self):
    out = self.create_tempdir().full_path
    result = fault_soak.main([
        "--seed=2",
        "--max_faults=8",
        "--num_train_steps=40",
        "--dropout=0",
        "--max_gap_seconds=5",
        # A hang is a wait that never ends; 300 s, not the bench's 120, tells it from a process start
        # slowed by a loaded machine (the suite runs three targets at once, beside a bin/demo at worst).
        "--clean_in_parallel",
        "--hang_seconds=300",
        # Every kind, disk_full (the RLIMIT_FSIZE variant, which needs no root) and update_index included.
        f"--work_dir={out}",
        f"--output_json={os.path.join(out, 'fault_soak.json')}"
    ])
    inv = result["invariants"]
    summary = {
        k: result[k]
        for k in ("faults_by_kind", "invariants", "leftovers", "tracebacks", "edits_read_by_trainer")
    }
    summary["updates"] = result["faulted"].get("updates")
    # A hang's record holds both processes' last log lines: what a failure here needs to be read.
    summary["hangs"] = {name: result[name].get("hang") for name in ("clean", "faulted")}
    self.assertEqual(result["faults_injected"], 8, summary)
    # Where it ran, as every bench's JSON says: the command, the CPU and the load.
    self.assertIn("--max_faults=8", result["command"])
    self.assertTrue(result["machine"]["processor"])
    self.assertLen(result["machine"]["load_average_at_start"], 3)
    self.assertLen(result["load_average_at_end"], 3)
    self.assertTrue(inv["reached_step"], summary)
    self.assertTrue(inv["clean_reached_step"], summary)
    if inv["not_published_warnings"] == 0 and not result["edits_read_by_trainer"]:
      self.assertLessEqual(inv["weights_max_abs_diff"], 1e-5, summary)
    self.assertTrue(inv["weights_equal_or_explained"], summary)
    self.assertEqual(inv["checkpoints_restored"] + inv["checkpoints_damaged_by_soak_still_listed"],
                     inv["checkpoints_listed"], summary)
    self.assertEqual(inv["checkpoints_unreadable"], 0, summary)
    self.assertGreater(inv["indexes_verified"], 0, summary)
    self.assertEqual(inv["indexes_failed"], 0, summary)
    self.assertEqual(inv["temporary_leftovers"], 0, summary)
    self.assertFalse(inv["hang"], summary)
    self.assertEqual(inv["trainer_restarts_without_progress"], 0, summary)
    self.assertLess(inv["trainer_exit_after_done_s"], 120, summary)
    self.assertLess(inv["refresher_exit_after_done_s"], 120, summary)
    self.assertEqual(inv["tracebacks_undocumented"], 0, summary)
    self.assertEqual(inv["second_refreshers_refused_naming_first"], inv["second_refreshers"], summary)
    self.assertEqual(inv["unexpected_exits"], 0, summary)
    self.assertEqual(inv["updates_unexpected"], 0, summary)
    self.assertTrue(inv["all_hold"], summary)


if __name__ == "__main__":
  tf.test.main()
