"""Query helpers the apps' selectors share."""

from __future__ import annotations

import operator
from functools import reduce
from typing import TypeVar

from django.db.models import Model, Q, QuerySet

M = TypeVar("M", bound=Model)


def filter_given(queryset: QuerySet[M], **lookups) -> QuerySet[M]:
    """The queryset narrowed by each lookup whose value is given (neither None nor ""): a list
    page's optional filters, e.g. `filter_given(tickets, severity=severity, host__hostname=host)`.
    One filter() call: a lookup across a multi-valued relation would need the same related row to
    match them all (the filters here follow foreign keys only)."""
    given = {lookup: value for lookup, value in lookups.items() if value is not None and value != ""}
    return queryset.filter(**given) if given else queryset


# --- the search box ----------------------------------------------------------------------------

SEARCH_MAX_LENGTH = 100  # longer is no search a person types (hostnames: 63, UUIDs: 40)
# Two or three characters occur inside most of a fleet's UUIDs (hex digits): below this length a
# query matches a UUID's start only, from it anywhere inside.
UUID_INFIX_MIN = 6
_ID_DIGITS_MAX = 18  # fits a 64-bit integer column on every engine


def search_id(query: str) -> int | None:
    """The object id a search names ("12" or "#12"), or None when it names none."""
    digits = query.strip().removeprefix("#")
    if digits.isascii() and digits.isdigit() and len(digits) <= _ID_DIGITS_MAX:
        return int(digits)
    return None


def search_by_id_or_text(query: str, *text_fields: str) -> Q:
    """Rows whose id the query names or whose text fields contain it (case-insensitive)."""
    match = reduce(operator.or_, (Q(**{f"{name}__icontains": query}) for name in text_fields), Q(pk__in=[]))
    if (pk := search_id(query)) is not None:
        match |= Q(pk=pk)
    return match
