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


class StaleEpoch(TimerServiceError):
    """A send mark under an ownership epoch that is no longer its biz type's: another
    broker has taken the stream since. Nothing of the call was marked."""

    def __init__(self, biz_types: frozenset[str]) -> None:
        super().__init__(f"stale ownership epoch of {', '.join(sorted(biz_types))}")
        self.biz_types = biz_types


class StoreUnavailable(TimerServiceError):
    """The job store does not answer."""


class LayoutMismatch(TimerServiceError):
    """The store was initialised with another layout than this process is configured for."""
