"""`GET /api/v1/gpus/{uuid}/wear` (portal-api-v1.md, "Wear")."""

import datetime as dt

from django.shortcuts import get_object_or_404
from ninja import Field, Query, Router, Schema

from portal.core.api import ApiDateTime, ErrorOut, require_perm
from portal.core.errors import InvalidInput
from portal.fleet import selectors as fleet_selectors
from portal.wear.selectors import wear_for_period

router = Router(tags=["wear"])


class WearQuery(Schema):
    start: ApiDateTime | None = Field(None, alias="from", description="RFC 3339; absent: the GPU's first reading.")
    end: ApiDateTime | None = Field(None, alias="to", description="RFC 3339; absent: now. Half-open: from <= t < to.")


class WearOut(Schema):
    uuid: str
    start: dt.datetime | None = Field(alias="from")
    end: dt.datetime | None = Field(alias="to")
    powered_hours: float
    busy_hours: float
    hot_hours: float
    fan_high_hours: float
    longest_busy_hours: float
    thermal_cycles: int
    energy_kwh: float


@router.get(
    "/gpus/{uuid}/wear", response={200: WearOut, 400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut},
    by_alias=True,
)  # fmt: skip
def gpu_wear(request, uuid: str, query: Query[WearQuery]):
    """A GPU's wear over [from, to): hours powered, busy (utilization ≥ 90 %), hot (≥ slowdown − 10 °C),
    fan-high (≥ 80 %), the longest busy streak, thermal cycles (30 °C hysteresis) and energy.

    Exact for any period while its edge hours' raw readings are kept, and for periods on whole
    hours forever (the hour and day meters outlive raw retention). Past raw retention
    (RETENTION_RAW_DAYS) a `from` or `to` inside an hour whose raw readings are gone, which the
    contract does not cover: that hour's stored figures count in proportion to the share of the
    hour inside the period (busy streak included), and its thermal cycles over its stored
    turning points inside the period."""
    require_perm(request, "fleet.view_gpu")
    if query.start and query.end and query.start > query.end:
        raise InvalidInput("'from' is later than 'to'", problems=[("from", "later than 'to'")])
    gpu = get_object_or_404(fleet_selectors.gpus().only("pk", "uuid", "temp_slowdown_c"), uuid=uuid)
    figures = wear_for_period(gpu=gpu, start=query.start, end=query.end)
    return {"uuid": gpu.uuid, "from": query.start, "to": query.end, **figures.as_dict()}
