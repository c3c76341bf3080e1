"""Data-migration tests: the database taken to given migrations and back to the newest."""

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_to(targets):
    """The database at `targets` ([(app, migration), ...]); the apps registry of that state."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def migrate_to_newest():
    """Every app at its newest migration (for the tests that follow); that state's apps registry."""
    return migrate_to(MigrationExecutor(connection).loader.graph.leaf_nodes())
