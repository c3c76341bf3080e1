"""The one shape of a decision a lower app leaves to a higher one (one-way layers).

A hook (`portal.core.hooks`) says "this happened" to whoever listens. A policy answers a
question the lower app asks ("may this GPU return to service?", "what are these hosts' care
limits?"), so it has exactly one owner: the higher app that provides it in its
`AppConfig.ready()`. A second app providing the same policy is a configuration error at start,
not a silent "the last one counts". The lower app lists its policies, with their owners, where
it documents its hooks, and works without an owner (the policy's `default`).
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured


class Policy:
    def __init__(self, name: str, *, default: Callable):
        self.name = name
        self.default = default
        self._owner: str | None = None
        self._function: Callable | None = None

    def provide(self, owner: str) -> Callable[[Callable], Callable]:
        """Decorator: `function` answers this policy from now on. The same owner providing again
        replaces its answer (a reloaded app, a test's stand-in); another owner is refused."""

        def register(function: Callable) -> Callable:
            if self._owner not in (None, owner):
                raise ImproperlyConfigured(
                    f"policy {self.name} is provided by {self._owner}; {owner} cannot provide it too"
                )
            self._owner, self._function = owner, function
            return function

        return register

    def withdraw(self, owner: str) -> None:
        if self._owner == owner:
            self._owner, self._function = None, None

    @property
    def owner(self) -> str | None:
        return self._owner

    @property
    def provided(self) -> bool:
        return self._function is not None

    def ask(self, **kwargs):
        """The owner's answer, or the default's where no app provides the policy."""
        return (self._function or self.default)(**kwargs)
