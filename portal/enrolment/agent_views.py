"""/agent/: the agent's files, for anyone (a new host has no account): a page pip's
--find-links reads, the wheels, install.sh and the version. The wheels are the files a start of the
portal prepared (portal/enrolment/agent_dist.py), served as they are: nothing is built here."""

from pathlib import Path

from django.contrib.auth.decorators import login_not_required
from django.http import FileResponse, Http404, HttpResponse, JsonResponse
from django.utils.html import format_html, format_html_join
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from portal.enrolment.agent_dist import agent_dist_file, agent_dist_manifest, agent_project

INSTALL_SCRIPT = Path(__file__).with_name("install.sh")
NOT_PREPARED = (
    "The agent's distribution has not been prepared: a start of the portal (manage.py serve or run) "
    "or manage.py agent_dist does it."
)


@login_not_required
@require_safe
@never_cache
def index(request):
    manifest = agent_dist_manifest()
    if manifest is None:
        notes, files = format_html("<p>{}</p>", NOT_PREPARED), []
    else:
        files = [entry["name"] for entry in manifest["files"]]
        notes = format_html_join(
            "\n",
            '<p class="missing">Missing: {}. Hosts without internet access cannot install the agent until its '
            "wheel is in the portal's AGENT_DIST_DIR (the portal's log names the command).</p>",
            ((requirement,) for requirement in manifest["missing"]),
        )
    links = format_html_join("\n", '<li><a href="{}">{}</a></li>', ((name, name) for name in files))
    page = format_html(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>gpu-fleet-agent</title></head>'
        '<body><h1>gpu-fleet-agent</h1>{}<ul>\n{}\n<li><a href="install.sh">install.sh</a></li>\n'
        '<li><a href="version">version</a></li></ul></body></html>',
        notes,
        links,
    )
    return HttpResponse(page)


@login_not_required
@require_safe
def wheel(request, name: str):
    path = agent_dist_file(name)
    if path is None or not path.is_file():
        raise Http404("no such file")
    return FileResponse(path.open("rb"), as_attachment=True, filename=name, content_type="application/zip")


@login_not_required
@require_safe
def install_script(request):
    return HttpResponse(INSTALL_SCRIPT.read_bytes(), content_type="text/x-shellscript; charset=utf-8")


@login_not_required
@require_safe
@never_cache
def version(request):
    """{"version", "wheel"} as the contract has it, plus `sha256` (the agent's wheel), `files` (each
    served wheel's sha256) and `missing` (dependencies /agent/ lacks); null and empty before a start
    prepared the files."""
    manifest = agent_dist_manifest()
    if manifest is None:
        project = agent_project()
        return JsonResponse(
            {"version": project.version, "wheel": project.wheel_name, "sha256": None, "files": {}, "missing": []}
        )
    files = {entry["name"]: entry["sha256"] for entry in manifest["files"]}
    return JsonResponse(
        {
            "version": manifest["version"], "wheel": manifest["wheel"], "sha256": files.get(manifest["wheel"]),
            "files": files, "missing": manifest["missing"],
        }
    )  # fmt: skip
