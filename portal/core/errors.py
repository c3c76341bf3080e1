"""One exception hierarchy for the application layer; the edges turn it into answers.

Services raise these, never HTTP status codes. Two edges translate them: the JSON API's handler
(`portal.core.api.application_error_response`, the shape `{"error", "detail": [{"loc", "msg"}]}`)
and the forms' helper (`portal.core.forms.add_application_error`). Each problem names a field
path (`loc`, dotted: `answers.0.value`) or `request` when it concerns the whole request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    loc: str
    msg: str

    def as_dict(self) -> dict[str, str]:
        return {"loc": self.loc, "msg": self.msg}


class ApplicationError(Exception):
    """Base of every error a service raises on purpose.

    `problems` lists (field path, message) pairs; `field_errors` is a mapping of field path to one
    message or a list of them (the shape Django forms use). Either may be given, or neither.
    """

    def __init__(
        self,
        message: str,
        *,
        problems: Iterable[Problem | tuple[str, str]] = (),
        field_errors: Mapping[str, str | Iterable[str]] | None = None,
    ):
        super().__init__(message)
        self.message = message
        collected = [p if isinstance(p, Problem) else Problem(*p) for p in problems]
        for loc, messages in (field_errors or {}).items():
            for msg in [messages] if isinstance(messages, str) else messages:
                collected.append(Problem(str(loc), str(msg)))
        self.problems: list[Problem] = collected

    @property
    def field_errors(self) -> dict[str, list[str]]:
        """The problems grouped by field path, in order (what a form shows beside each field)."""
        grouped: dict[str, list[str]] = {}
        for problem in self.problems:
            grouped.setdefault(problem.loc, []).append(problem.msg)
        return grouped

    def detail(self) -> list[dict[str, str]]:
        return [problem.as_dict() for problem in self.problems] or [{"loc": "request", "msg": self.message}]

    @classmethod
    def from_django(cls, error, *, message: str = "invalid input", prefix: str = "") -> ApplicationError:
        """Wrap a django.core.exceptions.ValidationError (a model's full_clean) as this error."""
        if hasattr(error, "error_dict"):
            problems = [
                (f"{prefix}{'request' if field == '__all__' else field}", msg)
                for field, errs in error.message_dict.items()
                for msg in errs
            ]
        else:
            problems = [(prefix.rstrip(".") or "request", msg) for msg in error.messages]
        return cls(message, problems=problems)


class InvalidInput(ApplicationError):
    """The input is wrong; the problems say where (HTTP 400)."""


class NotFound(ApplicationError):
    """The thing asked for does not exist, or the caller may not know that it does (HTTP 404)."""


class Conflict(ApplicationError):
    """The request is fine but the state does not allow it now (HTTP 409)."""


class Forbidden(ApplicationError):
    """The caller's role does not allow this (HTTP 403)."""


class TooManyRequests(ApplicationError):
    """Refused for now: too many attempts from this client; try again later (HTTP 429)."""
