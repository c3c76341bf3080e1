"""The embedded broker: kombu's filesystem transport, with messages that appear whole.

kombu's own transport creates a message's file and then writes into it, so a worker polling the
folder can take the file in between and read nothing: the JSON decode error that follows stops
the worker ("Unrecoverable error") and the message is lost. Here a message is written under a
name the reader ignores and renamed into place when complete (a rename is atomic within one
folder), and a file that still cannot be read (a disk that filled up mid-write, say) is set aside
in `unreadable/` with a log line, instead of stopping the worker.

Registered as the `portalfs` transport when `portal.celery` loads (web server, worker and beat
all load it); settings.CELERY_BROKER_URL names it when REDIS_URL is unset.

With REDIS_URL, `register` also points the redis:// and rediss:// schemes at kombu's Redis
transport with one fix (portal.ops.broker_redis, imported by kombu only when such a URL is used:
the Redis client is a tenth of the start of a process that never talks to Redis).
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic

from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

ALIAS = "portalfs"
UNREADABLE = "unreadable"


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """Put a message on `queue`: written whole, then renamed to the name readers look for."""
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{name}.part")
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            _remove_quietly(partial)
            raise filesystem.ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _get(self, queue):
        """Take the oldest message of `queue`: claimed by a rename (so no other reader takes it),
        read, removed. An unreadable one is set aside and the next one taken."""
        wanted = f"{queue}.msg"
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            path = os.path.join(self.data_folder_in, name)
            claimed = os.path.join(self.data_folder_in, f".claimed-{name}")
            try:
                os.rename(path, claimed)
            except OSError:
                continue  # another reader took it
            try:
                with open(claimed, "rb") as f:
                    payload = f.read()
                message = loads(bytes_to_str(payload))
            except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                self._set_aside(claimed, name, queue, exc)
                continue
            if self.store_processed:
                os.replace(claimed, os.path.join(self.processed_folder, name))
            else:
                _remove_quietly(claimed)
            return message
        raise Empty()

    def _set_aside(self, claimed: str, name: str, queue: str, exc: Exception) -> None:
        aside = Path(self.data_folder_in).parent / UNREADABLE
        try:
            aside.mkdir(parents=True, exist_ok=True)
            os.replace(claimed, aside / name)
        except OSError:
            _remove_quietly(claimed)
        log.error("embedded broker: unreadable message %s on queue %s set aside in %s (%s)", name, queue, aside, exc)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


class Transport(filesystem.Transport):
    Channel = Channel


def register() -> None:
    TRANSPORT_ALIASES[ALIAS] = f"{__name__}:Transport"
    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = "portal.ops.broker_redis:RedisTransport"
