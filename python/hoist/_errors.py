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


class UnavailableError(HoistError):
    """The device is not present or usable here (no GPU, a torch without CUDA)."""


class TensorNotFoundError(HoistError, KeyError):
    """No tensor of that name in the model; also a KeyError, as a dict lookup would raise."""

    def __init__(self, message, status="not found"):
        HoistError.__init__(self, message, status)

    def __str__(self):  # KeyError's own quotes the message
        return self.args[0]


class ModelChangedError(HoistError):
    """A model file was replaced or written to after it was opened: what was loaded may mix
    two versions of it. Open the model again."""


# By the C API's status (include/hoist/hoist.h's hoist_status values, a stable ABI): the native
# module passes the integer, never text to be matched.
_BY_CODE = {
    2: InvalidModelError,   # HOIST_INVALID_MODEL
    3: StalledError,        # HOIST_STALLED
    4: DeviceError,         # HOIST_DEVICE_ERROR
    6: CancelledError,      # HOIST_CANCELLED
    8: FileNotFoundError,   # HOIST_NOT_FOUND
    10: UnavailableError,   # HOIST_UNAVAILABLE
    11: ModelChangedError,  # HOIST_FILE_CHANGED
}


def make_error(message, code, status):
    """The exception for native status `code` (named `status`): NotFoundError (a
    FileNotFoundError) for HOIST_NOT_FOUND, the HoistError subclass of its kind, else HoistError."""
    kind = _BY_CODE.get(code, HoistError)
    if kind is FileNotFoundError:
        return NotFoundError(message, status)
    return kind(message, status)


class NotFoundError(HoistError, FileNotFoundError):
    """The model or one of its files does not exist."""

    def __init__(self, message, status="not found"):
        HoistError.__init__(self, message, status)
