"""Functions that read fleet records. List pages run a fixed number of queries whatever the
fleet's size: every "last X" is a subquery, never a query per row."""

from django.db.models import OuterRef, Prefetch, Q, QuerySet, Subquery
from django.shortcuts import get_object_or_404

from portal.fleet.models import Gpu, GpuStatusChange, Host, MaintenanceRecord

Kind = MaintenanceRecord.Kind


def _last_record_for_gpu(kind: str, field: str = "performed_at") -> Subquery:
    """Latest record of a kind that applies to the outer GPU: on the GPU itself or on its whole host."""
    records = (
        MaintenanceRecord.objects.filter(kind=kind, host_id=OuterRef("host_id"))
        .filter(Q(gpu_id=OuterRef("pk")) | Q(gpu__isnull=True))
        .order_by("-performed_at", "-id")
        .values(field)[:1]
    )
    return Subquery(records)


def _last_record_for_host(kind: str, field: str = "performed_at") -> Subquery:
    records = (
        MaintenanceRecord.objects.filter(kind=kind, host_id=OuterRef("pk"))
        .order_by("-performed_at", "-id")
        .values(field)[:1]
    )
    return Subquery(records)


def gpus_with_derived_dates(queryset: QuerySet[Gpu] | None = None) -> QuerySet[Gpu]:
    queryset = Gpu.objects.all() if queryset is None else queryset
    return queryset.select_related("host").annotate(
        last_cleaning_at=_last_record_for_gpu(Kind.CLEANING),
        last_driver_update_at=_last_record_for_gpu(Kind.DRIVER_UPDATE),
        last_backup_at=_last_record_for_gpu(Kind.BACKUP),
        last_inspection_at=_last_record_for_gpu(Kind.INSPECTION),
    )


def hosts_with_derived_dates(queryset: QuerySet[Host] | None = None) -> QuerySet[Host]:
    queryset = Host.objects.all() if queryset is None else queryset
    return queryset.annotate(
        last_cleaning_at=_last_record_for_host(Kind.CLEANING),
        last_backup_at=_last_record_for_host(Kind.BACKUP),
        last_connection_check_at=_last_record_for_host(Kind.CONNECTION_CHECK),
    )


def fleet_overview(*, include_retired: bool = False) -> list[Host]:
    """Hosts, each with its GPUs (their derived dates and latest reading) prefetched: two queries."""
    hosts = Host.objects.all()
    # The latest reading is telemetry's; joined here so the page stays at a fixed query count.
    gpus = Gpu.objects.order_by("index").select_related("latest")
    if not include_retired:
        hosts = hosts.exclude(status=Host.Status.RETIRED)
        gpus = gpus.exclude(status=Gpu.Status.RETIRED)
    return list(
        hosts_with_derived_dates(hosts).prefetch_related(
            Prefetch("gpus", queryset=gpus_with_derived_dates(gpus), to_attr="listed_gpus")
        )
    )


def host_get(*, hostname: str) -> Host:
    return get_object_or_404(hosts_with_derived_dates(), hostname=hostname)


def gpu_get(*, uuid: str) -> Gpu:
    return get_object_or_404(gpus_with_derived_dates(), uuid=uuid)


def gpu_timeline(*, gpu: Gpu) -> QuerySet[MaintenanceRecord]:
    """Records on this GPU and on its whole host, newest first."""
    return (
        MaintenanceRecord.objects.filter(host_id=gpu.host_id)
        .filter(Q(gpu=gpu) | Q(gpu__isnull=True))
        .select_related("gpu", "host", "recorded_by")
        .prefetch_related("attachments")
    )


def host_timeline(*, host: Host) -> QuerySet[MaintenanceRecord]:
    return (
        MaintenanceRecord.objects.filter(host=host)
        .select_related("gpu", "host", "recorded_by")
        .prefetch_related("attachments")
    )


def record_get(*, pk: int) -> MaintenanceRecord:
    return get_object_or_404(
        MaintenanceRecord.objects.select_related("gpu", "host", "recorded_by").prefetch_related("attachments"), pk=pk
    )


def fleet_search(*, query: str, limit: int = 50) -> dict:
    """Hosts by hostname; GPUs by serial, uuid (with or without the GPU- prefix) or model."""
    query = query.strip()
    if not query:
        return {"hosts": [], "gpus": []}
    hosts = list(Host.objects.filter(Q(hostname__icontains=query) | Q(location__icontains=query))[:limit])
    gpus = list(
        gpus_with_derived_dates(
            Gpu.objects.filter(
                Q(serial__icontains=query)
                | Q(uuid__icontains=query)
                | Q(model_name__icontains=query)
                | Q(host__hostname__icontains=query)
                | Q(pci_bus_id__icontains=query)
            )
        )[:limit]
    )
    return {"hosts": hosts, "gpus": gpus}


def gpu_status_history(*, gpu: Gpu) -> QuerySet[GpuStatusChange]:
    """The GPU's status changes, oldest first."""
    return GpuStatusChange.objects.filter(gpu=gpu).select_related("changed_by").order_by("changed_at", "id")
