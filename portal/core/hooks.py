"""The one shape of an extension point between apps (one-way layers).

A lower app that must let higher ones react owns a `Hook` in its `hooks.py` and calls it; the
higher apps subscribe in their `AppConfig.ready()`. A subscriber is named, so subscribing again
under the same name replaces it (a test's stand-in, a reloaded app) rather than calling twice.

- `isolated=True`: the hook is called after the owner's work is safe (committed, answered); a
  subscriber that fails is logged and the others still run, and the caller never sees the error.
- `isolated=False`: a subscriber's error is the caller's (a guard that refuses, a consumer inside
  the owner's transaction).

Subscribers run in `order`, then in the order they subscribed.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Subscriber:
    name: str
    function: Callable
    order: int = 0
    options: dict = dataclasses.field(default_factory=dict)


class Hook:
    def __init__(self, name: str, *, isolated: bool = False):
        self.name = name
        self.isolated = isolated
        self._subscribers: list[Subscriber] = []

    def subscribe(self, name: str, *, order: int = 0, **options) -> Callable[[Callable], Callable]:
        """Decorator: `function` is called by `call()` (or read by the owner through `subscribers`)."""

        def register(function: Callable) -> Callable:
            kept = [entry for entry in self._subscribers if entry.name != name]
            entries = [*kept, Subscriber(name, function, order, options)]
            # sorted() is stable: equal orders stay in the order they subscribed
            self._subscribers[:] = sorted(entries, key=lambda entry: entry.order)
            return function

        return register

    def unsubscribe(self, name: str) -> None:
        self._subscribers[:] = [entry for entry in self._subscribers if entry.name != name]

    @property
    def subscribers(self) -> list[Subscriber]:
        return list(self._subscribers)

    def __iter__(self) -> Iterator[Subscriber]:
        return iter(self.subscribers)

    def __bool__(self) -> bool:
        return bool(self._subscribers)

    def call(self, **kwargs) -> list:
        """Every subscriber with these keyword arguments; their results, in order (an isolated
        hook leaves out those that failed)."""
        results = []
        for entry in self.subscribers:
            if not self.isolated:
                results.append(entry.function(**kwargs))
                continue
            try:
                results.append(entry.function(**kwargs))
            except Exception:
                log.exception("%s: subscriber %s failed; the caller's work itself is done", self.name, entry.name)
        return results


# Core's own: what every web start prepares under VAR_DIR besides the catalogues
# (portal.ops.startup; the agent's distribution, portal.enrolment).
web_start = Hook("core.web_start")
