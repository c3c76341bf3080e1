from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.functional import lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext, pgettext_lazy
from django.views import View
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from django.views.i18n import set_language as django_set_language

from portal.accounts.directory.services import user_source
from portal.accounts.models import ApiToken, Source
from portal.accounts.roles import ROLE_LABELS, ROLES, role_flags
from portal.accounts.services import (
    TOKEN_DEFAULT_DAYS,
    TOKEN_LIFETIME_DAYS,
    api_token_issue,
    api_token_revoke,
    user_language,
    user_language_set,
)
from portal.core.errors import ApplicationError
from portal.core.forms import add_application_error


def _in_days_now(days: int) -> str:
    return ngettext("in %(days)s day", "in %(days)s days", days) % {"days": days}


_in_days = lazy(_in_days_now, str)  # the choice's label, in the language of the page that shows it


class ApiTokenForm(forms.Form):
    label = forms.CharField(max_length=100, required=False, label=gettext_lazy("Label"))
    expires_in_days = forms.TypedChoiceField(
        choices=[(str(days), _in_days(days)) for days in TOKEN_LIFETIME_DAYS],
        coerce=int,
        empty_value=None,
        initial=str(TOKEN_DEFAULT_DAYS),
        label=gettext_lazy("Expires"),
    )

    def __init__(self, data=None, *, user, **kwargs):
        if data is not None and "expires_in_days" not in data:  # not chosen at all: the default
            data = data.copy()
            data["expires_in_days"] = str(TOKEN_DEFAULT_DAYS)
        super().__init__(data, **kwargs)
        if role_flags(user)["admin"]:  # only an admin may mint a token that never expires
            field = self.fields["expires_in_days"]
            field.choices = [*field.choices, ("", pgettext_lazy("token expiry", "never"))]
            field.required = False


@method_decorator(never_cache, name="dispatch")
class ProfileView(View):
    """The user's own page: role and personal API tokens (any logged-in user, even without a role)."""

    def get(self, request, form=None, new_token=None, status=200, language_form=None):
        source = user_source(request.user)
        roles = [ROLE_LABELS[name] for name in request.user.groups.values_list("name", flat=True) if name in ROLES]
        context = {
            "roles": roles,
            "tokens": ApiToken.objects.filter(user=request.user),
            "now": timezone.now(),
            "form": form or ApiTokenForm(user=request.user),
            "new_token": new_token,
            "language_form": language_form or LanguageForm(initial={"language": user_language(request.user)}),
            "directory_source": "" if source == Source.LOCAL else source,
            "oidc_provider_name": settings.OIDC_PROVIDER_NAME,
        }
        return render(request, "accounts/profile.html", context, status=status)

    def post(self, request):
        form = ApiTokenForm(request.POST, user=request.user)
        if not form.is_valid():
            return self.get(request, form=form, status=400)
        try:
            secret, _ = api_token_issue(
                user=request.user, label=form.cleaned_data["label"],
                expires_in_days=form.cleaned_data["expires_in_days"],
            )  # fmt: skip
        except ApplicationError as error:
            add_application_error(form, error)
            return self.get(request, form=form, status=400)
        return self.get(request, new_token=secret, status=201)


class ApiTokenRevokeView(View):
    def post(self, request, pk):
        token = get_object_or_404(ApiToken, pk=pk, user=request.user)
        api_token_revoke(token=token)
        messages.success(request, _("API token %(prefix)s… revoked.") % {"prefix": token.prefix})
        return HttpResponseRedirect(reverse("accounts:profile"))


class LanguageForm(forms.Form):
    language = forms.ChoiceField(
        choices=[("", gettext_lazy("Follow the browser")), *settings.LANGUAGES],
        required=False,
        label=gettext_lazy("Language"),
    )


class LanguageView(View):
    """The account page's language setting (empty: follow the browser's Accept-Language)."""

    def post(self, request):
        form = LanguageForm(request.POST)
        if not form.is_valid():
            return ProfileView().get(request, language_form=form, status=400)
        user_language_set(user=request.user, language=form.cleaned_data["language"], session=request.session)
        return HttpResponseRedirect(reverse("accounts:profile"))


@login_not_required
@require_POST
def set_language(request):
    """Django's set_language (the cookie, and the redirect back), plus the profile of a signed-in
    user, whose choice outranks the cookie; an unknown language is a 400 naming `language`."""
    language = request.POST.get("language", "")
    if language not in dict(settings.LANGUAGES):
        return JsonResponse(
            {
                "error": "unknown language",
                "detail": [{"loc": "language", "msg": f"one of {', '.join(dict(settings.LANGUAGES))}"}],
            },
            status=400,
        )
    if request.user.is_authenticated:
        user_language_set(user=request.user, language=language, session=request.session)
    return django_set_language(request)
