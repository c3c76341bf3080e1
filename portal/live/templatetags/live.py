from django import template

from portal.live import selectors

register = template.Library()


@register.simple_tag
def live_fleet_state():
    return selectors.fleet_live_state()


@register.simple_tag
def live_ticket_counts():
    return selectors.open_ticket_counts()


@register.simple_tag
def live_gpu_config(gpu, records):
    return selectors.gpu_live_config(gpu=gpu, records=records)
