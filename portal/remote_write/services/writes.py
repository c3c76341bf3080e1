"""Store a remote write request's samples (prometheus-v1.md): all of them in one transaction or
none, at once, without waiting for their readings to be complete. A sample is one row until its
reading is handed on (services/hand_on.py); a sample sent again stores nothing, and a field
already stored is never changed."""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from portal.fleet import selectors as fleet_selectors
from portal.fleet import services as fleet_services
from portal.remote_write import mapping
from portal.remote_write.models import FedHost, IngestSource, PendingSample, SourceGpu
from portal.remote_write.wire import Series
from portal.telemetry import selectors as telemetry_selectors
from portal.telemetry.services.ingest import MAX_FUTURE

if TYPE_CHECKING:
    from portal.fleet.models import Host

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class StoreBusy(Exception):
    """Another request created the same host or GPU meanwhile: nothing stored, Prometheus sends again."""


@dataclass
class WriteResult:
    stored: int = 0
    skipped: int = 0
    dropped: int = 0
    skipped_why: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    dropped_why: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def skip(self, why: str, count: int = 1) -> None:
        self.skipped += count
        self.skipped_why[why] += count

    def drop(self, why: str, count: int = 1) -> None:
        self.dropped += count
        self.dropped_why[why] += count


OUTSIDE_WINDOW, UNUSABLE_VALUE, LATE = (
    "outside the acceptance window",
    "value a reading cannot use",
    "reading handed on",
)
NOT_MATCHED, AGENT_HOST, OTHER_SOURCE, OTHER_HOST_GPU = (
    "hostname outside the source's pattern", "host reported by an agent", "host fed by another source",
    "GPU of another host",
)  # fmt: skip

# (uuid, timestamp in ms, field) → (value, jobs as JSON or None)
Samples = dict[tuple[str, int, str], tuple[float, str | None]]


def _usable_samples(series: list[Series], now: dt.datetime, result: WriteResult):
    """The samples a reading can use, by key, and the identity of each GPU (its newest labels)."""
    oldest = int((now - dt.timedelta(hours=settings.INGEST_MAX_AGE_HOURS) - EPOCH).total_seconds() * 1000)
    newest = int((now + MAX_FUTURE - EPOCH).total_seconds() * 1000)
    samples: Samples = {}
    identities: dict[str, mapping.SeriesIdentity] = {}
    for one in series:
        identity = mapping.identity_of(one.labels)
        if isinstance(identity, str):
            result.skip(identity, len(one.samples))
            continue
        identities[identity.uuid] = identity
        jobs = None if identity.jobs is None else orjson.dumps(identity.jobs).decode()
        for timestamp, value in one.samples:
            if mapping.is_stale_marker(value):
                continue  # Prometheus's "series gone": ignored
            if not oldest <= timestamp <= newest:
                result.skip(OUTSIDE_WINDOW)
                continue
            usable = mapping.value_usable(identity.field, value)
            if usable is None:
                result.skip(UNUSABLE_VALUE)
                continue
            samples[(identity.uuid, timestamp, identity.field)] = (usable, jobs)
    return samples, identities


def _hosts_refused(source: IngestSource, hostnames: set[str]) -> tuple[dict[str, str], dict[str, Host]]:
    """Hostnames whose samples are dropped (with why), and the hosts of the others that exist."""
    refused = {name: NOT_MATCHED for name in hostnames if not fnmatch.fnmatchcase(name, source.hosts)}
    hosts = {host.hostname: host for host in fleet_selectors.hosts().filter(hostname__in=hostnames - refused.keys())}
    host_ids = [host.pk for host in hosts.values()]
    agent = set(telemetry_selectors.tokens_live().filter(host_id__in=host_ids).values_list("host_id", flat=True))
    fed = dict(FedHost.objects.filter(host_id__in=host_ids).values_list("host_id", "source_id"))
    for name, host in hosts.items():
        if host.pk in agent:
            refused[name] = AGENT_HOST
        elif fed.get(host.pk, source.pk) != source.pk:
            refused[name] = OTHER_SOURCE
    return refused, {name: host for name, host in hosts.items() if name not in refused}


def _fed_hosts(source: IngestSource, identities, hosts: dict[str, Host]) -> dict[str, FedHost]:
    """Each hostname's FedHost, the host created on first sight; its driver as the labels say."""
    fed = {row.host.hostname: row for row in FedHost.objects.filter(host__in=hosts.values()).select_related("host")}
    drivers = {identity.hostname: identity.driver_version for identity in identities.values()}
    for hostname, driver in drivers.items():
        row = fed.get(hostname)
        if row is None:
            host = hosts.get(hostname) or fleet_services.host_create(hostname=hostname)
            fed[hostname] = FedHost.objects.create(host=host, source=source, driver_version=driver)
        elif driver and row.driver_version != driver:
            FedHost.objects.filter(pk=row.pk).update(driver_version=driver)
    return fed


