"""Every row of prometheus-v1.md's status table, and what each answer leaves behind."""

import pytest

from portal.remote_write.models import IngestSource, PendingReading
from portal.remote_write.services.sources import ingest_source_revoke
from portal.remote_write.wire import snappy_compress
from tests.remote_write.helpers import FULL, body, now_ms, pending_samples, post, sample_series

pytestmark = pytest.mark.django_db


def test_stored_answers_204_and_keeps_every_sample(source):
    answer = post(source.client, source.token, body(sample_series(FULL, now_ms())))
    assert answer.status_code == 204 and answer.content == b""
    ((_, samples),) = pending_samples().items()  # one row for the GPU's reading, every sample in it
    assert len(samples) == len(FULL)
    record = IngestSource.objects.get()
    assert record.samples_stored == len(FULL) and record.last_write_at is not None


def test_a_request_sent_again_stores_nothing_new(source):
    data = body(sample_series(FULL, now_ms()))
    assert post(source.client, source.token, data).status_code == 204
    assert post(source.client, source.token, data).status_code == 204
    ((_, samples),) = pending_samples().items()
    assert len(samples) == len(FULL)
    assert IngestSource.objects.get().samples_stored == len(FULL)


def test_a_field_already_stored_is_never_changed(source):
    ts = now_ms()
    post(source.client, source.token, body(sample_series({"DCGM_FI_DEV_GPU_TEMP": 60}, ts)))
    post(source.client, source.token, body(sample_series({"DCGM_FI_DEV_GPU_TEMP": 99, "DCGM_FI_DEV_GPU_UTIL": 5}, ts)))
    assert list(pending_samples().values()) == [{"temperature_c": 60, "utilization_gpu_pct": 5}]


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (b"\x20not snappy at all", "snappy"),  # a length snappy then cannot give
        (snappy_compress(b"\x0a\x05\x0a\x03abc"), "snappy"),  # a series whose labels run past it
        (snappy_compress(b"\x0f"), "snappy"),  # a wire type protobuf does not have
        (body([]), "gzip"),  # not snappy at all
        (b"", "snappy"),
    ],
)
def test_not_snappy_or_not_a_write_request_is_400(source, data, encoding):
    answer = post(source.client, source.token, data, **{"Content-Encoding": encoding})
    assert answer.status_code == 400 and answer.json()["error"]
    assert not PendingReading.objects.exists()


@pytest.mark.parametrize("header", [None, "Bearer gfs_nope", "Basic abc", "Bearer "])
def test_missing_or_wrong_token_is_401(source, header):
    headers = {} if header is None else {"Authorization": header}
    answer = post(source.client, None, body(sample_series(FULL, now_ms())), **headers)
    assert answer.status_code == 401 and answer.json() == {"error": "missing, unknown or revoked source token"}
    assert not PendingReading.objects.exists()


def test_revoked_token_is_401(source):
    ingest_source_revoke(source=source.record)
    assert post(source.client, source.token, body(sample_series(FULL, now_ms()))).status_code == 401


def test_body_too_large_is_413(source, settings):
    settings.REMOTE_WRITE_MAX_BODY_BYTES = 200
    answer = post(source.client, source.token, body(sample_series(FULL, now_ms())))
    assert answer.status_code == 413
    assert not PendingReading.objects.exists()


def test_rate_limited_is_429_with_retry_after(source, settings):
    settings.REMOTE_WRITE_RATE_PER_S, settings.REMOTE_WRITE_RATE_BURST = 0.01, 1
    data = body(sample_series(FULL, now_ms()))
    assert post(source.client, source.token, data).status_code == 204
    answer = post(source.client, source.token, data)
    assert answer.status_code == 429 and int(answer["Retry-After"]) >= 1


def test_cannot_store_now_is_503_with_retry_after(source, monkeypatch):
    from django.db import OperationalError

    from portal.remote_write import write_view

    def busy(**kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(write_view, "remote_write_store", busy)  # the database, not the code under test
    answer = post(source.client, source.token, body(sample_series(FULL, now_ms())))
    assert answer.status_code == 503 and answer["Retry-After"] == "1"


def test_get_is_405(source):
    assert source.client.get("/api/v1/prometheus/write").status_code == 405


def test_body_past_the_limit_once_decompressed_is_413(source, settings):
    data = body(sample_series(FULL, now_ms()))
    settings.REMOTE_WRITE_MAX_BODY_BYTES = len(data) + 10  # the request fits; decompressed it does not
    answer = post(source.client, source.token, data)
    assert answer.status_code == 413 and "decompression" in answer.json()["error"]
