from django import forms
from django.contrib.auth import get_user_model
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from portal.fleet import selectors as fleet_selectors
from portal.maintenance import chat
from portal.maintenance.models import Severity, Subscription, Ticket
from portal.maintenance.rules import RULES


class TransitionForm(forms.Form):
    state = forms.ChoiceField(choices=Ticket.State.choices, label=_("State"))
    note = forms.CharField(required=False, max_length=2000, label=_("Note"))


class CommentForm(forms.Form):
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=10_000, label=_("Comment"))


class AssignForm(forms.Form):
    assignee = forms.ModelChoiceField(
        queryset=get_user_model().objects.filter(is_active=True), required=False, label=_("Assignee")
    )


class SilenceForm(forms.Form):
    host = forms.ModelChoiceField(queryset=fleet_selectors.hosts(), to_field_name="hostname", label=_("Host"))
    gpu = forms.ModelChoiceField(queryset=fleet_selectors.gpus(), to_field_name="uuid", required=False, label=_("GPU"))
    ends_at = forms.DateTimeField(label=_("Until"))
    comment = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), label=_("Why"))

    def clean(self):
        data = super().clean()
        gpu, host = data.get("gpu"), data.get("host")
        if gpu is not None and host is not None and gpu.host_id != host.pk:
            self.add_error("gpu", gettext("this GPU is not in that host"))
        return data


class RuleConfigForm(forms.Form):
    params = forms.JSONField(label=_("Settings"), help_text=_('Only the settings to change, e.g. {"open_for_s": 180}'))
    enabled = forms.BooleanField(required=False, initial=True, label=_("Enabled"))
    host = forms.ModelChoiceField(
        queryset=fleet_selectors.hosts(), to_field_name="hostname", required=False, label=_("Host")
    )


class SubscriptionForm(forms.Form):
    channel = forms.ChoiceField(choices=Subscription.Channel.choices, label=_("Channel"))
    target = forms.CharField(
        max_length=500,
        label=pgettext_lazy("notification recipient", "To"),
        help_text=_("Email address, or the webhook's or robot's http(s) URL."),
    )
    secret = forms.CharField(
        max_length=200, required=False, widget=forms.PasswordInput(render_value=False), label=_("Signing secret"),
        help_text=_("Feishu / Lark and DingTalk robots with signing on: the robot's secret. Empty: unsigned."),
    )  # fmt: skip
    min_severity = forms.ChoiceField(choices=Severity.choices, initial=Severity.WARNING, label=_("At least"))
    rules = forms.MultipleChoiceField(choices=lambda: [(key, key) for key in sorted(RULES)], required=False,
                                      label=_("Rules"), help_text=_("None selected: every rule."))  # fmt: skip
    host = forms.ModelChoiceField(queryset=fleet_selectors.hosts(), to_field_name="hostname", required=False,
                                  label=_("Host"), help_text=_("Empty: every host."))  # fmt: skip

    def clean(self):
        data = super().clean()
        channel, target = data.get("channel"), data.get("target")
        if channel == "email" and target:
            try:
                forms.EmailField().clean(target)
            except forms.ValidationError:
                self.add_error("target", gettext("not a valid email address"))
        elif channel in chat.WEBHOOK_CHANNELS and target:
            try:
                forms.URLField(assume_scheme="https").clean(target)
            except forms.ValidationError:
                self.add_error("target", gettext("not a valid http(s) URL"))
            else:
                if not target.startswith(("http://", "https://")):
                    self.add_error("target", gettext("not a valid http(s) URL"))
        return data
