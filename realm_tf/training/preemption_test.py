"""Tests of realm_tf.training.preemption: SIGTERM recorded instead of fatal, the previous handler back."""

import os
import signal
import threading
import time

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

  def test_sigterm_reaches_on_request_while_the_main_thread_waits_inside_tensorflow(self):
    # The trainer's state when its input pipeline waits for an index: the main thread waits inside
    # TensorFlow for a batch (here a generator that waits for the request in a tf.data thread), where
    # Python's SIGTERM handler cannot run; the wakeup fd's watcher thread calls on_request instead.
    released = threading.Event()
    calls = []

    def batches():
      released.wait(60)
      yield 1

    dataset = tf.data.Dataset.from_generator(batches, output_signature=tf.TensorSpec([], tf.int32))
    with preemption.sigterm_requests_stop(lambda: [calls.append(1), released.set()]) as stop:
      timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
      timer.start()
      started = time.time()
      self.assertEqual(int(next(iter(dataset))), 1)
      self.assertLess(time.time() - started, 30)
      timer.join()
      self.assertTrue(stop.requested)
      os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM: on_request already ran
      time.sleep(0.2)
    self.assertEqual(calls, [1])

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
