"""Pages assembled from panels that higher apps register (one-way layers, templates included).

A page belongs to one app ("fleet.gpu": fleet's GPU page) and has named slots, places in its
template where panels go. A higher app that adds to the page registers a panel in its own
`panels.py` (imported by its `AppConfig.ready()`):

    @panel("fleet.gpu", slot="main", name="wear", template="wear/_gpu_panel.html", order=10)
    def gpu_wear(*, gpu, **page):
        return {"wear": selectors.gpu_wear_panel(gpu=gpu)}

The page's view asks for them once (`page_panels("fleet.gpu", request=..., gpu=...)`): every
context function runs its own queries through its app's selectors and returns the panel's
context, or None when the panel is not shown (no permission, nothing to say). The page's template
names no higher app; it loops over a slot:

    {% for panel in panels.main %}{% include panel.template with panel=panel.context %}{% endfor %}

so the partial reads its values as `panel.<key>` (and the page's own context as ever). `title` is
for slots that need a heading per panel (a table's extra columns). `.ci/template_layers.py`
(make lint) keeps templates from naming a higher app's templates or URLs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Panel:
    page: str
    slot: str
    name: str
    template: str
    context: Callable[..., dict | None]
    order: int = 0
    title: str = ""


@dataclasses.dataclass(frozen=True)
class Shown:
    """A panel as a page renders it: its template and the context its function returned."""

    name: str
    template: str
    context: dict
    title: str = ""


_panels: dict[str, list[Panel]] = {}


def panel(
    page: str, *, slot: str, name: str, template: str, order: int = 0, title: str = ""
) -> Callable[[Callable[..., dict | None]], Callable[..., dict | None]]:
    """Register `context` as panel `name` of `page` (registering a name again replaces it)."""

    def register(context: Callable[..., dict | None]) -> Callable[..., dict | None]:
        kept = [entry for entry in _panels.get(page, []) if entry.name != name]
        entry = Panel(page=page, slot=slot, name=name, template=template, context=context, order=order, title=title)
        _panels[page] = sorted([*kept, entry], key=lambda p: (p.order, p.name))
        return context

    return register


def registered(page: str | None = None) -> list[Panel]:
    """The panels of one page, or of every page."""
    if page is not None:
        return list(_panels.get(page, []))
    return [entry for entries in _panels.values() for entry in entries]


def page_panels(page: str, **context) -> dict[str, list[Shown]]:
    """Slot name → the panels shown there, in order, each with its context."""
    slots: dict[str, list[Shown]] = {}
    for entry in _panels.get(page, []):
        own = entry.context(**context)
        if own is None:
            continue
        slots.setdefault(entry.slot, []).append(Shown(entry.name, entry.template, own, entry.title))
    return slots
