"""The maintenance app's errors (part of portal.core.errors' hierarchy)."""

from portal.core.errors import Conflict, InvalidInput

__all__ = ["InvalidInput", "TicketConflict"]


class TicketConflict(Conflict):
    """The ticket changed under us (another user or worker got there first)."""
