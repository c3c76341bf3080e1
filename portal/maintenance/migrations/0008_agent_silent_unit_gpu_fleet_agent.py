""""Agent silent" tickets name the agent's one systemd unit, gpu-fleet-agent.service (the one the
portal's installer writes), so that their stored action is the rule's wording again and is shown
in the reader's language (portal.maintenance.texts.ticket_action_shown)."""

from django.db import migrations

# Every name the action has stored: the first release's, then the removed manual unit's (0005).
OLD = ("systemctl status gpu-agent.service)", "systemctl status gpu-fleet-agent)")
NEW = "systemctl status gpu-fleet-agent.service)"


def forwards(apps, schema_editor):
    Ticket = apps.get_model("maintenance", "Ticket")
    for old in OLD:
        for ticket in Ticket.objects.filter(rule="agent_silent", action__contains=old).only("pk", "action"):
            ticket.action = ticket.action.replace(old, NEW)
            ticket.save(update_fields=["action"])


class Migration(migrations.Migration):
    dependencies = [("maintenance", "0007_batch_evaluation_into_the_pipeline_ledger")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
