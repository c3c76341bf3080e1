from celery import shared_task

from portal.checklists.services import verifications_finish


@shared_task(ignore_result=True)
def verifications_finish_task():
    """Beat: judge the cleaning checks that were waiting for readings after the cleaning.
    Idempotent (each run is claimed under a row lock), so an overlapping run does no harm."""
    return verifications_finish()
