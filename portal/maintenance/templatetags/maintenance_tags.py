from django import template

from portal.maintenance import selectors

register = template.Library()


@register.simple_tag(takes_context=True)
def open_tickets(context):
    """Open tickets of the page's GPU (when there is one) or host: one query."""
    gpu = context.get("gpu")
    if gpu is not None:
        return selectors.open_tickets_for(gpu=gpu)
    host = context.get("host")
    return selectors.open_tickets_for(host=host) if host is not None else []
