"""Schemathesis builds each operation's Hypothesis test when its module is collected, and its
coverage phase works out every boundary case of the operation right then: about 8 CPU-seconds
for the suite's two schemathesis files, in every pytest-xdist worker, though one worker runs each
test. Here the build waits for the test's setup: collection gets a stand-in with the built test's
name, marks and fixtures (its signature less the arguments Schemathesis gives), and the test runs
the very function Schemathesis would have built. A definition Schemathesis cannot build fails the
test's setup instead of its collection."""

import inspect

import pytest

_BUILD = "_schemathesis_lazy_build"


def _stand_in(test_func, given_kwargs: dict, build):
    """A function for pytest to collect: the test's name, marks and fixtures, no Hypothesis."""

    def not_built(*args, **kwargs):
        raise AssertionError(f"{test_func.__name__}: run before its Schemathesis test was built")

    for attribute in ("__name__", "__qualname__", "__module__", "__doc__"):
        setattr(not_built, attribute, getattr(test_func, attribute))
    if hasattr(test_func, "pytestmark"):
        not_built.pytestmark = test_func.pytestmark
    given = {"case", *given_kwargs}
    signature = inspect.signature(test_func)
    not_built.__signature__ = signature.replace(
        parameters=[p for p in signature.parameters.values() if p.name not in given]
    )
    not_built.__wrapped__ = test_func  # where reports say the test is (the signature above stands)
    setattr(not_built, _BUILD, build)
    return not_built


def pytest_configure(config):
    from schemathesis.pytest import _test_builder

    build_now = _test_builder.build_operation_test

    def build_operation_test(*, test_func, given_kwargs, **kwargs):
        if inspect.iscoroutinefunction(test_func):  # its built test gets an inner test at collection
            return build_now(test_func=test_func, given_kwargs=given_kwargs, **kwargs)

        def build():
            return build_now(test_func=test_func, given_kwargs=given_kwargs, **kwargs)

        return _stand_in(test_func, given_kwargs, build)

    _test_builder.build_operation_test = build_operation_test


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    build = getattr(getattr(item, "obj", None), _BUILD, None)
    if build is None:
        return
    stand_in = item.obj
    built = build()
    fixtures = [list(inspect.signature(test).parameters) for test in (built, stand_in)]
    if fixtures[0] != fixtures[1]:
        pytest.fail(
            f"Schemathesis built {item.name} with the fixtures {fixtures[0]}, collected with "
            f"{fixtures[1]}: tests/schemathesis_lazy.py is out of date"
        )
    item.obj = built
