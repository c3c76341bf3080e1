"""Ticket pages: thin views that parse the request, call a selector or a service, and render."""

from django.contrib import messages
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext, pgettext_lazy
from django.views import View

from portal.core.errors import Conflict, InvalidInput
from portal.core.forms import add_application_error
from portal.core.panels import page_panels
from portal.maintenance import failures, selectors, services, xid_catalog
from portal.maintenance.forms import (
    AssignForm,
    CommentForm,
    RuleConfigForm,
    SilenceForm,
    SubscriptionForm,
    TransitionForm,
)
from portal.maintenance.models import RuleConfig, Severity, Silence, Subscription, Ticket
from portal.maintenance.rules import RULES
from portal.maintenance.services.config import rule_config_set
from portal.maintenance.services.silences import silence_create
from portal.maintenance.services.subscriptions import subscription_create, subscription_delete

# The ticket list's sort keys (the URL's `sort`) as a person reads them.
SORT_LABELS = {
    "last_seen": pgettext_lazy("sort tickets by", "last seen"),
    "first_seen": pgettext_lazy("sort tickets by", "first seen"),
    "severity": pgettext_lazy("sort tickets by", "severity"),
    "occurrences": pgettext_lazy("sort tickets by", "occurrences"),
    "host": pgettext_lazy("sort tickets by", "host"),
    "rule": pgettext_lazy("sort tickets by", "rule"),
    "state": pgettext_lazy("sort tickets by", "state"),
}


class Permission(PermissionRequiredMixin):
    raise_exception = True


def _form_errors(form) -> str:
    return "; ".join(f"{field}: {' '.join(errs)}" for field, errs in form.errors.items())


def _service_errors(error: InvalidInput) -> str:
    return "; ".join(f"{f}: {' '.join(e)}" for f, e in error.field_errors.items()) or error.message


class TicketListView(Permission, View):
    permission_required = "maintenance.view_ticket"

    def get(self, request):
        filters = {name: request.GET.get(name, "") for name in selectors.FILTERS}
        if "state" not in request.GET:
            filters["state"] = "active"
        sort = request.GET.get("sort", "")
        page = Paginator(selectors.ticket_list(**filters, sort=sort), 50).get_page(request.GET.get("page"))
        return render(request, "maintenance/ticket_list.html", {
            "page": page, "filters": filters, "sort": sort, "states": Ticket.State.choices,
            "severities": Severity.choices, "rules": sorted((key, rule.title_shown) for key, rule in RULES.items()),
            "sorts": [(key, SORT_LABELS[key]) for key in selectors.SORTS],
            "panels": page_panels("maintenance.tickets", request=request),
        })  # fmt: skip


class TicketDetailView(Permission, View):
    permission_required = "maintenance.view_ticket"

    def get(self, request, pk, status=200):
        try:
            ticket = selectors.ticket_detail(pk=pk)
        except Ticket.DoesNotExist as error:
            from django.http import Http404

            raise Http404("no such ticket") from error
        return render(request, "maintenance/ticket_detail.html", {
            "ticket": ticket, "chart": selectors.ticket_chart(ticket=ticket), "rule": RULES.get(ticket.rule),
            "transitions": sorted(services.tickets.TRANSITIONS[ticket.state]), "assign_form": AssignForm(),
            "comment_form": CommentForm(), "xid_guidance": failures.ticket_xid_guidance(ticket),
            "failure_category": failures.ticket_category_shown(ticket),
            "xid_source_url": xid_catalog.SOURCE_URL, "xid_source_title": xid_catalog.SOURCE_TITLE,
            "panels": page_panels("maintenance.ticket", request=request, ticket=ticket, rule=RULES.get(ticket.rule)),
        }, status=status)  # fmt: skip

    def post(self, request, pk):
        user = request.user
        if not (user.has_perm("maintenance.change_ticket") or user.has_perm("maintenance.add_ticketcomment")):
            raise PermissionDenied  # a role that can do nothing here is refused before its input is read
        ticket = get_object_or_404(Ticket, pk=pk)
        action = request.POST.get("action")
        forms = {"transition": TransitionForm, "comment": CommentForm, "assign": AssignForm}
        if action not in forms:
            messages.error(request, gettext("action: unknown action"))
            return self.get(request, pk, status=400)
        needed = "maintenance.add_ticketcomment" if action == "comment" else "maintenance.change_ticket"
        if not request.user.has_perm(needed):
            raise PermissionDenied
        form = forms[action](request.POST)
        if not form.is_valid():
            messages.error(request, _form_errors(form))
            return self.get(request, pk, status=400)
        data = form.cleaned_data
        try:
            if action == "transition":
                if data["state"] == "closed" and not request.user.has_perm("maintenance.close_ticket"):
                    raise PermissionDenied
                services.ticket_transition(ticket=ticket, to_state=data["state"], user=request.user, note=data["note"])
            elif action == "comment":
                services.ticket_comment_add(ticket=ticket, author=request.user, body=data["body"])
            else:
                services.ticket_assign(ticket=ticket, assignee=data["assignee"], user=request.user)
        except InvalidInput as error:
            messages.error(request, _service_errors(error))
            return self.get(request, pk, status=400)
        except Conflict as error:
            messages.error(request, error.message)
            return self.get(request, pk, status=409)
        return redirect(ticket)


