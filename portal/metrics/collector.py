"""The portal's figures for Prometheus (portal-api-v1.md, "Metrics for Prometheus"), read from the
database at scrape time by one custom collector in one registry. A fixed number of queries
whatever the fleet size: latest readings, last record per kind, wear states, open tickets,
checklist work due, and the pipeline's stages (telemetry.pipeline); nothing per GPU."""

from __future__ import annotations

from django.db.models import Count, Max
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from portal.checklists.selectors import checklist_work_due_count
from portal.fleet import care
from portal.fleet import selectors as fleet
from portal.maintenance import selectors as maintenance
from portal.telemetry import selectors as telemetry
from portal.telemetry.metrics import POWER, TEMPERATURE, UTILIZATION_GPU
from portal.telemetry.pipeline import pipeline_status
from portal.wear.selectors import wear_lifetime_all

GPU_LABELS = ["uuid", "hostname", "index", "model"]


class PortalCollector:
    def describe(self):
        return []  # families are built at scrape time; nothing to check at registration

    def collect(self):
        yield from self._latest()
        yield self._last_maintenance()
        yield from self._wear()
        yield self._open_tickets()
        yield self._checklist_runs_due()
        yield from self._pipeline()

    def _latest(self):
        temperature = GaugeMetricFamily(
            "gpufleet_gpu_temperature_celsius", "GPU temperature at its latest reading.", labels=GPU_LABELS
        )
        power = GaugeMetricFamily(
            "gpufleet_gpu_power_watts", "GPU power draw at its latest reading.", labels=GPU_LABELS
        )
        utilization = GaugeMetricFamily(
            "gpufleet_gpu_utilization_ratio", "GPU utilization (0-1) at its latest reading.", labels=GPU_LABELS
        )
        last = GaugeMetricFamily(
            "gpufleet_gpu_last_reading_timestamp_seconds", "Time of the GPU's latest reading (its ts).",
            labels=GPU_LABELS,
        )  # fmt: skip
        rows = telemetry.latest_readings().values_list(
            "gpu__uuid", "gpu__host__hostname", "gpu__index", "gpu__model_name", "ts", TEMPERATURE.name, POWER.name,
            UTILIZATION_GPU.name,
        ).order_by("gpu__host__hostname", "gpu__index")  # fmt: skip
        for uuid, hostname, index, model, ts, temp, watts, util in rows:
            labels = [uuid, hostname, str(index), model]
            last.add_metric(labels, ts.timestamp())
            if temp is not None:
                temperature.add_metric(labels, float(temp))
            if watts is not None:
                power.add_metric(labels, float(watts))
            if util is not None:
                utilization.add_metric(labels, util / 100.0)
        return [temperature, power, utilization, last]

    def _last_maintenance(self):
        family = GaugeMetricFamily(
            "gpufleet_gpu_last_maintenance_timestamp_seconds",
            "Time of the last maintenance record of each kind done on the GPU (or on its whole host).",
            labels=["uuid", "hostname", "kind"],
        )
        per_gpu = (
            fleet.records()
            .filter(gpu__isnull=False)
            .values_list("gpu__uuid", "host__hostname", "kind")
            .annotate(last=Max("performed_at"))
        )
        per_host = (
            fleet.records().filter(gpu__isnull=True).values_list("host_id", "kind").annotate(last=Max("performed_at"))
        )
        latest: dict[tuple[str, str, str], float] = {}
        for uuid, hostname, kind, moment in per_gpu:
            latest[(uuid, hostname, kind)] = moment.timestamp()
        host_records: dict[int, list[tuple[str, float]]] = {}
        for host_id, kind, moment in per_host:
            host_records.setdefault(host_id, []).append((kind, moment.timestamp()))
        if host_records:
            for uuid, hostname, host_id in (
                fleet.gpus().filter(host_id__in=list(host_records)).values_list("uuid", "host__hostname", "host_id")
            ):
                for kind, moment in host_records[host_id]:
                    key = (uuid, hostname, kind)
                    latest[key] = max(latest.get(key, 0.0), moment)
        for (uuid, hostname, kind), moment in sorted(latest.items()):
            family.add_metric([uuid, hostname, kind], moment)
        return family

    def _wear(self):
        labels = ["uuid", "hostname"]
        hot = CounterMetricFamily("gpufleet_gpu_hot_seconds",
                                  f"Lifetime seconds at slowdown - {care.WEAR_HOT_MARGIN_C} C or hotter.",
                                  labels=labels)  # fmt: skip
        busy = CounterMetricFamily("gpufleet_gpu_busy_seconds", "Lifetime seconds at 90 % utilization or more.",
                                   labels=labels)  # fmt: skip
        cycles = CounterMetricFamily("gpufleet_gpu_thermal_cycles", "Lifetime thermal cycles (30 C swings).",
                                     labels=labels)  # fmt: skip
        energy = CounterMetricFamily("gpufleet_gpu_energy_joules", "Lifetime energy.", labels=labels)
        for uuid, hostname, hot_s, busy_s, cycles_total, millijoules in wear_lifetime_all():
            hot.add_metric([uuid, hostname], hot_s)
            busy.add_metric([uuid, hostname], busy_s)
            cycles.add_metric([uuid, hostname], cycles_total)
            energy.add_metric([uuid, hostname], millijoules / 1000.0)
        return [hot, busy, cycles, energy]

    def _open_tickets(self):
        family = GaugeMetricFamily(
            "gpufleet_open_tickets", "Open maintenance tickets by severity.", labels=["severity"]
        )
        counts = dict.fromkeys(maintenance.Severity.values, 0)
        counts.update(
            dict(
                maintenance.tickets()
                .filter(state__in=maintenance.OPEN_STATES)
                .values_list("severity")
                .annotate(n=Count("id"))
            )
        )
        for severity, n in counts.items():
            family.add_metric([severity], n)
        return family

    def _checklist_runs_due(self):
        """Checklist runs in progress plus open tickets a checklist template resolves."""
        due = checklist_work_due_count()
        return GaugeMetricFamily(
            "gpufleet_checklist_runs_due",
            "Checklist runs in progress plus open tickets a checklist template resolves.",
            value=due,
        )  # fmt: skip

    def _pipeline(self):
        backlog = GaugeMetricFamily(
            "gpufleet_pipeline_backlog_batches", "Stored batches the stage has not finished.", labels=["stage"]
        )
        lag = GaugeMetricFamily(
            "gpufleet_pipeline_lag_seconds", "Seconds since the oldest batch the stage has not finished was stored "
            "(0 when none waits).", labels=["stage"],
        )  # fmt: skip
        for stage in pipeline_status():
            backlog.add_metric([stage.name], stage.backlog_batches)
            lag.add_metric([stage.name], stage.lag_seconds or 0.0)
        return [backlog, lag]


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(PortalCollector())


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(registry: CollectorRegistry = REGISTRY) -> bytes:
    """The registry in the text format, version 0.0.4 — what prometheus_client's generate_latest
    writes for these families, without its per-sample label-name validation (our label names are
    fixed, and checking them on every sample of every GPU dominated a large fleet's scrape)."""
    lines: list[str] = []
    label_text: dict[tuple, str] = {}  # a GPU's labels recur in several families
    for family in registry.collect():
        name = family.name
        if family.type == "counter" and not name.endswith("_total"):
            name += "_total"
        doc = family.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {family.type}")
        for sample in family.samples:
            if sample.labels:
                key = tuple(sample.labels.items())
                labels = label_text.get(key)
                if labels is None:
                    labels = label_text[key] = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in key)
                lines.append(f"{sample.name}{{{labels}}} {floatToGoString(sample.value)}")
            else:
                lines.append(f"{sample.name} {floatToGoString(sample.value)}")
    lines.append("")
    return "\n".join(lines).encode()
