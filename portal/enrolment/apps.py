from django.apps import AppConfig


class EnrolmentConfig(AppConfig):
    name = "portal.enrolment"
    label = "enrolment"
    verbose_name = "Agent enrolment"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.core.startup import preparation
        from portal.enrolment.agent_dist import agent_dist_prepare
        from portal.enrolment.models import EnrolmentAttempt, EnrolmentCode

        preparation(agent_dist_prepare)  # /agent/'s files, prepared by every web start under VAR_DIR

        # Codes (made, revoked) and every exchange, granted or refused, are in the audit trail.
        auditlog.register(EnrolmentCode, exclude_fields=["secret_hash"])
        auditlog.register(EnrolmentAttempt)
