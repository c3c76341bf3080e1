from portal.telemetry.services.tokens import (
    host_token_authenticate,
    host_token_issue,
    host_token_revoke,
    host_token_rotate,
    host_token_rotation_finish,
)

__all__ = [
    "host_token_authenticate",
    "host_token_issue",
    "host_token_revoke",
    "host_token_rotate",
    "host_token_rotation_finish",
]
