"""The scheduler of `make test`'s pytest-xdist workers (tests/conftest.py installs it for
--dist loadgroup): xdist's loadscope scheduling over the units the workers wrote (a group of tests
sharing a costly fixture, or a test alone), in the workers' order, with one rule more: a worker
that has run browser tests takes no unit that uses the database afterwards (Playwright's running
event loop, tests/conftest.py), and takes the first unit without one instead."""

import json

from xdist.scheduler import LoadScopeScheduling


class SharedFixtureScheduling(LoadScopeScheduling):
    def __init__(self, config, log=None, *, units_path: str):
        super().__init__(config, log)
        self.units_path = units_path
        self.units: dict[str, dict] | None = None
        self.after_browser: set = set()

    def _unit_of(self, nodeid: str) -> dict:
        if self.units is None:  # written by every worker before it reports its collection
            with open(self.units_path) as source:
                self.units = json.load(source)
        return self.units.get(nodeid) or {"unit": nodeid, "database": True, "browser": False}

    def _split_scope(self, nodeid: str) -> str:
        return self._unit_of(nodeid)["unit"]

    def _takes(self, node, nodeids) -> bool:
        return node not in self.after_browser or not any(self._unit_of(n)["database"] for n in nodeids)

    def _assign_work_unit(self, node) -> None:
        scope = next((scope for scope, unit in self.workqueue.items() if self._takes(node, unit)), None)
        if scope is None:
            return  # idle until the queue is empty, then shut down (below)
        work_unit = self.workqueue.pop(scope)
        if any(self._unit_of(nodeid)["browser"] for nodeid in work_unit):
            self.after_browser.add(node)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items() if not done])
        if not self.workqueue:
            for other in self.nodes:
                self._reschedule(other)  # shuts down the nodes left idle by the rule
