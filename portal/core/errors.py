"""One exception hierarchy for the application layer; the edges turn it into answers."""


class ApplicationError(Exception):
    def __init__(self, message: str, *, field_errors: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.message = message
        self.field_errors = field_errors or {}


class NotFound(ApplicationError):
    pass


class PermissionDenied(ApplicationError):
    pass
