from django.apps import AppConfig


class EnrolmentConfig(AppConfig):
    name = "portal.enrolment"
    label = "enrolment"
    verbose_name = "Agent enrolment"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.enrolment.models import EnrolmentAttempt, EnrolmentCode

        # Codes (made, revoked) and every exchange, granted or refused, are in the audit trail.
        auditlog.register(EnrolmentCode, exclude_fields=["secret_hash"])
        auditlog.register(EnrolmentAttempt)
