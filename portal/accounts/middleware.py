"""A signed-in user's own language, over the cookie and the browser's (portal-api-v1.md, "Language").

The profile's language is copied into the session at login and whenever the user changes it
(portal.accounts.services.user_language_set), so pages pay no query for it."""

import time

from django.contrib.auth import logout
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


class DirectoryRecheckMiddleware:
    """A directory account's session ends once its directory no longer gives it a role, within
    LIVE_RECHECK_S (portal.accounts.directory.recheck). The session keeps a copy of until when the
    directory vouched for it, so a request inside that costs nothing; local accounts, nothing ever."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        from portal.accounts.directory.recheck import (
            LOCAL_MARK,
            SESSION_VOUCHED_KEY,
            directory_account_recheck,
            session_mark_after_check,
        )
        from portal.accounts.directory.services import client_address

        mark = request.session.get(SESSION_VOUCHED_KEY)
        if mark != LOCAL_MARK and (mark is None or time.time() >= mark) and request.user.is_authenticated:
            until = directory_account_recheck(user=request.user, client=client_address(request))
            if until is None:
                logout(request)  # the login page next, or the API's 401
            else:
                request.session[SESSION_VOUCHED_KEY] = session_mark_after_check(until)
        return self.get_response(request)
