"""A span and a job as the API shows them (portal-api-v1.md, "Jobs on GPUs"): one place, read by
the API, the pages and the reports."""

from __future__ import annotations

from portal.jobs.models import JobSpan
from portal.jobs.selectors import JobRows


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


def _span_row_out(key: str, span) -> dict:
    """span_out for a selectors.SPAN_ROW row: the same figures from the same columns (the
    properties of JobSpan, written out)."""
    readings, count, newest = span.readings, span.utilization_count, span.gpu__latest__ts
    return {
        "job": key, "gpu": span.gpu__uuid, "host": span.gpu__host__hostname, "started_at": span.started_at,
        "ended_at": span.ended_at, "running": newest is not None and span.ended_at >= newest,
        "gpu_hours": round((span.ended_at - span.started_at).total_seconds() / 3600.0, 4),
        "energy_kwh": None if span.energy_mj is None else round(span.energy_mj / 3.6e9, 6),
        "utilization_gpu_mean_pct": round(span.utilization_sum / count, 2) if count else None,
        "memory_used_max_mib": span.memory_used_max_mib, "temperature_max_c": span.temperature_max_c,
        "throttled_pct": round(100.0 * span.throttled_count / readings, 2) if readings else None,
    }  # fmt: skip


def job_out(detail: JobRows) -> dict:
    job = detail.job
    spans = [_span_row_out(job.key, span) for span in detail.spans]
    return {
        "job": job.key, "scheduler": job.scheduler, "user": job.user, "name": job.name, "account": job.account,
        "started_at": job.started_at, "ended_at": job.ended_at, "running": any(span["running"] for span in spans),
        "gpus": spans, "gpu_hours": _round(job.gpu_hours),
        "energy_kwh": _round(None if job.energy_mj is None else job.energy_mj / 3.6e9, 6),
        "utilization_gpu_mean_pct": _round(job.utilization_gpu_mean_pct, 2), "idle": job.idle,
        "tickets": [
            {"id": t.id, "title": t.title, "severity": t.severity, "gpu": t.gpu__uuid, "opened_at": t.first_seen}
            for t in detail.tickets
        ],
        "interrupted": job.interrupted, "gpu_hours_lost": _round(job.gpu_hours_lost),
    }  # fmt: skip
