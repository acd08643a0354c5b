"""pillar_client: a Python client for the pillar serving tier's router.

    from pillar_client import Client
    with Client("127.0.0.1:7400") as c:
        recs = c.batch_get(["https://example.com/a", bytes.fromhex("00" * 16)])

See clients/python/README.md.
"""

from .client import Client, is_loopback
from .errors import (ConfigError, CorruptRecordError, DeadlineExceededError, InvalidKeyError, KeyNotServedError,
                     KeyReadError, KeyStatusError, PillarError, RequestError, ResponseTooLargeError, UnavailableError,
                     VersionError)
from .keys import KEY_SIZE, InvalidURL, key_of_normalized, key_of_url, normalize_url, parse_key
from .record import Chunk, Record, decode_record, decode_vector

__all__ = [
    "Client", "is_loopback", "Record", "Chunk", "decode_record", "decode_vector",
    "KEY_SIZE", "InvalidURL", "key_of_url", "key_of_normalized", "normalize_url", "parse_key",
    "PillarError", "ConfigError", "InvalidKeyError", "DeadlineExceededError", "UnavailableError",
    "ResponseTooLargeError", "VersionError", "RequestError", "KeyStatusError", "KeyNotServedError",
    "KeyReadError", "CorruptRecordError",
]

__version__ = "0.1.0"