def _source_gpus(identities, fed: dict[str, FedHost]) -> dict[str, SourceGpu]:
    gpus = {gpu.uuid: gpu for gpu in SourceGpu.objects.filter(uuid__in=identities.keys())}
    for uuid, identity in identities.items():
        values = {"fed_host": fed[identity.hostname], "index": identity.index, "name": identity.name,
                  "pci_bus_id": identity.pci_bus_id}  # fmt: skip
        gpu = gpus.get(uuid)
        if gpu is None:
            gpus[uuid] = SourceGpu.objects.create(uuid=uuid, **values)
        elif (gpu.fed_host_id, gpu.index, gpu.name, gpu.pci_bus_id) != (
            fed[identity.hostname].pk, identity.index, identity.name, identity.pci_bus_id,
        ):  # fmt: skip
            SourceGpu.objects.filter(pk=gpu.pk).update(**values)
    return gpus


def _instant(timestamp_ms: int, cache: dict[int, dt.datetime]) -> dt.datetime:
    moment = cache.get(timestamp_ms)
    if moment is None:
        moment = cache[timestamp_ms] = EPOCH + dt.timedelta(milliseconds=timestamp_ms)
    return moment


def remote_write_store(*, source: IngestSource, series: list[Series], now: dt.datetime | None = None) -> WriteResult:
    """Store the request's usable samples, whole or not at all (StoreBusy: nothing stored)."""
    now = now or timezone.now()
    result = WriteResult()
    samples, identities = _usable_samples(series, now, result)
    refused, hosts = _hosts_refused(source, {identity.hostname for identity in identities.values()})
    other_hosts = dict(fleet_selectors.gpus().filter(uuid__in=identities.keys()).values_list("uuid", "host__hostname"))
    for uuid, identity in list(identities.items()):
        why = refused.get(identity.hostname)
        if why is None and other_hosts.get(uuid, identity.hostname) != identity.hostname:
            why = OTHER_HOST_GPU
        if why is not None:
            del identities[uuid]
            result.drop(why, sum(1 for key in samples if key[0] == uuid))
    samples = {key: value for key, value in samples.items() if key[0] in identities}
    try:
        with transaction.atomic():
            fed = _fed_hosts(source, identities, hosts)
            gpus = _source_gpus(identities, fed)
            _insert(samples, gpus, now, result)
            IngestSource.objects.filter(pk=source.pk).update(
                last_write_at=now, samples_stored=F("samples_stored") + result.stored,
                samples_skipped=F("samples_skipped") + result.skipped,
                samples_dropped=F("samples_dropped") + result.dropped,
            )  # fmt: skip
    except IntegrityError as error:
        raise StoreBusy(str(error)) from None
    return result


def _insert(samples: Samples, gpus: dict[str, SourceGpu], now: dt.datetime, result: WriteResult) -> None:
    instants: dict[int, dt.datetime] = {}
    fresh = []
    for (uuid, timestamp, name), (value, jobs) in samples.items():
        gpu = gpus[uuid]
        ts = _instant(timestamp, instants)
        if gpu.handed_until is not None and ts <= gpu.handed_until:
            result.skip(LATE)  # its reading went on already (a late field, or the request sent again)
            continue
        fresh.append((gpu.pk, ts, name, value, jobs))
    if not fresh:
        return
    stored = set(
        PendingSample.objects.filter(
            gpu_id__in={row[0] for row in fresh}, ts__in={row[1] for row in fresh}
        ).values_list("gpu_id", "ts", "field")
    )
    new = [row for row in fresh if (row[0], row[1], row[2]) not in stored]
    _insert_rows(new, now)
    result.stored += len(new)


@functools.cache
def _insert_sql() -> str:
    columns = ("gpu_id", "ts", "field", "value", "jobs", "received_at")
    table = connection.ops.quote_name(PendingSample._meta.db_table)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) ON CONFLICT DO NOTHING"
    )


def _insert_rows(rows: list[tuple], now: dt.datetime) -> None:
    """One prepared INSERT run over the rows (the ORM's bulk_create spent most of a write's CPU
    building model instances); a sample stored meanwhile by a request beside this one is left."""
    if not rows:
        return
    adapt = connection.ops.adapt_datetimefield_value
    instants: dict[dt.datetime, object] = {}
    received = adapt(now)
    params = []
    for gpu_id, ts, name, value, jobs in rows:
        moment = instants.get(ts)
        if moment is None:
            moment = instants[ts] = adapt(ts)
        params.append((gpu_id, moment, name, value, jobs, received))
    with connection.cursor() as cursor:
        cursor.executemany(_insert_sql(), params)
