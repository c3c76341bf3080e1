"""The fleet heatmap's starting state, fetched by the page (kept out of its HTML: at 5,000 GPUs
it is several hundred kilobytes the host list does not need)."""

from django.contrib.auth.decorators import permission_required
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from portal.live import selectors


@never_cache
@require_safe  # a read: writes answer 405 (the role-matrix walk)
@permission_required("fleet.view_gpu", raise_exception=True)
def fleet_state(request):
    return JsonResponse(selectors.fleet_live_state())
