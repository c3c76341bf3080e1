from portal.telemetry.services.tokens import host_token_authenticate, host_token_issue, host_token_revoke

__all__ = ["host_token_authenticate", "host_token_issue", "host_token_revoke"]
