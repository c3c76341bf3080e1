"""Which fields each kind of maintenance record uses, and which of them it requires.

One table drives the forms, the validation in services and the timeline on the pages, so a new
kind is added here and nowhere else.
"""

from dataclasses import dataclass

from portal.fleet.models import MaintenanceRecord

Kind = MaintenanceRecord.Kind


@dataclass(frozen=True)
class KindSpec:
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()

    @property
    def fields(self) -> tuple[str, ...]:
        return self.required + self.optional


KIND_SPECS: dict[str, KindSpec] = {
    Kind.CLEANING: KindSpec(required=("dust_level",), optional=("airflow_ok",)),
    Kind.THERMAL_PASTE: KindSpec(optional=("part_used",)),
    Kind.FAN_REPLACEMENT: KindSpec(required=("part_used",)),
    Kind.DRIVER_UPDATE: KindSpec(required=("to_version",), optional=("from_version",)),
    Kind.FIRMWARE_UPDATE: KindSpec(required=("to_version",), optional=("from_version",)),
    Kind.CONNECTION_CHECK: KindSpec(required=("cables_ok", "risers_ok", "power_ok")),
    Kind.INSPECTION: KindSpec(required=("passed",)),
    Kind.REPAIR: KindSpec(required=("vendor", "outcome"), optional=("rma_number", "parts", "cost", "downtime_hours")),
    Kind.BACKUP: KindSpec(required=("backup_content", "destination", "verified"), optional=("size_gb", "verified_at")),
    Kind.OTHER: KindSpec(),
}

COMMON_FIELDS = ("performed_at", "performed_by", "notes")

# Every kind-specific column, whichever kind uses it.
ALL_KIND_FIELDS: tuple[str, ...] = tuple(dict.fromkeys(f for spec in KIND_SPECS.values() for f in spec.fields))

# Kinds that only make sense on a whole host (a backup is of the host's data, not of one GPU).
HOST_ONLY_KINDS = frozenset({Kind.BACKUP})
