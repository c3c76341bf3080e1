"""Long-running processes leave their start-up objects out of the garbage collector's scans.

A full (generation 2) collection walks every tracked object. In a portal process, once Django,
the apps, their schemas and Celery are loaded, that is a few hundred thousand objects: 100–260 ms
on these machines, every few seconds under ingest. On SQLite a collection that fell while a
request or a task held the write lock held it that much longer, and every other agent's request
waited (seen with SQLITE_SLOW_LOCK_MS: each long hold began with such a collection). Start-up
objects live as long as the process, so scanning them finds nothing: frozen, later collections
walk only what was made since.
"""

import gc


def freeze_startup_objects() -> None:
    """Call once the process has loaded what it serves with, before it serves."""
    gc.collect()
    gc.freeze()
