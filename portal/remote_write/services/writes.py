"""Store a remote write request's samples (prometheus-v1.md): all of them in one transaction or
none, at once, without waiting for their readings to be complete. The samples of one GPU and
timestamp are one pending row until their reading is handed on (services/hand_on.py): merged with
the parts earlier requests stored, a field already stored never changed, so a request sent again
stores nothing new. The readings a request completes are handed on in its own transaction, as
an agent's batch is stored by its request; the rest wait for a later request or for the pass."""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from portal.core.db import hot_cursor, row_to_models, select_columns
from portal.fleet import selectors as fleet_selectors
from portal.fleet import services as fleet_services
from portal.remote_write import mapping
from portal.remote_write.models import FedHost, IngestSource, SourceGpu
from portal.remote_write.services import hand_on
from portal.remote_write.wire import Series
from portal.telemetry import selectors as telemetry_selectors
from portal.telemetry.services.ingest import MAX_FUTURE

# The hosts' model as our own foreign key names it (not imported: fleet owns it): the hosts lookup
# reads its columns in a hand-written query, as the agents' token lookup does.
Host = FedHost.host.field.related_model

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class StoreBusy(Exception):
    """Another request created the same host or GPU meanwhile: nothing stored, Prometheus sends again."""


@dataclass
class WriteResult:
    stored: int = 0
    skipped: int = 0
    dropped: int = 0
    left_for_pass: int = 0  # complete readings ingest refused in this write: the pass tries them
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

# uuid → timestamp in ms → [{field: value}, jobs as JSON or None]: a request's samples as readings.
Readings = dict[str, dict[int, list]]


def _usable_samples(series: list[Series], now: dt.datetime, result: WriteResult):
    """The samples a reading can use, grouped by GPU and timestamp, and the identity of each GPU
    (its newest labels). A sample sent twice in one request: the later one."""
    oldest = int((now - dt.timedelta(hours=settings.INGEST_MAX_AGE_HOURS) - EPOCH).total_seconds() * 1000)
    newest = int((now + MAX_FUTURE - EPOCH).total_seconds() * 1000)
    readings: Readings = {}
    identities: dict[str, mapping.SeriesIdentity] = {}
    by_gpu: dict[str, list[tuple[mapping.SeriesIdentity, Series]]] = {}
    for one in series:
        identity = mapping.identity_of(one.labels)
        if isinstance(identity, str):
            result.skip(identity, len(one.values))
            continue
        identities[identity.uuid] = identity
        gpu_series = by_gpu.get(identity.uuid)
        if gpu_series is None:
            by_gpu[identity.uuid] = [(identity, one)]
        else:
            gpu_series.append((identity, one))
    for uuid, gpu_series in by_gpu.items():
        readings[uuid] = _gpu_readings(gpu_series, oldest, newest) or _gpu_samples(gpu_series, oldest, newest, result)
    return readings, identities


def _gpu_readings(gpu_series: list, oldest: int, newest: int) -> dict[int, list] | None:
    """One GPU's readings when its series are the usual ones (Prometheus scrapes a GPU's series
    together): the same times, inside the window, every value one a reading can use (and none a
    staleness marker), answered by values already kept; taken together, a reading a row of their
    columns. None otherwise: sample by sample (_gpu_samples)."""
    stamps = gpu_series[0][1].stamps
    if not stamps or min(stamps) < oldest or max(stamps) > newest:
        return None
    names, columns, jobs = [], [], None
    for identity, one in gpu_series:
        if one.stamps != stamps:
            return None
        column = list(map(mapping.usable_kept(identity.field).get, one.values))
        if None in column:
            return None
        names.append(identity.field)
        columns.append(column)
        if jobs is None:
            jobs = identity.jobs_json
    rows = zip(stamps, zip(*columns, strict=True), strict=True)
    return {timestamp: [dict(zip(names, row, strict=True)), jobs] for timestamp, row in rows}


