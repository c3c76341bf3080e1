"""What fleet tells higher apps, and what it asks them, without importing them (one-way layers).

Hooks (`portal.core.hooks.Hook`) say "this happened"; any number of higher apps subscribe in their
`AppConfig.ready()`:

- `gpu_registered`: `consumer(gpu=..., source=...)` when a GPU is registered (inside the
  registering transaction; defer work with `transaction.on_commit`). Diagnostics subscribes: a GPU
  its agent reports for the first time gets a burn-in.
- `record_saved`: `consumer(record=...)` when a maintenance record is created or changed (inside
  the saving transaction: a subscriber's error undoes the record). Maintenance subscribes: a
  cleaning, paste or fan record resolves the tickets it answers.
- `record_fields`: a field a higher app adds to a maintenance record's body (`POST
  /api/v1/records`), named by the subscriber's option `field` (`subscribe(name, field="parts_used")`):
  `consumer(record=..., value=..., user=...)` is called when a record is created with that field,
  inside the record's transaction once the record is saved; its error (InvalidInput, Conflict)
  undoes the record, so the record and what the field says are written together or not at all.
  Inventory subscribes: `parts_used`, the stock a repair took.
- `gpu_swapped`: `consumer(swap=...)` once a card swapped into a slot has committed (maintenance
  resolves the old GPU's "Agent silent" tickets). Isolated: the swap stands whatever fails.

Policies (`portal.core.policies.Policy`) answer a question fleet asks; each has one owner, and
another app providing it too is refused at start:

- `return_to_service_gate`, owned by diagnostics: `gate(gpu=...)` is asked before a GPU goes back
  in service from any other status, `retired` included (not when an admin forces it); it returns
  what proved the GPU fit (kept in its status history), or raises `portal.core.errors.Conflict`
  naming `status` when the GPU may not return yet (a passed diagnostic since it left service and
  its latest repair, on the current driver). Without an owner, a GPU returns only through a
  repair-return checklist run (or an admin's force).
- `care_limits`, owned by maintenance: `factory(host_ids=...)` returns a `fleet.care.CareLimits`
  for those hosts (the rule configuration in force, per-host overrides included), so a page colours
  a value exactly where a ticket would open. Without an owner, nothing is coloured.

- `gpu_warranties`, owned by inventory: `lookup(gpus=[...])` returns `{gpu id: contract}`, the
  warranty contract covering each GPU (itself or its host) today as `{"vendor", "contract",
  "coverage", "ends_on"}` (a GPU none covers may be left out), in a constant number of queries
  (the API's `warranty` of a GPU). Without an owner, none.

What higher apps show on fleet's pages are panels (`portal.core.panels`, pages "fleet.fleet",
"fleet.host", "fleet.gpu" and "fleet.gpu_rows": the GPU rows of the fleet and host pages).
"""

from __future__ import annotations

from collections.abc import Iterable

from portal.core.hooks import Hook
from portal.core.policies import Policy
from portal.fleet.care import CareLimits

gpu_registered = Hook("fleet.gpu_registered")
record_saved = Hook("fleet.record_saved")
record_fields = Hook("fleet.record_fields")
gpu_swapped = Hook("fleet.gpu_swapped", isolated=True)

return_to_service_gate = Policy("fleet.return_to_service_gate", default=lambda *, gpu: None)
care_limits = Policy("fleet.care_limits", default=lambda *, host_ids: CareLimits())
gpu_warranties = Policy("fleet.gpu_warranties", default=lambda *, gpus: {})


def record_field_names() -> list[str]:
    """The record fields higher apps add (the `field` option of `record_fields`' subscribers)."""
    return [entry.options["field"] for entry in record_fields.subscribers]


def care_limits_for(*, host_ids: Iterable[int]) -> CareLimits:
    return care_limits.ask(host_ids=list(host_ids))
