"""The maintenance app's errors (part of portal.core.errors' hierarchy)."""

from portal.core.errors import ApplicationError


class TicketConflict(ApplicationError):
    """The ticket changed under us (another user or worker got there first)."""


class InvalidInput(ApplicationError):
    pass
