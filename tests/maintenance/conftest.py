import pytest

from portal.fleet.models import Gpu
from tests.factories import GpuFactory, HostFactory


@pytest.fixture
def gpu(db):
    """One RTX-6000-like GPU: slowdown 90 °C, default power limit 300 W, PCIe gen 4 x16."""
    return GpuFactory(
        temp_slowdown_c=90, power_limit_default_w=300.0, pcie_link_gen_max=4, pcie_link_width_max=16,
        status=Gpu.Status.IN_SERVICE,
    )  # fmt: skip


@pytest.fixture
def host8(db):
    """A host with eight GPUs."""
    host = HostFactory()
    gpus = [
        GpuFactory(host=host, index=i, temp_slowdown_c=90, power_limit_default_w=300.0, pcie_link_gen_max=4,
                   pcie_link_width_max=16)
        for i in range(8)
    ]  # fmt: skip
    return host, gpus
