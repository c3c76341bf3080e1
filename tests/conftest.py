"""Fixtures every portal test can use: the four standard actors, logged-in clients, a private
MEDIA_ROOT, and the external services (Redis, PostgreSQL) that later tests need."""

import collections
import contextlib
import functools
import os
import re
import sqlite3

import pytest
from django.test import Client

from portal.accounts.roles import ROLE_ADMIN, ROLE_TECHNICIAN, ROLE_VIEWER
from tests.factories import UserFactory

pytest_plugins = ["tests.schemathesis_lazy"]  # Schemathesis' tests built when they run, not collected


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def skip_or_fail(message: str):
    """Missing infrastructure: a skip on a laptop, a failure in CI (where it must be there)."""
    if in_ci():
        pytest.fail(f"{message} (CI=true, so this is a failure, not a skip)")
    pytest.skip(message)


# --- the standard actors -------------------------------------------------------------------


@pytest.fixture
def admin(db):
    return UserFactory(username="alice", role=ROLE_ADMIN)


@pytest.fixture
def technician(db):
    return UserFactory(username="bob", role=ROLE_TECHNICIAN)


@pytest.fixture
def viewer(db):
    return UserFactory(username="charlie", role=ROLE_VIEWER)


@pytest.fixture
def outsider(db):
    """Logged in, but with no role at all."""
    return UserFactory(username="mallory")


@pytest.fixture
def actors(admin, technician, viewer, outsider):
    return {"admin": admin, "technician": technician, "viewer": viewer, "outsider": outsider}


@pytest.fixture
def client_for(db):
    """client_for(user) -> a test Client logged in as that user (None: anonymous)."""

    def make(user=None) -> Client:
        client = Client()
        if user is not None:
            client.force_login(user)
        return client

    return make


@pytest.fixture
def media_root(settings, tmp_path):
    """Uploaded files go to a temporary directory that the test can inspect."""
    root = tmp_path / "media"
    root.mkdir()
    settings.MEDIA_ROOT = root
    return root


# --- external services ---------------------------------------------------------------------


def redis_test_url(base: str, worker: str | None) -> str:
    """The Redis database of one pytest-xdist worker: gwN flushes database base−N (the default
    base 15 and Redis's 16 databases leave room downwards, not upwards), the whole run without
    xdist the base itself."""
    if not worker or not worker.startswith("gw"):
        return base
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(base)
    database = int(parts.path.strip("/") or 0) - int(worker.removeprefix("gw"))
    if database < 0:
        raise ValueError(
            f"REDIS_TEST_URL={base}: xdist worker {worker} would need Redis database {database}; "
            "choose a higher database number or fewer workers"
        )
    return urlunsplit(parts._replace(path=f"/{database}"))


@pytest.fixture(scope="session")
def redis_url():
    """URL of a Redis database the tests may flush (REDIS_TEST_URL, default db 15 on localhost;
    one database per xdist worker, see redis_test_url)."""
    import redis

    url = redis_test_url(
        os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15"), os.environ.get("PYTEST_XDIST_WORKER")
    )
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        client.ping()
    except redis.RedisError as error:
        skip_or_fail(f"Redis does not answer at {url} ({error}); set REDIS_TEST_URL or start Redis")
    finally:
        client.close()
    return url


@pytest.fixture
def require_postgres():
    """Skip unless the tests run on PostgreSQL; in CI with a postgres DATABASE_URL, anything else fails."""
    from django.db import connection

    if connection.vendor == "postgresql":
        return connection
    message = f"needs PostgreSQL, the tests run on {connection.vendor}"
    if in_ci() and os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.fail(f"{message}, although DATABASE_URL points at PostgreSQL")
    pytest.skip(message + " (set DATABASE_URL=postgres://...)")


@pytest.fixture(autouse=True)
def _wear_stage_only_where_asked(request, monkeypatch):
    """The pipeline's wear stage runs only in the tests that ask for it (`wear_on_ingest`): run on
    every in-process ingest it would slow the timing-sensitive live tests."""
    if "wear_on_ingest" not in request.fixturenames:
        from portal.telemetry import hooks

        kept = [stage for stage in hooks.pipeline_stages.subscribers if stage.name != "wear"]
        monkeypatch.setattr(hooks.pipeline_stages, "_subscribers", kept)


@pytest.fixture
def wear_on_ingest():
    """The wear meters kept by the pipeline on every stored batch, as in production."""


@pytest.fixture
def pipeline_held(monkeypatch):
    """Batches are stored but not handed on to the pipeline (as with the broker down): the test
    runs it (portal.telemetry.pipeline.pipeline_run)."""
    from portal.telemetry import enqueue

    monkeypatch.setattr(enqueue, "_send", lambda: None)


