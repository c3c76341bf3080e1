import pytest


@pytest.fixture(autouse=True)
def _agent_dist_dir(settings, tmp_path):
    """Each test's own AGENT_DIST_DIR (empty: no start prepared it), never the checkout's var/."""
    settings.AGENT_DIST_DIR = str(tmp_path / "agent-dist")
