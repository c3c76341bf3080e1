"""Refuse NUL characters in query strings and form fields before any view sees them.

PostgreSQL text cannot hold NUL, so a search or filter containing one would fail in the
database as a 500. Django's form fields refuse NUL already; query parameters read directly by
views and API filters do not, so the check lives here, once, for every page and endpoint.
"""

from django.http import JsonResponse


class RejectNulCharactersMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        for source, params in (("query", request.GET), ("form", request.POST)):
            for name, values in params.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    return JsonResponse(
                        {
                            "error": "NUL characters are not allowed",
                            "detail": [{"loc": f"{source}.{name}", "msg": "contains NUL"}],
                        },
                        status=400,
                    )
        return self.get_response(request)
