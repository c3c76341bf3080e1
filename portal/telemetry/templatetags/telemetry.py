from django import template

from portal.telemetry.models import HostToken

register = template.Library()


@register.simple_tag
def host_tokens(host):
    return list(HostToken.objects.filter(host=host).select_related("created_by"))
