"""Ingest sources over the API (prometheus-v1.md, "Sources"): admins only."""

import datetime as dt

from ninja import Field, Router, Schema, Status

from portal.core.api import ErrorOut, require_perm
from portal.core.errors import NotFound
from portal.remote_write import selectors
from portal.remote_write.models import IngestSource
from portal.remote_write.services import sources

router = Router(tags=["ingest sources"])


class SourceIn(Schema):
    name: str = Field(max_length=100)
    hosts: str = Field(max_length=253)


class SourceCreatedOut(Schema):
    id: int
    name: str
    hosts: str
    token: str


class SourceOut(Schema):
    id: int
    name: str
    hosts: str
    last_write_at: dt.datetime | None
    samples_stored: int
    samples_skipped: int
    samples_dropped: int


@router.post(
    "/ingest-sources", response={201: SourceCreatedOut, 400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 409: ErrorOut}
)
def ingest_source_create(request, payload: SourceIn):
    require_perm(request, "remote_write.add_ingestsource")
    issued = sources.ingest_source_issue(name=payload.name, hosts=payload.hosts, created_by=request.user)
    record = issued.record
    return Status(201, {"id": record.pk, "name": record.name, "hosts": record.hosts, "token": issued.token})


@router.get("/ingest-sources", response={200: list[SourceOut], 401: ErrorOut, 403: ErrorOut})
def ingest_source_list(request):
    require_perm(request, "remote_write.view_ingestsource")
    return list(selectors.ingest_sources().filter(revoked_at__isnull=True))


@router.delete("/ingest-sources/{source_id}", response={204: None, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut})
def ingest_source_revoke(request, source_id: int):
    require_perm(request, "remote_write.change_ingestsource")
    source = IngestSource.objects.filter(pk=source_id, revoked_at__isnull=True).first()
    if source is None:
        raise NotFound(f"no ingest source {source_id}")
    sources.ingest_source_revoke(source=source)
    return Status(204, None)
