"""The Celery app of the web server, the worker and beat, and what each of them does as it starts:
the broker's transport registered, the one beat per cluster, the start-up heap frozen, the
catalogues compiled (portal.ops)."""

import os

from celery import Celery
from celery.signals import beat_init, worker_init, worker_process_init

from portal.ops import broker
from portal.ops.heap import freeze_startup_objects

broker.register()  # the embedded broker's transport, before any connection is made
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
# Every Celery option lives in Django settings under the CELERY_ prefix.
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _pause_after_commits(**kwargs):
    """On SQLite the worker's write transactions leave the web server a moment between them to
    take the write lock (portal/core/sqlite_backend/base.py)."""
    from django.db import connections

    from portal.core import engine
    from portal.core.sqlite_backend.base import WORKER_PAUSE_AFTER_COMMIT_S

    wrapper = connections["default"]
    if engine.single_writer(wrapper):
        type(wrapper).pause_after_commit_s = WORKER_PAUSE_AFTER_COMMIT_S


@beat_init.connect
def _one_beat_per_cluster(**kwargs):
    from portal.ops.beat_lock import beat_lock_for_this_process

    beat_lock_for_this_process()  # blocks while another beat runs: see portal/ops/beat_lock.py


@worker_process_init.connect
@beat_init.connect
def _freeze_startup_objects(**kwargs):
    freeze_startup_objects()  # see portal/ops/heap.py


@worker_init.connect
def _compile_catalogues(**kwargs):
    """The translated catalogues under VAR_DIR before the pool starts: the worker writes e-mails and
    chat messages in each subscriber's language (portal/ops/startup.py)."""
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()
    from portal.ops.startup import start_prepare

    start_prepare(web=False)
