"""A Django ASGI handler without the middleware stack, for the agents' ingest endpoint.

The portal's middleware (WhiteNoise, django-auditlog) is sync-only. Behind it, every request
is run on Django's single "thread-sensitive" thread, which serialises a server process's
requests: the ingest view's own async path and thread pool never get to overlap. Ingest needs
none of that middleware (no session, no CSRF, no static files, no audit actor), so its path
gets this handler, and the view checks the Host header itself.
"""

from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response


class BareASGIHandler(ASGIHandler):
    def load_middleware(self, is_async=False):
        # What BaseHandler.load_middleware builds for an empty MIDDLEWARE setting.
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        get_response = self._get_response_async if is_async else self._get_response
        self._middleware_chain = convert_exception_to_response(get_response)
