"""A signed-in user's own language, over the cookie and the browser's (portal-api-v1.md, "Language").

The profile's language is copied into the session at login and whenever the user changes it
(portal.accounts.services.user_language_set), so pages pay no query for it."""

from django.utils import translation

SESSION_LANGUAGE_KEY = "portal_language"


class UserLanguageMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        language = request.session.get(SESSION_LANGUAGE_KEY, "") if request.user.is_authenticated else ""
        if language:
            translation.activate(language)
            request.LANGUAGE_CODE = translation.get_language()
        return self.get_response(request)