def _gpu_samples(gpu_series: list, oldest: int, newest: int, result: WriteResult) -> dict[int, list]:
    """One GPU's readings, sample by sample: stale markers ignored, samples outside the window or
    with a value a reading cannot use skipped and counted."""
    usable_value, stale = mapping.value_usable, mapping.is_stale_marker
    gpu_readings: dict[int, list] = {}
    for identity, one in gpu_series:
        name, jobs = identity.field, identity.jobs_json
        for timestamp, value in zip(one.stamps, one.values, strict=True):
            if value != value and stale(value):
                continue  # Prometheus's "series gone": ignored
            if not oldest <= timestamp <= newest:
                result.skip(OUTSIDE_WINDOW)
                continue
            usable = usable_value(name, value)
            if usable is None:
                result.skip(UNUSABLE_VALUE)
                continue
            reading = gpu_readings.get(timestamp)
            if reading is None:
                gpu_readings[timestamp] = [{name: usable}, jobs]
            else:
                reading[0][name] = usable
                if reading[1] is None:
                    reading[1] = jobs
    return gpu_readings


# The queries every write runs, hand-written rather than the ORM's: compiling the equivalent
# querysets cost a write more CPU than the queries themselves (as for the agents' token lookup).
@functools.cache
def _sql() -> dict[str, str]:
    quote = connection.ops.quote_name
    # The GPUs' model as fleet's selector answers it, and a live token as telemetry words it (they own them).
    host, fed, gpu, source_gpu, source = (
        quote(model._meta.db_table) for model in (Host, FedHost, fleet_selectors.gpus().model, SourceGpu, IngestSource)
    )  # fmt: skip
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return {
        "hosts": f"SELECT {select_columns(Host, 'h')}, {telemetry_selectors.token_live_sql(host_id='h.id')},"
        " f.id, f.source_id, f.driver_version"
        f" FROM {host} h LEFT JOIN {fed} f ON f.host_id = h.id WHERE h.hostname IN ({{}})",
        "gpu_hosts": f"SELECT g.uuid, h.hostname FROM {gpu} g JOIN {host} h ON h.id = g.host_id WHERE g.uuid IN ({{}})",
        # In id order, so that two writes never wait on each other's GPUs in a loop.
        "gpus": f"SELECT {select_columns(SourceGpu, 's')} FROM {source_gpu} s WHERE s.uuid IN ({{}}) ORDER BY s.id"
        + lock,
        "counts": f"UPDATE {source} SET last_write_at = %s, samples_stored = samples_stored + %s,"
        " samples_skipped = samples_skipped + %s, samples_dropped = samples_dropped + %s WHERE id = %s",
    }


def _query(name: str, values, params=()) -> list[tuple]:
    values = list(values)
    if not values:
        return []
    with hot_cursor() as cursor:
        cursor.execute(_sql()[name].format(", ".join(["%s"] * len(values))), [*values, *params])
        return cursor.fetchall()


def _hosts_refused(source: IngestSource, hostnames: set[str]) -> tuple[dict[str, str], dict[str, FedHost | Host]]:
    """Hostnames whose samples are dropped (with why), and for the others that exist their FedHost
    (its host with it), or their Host where the source does not feed it yet."""
    refused = {name: NOT_MATCHED for name in hostnames if not fnmatch.fnmatchcase(name, source.hosts)}
    width = len(Host._meta.concrete_fields)
    hosts: dict[str, FedHost | Host] = {}
    for row in _query("hosts", hostnames - refused.keys()):
        (host,) = row_to_models(row[:width], Host)
        agent, fed_id, source_id, driver = row[width:]
        if agent:
            refused[host.hostname] = AGENT_HOST
        elif fed_id is not None and source_id != source.pk:
            refused[host.hostname] = OTHER_SOURCE
        elif fed_id is not None:
            hosts[host.hostname] = FedHost(id=fed_id, host=host, source_id=source_id, driver_version=driver)
        else:
            hosts[host.hostname] = host
    return refused, hosts


