"""Reading ingest sources and the hosts they feed."""

from django.db.models import Count, QuerySet

from portal.remote_write.models import FedHost, IngestSource


def ingest_sources() -> QuerySet[IngestSource]:
    return IngestSource.objects.select_related("created_by").annotate(host_count=Count("fed_hosts")).order_by("name")


def host_source(*, host_id: int) -> IngestSource | None:
    """The source that feeds a host, or None (an agent reports it, or nothing yet)."""
    fed = FedHost.objects.select_related("source").filter(host_id=host_id).first()
    return fed.source if fed else None
