from django.http import Http404
from django.shortcuts import render
from django.views import View

from . import selectors
from .practices import BY_SLUG, PRACTICES


class GuideIndexView(View):
    """Every practice, for anyone signed in."""

    def get(self, request):
        return render(request, "guidance/index.html", {"practices": PRACTICES})


class PracticeView(View):
    """One practice: why, what to do, how often, and where the portal watches and records it."""

    def get(self, request, slug):
        practice = BY_SLUG.get(slug)
        if practice is None:
            raise Http404("no such practice")
        return render(
            request,
            practice.template_name,
            {"practice": practice, "practices": PRACTICES, **selectors.practice_panels(practice=practice)},
        )
