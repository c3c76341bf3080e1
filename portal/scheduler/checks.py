"""Settings that cannot work stop the portal at start (Django runs these checks before serving,
migrating and starting workers through manage.py)."""

from django.conf import settings
from django.core.checks import Error, register

from portal.maintenance.selectors import SEVERITY_RANK
from portal.scheduler.adapters import rest_url_problem


@register()
def slurm_settings_check(app_configs=None, **kwargs) -> list[Error]:
    if not getattr(settings, "SLURM_ENABLED", False):
        return []
    errors = []
    mode = settings.SLURM_MODE
    if mode not in ("cli", "rest"):
        errors.append(Error(f"SLURM_MODE must be off, cli or rest, not {mode!r}", id="scheduler.E001"))
    if mode == "rest":
        missing = [
            name for name in ("SLURM_REST_URL", "SLURM_REST_USER", "SLURM_REST_TOKEN") if not getattr(settings, name)
        ]
        if missing:
            errors.append(
                Error(
                    f"SLURM_MODE=rest needs {', '.join(missing)}",
                    hint="set them, or SLURM_MODE=cli",
                    id="scheduler.E002",
                )
            )
        elif problem := rest_url_problem(settings.SLURM_REST_URL):
            errors.append(
                Error(
                    problem,
                    hint="serve slurmrestd over TLS (e.g. behind nginx) and use its https:// URL, or an SSH "
                    "tunnel's local end (http://127.0.0.1:PORT)",
                    id="scheduler.E003",
                )
            )
    if settings.SLURM_DRAIN_SEVERITY not in (*SEVERITY_RANK, "none"):
        errors.append(
            Error(
                f"SLURM_DRAIN_SEVERITY must be one of {', '.join([*SEVERITY_RANK, 'none'])}, "
                f"not {settings.SLURM_DRAIN_SEVERITY!r}",
                id="scheduler.E004",
            )
        )
    return errors
