"""The Slurm adapter's parsing and argument handling (no cluster needed) and the settings check."""

import datetime as dt

import pytest
from django.core.checks import run_checks

from portal.scheduler.adapters import (
    NodeUnknown,
    SchedulerSilent,
    SlurmCli,
    clean_reason,
    expand_hostlist,
    gpu_indices,
    jobs_from_json,
    node_from_json,
    node_state_words,
)


def test_reason_is_one_line_without_control_characters_and_cut_to_fit():
    assert clean_reason("a\nb\r\tc\x00d\x1b[31m") == "a b c d [31m"
    assert clean_reason('say "hi"') == "say 'hi'"
    long = clean_reason("x" * 500)
    assert len(long) == 200 and long.endswith("…")


@pytest.mark.parametrize(
    ("base", "flags", "words"),
    [
        ("idle", [], "idle"),
        ("IDLE", ["DRAIN"], "drained"),
        ("mixed", ["DRAIN"], "draining"),
        (["ALLOCATED", "DRAIN"], None, "draining"),  # 23.02+: one list
        (["DOWN", "DRAIN", "NOT_RESPONDING"], None, "down+drain+not_responding"),
        (["MIXED", "DRAIN"][0], ["DRAIN"], "draining"),
        ([], None, "unknown"),
    ],
)
def test_state_words(base, flags, words):
    assert node_state_words(base, flags) == words


def test_hostlists_and_gpu_indices():
    assert expand_hostlist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand_hostlist("vm") == ["vm"]
    assert gpu_indices("gpu:2(IDX:0,3)") == [0, 3]
    assert gpu_indices("gpu:h200:4(IDX:0-2,5)") == [0, 1, 2, 5]
    assert gpu_indices("gpu:1") == []


def test_jobs_in_the_22_05_and_the_newer_shape():
    jobs = [
        {"job_id": 7, "user_name": "ann", "name": "a", "job_state": "RUNNING", "nodes": "gpu[01-02]",
         "gres_detail": ["gpu:1(IDX:0)", "gpu:2(IDX:2-3)"], "start_time": 1_700_000_000},
        {"job_id": 8, "user_name": "bo", "name": "b", "job_state": ["RUNNING"], "nodes": "gpu02",
         "gres_detail": ["gpu:1(IDX:1)"], "start_time": {"set": True, "infinite": False, "number": 1_700_000_060}},
        {"job_id": 9, "user_name": "cy", "name": "c", "job_state": ["PENDING"], "nodes": "gpu02"},
    ]  # fmt: skip
    found = jobs_from_json(jobs, "gpu02")
    assert [(j.id, j.user, j.gpus) for j in found] == [(7, "ann", [2, 3]), (8, "bo", [1])]
    assert found[1].start == dt.datetime.fromtimestamp(1_700_000_060, tz=dt.UTC)


def test_node_lookup():
    nodes = [{"name": "gpu01", "state": "mixed", "state_flags": ["DRAIN"], "reason": "gpu-fleet #3: x"}]
    assert node_from_json(nodes, "gpu01").state == "draining"
    with pytest.raises(NodeUnknown):
        node_from_json(nodes, "gpu02")


def _commands(tmp_path, **scripts: str) -> SlurmCli:
    """A SlurmCli whose commands are the given shell bodies (a command not given is missing)."""
    tmp_path.mkdir(exist_ok=True)
    for command, body in scripts.items():
        script = tmp_path / command
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    return SlurmCli(bin_dir=str(tmp_path), timeout=0.5)


FORGOTTEN = "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1"


def test_a_job_slurm_forgot_is_unknown_but_silence_is_slurm_down(tmp_path):
    no_accounting = "echo 'sacct: error: Slurm accounting storage is disabled' >&2; exit 1"
    assert _commands(tmp_path, scontrol=FORGOTTEN, sacct=no_accounting).job_info(7) is None
    assert _commands(tmp_path, scontrol=FORGOTTEN, sacct="exit 0").job_info(7) is None  # sacct: nothing
    for scripts in ({"scontrol": "sleep 5"}, {"scontrol": FORGOTTEN, "sacct": "sleep 5"}):
        with pytest.raises(SchedulerSilent):
            _commands(tmp_path / str(len(scripts)), **scripts).job_info(7)
    with pytest.raises(SchedulerSilent):  # no Slurm commands at all
        SlurmCli(bin_dir=str(tmp_path / "none")).job_info(7)