class SilenceListView(Permission, View):
    permission_required = "maintenance.view_silence"

    def get(self, request, form=None, status=200):
        silences = Silence.objects.select_related("host", "gpu", "created_by").filter(ends_at__gt=timezone.now())
        return render(request, "maintenance/silences.html", {"silences": silences, "form": form or SilenceForm()},
                      status=status)  # fmt: skip

    def post(self, request):
        if not request.user.has_perm("maintenance.add_silence"):
            raise PermissionDenied
        form = SilenceForm(request.POST)
        if not form.is_valid():
            return self.get(request, form=form, status=400)
        data = form.cleaned_data
        try:
            silence_create(host=data["host"], gpu=data["gpu"], ends_at=data["ends_at"], comment=data["comment"],
                           user=request.user)  # fmt: skip
        except InvalidInput as error:
            add_application_error(form, error)
            return self.get(request, form=form, status=400)
        messages.success(request, gettext("Silence saved."))
        return redirect("maintenance:silences")


class RuleListView(Permission, View):
    permission_required = "maintenance.view_ruleconfig"

    def get(self, request, form=None, status=200, selected=""):
        configs = {}
        for config in RuleConfig.objects.select_related("host"):
            configs.setdefault(config.rule, []).append(config)
        rules = [(rule, configs.get(key, [])) for key, rule in sorted(RULES.items())]
        return render(request, "maintenance/rules.html", {"rules": rules, "form": form or RuleConfigForm(),
                                                          "selected": selected}, status=status)  # fmt: skip

    def post(self, request):
        if not request.user.has_perm("maintenance.change_ruleconfig"):
            raise PermissionDenied
        rule = request.POST.get("rule", "")
        form = RuleConfigForm(request.POST)
        if rule not in RULES:
            form.is_valid()
            form.add_error(None, gettext("rule: unknown rule"))
            return self.get(request, form=form, status=400)
        if not form.is_valid():
            return self.get(request, form=form, status=400, selected=rule)
        data = form.cleaned_data
        try:
            rule_config_set(rule=rule, params=data["params"], enabled=data["enabled"], host=data["host"],
                            user=request.user)  # fmt: skip
        except InvalidInput as error:
            add_application_error(form, error)
            return self.get(request, form=form, status=400, selected=rule)
        messages.success(request, gettext("Thresholds of %(rule)s saved.") % {"rule": rule})
        return redirect("maintenance:rules")


class SubscriptionListView(Permission, View):
    """The signed-in user's own subscriptions: add (email or webhook, severities, rules, host), remove."""

    permission_required = "maintenance.view_ticket"

    def get(self, request, form=None, status=200):
        subscriptions = Subscription.objects.filter(user=request.user).select_related("host")
        return render(request, "maintenance/subscriptions.html", {
            "subscriptions": subscriptions, "form": form or SubscriptionForm(),
        }, status=status)  # fmt: skip

    def post(self, request):
        deleting = request.POST.get("action") == "delete"
        # Viewers read tickets but subscribe to nothing: the role matrix gives the subscription
        # permissions to technicians and admins only. Checked before the input is looked at.
        if not request.user.has_perm("maintenance.delete_subscription" if deleting else "maintenance.add_subscription"):
            raise PermissionDenied
        if deleting:
            try:
                subscription_id = int(request.POST.get("id", ""))
            except ValueError:
                messages.error(request, gettext("id: not a subscription"))
                return self.get(request, status=400)
            if not subscription_delete(user=request.user, subscription_id=subscription_id):
                messages.error(request, gettext("id: not one of your subscriptions"))
                return self.get(request, status=404)
            messages.success(request, gettext("Subscription removed."))
            return redirect("maintenance:subscriptions")
        form = SubscriptionForm(request.POST)
        if not form.is_valid():
            return self.get(request, form=form, status=400)
        data = form.cleaned_data
        try:
            subscription_create(user=request.user, channel=data["channel"], target=data["target"],
                                min_severity=data["min_severity"], rules=data["rules"], host=data["host"],
                                secret=data["secret"])  # fmt: skip
        except InvalidInput as error:
            add_application_error(form, error)
            return self.get(request, form=form, status=400)
        messages.success(request, gettext("Subscription saved."))
        return redirect("maintenance:subscriptions")
