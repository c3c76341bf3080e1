"""Open "Agent silent" tickets: their peak is seconds of silence, and their advice names the agent's
systemd unit as shipped (gpu-agent.service)."""

from django.db import migrations


def forwards(apps, schema_editor):
    Ticket = apps.get_model("maintenance", "Ticket")
    silent = Ticket.objects.filter(rule="agent_silent")
    silent.filter(unit="").update(unit="s")
    for ticket in silent.filter(action__contains="systemctl status gpu-fleet-agent)").only("pk", "action"):
        ticket.action = ticket.action.replace("systemctl status gpu-fleet-agent)", "systemctl status gpu-agent.service)")
        ticket.save(update_fields=["action"])


class Migration(migrations.Migration):
    dependencies = [("maintenance", "0004_ticketevent_kind_scheduler")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