@pytest.fixture(autouse=True)
def _fresh_ingest_gpu_cache():
    """Ingest keeps each host's GPU rows per process; database ids repeat from test to test."""
    from portal.telemetry.services.ingest import host_gpus_forget, job_sets_forget

    host_gpus_forget()
    job_sets_forget()
    yield
    host_gpus_forget()
    job_sets_forget()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """Before pytest-django creates the test database: on SQLite, its `migrate` becomes a copy of
    a database migrated once for the code as it stands (tests/portal_process.py), 4 seconds of
    CPU less for each test process."""
    from django.core import management
    from django.db import connection

    if connection.vendor != "sqlite":
        return
    migrate_command = management.call_command

    @functools.wraps(migrate_command)  # django_db_setup puts the real one back (__wrapped__)
    def call_command(name, *args, **options):
        if name != "migrate" or options.get("database", "default") != "default":
            return migrate_command(name, *args, **options)
        from tests.portal_process import sqlite_migrated_once

        def migrate_into(path):
            migrate_command(name, *args, **options)
            with contextlib.closing(sqlite3.connect(path)) as target:
                connection.connection.backup(target)

        template = sqlite_migrated_once(migrate_into, kind=f"tests-{os.environ.get('DJANGO_SETTINGS_MODULE')}")
        connection.ensure_connection()
        with contextlib.closing(sqlite3.connect(template)) as source:
            source.backup(connection.connection)

    management.call_command = call_command


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """PostgreSQL keeps readings in day partitions for the days ingest may write to now; tests
    store readings at fixed dates, so the test database adds a default partition for the rest
    (the portal's own layout has none: tests/telemetry/test_partitions.py checks it without), now
    and whenever a test migrates the readings table again."""
    from django.core import management

    from portal.telemetry.services import partitions

    # the test database is made: a test's own migrate migrates
    management.call_command = getattr(management.call_command, "__wrapped__", management.call_command)
    partitions.with_default_partition = True
    with django_db_blocker.unblock():
        partitions.reading_partitions_ensure()


# --- the PostgreSQL pass ---------------------------------------------------------------------

# A test that asks for one of these (itself or through its fixtures) or is marked django_db or
# postgres reaches the database; any other test's outcome is the same on either engine.
DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback", "live_server",
     "require_postgres"}
)  # fmt: skip


def pytest_addoption(parser):
    parser.addoption(
        "--database-tests-only",
        action="store_true",
        help="run only the tests that reach the database (the second pass of .ci/run, on PostgreSQL: "
        "the first pass, on SQLite, ran all of them)",
    )
    parser.addoption(
        "--serial-files-only",
        action="store_true",
        help="collect only the test files that name the serial marker (`make test`'s second pass, "
        "-m serial: importing the other two hundred files only to deselect their tests takes 15 s)",
    )


# The marker as a test file applies it (`@pytest.mark.serial`, `pytestmark = pytest.mark.serial`):
# "serial" alone is in thirty files more, about GPU serial numbers.
SERIAL_MARKER = re.compile(r"\bmark\.serial\b")


def pytest_ignore_collect(collection_path, config):
    if not config.getoption("serial_files_only"):
        return None
    a_test_file = collection_path.suffix == ".py" and collection_path.name.startswith("test_")
    return True if a_test_file and not SERIAL_MARKER.search(collection_path.read_text()) else None


def uses_database(item) -> bool:
    if item.get_closest_marker("django_db") or item.get_closest_marker("postgres"):
        return True
    return not DATABASE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


# Under pytest-xdist (`make test`: --dist loadgroup --no-loadscope-reorder, with the scheduler
# below), the tests sharing one of these costly session fixtures, or a module-scoped one, run on
# one worker, which sets it up once instead of once per worker.
SHARED_SESSION_FIXTURES = {
    "slurm_cluster": "slurm",  # a Slurm cluster (munged, slurmctld, slurmd, slurmrestd)
    "browser": "browser",  # Chromium, and the seeded portals of tests/browser
    "portal_server": "browser",
    "walk_server": "browser",
    "directory": "ldap",  # slapd with the demo people (tests/accounts)
    "oidc_provider": "oidc",  # node's oidc-provider (tests/accounts)
}
# Playwright's sync API keeps an event loop running in the test thread from the browser's start to
# the session's end, and Django refuses database calls under a running loop
# (SynchronousOnlyOperation): a worker that has run browser tests runs none that use the database.
BROWSER_GROUP = "browser"


def database_kind(item) -> int:
    """0: no database; 1: in a transaction rolled back after it; 2: committing, the tables flushed
    after it (pytest-django's transactional_db), which empties what the migrations stored."""
    from pytest_django.plugin import validate_django_db

    fixtures = getattr(item, "fixturenames", ())
    marker = item.get_closest_marker("django_db")
    transaction, reset_sequences = validate_django_db(marker)[:2] if marker else (False, False)
    if (
        transaction
        or reset_sequences
        or {"transactional_db", "live_server", "django_db_reset_sequences"} & set(fixtures)
    ):
        return 2
    return 1 if marker or "db" in fixtures else 0


