"""Batches recorded on real GPUs, validated against the protocol.

Record one on a GPU host with:
    python -m agents --once --stdout > tests/agents/fixtures/real_gpu_<model>.json
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from protocol_check import protocol_problems

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("real_gpu_*.json"))


@pytest.mark.skipif(
    not FIXTURES,
    reason="no real-GPU fixture yet: record tests/agents/fixtures/real_gpu_*.json "
    "with `python -m agents --once --stdout` on a GPU host",
)
@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_real_gpu_batch_matches_the_protocol(path):
    batch = json.loads(path.read_text())
    assert protocol_problems(batch) == []
    assert batch["gpus"], "a first batch carries the inventory"
    assert {r["gpu_uuid"] for r in batch["readings"]} <= {g["uuid"] for g in batch["gpus"]}
    # A real GPU supports at least these; all null would mean the NVML mapping is broken.
    for reading in batch["readings"]:
        assert reading["temperature_c"] is not None and reading["power_w"] is not None
        assert reading["memory_used_mib"] is not None
