"""A span and a job as the API shows them (portal-api-v1.md, "Jobs on GPUs"): one place, read by
the API, the pages and the reports."""

from __future__ import annotations

from portal.jobs.models import JobSpan
from portal.jobs.selectors import JobDetail


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def span_out(span: JobSpan) -> dict:
    return {
        "job": span.job.key, "gpu": span.gpu.uuid, "host": span.gpu.host.hostname, "started_at": span.started_at,
        "ended_at": span.ended_at, "running": getattr(span, "running", False), "gpu_hours": _round(span.gpu_hours),
        "energy_kwh": _round(span.energy_kwh, 6), "utilization_gpu_mean_pct": _round(span.utilization_gpu_mean_pct, 2),
        "memory_used_max_mib": span.memory_used_max_mib, "temperature_max_c": span.temperature_max_c,
        "throttled_pct": _round(span.throttled_pct, 2),
    }  # fmt: skip


def job_out(detail: JobDetail) -> dict:
    job = detail.job
    return {
        "job": job.key, "scheduler": job.scheduler, "user": job.user, "name": job.name, "account": job.account,
        "started_at": job.started_at, "ended_at": job.ended_at, "running": detail.running,
        "gpus": [span_out(span) for span in detail.spans], "gpu_hours": _round(job.gpu_hours),
        "energy_kwh": _round(None if job.energy_mj is None else job.energy_mj / 3.6e9, 6),
        "utilization_gpu_mean_pct": _round(job.utilization_gpu_mean_pct, 2), "idle": job.idle,
        "tickets": [
            {"id": t.pk, "title": t.title, "severity": t.severity, "gpu": t.gpu.uuid, "opened_at": t.first_seen}
            for t in detail.tickets
        ],
        "interrupted": job.interrupted, "gpu_hours_lost": _round(job.gpu_hours_lost),
    }  # fmt: skip
