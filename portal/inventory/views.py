"""The stock, warranties and RMA cases pages: parse, check the permission, call a service or a
selector, render (a refusal shown on its form, with 400 or 409)."""

from django.contrib import messages
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext
from django.views import View

from portal.core.api import application_error_status
from portal.core.errors import ApplicationError
from portal.core.forms import add_application_error
from portal.inventory import selectors
from portal.inventory.forms import MovementForm, PartForm, RmaCaseForm, TransitionForm, WarrantyForm
from portal.inventory.models import RmaCase
from portal.inventory.services import rma, stock, warranties

PER_PAGE = 100


class Permission(PermissionRequiredMixin):
    raise_exception = True


def _refused(form, error: ApplicationError) -> int:
    add_application_error(form, error)
    return application_error_status(error)


class StockView(Permission, View):
    permission_required = "inventory.view_part"

    def get(self, request, part_form=None, movement_form=None, status=200):
        return render(request, "inventory/stock.html", {
            "parts": list(selectors.parts_list()),
            "movements": selectors.movements_recent(),
            "part_form": part_form or PartForm(prefix="part"),
            "movement_form": movement_form or MovementForm(prefix="move"),
            "can_edit": request.user.has_perm("inventory.add_stockmovement"),
            "can_add": request.user.has_perm("inventory.add_part"),
        }, status=status)  # fmt: skip

    def post(self, request):
        if request.POST.get("form") == "part":
            return self._part(request)
        return self._movement(request)

    def _part(self, request):
        if not request.user.has_perm("inventory.add_part"):
            raise PermissionDenied
        form = PartForm(request.POST, prefix="part")
        if not form.is_valid():
            return self.get(request, part_form=form, status=400)
        try:
            part = stock.part_create(**form.cleaned_data)
        except ApplicationError as error:
            return self.get(request, part_form=form, status=_refused(form, error))
        messages.success(request, gettext("Part %(name)s added.") % {"name": part.name})
        return redirect("inventory:stock")

    def _movement(self, request):
        if not request.user.has_perm("inventory.add_stockmovement"):
            raise PermissionDenied
        form = MovementForm(request.POST, prefix="move")
        if not form.is_valid():
            return self.get(request, movement_form=form, status=400)
        data = form.cleaned_data
        try:
            movement = stock.movement_record(
                part=data["part"], delta=data["delta"], reason=data["reason"], notes=data["notes"], user=request.user
            )
        except ApplicationError as error:
            return self.get(request, movement_form=form, status=_refused(form, error))
        messages.success(request, gettext("%(part)s: %(on_hand)s on hand.") % {
            "part": movement.part.name, "on_hand": movement.on_hand_after})  # fmt: skip
        return redirect("inventory:stock")


class WarrantiesView(Permission, View):
    permission_required = "inventory.view_warranty"

    def get(self, request, form=None, status=200):
        page = Paginator(selectors.warranties_list(), PER_PAGE).get_page(request.GET.get("page"))
        return render(request, "inventory/warranties.html", {
            "page": page, "form": form or WarrantyForm(), "can_add": request.user.has_perm("inventory.add_warranty"),
        }, status=status)  # fmt: skip

    def post(self, request):
        if not request.user.has_perm("inventory.add_warranty"):
            raise PermissionDenied
        form = WarrantyForm(request.POST)
        if not form.is_valid():
            return self.get(request, form=form, status=400)
        try:
            warranty = warranties.warranty_create(**form.cleaned_data, user=request.user)
        except ApplicationError as error:
            return self.get(request, form=form, status=_refused(form, error))
        messages.success(request, gettext("Warranty %(contract)s saved.") % {"contract": str(warranty)})
        return redirect("inventory:warranties")


class RmaCasesView(Permission, View):
    permission_required = "inventory.view_rmacase"

    def get(self, request, form=None, status=200):
        state = request.GET.get("state", "")
        state = state if state in RmaCase.State.values else ""
        vendor = request.GET.get("vendor", "")[:200]
        gpu = request.GET.get("gpu", "")[:96]
        cases = selectors.rma_cases(state=state or None, vendor=vendor or None, gpu=gpu or None)
        page = Paginator(cases, PER_PAGE).get_page(request.GET.get("page"))
        return render(request, "inventory/rma_cases.html", {
            "page": page, "states": RmaCase.State.choices, "state": state, "vendor": vendor, "gpu": gpu,
            "form": form or RmaCaseForm(initial={"gpu": gpu}),
            "can_open": request.user.has_perm("inventory.add_rmacase"),
        }, status=status)  # fmt: skip

    def post(self, request):
        if not request.user.has_perm("inventory.add_rmacase"):
            raise PermissionDenied
        form = RmaCaseForm(request.POST)
        if not form.is_valid():
            return self.get(request, form=form, status=400)
        try:
            case = rma.rma_case_create(**form.cleaned_data, user=request.user)
        except ApplicationError as error:
            return self.get(request, form=form, status=_refused(form, error))
        messages.success(request, gettext("RMA case %(case)s opened.") % {"case": str(case)})
        return redirect(case)


class RmaCaseView(Permission, View):
    permission_required = "inventory.view_rmacase"

    def get(self, request, pk, form=None, status=200):
        case = get_object_or_404(selectors.rma_cases(), pk=pk)
        next_states = [(s, RmaCase.State(s).label) for s in rma.FORWARD[case.state]]
        form = form or TransitionForm()
        # The menu offers the moves forward; the field still takes any state (the service says 409).
        form.fields["state"].widget.choices = next_states
        return render(request, "inventory/rma_case.html", {
            "case": case, "next_states": next_states, "form": form,
            "can_move": request.user.has_perm("inventory.change_rmacase"),
        }, status=status)  # fmt: skip

    def post(self, request, pk):
        if not request.user.has_perm("inventory.change_rmacase"):
            raise PermissionDenied
        case = get_object_or_404(selectors.rma_cases(), pk=pk)
        form = TransitionForm(request.POST)
        if not form.is_valid():
            return self.get(request, pk, form=form, status=400)
        try:
            rma.rma_case_transition(case=case, **form.values(), user=request.user)
        except ApplicationError as error:
            return self.get(request, pk, form=form, status=_refused(form, error))
        messages.success(request, gettext("RMA case %(case)s moved on.") % {"case": str(case)})
        return redirect(case)