def xdist_group(item) -> str | None:
    groups = sorted({SHARED_SESSION_FIXTURES[name] for name in item.fixturenames if name in SHARED_SESSION_FIXTURES})
    # a browser test may ask for its fixtures only once running (the accessibility test skips
    # before the page walk when axe-core is missing): its marker says where it belongs
    if item.get_closest_marker("browser"):
        groups = [BROWSER_GROUP]
    if groups:
        return groups[0]
    definitions = getattr(item, "_fixtureinfo", None)
    # The suite's own fixtures (a plugin's, such as pytest-django's class-scoped no-op, have no baseid).
    ours = [d[-1] for d in definitions.name2fixturedefs.values() if d and d[-1].baseid] if definitions else []
    return item.nodeid.split("::")[0] if {d.scope for d in ours} & {"module", "package", "class"} else None


def pytest_itemcollected(item):
    """Schemathesis names each case it generates after its operation (`test_x[GET /api/v1/gpus]`)
    but leaves every one its function's nodeid, by which xdist's scheduler, --deselect and the
    reports know a test: each is given the nodeid its name says."""
    if item.nodeid.endswith("]") or not item.name.endswith("]") or "[" not in item.name:
        return
    if type(item).__name__ == "SchemathesisFunction":
        item._id = item._id.with_params(item.name.partition("[")[2][:-1])


def xdist_duplicates_refuse(items) -> None:
    """The scheduler knows a test by its nodeid: of several tests sharing one (as schemathesis'
    generated cases do) it would run one and drop the rest without a word."""
    counts = collections.Counter(item.nodeid for item in items if item.get_closest_marker("serial") is None)
    shared = sorted(nodeid for nodeid, count in counts.items() if count > 1)
    if shared:
        raise pytest.UsageError(f"tests sharing a nodeid must be marked serial to run under xdist: {shared}")


def xdist_order_and_group(items) -> dict[str, dict]:
    """Each worker runs what it is given in the order given: the browser tests first (their worker
    takes no database test afterwards), then the tests marked slow that use no database, then
    pytest-django's order: the tests rolled back, then the committing ones, whose flush empties
    what the migrations stored, then those without a database (a slow test first in its kind),
    each group holding tests of one kind only so that the order holds for groups too; within a
    kind the groups first. Returns each test's unit of scheduling (its group, or itself)
    and whether it uses the database or the browser."""

    facts = {item.nodeid: (xdist_group(item), database_kind(item)) for item in items}
    # the long runs of programs without a database right after the browser tests: started last,
    # the pass would end with one of them running alone on a machine otherwise idle
    # (and a slow test of the others first among those of its kind)
    slow = {item.nodeid for item in items if item.get_closest_marker("slow")}
    items.sort(
        key=lambda item: (
            facts[item.nodeid][0] != BROWSER_GROUP,
            not (item.nodeid in slow and facts[item.nodeid][1] == 0),
            (2, 0, 1)[facts[item.nodeid][1]],
            item.nodeid not in slow,
            facts[item.nodeid][0] is None,
        )
    )
    return {
        nodeid: {
            "unit": nodeid if group is None else f"{group}:{kind}",
            "database": kind > 0,
            "browser": group == BROWSER_GROUP,
        }
        for nodeid, (group, kind) in facts.items()
    }


# --- the scheduler of `make test`'s workers ----------------------------------------------------
# xdist's own loadgroup scheduler reads a test's group from a suffix its worker appends to the
# test's nodeid, which pytest 9 no longer lets a plugin change: its groups were silently ignored
# (the browser's portals set up on both workers). Here each worker writes the units it collected
# to a file that the controller's scheduler reads.

UNITS_FILE_KEY = "test_units_file"
_units_file = pytest.StashKey[str]()


def units_file(config) -> str:
    if _units_file not in config.stash:
        import tempfile

        handle, path = tempfile.mkstemp(prefix="pytest-units-", suffix=".json")
        os.close(handle)
        config.stash[_units_file] = path
    return config.stash[_units_file]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput[UNITS_FILE_KEY] = units_file(node.config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.xdist_units import SharedFixtureScheduling

    return SharedFixtureScheduling(config, log, units_path=units_file(config))


def pytest_unconfigure(config):
    if _units_file in config.stash:
        with contextlib.suppress(OSError):
            os.unlink(config.stash[_units_file])


# trylast: after pytest-django's reordering (tryfirst), which this one replaces under xdist.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker
        xdist_duplicates_refuse(items)
        units = xdist_order_and_group(items)
        path = config.workerinput.get(UNITS_FILE_KEY)
        if path:  # every worker writes the same: the last one's replace wins whole
            import json

            partial = f"{path}.{os.getpid()}"
            with open(partial, "w") as out:
                json.dump(units, out)
            os.replace(partial, path)
    if not config.getoption("database_tests_only"):
        return
    kept = [item for item in items if uses_database(item)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if not uses_database(item)])
        items[:] = kept
