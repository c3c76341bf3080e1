import datetime as dt

from django.shortcuts import get_object_or_404
from django.utils import timezone
from ninja import Field, Query, Router, Schema, Status
from ninja.security import HttpBearer

import portal.core.converters  # noqa: F401 - registers {segment:…}
from portal.core.api import ApiDateTime, require_perm
from portal.core.errors import Forbidden, InvalidInput
from portal.fleet import selectors as fleet_selectors
from portal.telemetry.ingest_view import PLAIN_HTTP_REFUSED, plain_http_refused
from portal.telemetry.pipeline import pipeline_status
from portal.telemetry.selectors import DEFAULT_METRICS, gpu_series
from portal.telemetry.services import host_token_authenticate, host_token_rotate

router = Router(tags=["gpus"])
MAX_SPAN = dt.timedelta(days=400)


class SeriesOut(Schema):
    gpu: str
    resolution: str
    start: dt.datetime = Field(alias="from")
    end: dt.datetime = Field(alias="to")
    ts: list[dt.datetime]
    values: dict[str, list]
    min: dict[str, list] | None = None
    max: dict[str, list] | None = None


class SeriesQuery(Schema):
    start: ApiDateTime | None = Field(None, alias="from", description="Default: 'to' minus one hour.")
    end: ApiDateTime | None = Field(None, alias="to", description="Default: now.")
    metrics: str = Field(",".join(DEFAULT_METRICS), max_length=500, description="Comma-separated metric names.")
    resolution: str = Field("auto", pattern="^(auto|raw|1m|1h)$")


@router.get("/gpus/{segment:uuid}/readings", response=SeriesOut, by_alias=True)
def gpu_readings(request, uuid: str, query: Query[SeriesQuery]):
    """A GPU's readings over [from, to): raw, 1-minute or 1-hour rollups (mean, min and max).

    `resolution=auto` (the default) picks the finest resolution that keeps the answer under about
    2,000 points. Whatever the resolution, an answer holds at most 10,000 points
    (READINGS_MAX_POINTS): a span that would hold more at the resolution asked for (`raw` or `1m`
    over a long span) is a 400 naming `from` and `resolution`, with the latest `from` that fits
    and a coarser resolution to ask for instead. Nothing is cut off silently."""
    require_perm(request, "telemetry.view_reading")
    gpu = get_object_or_404(fleet_selectors.gpus(), uuid=uuid)
    end = query.end or timezone.now()
    start = query.start or end - dt.timedelta(hours=1)
    if end - start > MAX_SPAN:
        message = f"the span from 'from' to 'to' is over {MAX_SPAN.days} days"
        raise InvalidInput(message, problems=[("from", message)])
    metrics = tuple(dict.fromkeys(m.strip() for m in query.metrics.split(",") if m.strip()))
    if not metrics:
        raise InvalidInput("metrics: name at least one", problems=[("metrics", "name at least one")])
    series = gpu_series(gpu=gpu, start=start, end=end, metrics=metrics, resolution=query.resolution)
    return {
        "gpu": gpu.uuid,
        "resolution": series.resolution,
        "from": series.start,
        "to": series.end,
        "ts": series.ts,
        "values": series.values,
        "min": series.minimum,
        "max": series.maximum,
    }


class PipelineStageOut(Schema):
    name: str
    backlog_batches: int
    oldest_pending_at: dt.datetime | None
    lag_seconds: float | None


class PipelineOut(Schema):
    stages: list[PipelineStageOut]


@router.get("/pipeline", response=PipelineOut, tags=["pipeline"])
def pipeline(request):
    """What stands between a stored batch and its effects: per stage (rules, rollups, wear), the
    stored batches it has not finished, when the oldest of them was stored, and how long ago.
    Any signed-in user or personal token."""
    return {"stages": pipeline_status()}


class HostToken(HttpBearer):
    """`Authorization: Bearer <host token>`, as the agents send it to /api/v1/ingest. (ninja names
    the OpenAPI security scheme after the class: the same "HostToken" as ingest's.)"""

    def __call__(self, request):
        request.auth_refusal = "missing, unknown or revoked host token"  # the 401's message
        return super().__call__(request)

    def authenticate(self, request, token: str):
        return host_token_authenticate(token.strip())


class RotateIn(Schema):
    label: str = Field("", max_length=100)


class RotatedOut(Schema):
    hostname: str
    token: str
    prefix: str
    replaces: str


@router.post(
    "/host-tokens/rotate", auth=HostToken(), response={201: RotatedOut}, tags=["host tokens"],
    summary="A new host token for the calling agent's host; the old one is revoked after the first batch with it",
)  # fmt: skip
def host_token_rotate_view(request, payload: RotateIn):
    if plain_http_refused(request):  # the new token would cross the network in clear
        raise Forbidden(PLAIN_HTTP_REFUSED + " (or set PLAIN_HTTP=true on a trusted network)")
    old = request.auth
    issued = host_token_rotate(token=old, label=payload.label)
    return Status(
        201,
        {"hostname": old.host.hostname, "token": issued.token, "prefix": issued.record.prefix, "replaces": old.prefix},
    )
