"""The rules as a stage of the pipeline: one pass takes every pending batch and judges them
together, in reading order per GPU; a batch is judged once (the ledger); the sweep finds what no
task reached."""

import datetime as dt
import json

import pytest
from django.utils import timezone

from portal.maintenance.models import RuleState, Ticket
from portal.telemetry.models import StageDone
from portal.telemetry.pipeline import pipeline_run, pipeline_sweep
from portal.telemetry.schemas import BatchIn
from portal.telemetry.services.ingest import reading_batch_ingest
from portal.telemetry.services.tokens import host_token_issue
from tests.telemetry.batches import make_batch, make_gpu, make_reading

UUIDS = [f"GPU-0000000{i}-6b9b-4b4e-9d0a-6f1c1a2b3c4d" for i in range(2)]


@pytest.fixture
def store(db):
    """store(hostname, start, temps) -> batch pk: one batch, 10 s apart per reading, both GPUs."""
    hosts = {}

    def send(hostname, start, temps):
        if hostname not in hosts:
            hosts[hostname] = host_token_issue(hostname=hostname, label="t", create_host=True).record.host
        uuids = [u.replace("6f1c", hostname[-4:].rjust(4, "0")) for u in UUIDS]
        batch = make_batch(hostname, readings=0, now=start)
        batch["gpus"] = [make_gpu(u, index=i) for i, u in enumerate(uuids)]
        batch["readings"] = [
            make_reading(u, start + dt.timedelta(seconds=10 * k), temperature_c=t)
            for k, t in enumerate(temps)
            for u in uuids
        ]
        now = start + dt.timedelta(seconds=10 * len(temps))
        return reading_batch_ingest(host=hosts[hostname], batch=BatchIn.model_validate_json(json.dumps(batch)), now=now)

    return send


def test_one_pass_takes_every_pending_batch_in_order(store):
    t0 = timezone.now() - dt.timedelta(hours=1)
    pks = []
    for k in range(3):  # 3 batches per host × 2 hosts, 60 s of 88 °C each: fires in the third minute
        for host in ("dgx-0001", "dgx-0002"):
            pks.append(store(host, t0 + dt.timedelta(minutes=k), [88] * 6).batch_pk)
    result = pipeline_run()
    assert sorted(result.batches) == sorted(pks) and result.readings == 6 * 2 * 6
    assert result.finished["rules"] == 6
    assert Ticket.objects.filter(rule="overheat", gpu__isnull=False).count() == 4
    assert StageDone.objects.filter(stage="rules").count() == 6
    assert pipeline_run().batches == []


def test_a_run_takes_every_pending_batch_and_a_second_run_changes_nothing(store):
    t0 = timezone.now() - dt.timedelta(hours=1)
    first = store("dgx-0001", t0, [88] * 6).batch_pk
    second = store("dgx-0001", t0 + dt.timedelta(minutes=1), [88] * 6).batch_pk
    result = pipeline_run()
    assert sorted(result.batches) == [first, second] and result.finished["rules"] == 2
    states = list(RuleState.objects.order_by("key").values_list("key", "state", "last_ts"))
    assert pipeline_run().batches == []
    assert list(RuleState.objects.order_by("key").values_list("key", "state", "last_ts")) == states


def _states(hostname):
    rows = RuleState.objects.filter(host__hostname=hostname).values_list(
        "rule", "gpu__index", "state", "since_ts", "last_ts", "peak", "data"
    )
    # An ok state's last reading time is bookkeeping written only with another change: left out.
    rows = [row[:4] + (None if row[2] == "ok" else row[4],) + row[5:] for row in rows]
    return sorted(rows, key=lambda row: (row[0], row[1] if row[1] is not None else -1))


def _tickets(hostname):
    rows = Ticket.objects.filter(host__hostname=hostname, gpu__isnull=False).values_list(
        "rule", "gpu__index", "state", "occurrences", "peak_value", "severity"
    )
    return sorted(rows, key=lambda row: (row[0], row[1] if row[1] is not None else -1))


