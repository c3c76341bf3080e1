"""Query helpers the apps' selectors share."""

from __future__ import annotations

from typing import TypeVar

from django.db.models import Model, QuerySet

M = TypeVar("M", bound=Model)


def filter_given(queryset: QuerySet[M], **lookups) -> QuerySet[M]:
    """The queryset narrowed by each lookup whose value is given (neither None nor ""): a list
    page's optional filters, e.g. `filter_given(tickets, severity=severity, host__hostname=host)`.
    One filter() call: a lookup across a multi-valued relation would need the same related row to
    match them all (the filters here follow foreign keys only)."""
    given = {lookup: value for lookup, value in lookups.items() if value is not None and value != ""}
    return queryset.filter(**given) if given else queryset
