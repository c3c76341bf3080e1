"""/agent/: the agent's files, for anyone (a new host has no account): a page pip's
--find-links reads, the wheels, install.sh and the version."""

from pathlib import Path

from django.contrib.auth.decorators import login_not_required
from django.http import FileResponse, Http404, HttpResponse, JsonResponse
from django.utils.html import format_html_join
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from portal.enrolment.agent_dist import agent_dist_files, agent_project

INSTALL_SCRIPT = Path(__file__).with_name("install.sh")


@login_not_required
@require_safe
@never_cache
def index(request):
    links = format_html_join("\n", '<li><a href="{}">{}</a></li>', ((p.name, p.name) for p in agent_dist_files()))
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>gpu-fleet-agent</title></head>'
        "<body><h1>gpu-fleet-agent</h1>"
        f'<ul>\n{links}\n<li><a href="install.sh">install.sh</a></li>\n<li><a href="version">version</a></li></ul>'
        "</body></html>"
    )
    return HttpResponse(page)


@login_not_required
@require_safe
def wheel(request, name: str):
    for path in agent_dist_files():
        if path.name == name:
            return FileResponse(path.open("rb"), as_attachment=True, filename=name, content_type="application/zip")
    raise Http404("no such file")


@login_not_required
@require_safe
def install_script(request):
    return HttpResponse(INSTALL_SCRIPT.read_bytes(), content_type="text/x-shellscript; charset=utf-8")


@login_not_required
@require_safe
@never_cache
def version(request):
    project = agent_project()
    return JsonResponse({"version": project.version, "wheel": project.wheel_name})
