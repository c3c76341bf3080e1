from django.contrib.auth.mixins import PermissionRequiredMixin
from django.shortcuts import render
from django.views import View

from portal.wear.selectors import fleet_wear_ranking


class FleetWearView(PermissionRequiredMixin, View):
    """Every GPU ranked by its wear score against the fleet's medians, and who to inspect first."""

    permission_required = "fleet.view_gpu"
    raise_exception = True

    def get(self, request):
        return render(request, "wear/fleet.html", fleet_wear_ranking())
