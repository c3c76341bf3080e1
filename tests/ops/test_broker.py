"""The embedded broker's transport (portal.ops.broker): messages appear whole, an unreadable
one is set aside instead of stopping the worker, and kombu finds it by its `portalfs` name."""

from __future__ import annotations

import logging
import multiprocessing
import threading

import pytest
from kombu import Connection

from portal.ops import broker

pytestmark = pytest.mark.django_db(databases=[])


def _connection(folder):
    broker.register()
    queue = folder / "queue"
    queue.mkdir(parents=True, exist_ok=True)
    options = {"data_folder_in": str(queue), "data_folder_out": str(queue), "polling_interval": 0.01}
    return Connection("portalfs://localhost//", transport_options=options)


def test_the_url_names_our_transport_and_a_message_comes_back_whole(tmp_path):
    with _connection(tmp_path) as conn:
        assert isinstance(conn.transport, broker.Transport)
        queue = conn.SimpleQueue("jobs")
        queue.put({"batch": 7, "text": "x" * 100_000})
        message = queue.get(timeout=2)
        assert message.payload == {"batch": 7, "text": "x" * 100_000}
        message.ack()
        queue.close()
    assert [path.name for path in (tmp_path / "queue").iterdir() if not path.name.endswith("exchange")] == []


# A payload that takes a while to encode: kombu's own transport encodes it after creating the
# file, which is when a reader finds the file empty.
PAD = [{"reading": k, "temperature_c": 60.5} for k in range(2000)]


def _write(folder, offset: int, count: int) -> None:
    with _connection(folder) as conn:
        queue = conn.SimpleQueue("race")
        for n in range(count):
            queue.put({"n": offset + n, "pad": PAD})
        queue.close()


def test_a_reader_polling_while_writers_write_never_sees_a_partial_message(tmp_path):
    count, writers = 60, 3
    received: list[int] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            with _connection(tmp_path) as conn:
                queue = conn.SimpleQueue("race")
                while len(received) < count * writers:
                    # long enough for writers starved of CPU on a loaded machine
                    message = queue.get(timeout=60)
                    received.append(message.payload["n"])
                    message.ack()
                queue.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    # Writers in processes of their own, as the web server and beat are: started fresh, not forked
    # from this one while its reader thread may hold a lock (an import's, say) that a forked child
    # would then wait on forever, writing nothing.
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=_write, args=(tmp_path, k * count, count)) for k in range(writers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    reader.join(timeout=120)
    assert [process.exitcode for process in processes] == [0] * writers
    assert errors == []
    assert sorted(received) == list(range(count * writers))


def test_an_unreadable_message_is_set_aside_and_the_next_one_taken(tmp_path, caplog):
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue("jobs")
        # What kombu's own transport leaves for a moment (and for good after a full disk): an
        # empty file under a message's name, taken first (names sort by a millisecond clock, never "0_").
        (tmp_path / "queue" / "0_00000000-0000-0000-0000-000000000000.jobs.msg").write_bytes(b"")
        queue.put({"good": True})
        with caplog.at_level(logging.ERROR, logger="portal.ops.broker"):
            message = queue.get(timeout=2)
        assert message.payload == {"good": True}
        queue.close()
    aside = list((tmp_path / "unreadable").iterdir())
    assert [path.name for path in aside] == ["0_00000000-0000-0000-0000-000000000000.jobs.msg"]
    assert "unreadable message" in caplog.text and "jobs" in caplog.text
