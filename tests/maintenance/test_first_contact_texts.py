"""Texts a newcomer meets on the first walk of the pages (issue 48): no "0 minutes ago"."""

import datetime as dt

import pytest
from django.utils import timezone, translation

from portal.core.templatetags.portal import ago
from portal.maintenance.services.tickets import ticket_fire

pytestmark = pytest.mark.django_db


def test_a_ticket_seen_seconds_ago_reads_just_now(client_for, viewer, gpu):
    ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now(), value=88)
    page = client_for(viewer).get(gpu.get_absolute_url()).content.decode()
    assert "last seen just now" in page and "0\xa0minutes" not in page


def test_ago_in_both_languages():
    now = timezone.now()
    assert ago(now - dt.timedelta(seconds=59), now) == "just now"
    assert ago(now - dt.timedelta(minutes=5), now) == "5\xa0minutes ago"
    with translation.override("zh-hans"):
        assert ago(now - dt.timedelta(seconds=5), now) == "刚刚"
        assert ago(now - dt.timedelta(minutes=5), now) == "5\xa0分钟前"
