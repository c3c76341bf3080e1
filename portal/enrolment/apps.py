from django.apps import AppConfig


class EnrolmentConfig(AppConfig):
    name = "portal.enrolment"
    label = "enrolment"
    verbose_name = "Agent enrolment"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.core.hooks import web_start
        from portal.enrolment.agent_dist import agent_dist_prepare
        from portal.enrolment.models import EnrolmentAttempt, EnrolmentCode

        web_start.subscribe("enrolment")(agent_dist_prepare)  # /agent/'s files, under VAR_DIR

        # Codes (made, revoked) and every exchange, granted or refused, are in the audit trail.
        auditlog.register(EnrolmentCode, exclude_fields=["secret_hash"])
        auditlog.register(EnrolmentAttempt)
