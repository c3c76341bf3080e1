"""The pipeline trigger sends at most once per interval, with one trailing send that
carries the newest batch, so nothing stored is left unevaluated."""

import threading

from portal.core.debounce import Debouncer


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_first_send_goes_at_once_then_one_trailing_send_with_the_newest_batch():
    sent = []
    done = threading.Event()

    def send(batch_pk, gpu_ids):
        sent.append(batch_pk)
        if len(sent) == 2:
            done.set()

    clock = FakeClock()
    debounce = Debouncer(0.05, send, clock=clock)
    debounce(1, [1])
    for batch_pk in (2, 3, 4):
        debounce(batch_pk, [1])
    assert sent == [1]
    assert done.wait(2), "the trailing send never came"
    assert sent == [1, 4]


def test_after_a_quiet_interval_a_batch_is_sent_at_once():
    sent = []
    clock = FakeClock()
    debounce = Debouncer(0.5, lambda batch_pk, gpu_ids: sent.append(batch_pk), clock=clock)
    debounce(1, [])
    clock.now += 1.0
    debounce(2, [])
    assert sent == [1, 2]
