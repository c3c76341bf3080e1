"""The scheduler of `make test`'s workers (tests/xdist_units.py), driven as xdist's controller
drives it, with stand-ins for the worker processes: a group runs on one worker, and a worker that
has run browser tests is never given a test that uses the database."""

import json
import types

from tests.conftest import BROWSER_GROUP, xdist_group
from tests.xdist_units import SharedFixtureScheduling

BROWSER = [f"tests/browser/test_b.py::test_{n}" for n in range(4)]
SLURM = [f"tests/scheduler/test_s.py::test_{n}" for n in range(3)]
WITH_DATABASE = [f"tests/fleet/test_f.py::test_{n}" for n in range(6)]
WITHOUT_DATABASE = [f"tests/agents/test_a.py::test_{n}" for n in range(3)]
COLLECTION = BROWSER + SLURM + WITH_DATABASE + WITHOUT_DATABASE


class Worker:
    def __init__(self, name: str):
        self.name, self.shutting_down, self.sent = name, False, []
        self.gateway = types.SimpleNamespace(id=name)

    def send_runtest_some(self, indexes):
        self.sent.extend(COLLECTION[index] for index in indexes)

    def shutdown(self):
        self.shutting_down = True


def scheduler(tmp_path) -> SharedFixtureScheduling:
    units = {nodeid: {"unit": "browser:0", "database": False, "browser": True} for nodeid in BROWSER}
    units |= {nodeid: {"unit": "slurm:1", "database": True, "browser": False} for nodeid in SLURM}
    units |= {nodeid: {"unit": nodeid, "database": True, "browser": False} for nodeid in WITH_DATABASE}
    units |= {nodeid: {"unit": nodeid, "database": False, "browser": False} for nodeid in WITHOUT_DATABASE}
    path = tmp_path / "units.json"
    path.write_text(json.dumps(units))
    config = types.SimpleNamespace(
        getvalue=lambda name: ["2*popen"] if name == "tx" else None,
        option=types.SimpleNamespace(loadscopereorder=False),
    )
    return SharedFixtureScheduling(config, units_path=str(path))


def run_to_the_end(sched: SharedFixtureScheduling, workers: list[Worker]) -> None:
    """Each worker finishes its tests one by one, in turn, as the controller hears of them."""
    done = dict.fromkeys(workers, 0)
    while any(done[worker] < len(worker.sent) for worker in workers):
        for worker in workers:
            if done[worker] < len(worker.sent):
                index = sched.registered_collections[worker].index(worker.sent[done[worker]])
                done[worker] += 1
                sched.mark_test_complete(worker, index)


def test_groups_stay_on_one_worker_and_the_browsers_worker_takes_no_database_test(tmp_path):
    sched = scheduler(tmp_path)
    workers = [Worker("gw0"), Worker("gw1")]
    for worker in workers:
        sched.add_node(worker)
        sched.add_node_collection(worker, COLLECTION)
    sched.schedule()
    run_to_the_end(sched, workers)

    browser_worker = next(worker for worker in workers if BROWSER[0] in worker.sent)
    other = next(worker for worker in workers if worker is not browser_worker)
    assert browser_worker.sent[: len(BROWSER)] == BROWSER  # the group first, whole, in order
    assert not set(BROWSER) & set(other.sent)
    assert not set(WITH_DATABASE + SLURM) & set(browser_worker.sent)
    assert set(SLURM) <= set(other.sent)
    # Every test ran exactly once, and every worker was let go.
    assert sorted(browser_worker.sent + other.sent) == sorted(COLLECTION)
    assert all(worker.shutting_down for worker in workers)


def _item(nodeid: str, fixturenames: list[str], markers: tuple[str, ...] = ()):
    return types.SimpleNamespace(
        nodeid=nodeid, fixturenames=fixturenames, _fixtureinfo=None,
        get_closest_marker=lambda name: types.SimpleNamespace(name=name) if name in markers else None,
    )  # fmt: skip


def test_a_browser_test_that_asks_for_its_fixtures_while_running_is_in_the_browser_group():
    """The accessibility test reads the page walk with request.getfixturevalue: by its fixtures
    alone it would run on another worker, starting Chromium and the walk's portal again there."""
    assert xdist_group(_item("tests/browser/test_a.py::test_walk", ["request"], ("browser",))) == BROWSER_GROUP
    assert xdist_group(_item("tests/browser/test_c.py::test_csp", ["site_walk", "browser"])) == BROWSER_GROUP
    assert xdist_group(_item("tests/accounts/test_l.py::test_ldap", ["directory"])) == "ldap"
    assert xdist_group(_item("tests/fleet/test_f.py::test_page", ["client", "db"])) is None