def _fed_hosts(source: IngestSource, identities, hosts: dict[str, FedHost | Host]) -> dict[str, FedHost]:
    """Each hostname's FedHost, the host created on first sight (a write beside this one that
    creates it too fails on the unique host: StoreBusy); its driver as the labels say."""
    fed = {}
    drivers = {identity.hostname: identity.driver_version for identity in identities.values()}
    for hostname, driver in drivers.items():
        row = hosts.get(hostname)
        if not isinstance(row, FedHost):
            host = row or fleet_services.host_create(hostname=hostname)
            row = FedHost.objects.create(host=host, source=source, driver_version=driver)
        elif driver and row.driver_version != driver:
            FedHost.objects.filter(pk=row.pk).update(driver_version=driver)
            row.driver_version = driver
        fed[hostname] = row
    return fed


def _source_gpus(identities, fed: dict[str, FedHost]) -> dict[str, SourceGpu]:
    """Each GPU's row, locked until the write commits (PostgreSQL; SQLite's write lock is the whole
    database's), created on first sight; its inventory as the labels say."""
    gpus = {gpu.uuid: gpu for gpu in (row_to_models(row, SourceGpu)[0] for row in _query("gpus", identities))}
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
            for name, value in values.items():
                setattr(gpu, name, value)
    return gpus


def remote_write_store(*, source: IngestSource, series: list[Series], now: dt.datetime | None = None) -> WriteResult:
    """Store the request's usable samples, whole or not at all (StoreBusy: nothing stored), and
    hand on the readings they complete."""
    now = now or timezone.now()
    result = WriteResult()
    readings, identities = _usable_samples(series, now, result)
    refused, hosts = _hosts_refused(source, {identity.hostname for identity in identities.values()})
    other_hosts = dict(_query("gpu_hosts", identities))
    for uuid, identity in list(identities.items()):
        why = refused.get(identity.hostname)
        if why is None and other_hosts.get(uuid, identity.hostname) != identity.hostname:
            why = OTHER_HOST_GPU
        if why is not None:
            del identities[uuid]
            result.drop(why, sum(len(reading[0]) for reading in readings.pop(uuid).values()))
    try:
        with transaction.atomic():
            fed = _fed_hosts(source, identities, hosts)
            gpus = _source_gpus(identities, fed)
            _store(readings, identities, fed, gpus, now, result)
            with hot_cursor() as cursor:
                params = [
                    connection.ops.adapt_datetimefield_value(now),
                    result.stored,
                    result.skipped,
                    result.dropped,
                    source.pk,
                ]
                cursor.execute(_sql()["counts"], params)
    except IntegrityError as error:
        raise StoreBusy(str(error)) from None
    return result


def _store(readings: Readings, identities, fed: dict[str, FedHost], gpus: dict[str, SourceGpu], now, result) -> None:
    """Merge the request's readings into the GPUs' pending ones, and settle each host: the readings
    now complete handed on, the rest stored."""
    pending = hand_on.pending_read(gpu.pk for gpu in gpus.values())
    instants: dict[int, dt.datetime] = {}
    by_host: dict[str, list] = defaultdict(list)
    for uuid, gpu_readings in readings.items():
        gpu = gpus[uuid]
        gpu_pending = pending.get(gpu.pk, {})
        for timestamp, (values, jobs) in gpu_readings.items():
            ts = instants.get(timestamp)
            if ts is None:
                ts = instants[timestamp] = EPOCH + dt.timedelta(milliseconds=timestamp)
            if gpu.handed_until is not None and ts <= gpu.handed_until:
                result.skip(LATE, len(values))  # its reading went on already (a late field, or a request sent again)
                continue
            current = gpu_pending.get(ts)
            if current is None:
                gpu_pending[ts] = hand_on.Pending(ts, values, jobs, now, changed=True)
                result.stored += len(values)
                continue
            new = values.keys() - current.values.keys()  # a field already stored is never changed
            if new:
                current.values.update({name: values[name] for name in new})
                current.changed = True
                result.stored += len(new)
            if current.jobs is None and jobs is not None:
                current.jobs, current.changed = jobs, True
        by_host[identities[uuid].hostname].append(hand_on.GpuWork(gpu, gpu_pending))
    for hostname, work in by_host.items():
        result.left_for_pass += hand_on.settle(fed[hostname], fed[hostname].host, work, now, refuse=False).left
