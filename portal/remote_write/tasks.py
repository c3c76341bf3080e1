from celery import shared_task

from portal.remote_write.services.hand_on import remote_readings_hand_on


@shared_task(acks_late=True, ignore_result=True)
def remote_readings_hand_on_task():
    # Safe to run twice: one pass at a time, and a reading handed on leaves no sample behind.
    remote_readings_hand_on()
