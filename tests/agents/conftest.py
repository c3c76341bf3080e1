"""Agent tests: the stand-in pynvml goes first on sys.path; NVML is the only thing faked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

FAKE_NVML_DIR = Path(__file__).parent / "fakenvml"
sys.path.insert(0, str(FAKE_NVML_DIR))
sys.path.insert(1, str(Path(__file__).parent))  # for protocol_check, whatever pytest's import mode
sys.modules.pop("pynvml", None)

import pynvml  # noqa: E402  (must come after the sys.path change above)

assert Path(pynvml.__file__).parent == FAKE_NVML_DIR, "the real pynvml was imported instead of the stand-in"


@pytest.fixture
def fake_nvml():
    pynvml.fake_reset(count=2)
    yield pynvml
    pynvml.fake_reset(count=0)


@pytest.fixture
def open_client(fake_nvml):
    """open_client(**kwargs): an NvmlDeviceClient over the stand-in, closed after the test."""
    from agents.device import NvmlDeviceClient

    clients = []

    def open_(**kwargs):
        client = NvmlDeviceClient(xid_poll_ms=20, **kwargs)
        clients.append(client)
        return client

    yield open_
    for client in clients:
        client.close()
