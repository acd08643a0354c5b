"""The pillar_client exception hierarchy.

Every error a Client raises is a PillarError whose message names the
router address and the cause; ``address`` and ``cause`` hold them.
"""

__all__ = [
    "PillarError", "ConfigError", "InvalidKeyError", "DeadlineExceededError", "UnavailableError",
    "ResponseTooLargeError", "VersionError", "RequestError", "KeyStatusError", "KeyNotServedError",
    "KeyReadError", "CorruptRecordError",
]


class PillarError(Exception):
    """Base class. address: the router address ("" before one is known); cause: the detail."""

    def __init__(self, address, cause):
        self.address = address
        self.cause = cause
        super().__init__("router %s: %s" % (address, cause) if address else str(cause))


class ConfigError(PillarError, ValueError):
    """The Client's arguments are refused (a token without TLS beyond loopback, a missing file, ...)."""


class InvalidKeyError(PillarError, ValueError):
    """A key is neither 16 bytes nor a URL pillar can normalize."""


class DeadlineExceededError(PillarError, TimeoutError):
    """The call's deadline (Client timeout) passed before the router answered."""


class UnavailableError(PillarError, ConnectionError):
    """The router could not be reached (UNAVAILABLE) on every attempt. attempts: how many were made."""

    def __init__(self, address, cause, attempts=0):
        self.attempts = attempts
        super().__init__(address, cause)


class ResponseTooLargeError(PillarError):
    """The answer is larger than max_response_bytes: ask for fewer keys or raise the limit."""


class VersionError(PillarError):
    """The requested version (publication) is not served by the router."""


class RequestError(PillarError):
    """The router refused or failed the request (another gRPC status). code: the grpc.StatusCode."""

    def __init__(self, address, cause, code=None):
        self.code = code
        super().__init__(address, cause)


class KeyStatusError(PillarError):
    """One or more keys failed (KEY_NOT_SERVED or KEY_ERROR).

    failures: a list of (key, status name, detail) for every failed key, in
    request order (key as the caller passed it); records: the records of
    the keys that did not fail (the same dict batch_get would return);
    key: the first failed key."""

    def __init__(self, address, cause, failures, records):
        self.failures = failures
        self.records = records
        self.key = failures[0][0] if failures else None
        super().__init__(address, cause)


class KeyNotServedError(KeyStatusError):
    """The first failed key is KEY_NOT_SERVED: no replica holds its partition (for that version)."""


class KeyReadError(KeyStatusError):
    """The first failed key is KEY_ERROR: reading it failed on every replica."""


class CorruptRecordError(PillarError):
    """A value is not a valid encoded PreparedPage (internal/record)."""
