"""Celery tasks: thin interfaces that call a service, idempotent (beat runs them; never ingest)."""

from celery import shared_task

from portal.jobs import services


@shared_task(acks_late=True, ignore_result=True)
def jobs_watch_task():
    # Safe to run twice: each step finds what is left to do.
    services.job_interruptions_assess()
    services.jobs_idle_flag()


@shared_task(acks_late=True, ignore_result=True)
def jobs_slurm_lookup_task():
    services.jobs_slurm_lookup()
