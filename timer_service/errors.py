"""Exceptions of the timer service; the root's default message is its docstring."""


class TimerServiceError(Exception):
    """Timer service error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class NotFound(TimerServiceError):
    """Not found."""


class Conflict(TimerServiceError):
    """The resource is in a state that does not allow this."""


class VersionMismatch(Conflict):
    """The stored version is not the one the write names (If-Match, If-None-Match)."""


class CallbackInFlight(Conflict):
    """The job's callback has started; it can no longer be cancelled."""


class PayloadTooLarge(TimerServiceError):
    """The payload is larger than allowed."""


class InvalidInput(TimerServiceError):
    """The input breaks a rule."""

    def __init__(self, message: str | None = None, loc: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.loc = loc


class LeaseLost(TimerServiceError):
    """This process no longer holds the lease."""


class StoreUnavailable(TimerServiceError):
    """The job store does not answer."""


class LayoutMismatch(TimerServiceError):
    """The store was initialised with another layout than this process is configured for."""
