"""Tests of realm_tf.training.preemption: SIGTERM recorded instead of fatal, the previous handler back."""

import os
import signal
import threading

import tensorflow as tf

from realm_tf.training import preemption


class SigtermTest(tf.test.TestCase):

  def test_sigterm_sets_the_request_and_the_previous_handler_returns(self):
    calls = []
    previous = signal.signal(signal.SIGTERM, lambda *_: calls.append("previous"))
    self.addCleanup(signal.signal, signal.SIGTERM, previous)
    with preemption.sigterm_requests_stop() as stop:
      self.assertFalse(stop.requested)
      os.kill(os.getpid(), signal.SIGTERM)
      self.assertTrue(stop.requested)  # and the process is still alive
    self.assertEqual(calls, [])
    os.kill(os.getpid(), signal.SIGTERM)
    self.assertEqual(calls, ["previous"])

  def test_outside_the_main_thread_nothing_is_installed(self):
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def run():
      with preemption.sigterm_requests_stop() as stop:
        seen.append((signal.getsignal(signal.SIGTERM), stop.requested))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    self.assertEqual(seen, [(before, False)])

  def test_preempted_exits_with_143_and_its_message(self):
    error = preemption.Preempted("SIGTERM: saved X")
    self.assertIsInstance(error, SystemExit)
    self.assertEqual(error.code, 143)
    self.assertEqual(str(error), "SIGTERM: saved X")


if __name__ == "__main__":
  tf.test.main()
