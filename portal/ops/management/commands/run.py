"""`manage.py run`: the whole portal in one command — web server, Celery worker and beat.

For a small lab (and the demo): with REDIS_URL unset the worker and beat use the broker kept in
files under VAR_DIR, with it set the real broker. The processes are supervised (see
portal/ops/supervise.py): one that dies is started again, one that keeps dying stops them all
with a message, and Ctrl-C or SIGTERM stops every process this command started.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from portal.core import engine
from portal.core.staticfiles import static_collect
from portal.ops.management.commands.serve import refuse_without_portal_url
from portal.ops.startup import start_prepare
from portal.ops.supervise import Child, ChildFailed, Stop, Supervisor, wait_until_answers


def portal_children(
    *,
    host: str,
    port: int,
    workers: int,
    concurrency: int,
    env: dict[str, str],
    access_log: str | None = None,
    log_dir: Path | None = None,
) -> list[Child]:
    """Web server (`manage.py serve`), worker and beat, in the order they start; their output goes
    to this command's own, or to web.log, worker.log and beat.log in log_dir."""

    def log(name: str) -> Path | None:
        return log_dir / f"{name}.log" if log_dir else None

    manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
    serve = ["serve", "--host", host, "--port", str(port), "--workers", str(workers)]
    if access_log:
        serve += ["--access-log", access_log]
    celery = [sys.executable, "-m", "celery", "-A", "portal"]
    return [
        Child("web server", [*manage, *serve], env, log("web")),
        Child(
            "worker",
            [
                *celery,
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                str(concurrency),
                "--without-mingle",
                "--without-gossip",
                "--hostname",
                f"portal-{os.getpid()}@%h",
            ],
            env,
            log("worker"),
        ),  # fmt: skip
        Child(
            "beat",
            [*celery, "beat", "--loglevel", "INFO", "--schedule", settings.CELERY_BEAT_SCHEDULE_FILENAME],
            env,
            log("beat"),
        ),
    ]


# Sent once at start: the sweeps catch up what waited while no worker ran (stored batches some
# stage of the pipeline has not finished, notifications not sent) and preventive schedules are
# judged now instead of an hour later. Not the silence check: agents need a moment to reconnect.
CATCH_UP = ("pipeline-sweep", "maintenance-schedules", "maintenance-notify")


def catch_up() -> None:
    from portal.celery import app

    for name in CATCH_UP:
        app.send_task(settings.CELERY_BEAT_SCHEDULE[name]["task"])


def default_concurrency() -> int:
    # SQLite takes one writer at a time: more worker processes only wait for each other.
    if engine.single_writer():
        return 1
    return os.cpu_count() or 1


def start_portal(
    supervisor: Supervisor,
    *,
    host: str,
    port: int,
    workers: int = 1,
    concurrency: int | None = None,
    access_log: str | None = None,
    log_dir: Path | None = None,
    meanwhile=None,
) -> str:
    """Start web server, worker and beat under supervisor (their output in log_dir when given);
    run meanwhile() (if given) while they boot, wait until the web server answers and send the
    catch-up tasks. Returns the base URL."""
    concurrency = concurrency or default_concurrency()
    env = os.environ.copy()
    children = portal_children(
        host=host, port=port, workers=workers, concurrency=concurrency, env=env, access_log=access_log, log_dir=log_dir
    )
    for child in children:
        supervisor.start(child)
    url_host = f"[{host}]" if ":" in host else ("127.0.0.1" if host in {"0.0.0.0", ""} else host)
    base_url = f"http://{url_host}:{port}"
    if meanwhile is not None:
        meanwhile()
    wait_until_answers(base_url + "/healthz", check=supervisor.check)
    catch_up()
    return base_url


@contextlib.contextmanager
def supervised(command: BaseCommand) -> Iterator[Supervisor]:
    """A supervisor for a command's processes, with SIGTERM and Ctrl-C handled: they end the
    block with "Stopping…", a child that keeps exiting ends it as a CommandError that names it,
    and every process started is stopped when it ends, however it ends."""
    supervisor = Supervisor(say=lambda text: command.stderr.write(text))
    with supervisor.signals():
        try:
            yield supervisor
        except Stop:
            command.stdout.write("\nStopping…")
        except ChildFailed as failure:
            raise CommandError(str(failure)) from None
        finally:
            supervisor.stop()


def prepare(*, migrate: bool = True) -> None:
    """Before any process starts: the settings a start needs, the migrations, the static files
    (compressed: DEBUG off, or the demo; collected only when their sources changed) and what
    portal.ops.startup prepares under VAR_DIR (catalogues, the agent's distribution), so the
    worker and the web server find them at once."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        raise CommandError("CELERY_TASK_ALWAYS_EAGER is on: tasks would run in the web server, not the worker")
    refuse_without_portal_url()
    if migrate:
        call_command("migrate", interactive=False, verbosity=0)
    if settings.STATIC_COMPRESSED:
        static_collect()
    start_prepare()


class Command(BaseCommand):
    help = "Run the portal for a small lab: web server, Celery worker and beat, supervised; Ctrl-C stops all."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--workers", type=int, default=1, help="Daphne processes (more need REDIS_URL).")
        parser.add_argument("--concurrency", type=int, default=None, help="Celery worker processes.")
        parser.add_argument("--no-migrate", action="store_true", help="Don't apply migrations first.")

    def handle(self, *args, host, port, workers, concurrency, no_migrate, **options):
        prepare(migrate=not no_migrate)
        with supervised(self) as supervisor:
            base_url = start_portal(supervisor, host=host, port=port, workers=workers, concurrency=concurrency)
            broker = "Redis" if settings.REDIS_URL else f"files under {settings.EMBEDDED_BROKER_DIR}"
            self.stdout.write(f"The portal is up at {base_url}/ (worker and beat on {broker}); Ctrl-C stops it.")
            supervisor.run_forever()
