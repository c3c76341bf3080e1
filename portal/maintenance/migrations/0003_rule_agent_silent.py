"""The agent-silent rule was keyed "silence", a word the maintenance windows (Silence) also use:
rename the stored key in rule configurations, rule states, tickets, notifications and
subscriptions (fingerprints are "<rule>/gpu/<id>" or "<rule>/host/<id>")."""

from django.db import migrations
from django.db.models import Value
from django.db.models.functions import Concat, Substr

OLD, NEW = "silence", "agent_silent"


def _rename(apps, old: str, new: str) -> None:
    RuleConfig = apps.get_model("maintenance", "RuleConfig")
    RuleState = apps.get_model("maintenance", "RuleState")
    Ticket = apps.get_model("maintenance", "Ticket")
    Notification = apps.get_model("maintenance", "Notification")
    Subscription = apps.get_model("maintenance", "Subscription")
    prefix = f"{old}/"
    rest = Substr("fingerprint", len(prefix) + 1)
    RuleConfig.objects.filter(rule=old).update(rule=new)
    RuleState.objects.filter(rule=old).update(rule=new, key=Concat(Value(f"{new}/"), Substr("key", len(prefix) + 1)))
    Ticket.objects.filter(rule=old).update(rule=new, fingerprint=Concat(Value(f"{new}/"), rest))
    Notification.objects.filter(fingerprint__startswith=prefix).update(fingerprint=Concat(Value(f"{new}/"), rest))
    for subscription in Subscription.objects.all():
        if old in subscription.rules:
            subscription.rules = sorted({new if rule == old else rule for rule in subscription.rules})
            subscription.save(update_fields=["rules"])


def forwards(apps, schema_editor):
    _rename(apps, OLD, NEW)


def backwards(apps, schema_editor):
    _rename(apps, NEW, OLD)


class Migration(migrations.Migration):
    dependencies = [("maintenance", "0002_subscription_rules")]

    operations = [migrations.RunPython(forwards, backwards)]
