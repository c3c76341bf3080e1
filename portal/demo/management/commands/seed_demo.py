"""Seed a small demo fleet (3 hosts × 4 GPUs with some history) and demo users.

Idempotent: hosts that exist are left alone, users keep their passwords, so `make demo` can run
it every time and prints the same credentials.
"""

import datetime as dt
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from portal.accounts.roles import ROLE_ADMIN, ROLE_TECHNICIAN, ROLE_VIEWER
from portal.accounts.services import user_set_role
from portal.fleet import services
from portal.fleet.models import Host, MaintenanceRecord

Kind = MaintenanceRecord.Kind

DEMO_HOSTS = [
    ("dgx-01", "Server room B2", "R3", "Vision group", "NVIDIA H100 80GB HBM3", 700.0, 81760),
    ("dgx-02", "Server room B2", "R4", "NLP group", "NVIDIA A100-SXM4-80GB", 400.0, 81920),
    ("ws-lab-03", "Lab 3.14, under the desk", "", "Student workstation", "NVIDIA GeForce RTX 4090", 450.0, 24564),
]
DEMO_USERS = [("admin", ROLE_ADMIN), ("tech", ROLE_TECHNICIAN), ("viewer", ROLE_VIEWER)]


class Command(BaseCommand):
    help = "Create demo users and a small demo fleet with some maintenance history."

    def handle(self, *args, **options):
        credentials = self._users()
        with transaction.atomic():
            created = self._fleet()
        self.stdout.write(f"Demo fleet: {created} host(s) created, {Host.objects.count()} in all.")
        self.stdout.write("Demo users (username / password):")
        for username, password in credentials:
            self.stdout.write(f"  {username:8} {password}")

    def _users(self):
        """One user per role; passwords are kept in var/ so every demo run prints the same ones."""
        store = Path(settings.VAR_DIR) / "demo-credentials.txt"
        lines = store.read_text().splitlines() if store.exists() else []
        known = dict(line.split(" ", 1) for line in lines if " " in line)
        user_model = get_user_model()
        result = []
        for username, role in DEMO_USERS:
            password = known.get(username) or f"{username}-{secrets.token_urlsafe(6)}"
            user, created = user_model.objects.get_or_create(username=username)
            if created or not user.check_password(password):
                user.set_password(password)
                user.save()
            user_set_role(user=user, role=role)
            result.append((username, password))
        store.parent.mkdir(parents=True, exist_ok=True)
        store.write_text("".join(f"{u} {p}\n" for u, p in result))
        store.chmod(0o600)
        return result

    def _fleet(self) -> int:
        now = timezone.now()
        created = 0
        for number, (hostname, location, rack, owner, model, power, memory) in enumerate(DEMO_HOSTS):
            if Host.objects.filter(hostname=hostname).exists():
                continue
            created += 1
            host = services.host_create(hostname=hostname, location=location, rack=rack, owner=owner, contact="")
            host.driver_version = "570.133.20" if number < 2 else "550.54.15"
            host.save(update_fields=["driver_version"])
            gpus = [
                services.gpu_create(
                    uuid=f"GPU-demo{number:02d}{index:02d}-0000-4000-8000-{number:06d}{index:06d}",
                    serial=f"16507240{number:02d}{index:03d}",
                    model_name=model,
                    host=host,
                    index=index,
                    pci_bus_id=f"00000000:{0x1B + index * 0x20:02X}:00.0",
                    memory_total_mib=memory,
                    power_limit_default_w=power,
                    temp_slowdown_c=87 if number < 2 else 90,
                    temp_shutdown_c=92 if number < 2 else 95,
                    install_date=(now - dt.timedelta(days=400 + 100 * number)).date(),
                    warranty_end=(now + dt.timedelta(days=700 - 500 * number)).date(),
                )
                for index in range(4)
            ]
            # A history that makes the pages tell something: host 0 clean and current, host 1 due,
            # the workstation never cleaned and with a repair.
            cleaned_days_ago = [20, 85, None][number]
            if cleaned_days_ago is not None:
                services.record_create(
                    kind=Kind.CLEANING, host=host, performed_at=now - dt.timedelta(days=cleaned_days_ago),
                    performed_by="Li Wei", dust_level="moderate", airflow_ok=True,
                    notes="Blew out the intake filters and heatsinks with compressed air.",
                )  # fmt: skip
            services.record_create(
                kind=Kind.DRIVER_UPDATE, host=host, performed_at=now - dt.timedelta(days=60 + 40 * number),
                performed_by="agent", from_version="535.161.08", to_version=host.driver_version,
            )  # fmt: skip
            services.record_create(
                kind=Kind.CONNECTION_CHECK, host=host, performed_at=now - dt.timedelta(days=150 + 30 * number),
                performed_by="Li Wei", cables_ok=True, risers_ok=True, power_ok=number != 2,
                notes="" if number != 2 else "One 12VHPWR connector not fully seated; re-seated.",
            )  # fmt: skip
            services.record_create(
                kind=Kind.BACKUP, host=host, performed_at=now - dt.timedelta(days=2 + 6 * number),
                performed_by="backup job", backup_content="checkpoints", destination=f"nas01:/backups/{hostname}",
                size_gb="812.50", verified=number != 1,
            )  # fmt: skip
            services.record_create(
                kind=Kind.THERMAL_PASTE, host=host, gpu=gpus[1], performed_at=now - dt.timedelta(days=120),
                performed_by="Zhang Min", part_used="Arctic MX-6",
            )  # fmt: skip
            if number == 2:
                services.record_create(
                    kind=Kind.REPAIR, host=host, gpu=gpus[3], performed_at=now - dt.timedelta(days=30),
                    performed_by="Vendor depot", vendor="ACME GPU Service", rma_number="RMA-2026-0411",
                    parts="Fan assembly", cost="180.00", downtime_hours="72", outcome="fixed",
                    notes="Fan bearing worn: loud at 60 % duty, replaced under warranty.",
                )  # fmt: skip
        return created
