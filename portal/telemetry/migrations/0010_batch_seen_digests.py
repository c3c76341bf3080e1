"""BatchSeen keeps an 8-byte digest of each batch id (services/batches.py) instead of the 16-byte
id: the keys already kept are rewritten as digests. Backwards, the digests cannot become ids
again: the keys go (a batch sent again over an hour after it arrived would then be stored again)."""

import hashlib

from django.db import migrations

OLD_BYTES, NEW_BYTES = 16, 8


def _digests(apps, schema_editor):
    BatchSeen = apps.get_model("telemetry", "BatchSeen")
    for row in BatchSeen.objects.iterator(chunk_size=1000):
        blob = bytes(row.ids)
        row.ids = b"".join(
            hashlib.blake2b(blob[at : at + OLD_BYTES], digest_size=NEW_BYTES).digest()
            for at in range(0, len(blob), OLD_BYTES)
        )
        row.save(update_fields=["ids"])


def _forget(apps, schema_editor):
    apps.get_model("telemetry", "BatchSeen").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0009_rollup_chunks")]

    operations = [migrations.RunPython(_digests, _forget)]
