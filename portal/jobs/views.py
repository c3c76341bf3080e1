"""The job list and a job's page (portal-api-v1.md, "Jobs on GPUs"). Thin: parse, ask, render."""

from __future__ import annotations

import json

from django.contrib.auth.mixins import PermissionRequiredMixin
from django.core.exceptions import BadRequest
from django.http import Http404
from django.shortcuts import render
from django.views import View

from portal.core.errors import NotFound
from portal.jobs import charts, selectors

PAGE_SIZE = 100


def _flag(request, name: str) -> bool | None:
    raw = request.GET.get(name, "")
    if raw in ("", "any"):
        return None
    if raw not in ("true", "false"):
        raise BadRequest(f"{name}: true or false")
    return raw == "true"


class JobListView(PermissionRequiredMixin, View):
    permission_required = "fleet.view_gpu"
    raise_exception = True

    def get(self, request):
        user, host = request.GET.get("user", "")[:128], request.GET.get("host", "")[:253]
        interrupted, idle = _flag(request, "interrupted"), _flag(request, "idle")
        jobs = list(selectors.job_list(user=user, host=host, interrupted=interrupted, idle=idle)[:PAGE_SIZE])
        return render(request, "jobs/list.html", {
            "jobs": jobs, "user_filter": user, "host_filter": host, "interrupted": request.GET.get("interrupted", ""),
            "idle": request.GET.get("idle", ""), "page_size": PAGE_SIZE,
        })  # fmt: skip


class JobView(PermissionRequiredMixin, View):
    permission_required = "fleet.view_gpu"
    raise_exception = True

    def get(self, request, key: str):
        try:
            job = selectors.job_get(key=key)
        except NotFound as error:
            raise Http404(str(error)) from error
        (detail,) = selectors.jobs_detail([job])
        figure = charts.job_timeline(detail)
        return render(request, "jobs/job.html", {
            "detail": detail, "job": job, "chart": json.dumps(figure) if figure else None,
            "energy_kwh": None if job.energy_mj is None else job.energy_mj / 3.6e9,
        })  # fmt: skip
