from django import forms
from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.cache import never_cache

from portal.accounts.models import ApiToken
from portal.accounts.roles import ROLES
from portal.accounts.services import TOKEN_LIFETIME_DAYS, api_token_issue, api_token_revoke


class ApiTokenForm(forms.Form):
    label = forms.CharField(max_length=100, required=False)
    expires_in_days = forms.TypedChoiceField(
        choices=[("", "never"), *((str(days), f"in {days} days") for days in TOKEN_LIFETIME_DAYS)],
        coerce=int,
        empty_value=None,
        required=False,
        label="Expires",
    )


@method_decorator(never_cache, name="dispatch")
class ProfileView(View):
    """The user's own page: role and personal API tokens (any logged-in user, even without a role)."""

    def get(self, request, form=None, new_token=None, status=200):
        roles = [name for name in request.user.groups.values_list("name", flat=True) if name in ROLES]
        context = {
            "roles": roles,
            "tokens": ApiToken.objects.filter(user=request.user),
            "now": timezone.now(),
            "form": form or ApiTokenForm(),
            "new_token": new_token,
        }
        return render(request, "accounts/profile.html", context, status=status)

    def post(self, request):
        form = ApiTokenForm(request.POST)
        if not form.is_valid():
            return self.get(request, form=form, status=400)
        secret, _ = api_token_issue(
            user=request.user, label=form.cleaned_data["label"], expires_in_days=form.cleaned_data["expires_in_days"]
        )
        return self.get(request, new_token=secret, status=201)


class ApiTokenRevokeView(View):
    def post(self, request, pk):
        token = get_object_or_404(ApiToken, pk=pk, user=request.user)
        api_token_revoke(token=token)
        messages.success(request, f"API token {token.prefix}… revoked.")
        return HttpResponseRedirect(reverse("accounts:profile"))
