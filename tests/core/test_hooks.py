"""portal/core/hooks.py: the one shape of the hooks apps own (telemetry, fleet, maintenance,
diagnostics) and higher apps subscribe to."""

from __future__ import annotations

import logging

import pytest

from portal.core.hooks import Hook


def test_subscribers_run_in_order_then_as_they_came_and_a_name_again_replaces():
    hook, calls = Hook("t.hook"), []
    hook.subscribe("b")(lambda **kw: calls.append(("b", kw)) or "b")
    hook.subscribe("late", order=5)(lambda **kw: calls.append(("late", kw)) or "late")
    hook.subscribe("a")(lambda **kw: calls.append(("a", kw)) or "a")
    hook.subscribe("b")(lambda **kw: calls.append(("b2", kw)) or "b2")  # replaces b, in b's stead at the end

    assert hook.call(x=1) == ["a", "b2", "late"]
    assert [name for name, _ in calls] == ["a", "b2", "late"] and all(kw == {"x": 1} for _, kw in calls)
    hook.unsubscribe("a")
    assert [entry.name for entry in hook] == ["b", "late"] and bool(hook)
    assert not Hook("t.empty")


def test_an_isolated_hook_logs_a_failing_subscriber_and_runs_the_others(caplog):
    hook, calls = Hook("t.isolated", isolated=True), []

    def broken(**kw):
        raise RuntimeError("broker down")

    hook.subscribe("broken")(broken)
    hook.subscribe("fine")(lambda **kw: calls.append(kw) or "ok")
    with caplog.at_level(logging.ERROR, logger="portal.core.hooks"):
        assert hook.call(pk=7) == ["ok"]
    assert calls == [{"pk": 7}]
    assert "t.isolated: subscriber broken failed" in caplog.text


def test_a_hook_that_is_not_isolated_raises_what_a_subscriber_raises():
    hook = Hook("t.guard")

    def refuse(**kw):
        raise PermissionError("not yet")

    hook.subscribe("guard")(refuse)
    with pytest.raises(PermissionError, match="not yet"):
        hook.call(gpu=None)
