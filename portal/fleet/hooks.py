"""What fleet lets higher apps add to its own writes and pages, without importing them (one-way
layers; `portal.core.hooks.Hook`). Subscribed in the higher apps' `AppConfig.ready()`:

- `gpu_registered`: `consumer(gpu=..., source=...)` when a GPU is registered (inside the
  registering transaction; defer work with `transaction.on_commit`). Diagnostics subscribes: a GPU
  its agent reports for the first time gets a burn-in.
- `return_to_service`: `guard(gpu=...)` is asked before a GPU goes back in service from any other
  status, `retired` included (not when an admin forces it); it returns what proved the GPU fit (kept
  in its status history), or raises `portal.core.errors.Conflict` naming `status` when the GPU may
  not return yet. Diagnostics subscribes: a passed diagnostic since it left service and its latest
  repair, on the current driver. Without any guard, a GPU returns only through a repair-return
  checklist run (or an admin's force).
- `gpu_swapped`: `consumer(swap=...)` once a card swapped into a slot has committed (maintenance
  resolves the old GPU's "Agent silent" tickets). Isolated: the swap stands whatever fails.
- `care_limits`: `factory(host_ids=...)` returns a `fleet.care.CareLimits` for those hosts
  (maintenance: the rule configuration in force, per-host overrides included), so a page colours a
  value exactly where a ticket would open. The last subscriber counts; without one, nothing is
  coloured.

What higher apps show on fleet's pages are panels (`portal.core.panels`, pages "fleet.fleet",
"fleet.host", "fleet.gpu" and "fleet.gpu_rows": the GPU rows of the fleet and host pages).
"""

from __future__ import annotations

from collections.abc import Iterable

from portal.core.hooks import Hook
from portal.fleet.care import CareLimits

gpu_registered = Hook("fleet.gpu_registered")
return_to_service = Hook("fleet.return_to_service")
gpu_swapped = Hook("fleet.gpu_swapped", isolated=True)
care_limits = Hook("fleet.care_limits")


def care_limits_for(*, host_ids: Iterable[int]) -> CareLimits:
    factories = care_limits.subscribers
    return factories[-1].function(host_ids=list(host_ids)) if factories else CareLimits()