def check_ids(settings, **values) -> dict[str, str]:
    for name, value in values.items():
        setattr(settings, name, value)
    return {e.id: e.msg for e in run_checks() if e.id.startswith("scheduler.")}


def test_settings_that_cannot_work_stop_the_portal(settings):
    assert check_ids(settings, SLURM_ENABLED=True, SLURM_MODE="cli") == {}
    errors = check_ids(settings, SLURM_MODE="rest", SLURM_REST_URL="", SLURM_REST_USER="u", SLURM_REST_TOKEN="")
    assert "SLURM_REST_URL" in errors["scheduler.E002"] and "SLURM_REST_TOKEN" in errors["scheduler.E002"]
    assert "SLURM_REST_USER" not in errors["scheduler.E002"]
    assert "scheduler.E003" in check_ids(settings, SLURM_REST_URL="ftp://x", SLURM_REST_TOKEN="t")
    assert "SLURM_MODE" in check_ids(settings, SLURM_MODE="ssh")["scheduler.E001"]
    assert (
        "SLURM_DRAIN_SEVERITY" in check_ids(settings, SLURM_MODE="cli", SLURM_DRAIN_SEVERITY="high")["scheduler.E004"]
    )
    assert check_ids(settings, SLURM_ENABLED=False, SLURM_MODE="ssh") == {}  # off: nothing to check


@pytest.mark.parametrize(
    "url",
    [
        "http://slurm-head:6820",  # the JWT in clear across the network
        "http://10.0.0.5:6820",
        "http://127.0.0.1.evil.example:6820",  # not loopback, whatever its first label says
        "http://localhost@slurm-head:6820",
        "https://gpufleet:secret@slurm-head",
        "ftp://slurm-head",
        "https://",
        "http://[::1:6820",
    ],
)
def test_a_rest_url_that_would_leak_the_token_stops_the_portal(settings, url):
    errors = check_ids(settings, SLURM_ENABLED=True, SLURM_MODE="rest", SLURM_REST_URL=url, SLURM_REST_USER="u",
                       SLURM_REST_TOKEN="t")  # fmt: skip
    assert "SLURM_REST_URL" in errors["scheduler.E003"], errors


@pytest.mark.parametrize(
    "url",
    ["https://slurm-head:6820", "https://slurm-head/slurmrestd/", "http://127.0.0.1:6820", "http://127.8.0.1",
     "http://[::1]:6820", "http://localhost:6820", "HTTPS://SLURM-HEAD"],
)  # fmt: skip
def test_https_or_loopback_rest_urls_are_accepted(settings, url):
    assert check_ids(settings, SLURM_ENABLED=True, SLURM_MODE="rest", SLURM_REST_URL=url, SLURM_REST_USER="u",
                     SLURM_REST_TOKEN="t") == {}  # fmt: skip


@pytest.mark.parametrize(
    "url, error",
    [(None, "scheduler.E002"), ("http://slurm-head:6820", "scheduler.E003")],
    ids=["no URL", "plain http across the network"],
)
def test_the_portal_refuses_to_start_with_them(tmp_path, url, error):
    import os
    import subprocess
    import sys

    env = {**os.environ, "DEBUG": "true", "SLURM_MODE": "rest",
           "DJANGO_SETTINGS_MODULE": "portal.settings", "VAR_DIR": str(tmp_path),
           "SLURM_REST_USER": "gpufleet", "SLURM_REST_TOKEN": "jwt"}  # fmt: skip
    env.pop("SLURM_REST_URL", None)
    if url:
        env["SLURM_REST_URL"] = url
    done = subprocess.run([sys.executable, "manage.py", "serve"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert error in done.stderr and "SLURM_REST_URL" in done.stderr
