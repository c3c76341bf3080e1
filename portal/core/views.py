from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpResponsePermanentRedirect, JsonResponse
from django.templatetags.static import static
from django.views.decorators.http import require_safe


@login_not_required
@require_safe
def healthz(request):
    """For load balancers and `make demo`'s wait: answers once the database does."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


@login_not_required
@require_safe
def favicon(request):
    """Browsers ask for /favicon.ico whatever the page links (a bookmark, the API's JSON, a PDF):
    the portal's icon, by its static name (hashed, cached for good, with DEBUG off)."""
    return HttpResponsePermanentRedirect(static("core/favicon.ico"))
