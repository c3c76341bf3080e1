"""What fleet lets higher apps add to its own writes, without importing them (one-way layers).

- `on_gpu_registered(name)(consumer)`: `consumer(gpu=..., source=...)` is called when a GPU is
  registered (inside the registering transaction; defer work with `transaction.on_commit`).
  Diagnostics subscribes: a GPU its agent reports for the first time gets a burn-in.
- `on_return_to_service(name)(guard)`: `guard(gpu=...)` is asked before a GPU that is out for
  repair goes back in service (not when an admin forces it); it raises
  `portal.core.errors.Conflict` naming `status` when the GPU may not return yet. Diagnostics
  subscribes: a passed diagnostic after the repair, on the current driver. Without any guard, a
  GPU returns only through a repair-return checklist run (or an admin's force).
"""

from __future__ import annotations

from collections.abc import Callable

_registered: list[tuple[str, Callable[..., None]]] = []
_guards: list[tuple[str, Callable[..., None]]] = []


def _register(entries: list, name: str, function: Callable) -> Callable:
    entries[:] = [entry for entry in entries if entry[0] != name]
    entries.append((name, function))
    return function


def on_gpu_registered(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return lambda consumer: _register(_registered, name, consumer)


def gpu_registered(*, gpu, source: str) -> None:
    for _, consumer in list(_registered):
        consumer(gpu=gpu, source=source)


def on_return_to_service(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return lambda guard: _register(_guards, name, guard)


def return_to_service_guarded() -> bool:
    return bool(_guards)


def return_to_service_check(*, gpu) -> None:
    """Each guard in turn; the first that refuses raises (Conflict naming `status`)."""
    for _, guard in list(_guards):
        guard(gpu=gpu)
