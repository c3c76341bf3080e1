"""What higher apps add to fleet's pages, without fleet importing them (one-way layers).

Fleet's pages show what other apps know: how hot is too hot, when an agent counts as silent and
when a cleaning falls due are maintenance's rule configuration; the live heatmap and the open
tickets belong to `live` and `maintenance`. Those apps register here in `AppConfig.ready()`:

- `on_care_limits(factory)`: `factory(host_ids=...)` returns a `CareLimits` for those hosts
  (maintenance: the rule configuration in force, per-host overrides included), so a page colours
  a value exactly where a ticket would open. Without one, nothing is coloured.
- `on_page(page, name)(provider)`: `provider(**context)` returns extra template context for
  `page` ("fleet", "host", "gpu", "gpu_rows": the GPU rows of the fleet and host pages,
  "ticket": maintenance's ticket page), e.g. the open tickets of the host. Each runs its own
  queries through its app's selectors; templates only render.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

# How a periodic task stands: done recently, due soon, overdue, never done; "" when no schedule.
OK, DUE, OVERDUE, NEVER = "ok", "due", "overdue", "never"


class CareLimits:
    """The limits a page colours by. This base sets none (no maintenance app)."""

    def hot_c(self, *, host_id: int, slowdown_c: int | None) -> float | None:
        """From this temperature up a GPU counts as hot; None: never."""
        return None

    def silent_after_s(self, *, host_id: int) -> float | None:
        """A GPU without a reading for longer than this is silent; None: never."""
        return None

    def due_state(self, *, host_id: int, record_kind: str, last: dt.datetime | None, now: dt.datetime) -> str:
        """OK, DUE, OVERDUE or NEVER for a task done at `last`; "" when nothing schedules it."""
        return "" if last is not None else NEVER

    def open_tickets(self, *, host_id: int) -> int:
        """Open tickets on the host and its GPUs."""
        return 0


_care_factory: Callable[..., CareLimits] | None = None
_providers: dict[str, list[tuple[str, Callable[..., dict]]]] = {}


def on_care_limits(factory: Callable[..., CareLimits]) -> Callable[..., CareLimits]:
    global _care_factory
    _care_factory = factory
    return factory


def care_limits(*, host_ids: Iterable[int]) -> CareLimits:
    return _care_factory(host_ids=list(host_ids)) if _care_factory is not None else CareLimits()


def on_page(page: str, name: str) -> Callable[[Callable[..., dict]], Callable[..., dict]]:
    def register(provider: Callable[..., dict]) -> Callable[..., dict]:
        entries = [entry for entry in _providers.get(page, []) if entry[0] != name]
        _providers[page] = [*entries, (name, provider)]
        return provider

    return register


def page_panels(page: str, **context) -> dict:
    """The extra context every registered provider gives `page`."""
    panels: dict = {}
    for _, provider in _providers.get(page, []):
        panels.update(provider(**context))
    return panels
