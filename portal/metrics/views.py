"""`GET /metrics`: the Prometheus text format for a scrape job holding METRICS_TOKEN."""

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from portal.metrics.collector import exposition

# Exactly as portal-api-v1.md writes it (prometheus_client's constant adds '; charset=utf-8').
CONTENT_TYPE = "text/plain; version=0.0.4"


@login_not_required
@never_cache
@require_GET
def metrics(request):
    token = settings.METRICS_TOKEN
    if not token:
        raise Http404("metrics are off (METRICS_TOKEN unset)")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        response = HttpResponse("a valid bearer token is required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE)
