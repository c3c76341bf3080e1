"""The host page shows the agent's version and flags an agent older than the one the portal serves."""

import pytest

from agents import __version__
from tests.factories import HostFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("reported", "flagged"), [("0.0.1", True), (__version__, False), ("demo-backfill", False)])
def test_host_page_flags_an_older_agent(viewer, client_for, reported, flagged):
    host = HostFactory(hostname="dgx-31", agent_version=reported)
    page = client_for(viewer).get(f"/hosts/{host.hostname}/").content.decode()
    assert reported in page
    assert ('id="agent-outdated"' in page) is flagged
    if flagged:
        assert f"older than the portal&#x27;s {__version__}" in page or f"older than the portal's {__version__}" in page
