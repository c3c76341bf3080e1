"""What reports lets higher apps add to its packs and reports without importing them (one-way layers).

- `rma_pack_sections`: `consumer(gpu=..., now=...)` returns `{key: value}` (JSON values) that the
  GPU's RMA pack carries beside its own keys (`GET /api/v1/gpus/{uuid}/rma-pack`, the JSON file);
  the subscriber's option `pdf` (`subscribe(name, pdf=function)`) turns its value into the PDF's
  section: `function(evidence, text)` (the whole pack) returns `(title, header, rows, column shares)` or None, in the
  active language (`text` wraps what people wrote). Inventory subscribes: the GPU's RMA cases.
- `reliability_sections`: `consumer(query=...)` (a `ReportQuery`) returns `{key: value}` that
  the reliability report's JSON carries. Inventory subscribes: `rma`, per vendor.
"""

from __future__ import annotations

from portal.core.hooks import Hook

rma_pack_sections = Hook("reports.rma_pack_sections")
reliability_sections = Hook("reports.reliability_sections")
