"""The fleet heatmap's starting state, fetched by the page (kept out of its HTML: at 5,000 GPUs
it is several hundred kilobytes the host list does not need)."""

from django.contrib.auth.decorators import permission_required
from django.http import JsonResponse
from django.views.decorators.cache import never_cache

from portal.live import selectors


@never_cache
@permission_required("fleet.view_gpu", raise_exception=True)
def fleet_state(request):
    return JsonResponse(selectors.fleet_live_state())