def test_a_pass_equals_batch_by_batch(store):
    """The same readings judged in one pass or batch by batch give the same states and tickets."""
    t0 = timezone.now() - dt.timedelta(hours=2)
    temps = [88] * 18 + [91] * 6 + [60] * 72 + [88] * 24  # fires, escalates, clears, fires again
    for k in range(0, len(temps), 6):
        store("dgx-0001", t0 + dt.timedelta(minutes=k // 6), temps[k : k + 6])
    pipeline_run()
    for k in range(0, len(temps), 6):
        store("dgx-0002", t0 + dt.timedelta(minutes=k // 6), temps[k : k + 6])
        assert len(pipeline_run().batches) == 1
    assert _states("dgx-0001") == _states("dgx-0002")
    assert _tickets("dgx-0001") == _tickets("dgx-0002")
    assert {row[0] for row in _tickets("dgx-0001")} >= {"overheat"}
    # Grouping is judged on the states at the end of a pass: the host ticket exists either way, but
    # one pass that saw the first firing end and the second begin counts one occurrence, not two.
    for hostname in ("dgx-0001", "dgx-0002"):
        assert Ticket.objects.get(host__hostname=hostname, gpu__isnull=True, rule="overheat").state == "open"


def test_sweep_evaluates_batches_no_task_reached(store):
    t0 = timezone.now() - dt.timedelta(hours=1)
    pk = store("dgx-0001", t0, [88] * 13).batch_pk  # stored, but the task never ran (broker down)
    assert not StageDone.objects.filter(batch_pk=pk).exists()
    assert pipeline_sweep().batches == [pk]
    assert Ticket.objects.filter(rule="overheat", gpu__isnull=False).count() == 2
    assert pipeline_sweep().batches == []


@pytest.fixture
def no_hooks(monkeypatch):
    """Stored batches wait for a pass (in a test that commits, the hooks would run one at once)."""
    from portal.telemetry import hooks

    monkeypatch.setattr(hooks.batch_stored, "_subscribers", [])


@pytest.mark.django_db(transaction=True)
def test_a_pass_judges_before_it_takes_the_write_lock(store, no_hooks, monkeypatch):
    from portal.maintenance.services import evaluate

    t0 = timezone.now() - dt.timedelta(hours=1)
    pks = [store("dgx-0001", t0 + dt.timedelta(minutes=k), [88] * 6).batch_pk for k in range(2)]
    assert sorted(pipeline_run().batches) == pks
    judged, judge = [], evaluate._judge
    monkeypatch.setattr(evaluate, "_judge", lambda **kwargs: judged.append(kwargs) or judge(**kwargs))
    pk = store("dgx-0001", t0 + dt.timedelta(minutes=2), [88] * 6).batch_pk
    result = pipeline_run()
    # judged once: the states it read (and the rules changed in memory) were nobody else's
    assert result.batches == [pk] and result.readings == 2 * 6 and len(judged) == 1
    assert Ticket.objects.filter(rule="overheat", gpu__isnull=False).count() == 2
    assert StageDone.objects.filter(stage="rules").count() == 3
    assert pipeline_run().batches == []


@pytest.mark.django_db(transaction=True)
def test_a_state_written_meanwhile_makes_the_pass_judge_again_under_the_lock(store, no_hooks, monkeypatch):
    from portal.maintenance.services import evaluate

    t0 = timezone.now() - dt.timedelta(hours=1)
    store("dgx-0001", t0, [88] * 6)
    assert pipeline_run().batches  # overheat pending for both GPUs
    pk = store("dgx-0001", t0 + dt.timedelta(minutes=1), [88] * 6).batch_pk
    judged, judge = [], evaluate._judge

    def judge_then_reset(**kwargs):
        result = judge(**kwargs)
        if not judged:  # a maintenance record resets the states after the pass read them
            RuleState.objects.filter(rule="overheat").update(state="ok", since_ts=None)
        judged.append(result)
        return result

    monkeypatch.setattr(evaluate, "_judge", judge_then_reset)
    assert pipeline_run().batches == [pk]
    assert len(judged) == 2
    # judged again from the reset states: pending since the second batch, not since the first
    states = RuleState.objects.filter(rule="overheat", gpu__isnull=False)
    assert states.count() == 2
    assert all(state.since_ts >= t0 + dt.timedelta(seconds=59) for state in states)  # times kept to the ms
