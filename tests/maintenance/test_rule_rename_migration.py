"""Migration 0003: stored "silence" rule keys become "agent_silent" (and back)."""

import pytest

from tests.factories import HostFactory, UserFactory
from tests.migrations import migrate_to, migrate_to_newest

BEFORE = [("maintenance", "0002_subscription_rules")]
AFTER = [("maintenance", "0003_rule_agent_silent")]


@pytest.mark.django_db(transaction=True)
def test_silence_rule_keys_are_renamed_everywhere_and_back():
    from django.utils import timezone

    try:
        old = migrate_to(BEFORE)
    except Exception:
        migrate_to_newest()
        raise
    # Only maintenance is rolled back: other apps' tables are at their newest, so their rows are
    # made with today's models.
    host = HostFactory(hostname="mig-01")
    user = UserFactory(username="mig-user")
    now = timezone.now()
    fp = f"silence/host/{host.pk}"
    old.get_model("maintenance", "RuleConfig").objects.create(
        rule="silence", params={"silent_after_s": 60}, host_id=host.pk
    )
    old.get_model("maintenance", "RuleState").objects.create(key=fp, rule="silence", host_id=host.pk)
    ticket = old.get_model("maintenance", "Ticket").objects.create(
        fingerprint=fp, rule="silence", host_id=host.pk, title="Agent silent", severity="warning", first_seen=now,
        last_seen=now,
    )  # fmt: skip
    subscription = old.get_model("maintenance", "Subscription").objects.create(
        user_id=user.pk, channel="email", target="a@example.com", min_severity="info", rules=["overheat", "silence"]
    )
    old.get_model("maintenance", "Notification").objects.create(
        ticket=ticket, subscription=subscription, fingerprint=fp, event="opened", channel="email",
        target="a@example.com", attempt=1, created_at=now,
    )  # fmt: skip
    other = old.get_model("maintenance", "RuleState").objects.create(
        key="overheat/gpu/1", rule="overheat", host_id=host.pk
    )

    new = migrate_to(AFTER)
    new_fp = f"agent_silent/host/{host.pk}"
    assert new.get_model("maintenance", "RuleConfig").objects.get().rule == "agent_silent"
    assert new.get_model("maintenance", "RuleState").objects.exclude(pk=other.pk).get().key == new_fp
    assert new.get_model("maintenance", "RuleState").objects.get(pk=other.pk).key == "overheat/gpu/1"
    migrated = new.get_model("maintenance", "Ticket").objects.get()
    assert (migrated.rule, migrated.fingerprint) == ("agent_silent", new_fp)
    assert new.get_model("maintenance", "Notification").objects.get().fingerprint == new_fp
    assert new.get_model("maintenance", "Subscription").objects.get().rules == ["agent_silent", "overheat"]

    try:
        back = migrate_to(BEFORE)
        assert back.get_model("maintenance", "Ticket").objects.get().fingerprint == fp
    finally:  # every app back at its newest migration for the tests that follow
        migrate_to_newest()
