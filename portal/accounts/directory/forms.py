"""The login form (local and LDAP accounts), and the login page with a refusal's reason."""

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.shortcuts import render

from portal.accounts.directory.services import REFUSAL_ATTR, refusal_message


class LoginForm(AuthenticationForm):
    """Django's, but a directory sign-in that was refused says why (no role group, the directory
    down, a local account of that name) instead of "wrong password"."""

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            reason = getattr(self.request, REFUSAL_ATTR, None)
            if reason and reason != "credentials":
                raise ValidationError(refusal_message(reason), code=reason) from None
            raise


def login_page_context(request) -> dict:
    return {
        "oidc_enabled": settings.OIDC_ENABLED,
        "oidc_provider_name": settings.OIDC_PROVIDER_NAME,
        "ldap_enabled": settings.LDAP_ENABLED,
    }


def login_refused(request, *, reason: str, status: int):
    """The login page again, saying why the provider's sign-in was refused."""
    context = {
        **login_page_context(request),
        "form": LoginForm(request),
        "refusal": refusal_message(reason),
        "next": request.session.get("oidc_login_next") or "",
    }
    return render(request, "registration/login.html", context, status=status)
