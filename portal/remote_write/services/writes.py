"""Store a remote write request's samples (prometheus-v1.md): all of them in one transaction or
none, at once, without waiting for their readings to be complete. The samples of one GPU and
timestamp are one pending row until their reading is handed on (services/hand_on.py): merged with
the parts earlier requests stored, a field already stored never changed, so a request sent again
stores nothing new. The readings a request completes are handed on in its own transaction, as
an agent's batch is stored by its request; the rest wait for a later request or for the pass."""

import datetime as dt
import fnmatch
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from portal.fleet import services as fleet_services
from portal.fleet.models import Gpu, Host
from portal.remote_write import mapping
from portal.remote_write.models import FedHost, IngestSource, SourceGpu
from portal.remote_write.services import hand_on
from portal.remote_write.wire import Series
from portal.telemetry.models import HostToken
from portal.telemetry.services.ingest import MAX_FUTURE

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

# uuid → timestamp in ms → [{field: value}, jobs as JSON or None]: a request's samples as readings.
Readings = dict[str, dict[int, list]]


def _usable_samples(series: list[Series], now: dt.datetime, result: WriteResult):
    """The samples a reading can use, grouped by GPU and timestamp, and the identity of each GPU
    (its newest labels). A sample sent twice in one request: the later one."""
    oldest = int((now - dt.timedelta(hours=settings.INGEST_MAX_AGE_HOURS) - EPOCH).total_seconds() * 1000)
    newest = int((now + MAX_FUTURE - EPOCH).total_seconds() * 1000)
    readings: Readings = {}
    identities: dict[str, mapping.SeriesIdentity] = {}
    usable_value, stale = mapping.value_usable, mapping.is_stale_marker
    for one in series:
        identity = mapping.identity_of(one.labels)
        if isinstance(identity, str):
            result.skip(identity, len(one.samples))
            continue
        identities[identity.uuid] = identity
        name, jobs = identity.field, identity.jobs_json
        gpu_readings = readings.setdefault(identity.uuid, {})
        for timestamp, value in one.samples:
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
    return readings, identities


def _hosts_refused(source: IngestSource, hostnames: set[str]) -> tuple[dict[str, str], dict[str, Host]]:
    """Hostnames whose samples are dropped (with why), and the hosts of the others that exist."""
    refused = {name: NOT_MATCHED for name in hostnames if not fnmatch.fnmatchcase(name, source.hosts)}
    hosts = {host.hostname: host for host in Host.objects.filter(hostname__in=hostnames - refused.keys())}
    host_ids = [host.pk for host in hosts.values()]
    agent = set(
        HostToken.objects.filter(host_id__in=host_ids, revoked_at__isnull=True).values_list("host_id", flat=True)
    )
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
    """Each GPU's row, locked until the write commits (hand_on.gpus_lock), created on first sight;
    its inventory as the labels say."""
    gpus = {gpu.uuid: gpu for gpu in hand_on.gpus_lock(
        SourceGpu.objects.filter(uuid__in=identities.keys()).values_list("pk", flat=True)
    ).values()}  # fmt: skip
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
    other_hosts = dict(Gpu.objects.filter(uuid__in=identities.keys()).values_list("uuid", "host__hostname"))
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
            IngestSource.objects.filter(pk=source.pk).update(
                last_write_at=now, samples_stored=F("samples_stored") + result.stored,
                samples_skipped=F("samples_skipped") + result.skipped,
                samples_dropped=F("samples_dropped") + result.dropped,
            )  # fmt: skip
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
        hand_on.settle(fed[hostname], fed[hostname].host, work, now, refuse=False)
