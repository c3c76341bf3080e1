"""Services of the maintenance app (functions that write). See the modules for each area."""

from portal.maintenance.services.tickets import (  # noqa: F401
    ticket_assign,
    ticket_comment_add,
    ticket_transition,
    tickets_resolve_by_record,
)
