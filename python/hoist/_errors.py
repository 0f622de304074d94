"""hoist's exceptions. Each carries hoist's message (file, byte offset, rule) and a status."""


class HoistError(Exception):
    """A load or open failed. `status` is hoist's status name ("invalid model", "stalled"...)."""

    def __init__(self, message, status="error"):
        super().__init__(message)
        self.status = status


class InvalidModelError(HoistError):
    """The model's bytes break a rule of its format."""


class StalledError(HoistError):
    """A stage of the load made no progress for the stall timeout."""


class DeviceError(HoistError):
    """The device reported an error or ran out of memory."""


class CancelledError(HoistError):
    """The progress callback returned False."""


_BY_STATUS = {
    "invalid model": InvalidModelError,
    "stalled": StalledError,
    "device error": DeviceError,
    "cancelled": CancelledError,
    "not found": FileNotFoundError,
}


def make_error(message, status):
    """The exception for a native status: FileNotFoundError for "not found", else a HoistError."""
    kind = _BY_STATUS.get(status, HoistError)
    if kind is FileNotFoundError:
        return NotFoundError(message, status)
    return kind(message, status)


class NotFoundError(HoistError, FileNotFoundError):
    """The model or one of its files does not exist."""

    def __init__(self, message, status="not found"):
        HoistError.__init__(self, message, status)
