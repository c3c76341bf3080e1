"""portal/core/policies.py: a decision a lower app leaves to a higher one has exactly one owner, and
the apps that own fleet's policies are the ones fleet's hooks module names."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.core.policies import Policy
from portal.fleet import hooks as fleet_hooks


def test_without_an_owner_the_default_answers_and_the_owner_answers_once_provided():
    policy = Policy("t.limit", default=lambda *, n: n)
    assert (policy.ask(n=3), policy.owner, policy.provided) == (3, None, False)
    policy.provide("higher")(lambda *, n: n * 10)
    assert (policy.ask(n=3), policy.owner, policy.provided) == (30, "higher", True)
    policy.provide("higher")(lambda *, n: n * 100)  # the same owner again replaces its answer
    assert policy.ask(n=3) == 300
    policy.withdraw("higher")
    assert policy.ask(n=3) == 3


def test_a_second_owner_is_refused_and_the_first_answer_stands():
    policy = Policy("t.gate", default=lambda: "default")
    policy.provide("diagnostics")(lambda: "diagnostics")
    with pytest.raises(ImproperlyConfigured, match="t.gate is provided by diagnostics; other cannot"):
        policy.provide("other")(lambda: "other")
    assert policy.ask() == "diagnostics"


def test_fleets_policies_have_the_owners_its_hooks_module_lists():
    assert fleet_hooks.return_to_service_gate.owner == "diagnostics"
    assert fleet_hooks.care_limits.owner == "maintenance"
    documented = fleet_hooks.__doc__
    assert "`return_to_service_gate`, owned by diagnostics" in documented
    assert "`care_limits`, owned by maintenance" in documented
