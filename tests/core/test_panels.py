"""The panel registry (portal/core/panels.py): what higher apps add to a lower app's page, in the
slots that page's template renders."""

from __future__ import annotations

import re
from pathlib import Path

from django.template.loader import get_template

from portal.core import panels

ROOT = Path(__file__).resolve().parents[2]
# Each page's template: the slots a panel may name are the ones it loops over.
PAGE_TEMPLATES = {
    "fleet.fleet": ["fleet/fleet.html"],
    "fleet.host": ["fleet/host_detail.html"],
    "fleet.gpu": ["fleet/gpu_detail.html"],
    "fleet.gpu_rows": ["fleet/_gpu_table.html"],
    "fleet.search": ["fleet/search.html"],
    "maintenance.ticket": ["maintenance/ticket_detail.html"],
    "maintenance.tickets": ["maintenance/ticket_list.html"],
    "checklists.run": ["checklists/run.html"],
    "reports.reliability": ["reports/reliability.html"],
}


# What each page is made of: a panel registered again under another's name would replace it.
PAGE_PANELS = {
    "fleet.fleet": ["pipeline-lag", "burn-in", "live-tiles", "live-heatmap", "live-ticket-feed", "windows"],
    "fleet.host": [
        "start-checklist",
        "fed-by-source",
        "open-tickets",
        "scheduler",
        "diagnostics",
        "agent-tokens",
        "warranty",
        "windows",
    ],
    "fleet.gpu": [
        "start-checklist",
        "live-charts",
        "jobs",
        "wear",
        "open-tickets",
        "reliability",
        "diagnostics",
        "live-scripts",
        "warranty",
    ],
    "fleet.gpu_rows": ["diagnostics"],
    "fleet.search": ["tickets", "jobs", "checklist-runs"],
    "maintenance.ticket": ["start-checklist", "guidance", "jobs", "diagnostics", "scheduler"],
    "maintenance.tickets": ["live-ticket-feed"],
    "checklists.run": ["guidance"],
    "reports.reliability": ["rma"],
}


def test_each_page_has_its_panels():
    for page, names in PAGE_PANELS.items():
        assert sorted(entry.name for entry in panels.registered(page)) == sorted(names), page


def test_every_registered_panel_goes_in_a_slot_its_page_renders_and_its_template_exists():
    registered = panels.registered()
    assert {entry.page for entry in registered} == set(PAGE_TEMPLATES)
    for entry in registered:
        get_template(entry.template)
        sources = [(ROOT / "templates" / name).read_text() for name in PAGE_TEMPLATES[entry.page]]
        assert any(re.search(rf"\bin (gpu_)?panels\.{entry.slot}\b", text) for text in sources), entry


def test_panels_come_in_order_per_slot_and_none_hides_one(monkeypatch):
    monkeypatch.setattr(panels, "_panels", {})
    panels.panel("t.page", slot="main", name="late", template="t/late.html", order=20)(lambda **page: {"n": 2})
    panels.panel("t.page", slot="main", name="early", template="t/early.html", order=10)(lambda **page: {"n": 1})
    panels.panel("t.page", slot="main", name="hidden", template="t/x.html", order=15)(lambda **page: None)
    panels.panel("t.page", slot="side", name="side", template="t/side.html")(lambda *, who, **page: {"who": who})

    shown = panels.page_panels("t.page", who="alice")
    assert [(s.name, s.template, s.context) for s in shown["main"]] == [
        ("early", "t/early.html", {"n": 1}), ("late", "t/late.html", {"n": 2}),
    ]  # fmt: skip
    assert [s.context for s in shown["side"]] == [{"who": "alice"}]
    assert panels.page_panels("t.other") == {}


def test_registering_a_name_again_replaces_the_panel(monkeypatch):
    monkeypatch.setattr(panels, "_panels", {})
    panels.panel("t.page", slot="main", name="one", template="t/a.html")(lambda **page: {"v": "a"})
    panels.panel("t.page", slot="main", name="one", template="t/b.html")(lambda **page: {"v": "b"})
    assert [(s.template, s.context) for s in panels.page_panels("t.page")["main"]] == [("t/b.html", {"v": "b"})]
