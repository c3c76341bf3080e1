"""factory_boy factories for the portal's models. Records default to a valid cleaning on a GPU."""

import datetime as dt
import functools

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.utils import timezone

from portal.accounts.services import user_set_role
from portal.fleet.models import Gpu, Host, MaintenanceRecord

PASSWORD = "correct horse battery staple"


@functools.cache
def password_hash() -> str:
    """Hashed once per run: the default hasher is slow on purpose, and every user shares it."""
    return make_password(PASSWORD)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.LazyFunction(password_hash)

    @factory.post_generation
    def role(self, create, extracted, **kwargs):
        if create and extracted:
            user_set_role(user=self, role=extracted)


class HostFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Host

    hostname = factory.Sequence(lambda n: f"node-{n:03d}")
    location = "Server room B2"
    rack = factory.Sequence(lambda n: f"R{n % 10}")


class GpuFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Gpu

    host = factory.SubFactory(HostFactory)
    uuid = factory.Sequence(lambda n: f"GPU-{n:08d}-0000-4000-8000-000000000000")
    serial = factory.Sequence(lambda n: f"1650724{n:06d}")
    model_name = "NVIDIA H100 80GB HBM3"
    index = factory.Sequence(lambda n: n % 8)
    memory_total_mib = 81559
    temp_slowdown_c = 87
    temp_shutdown_c = 92


class RecordFactory(factory.django.DjangoModelFactory):
    """A cleaning of one GPU a week ago; pass gpu=None and host=... for a host-wide record."""

    class Meta:
        model = MaintenanceRecord

    kind = MaintenanceRecord.Kind.CLEANING
    gpu = factory.SubFactory(GpuFactory)
    host = factory.LazyAttribute(lambda o: o.gpu.host)
    performed_at = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(days=7))
    performed_by = "Li Wei"
    dust_level = MaintenanceRecord.DustLevel.LIGHT
