from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpResponseRedirect

from portal.accounts.directory.forms import LoginForm, login_page_context
from portal.accounts.directory.oidc import oidc_logout_url
from portal.accounts.directory.services import user_source
from portal.accounts.models import Source


class LoginView(auth_views.LoginView):
    """Local and LDAP accounts through the form; "Sign in with …" for OIDC."""

    authentication_form = LoginForm

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), **login_page_context(self.request)}


class LogoutView(auth_views.LogoutView):
    """Django's logout; an OIDC account is then signed out at the provider too (RP-initiated logout),
    which sends the browser back to the login page."""

    def post(self, request, *args, **kwargs):
        was_oidc = settings.OIDC_ENABLED and user_source(request.user) == Source.OIDC
        response = super().post(request, *args, **kwargs)
        if was_oidc:
            url = oidc_logout_url(request)
            if url:
                return HttpResponseRedirect(url)
        return response
