import os

from celery import Celery

from portal.core import broker

broker.register()  # the embedded broker's transport, before any connection is made
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
# Every Celery option lives in Django settings under the CELERY_ prefix.
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
