"""The router client: BatchGet of page keys over gRPC (cobbled/servepb)."""

import ipaddress
import itertools
import random
import threading
import time

import grpc

from ._gen import serve_pb2, serve_pb2_grpc
from .errors import (ConfigError, CorruptRecordError, DeadlineExceededError, InvalidKeyError, KeyNotServedError,
                     KeyReadError, PillarError, RequestError, ResponseTooLargeError, UnavailableError, VersionError)
from .keys import KEY_SIZE, InvalidURL, key_of_url
from .record import CorruptRecord, decode_record

__all__ = ["Client", "is_loopback"]

_KEY_NOT_SERVED = serve_pb2.KEY_NOT_SERVED
_KEY_ERROR = serve_pb2.KEY_ERROR
_STATUS_NAMES = {serve_pb2.KEY_OK: "KEY_OK", _KEY_NOT_SERVED: "KEY_NOT_SERVED", _KEY_ERROR: "KEY_ERROR"}


def is_loopback(addr):
    """Whether addr ("host:port") names only the loopback interface, as Go's tlsconf.IsLoopback."""
    host = addr
    if addr.startswith("["):
        host = addr[1:addr.find("]")] if "]" in addr else addr
    elif addr.count(":") == 1:
        host = addr.rsplit(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError("", "%s %s: %s" % (what, path, e.strerror or e)) from None


class Client:
    """A client of a pillar router's gRPC Serve API (pillar router serve).

    router_addr: "host:port". timeout: seconds, the deadline of one
    batch_get call, retries and backoff included (it never blocks longer,
    give or take scheduling). retries: attempts in all when the router
    answers UNAVAILABLE (cannot be reached, restarting); 1 = no retry; no
    other failure is retried. pool_size: gRPC channels (each its own
    connection) used round-robin. tls_ca: a PEM file of the CA the
    router's certificate must chain to; turns TLS on. tls_cert, tls_key:
    PEM files of a client certificate (mutual TLS; needs tls_ca).
    tls_server_name: the name to verify the router's certificate for when
    it is not the address dialled. token: a bearer token sent as
    "authorization: Bearer <token>"; refused without TLS unless the
    address is loopback. max_response_bytes: the largest answer accepted
    (ResponseTooLargeError beyond it).

    The client is safe to share between threads. Use it as a context
    manager or call close().
    """

    def __init__(self, router_addr, *, timeout=2.0, retries=3, pool_size=2, tls_ca=None, tls_cert=None,
                 tls_key=None, token=None, max_response_bytes=64 << 20, tls_server_name=None,
                 backoff=0.05, max_backoff=1.0):
        if not isinstance(router_addr, str) or not router_addr:
            raise ConfigError("", "router_addr must be a non-empty \"host:port\" string")
        self.address = router_addr
        if timeout is None or timeout <= 0:
            raise ConfigError(router_addr, "timeout must be positive seconds, got %r" % (timeout,))
        if retries < 1:
            raise ConfigError(router_addr, "retries is the number of attempts, at least 1, got %r" % (retries,))
        if pool_size < 1:
            raise ConfigError(router_addr, "pool_size must be at least 1, got %r" % (pool_size,))
        if max_response_bytes < 1:
            raise ConfigError(router_addr, "max_response_bytes must be positive, got %r" % (max_response_bytes,))
        if (tls_cert is None) != (tls_key is None):
            raise ConfigError(router_addr, "tls_cert and tls_key go together")
        if tls_cert is not None and tls_ca is None:
            raise ConfigError(router_addr, "a client certificate (tls_cert) needs tls_ca (TLS is off without it)")
        self.tls = tls_ca is not None
        if token is not None and not self.tls and not is_loopback(router_addr):
            raise ConfigError(router_addr, "a token is never sent in plaintext beyond loopback; give tls_ca "
                                           "(the router serving TLS)")
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.max_response_bytes = int(max_response_bytes)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._client_cert = tls_cert is not None
        self._metadata = (("authorization", "Bearer " + token),) if token is not None else None

        options = [
            ("grpc.max_receive_message_length", self.max_response_bytes),
            ("grpc.max_send_message_length", 64 << 20),
            # Each channel its own connection (channels with equal
            # arguments share one subchannel otherwise).
            ("grpc.use_local_subchannel_pool", 1),
            # Reconnect soon after a router restart: retries are short.
            ("grpc.initial_reconnect_backoff_ms", 50),
            ("grpc.min_reconnect_backoff_ms", 50),
            ("grpc.max_reconnect_backoff_ms", 1000),
            ("grpc.enable_retries", 0),
        ]
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        creds = None
        if self.tls:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca, "tls_ca"),
                private_key=_read(tls_key, "tls_key") if tls_key else None,
                certificate_chain=_read(tls_cert, "tls_cert") if tls_cert else None)
        self._channels = []
        for _ in range(pool_size):
            ch = grpc.secure_channel(router_addr, creds, options) if creds else grpc.insecure_channel(router_addr, options)
            self._channels.append(ch)
        self._stubs = [serve_pb2_grpc.ServeStub(ch) for ch in self._channels]
        self._next = itertools.cycle(range(pool_size))
        self._lock = threading.Lock()
        self._closed = False

    def close(self):
        """Closes every channel; calls after close fail."""
        self._closed = True
        for ch in self._channels:
            ch.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "Client(%r, tls=%s, pool_size=%d)" % (self.address, self.tls, len(self._channels))

    def _stub(self):
        with self._lock:
            return self._stubs[next(self._next)]

    def _raw_key(self, k):
        if isinstance(k, (bytes, bytearray, memoryview)):
            b = bytes(k)
            if len(b) != KEY_SIZE:
                raise InvalidKeyError(self.address, "page key %s: want %d bytes, got %d" % (b.hex(), KEY_SIZE, len(b)))
            return b
        if isinstance(k, str):
            try:
                return key_of_url(k)
            except InvalidURL as e:
                raise InvalidKeyError(self.address, str(e)) from None
        raise InvalidKeyError(self.address, "key %r: want 16 bytes or a URL string, got %s" % (k, type(k).__name__))

    def batch_get(self, keys, version=None, caller_id=None):
        """Reads keys through the router; returns {key: Record}.

        keys: page keys, each 16 raw bytes or a URL string (converted with
        key_of_url, as pillar.KeyOfURL). The dict's keys are the keys as
        given (URL strings stay strings; bytearray and memoryview keys
        become bytes). A key that is absent (never
        written, or deleted) is absent from the dict. version: the
        publication to read (None or "" = the router's default; "live",
        "candidate", "previous" or a publication id); caller_id: the id for
        the router's A/B split by caller.

        Raises: KeyNotServedError / KeyReadError (both KeyStatusError) when
        any key fails, naming the first one (hex), with .failures for all
        and .records for the rest; VersionError when the version is not
        served; DeadlineExceededError, UnavailableError,
        ResponseTooLargeError, RequestError, CorruptRecordError,
        InvalidKeyError. Every message names the router address.
        """
        return self.batch_get_versioned(keys, version=version, caller_id=caller_id)[0]

    def batch_get_versioned(self, keys, version=None, caller_id=None):
        """batch_get, also returning the concrete version the router read: (records, version)."""
        if self._closed:
            raise PillarError(self.address, "client is closed")
        keys = [bytes(k) if isinstance(k, (bytearray, memoryview)) else k for k in keys]
        raw = [self._raw_key(k) for k in keys]
        if not raw:
            return {}, ""
        req = serve_pb2.BatchGetRequest(keys=raw, version=version or "", caller_id=caller_id or "")
        resp = self._call(req)
        if len(resp.results) != len(raw):
            raise PillarError(self.address, "%d results for %d keys" % (len(resp.results), len(raw)))
        records, failures = {}, []
        for k, b, r in zip(keys, raw, resp.results):
            if r.status != serve_pb2.KEY_OK:
                failures.append((k, r.status, b, r.error))
                continue
            if not r.found:
                continue
            try:
                records[k] = decode_record(r.value)
            except CorruptRecord as e:
                raise CorruptRecordError(self.address, "key %s: %s" % (b.hex(), e)) from None
        if failures:
            self._raise_failures(failures, records, version)
        return records, resp.version

    def _raise_failures(self, failures, records, version):
        k, status, b, detail = failures[0]
        if version and status == _KEY_NOT_SERVED and ("version not served" in detail or 'version "%s"' % version in detail):
            raise VersionError(self.address, "unknown version %r: %s" % (version, detail))
        more = "" if len(failures) == 1 else " (and %d more keys)" % (len(failures) - 1)
        cls = KeyNotServedError if status == _KEY_NOT_SERVED else KeyReadError
        msg = "key %s: %s: %s%s" % (b.hex(), _STATUS_NAMES.get(status, status), detail, more)
        raise cls(self.address, msg, [(f[0], _STATUS_NAMES.get(f[1], f[1]), f[3]) for f in failures], records)

    def _call(self, req):
        start = time.monotonic()
        deadline = start + self.timeout
        last = None
        attempt = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            attempt += 1
            try:
                return self._stub().BatchGet(req, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else None
                detail = e.details() if hasattr(e, "details") else str(e)
                if code == grpc.StatusCode.UNAVAILABLE:
                    last = detail
                    if attempt >= self.retries:
                        break
                    pause = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
                    pause *= 0.5 + random.random() / 2  # jitter
                    if time.monotonic() + pause >= deadline:
                        break
                    time.sleep(pause)
                    continue
                raise self._error(code, detail, last) from None
        hint = ""
        if self.tls and not self._client_cert:
            hint = " (TLS without a client certificate: a router requiring mutual TLS refuses it; give tls_cert and tls_key)"
        if last is None:
            raise DeadlineExceededError(self.address, "deadline of %ss exceeded" % self.timeout)
        if attempt < self.retries:
            # The deadline ran out before the attempts did.
            raise DeadlineExceededError(self.address, "deadline of %ss exceeded after %d attempt%s, the router unavailable: %s%s"
                                        % (self.timeout, attempt, "" if attempt == 1 else "s", last, hint))
        raise UnavailableError(self.address, "unavailable after %d attempts: %s%s" % (attempt, last, hint), attempt)

    def _error(self, code, detail, last_unavailable):
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            tail = " (earlier attempts: unavailable: %s)" % last_unavailable if last_unavailable else ""
            return DeadlineExceededError(self.address, "deadline of %ss exceeded%s" % (self.timeout, tail))
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (detail or ""):
            return ResponseTooLargeError(self.address, "response larger than max_response_bytes=%d: %s"
                                         % (self.max_response_bytes, detail))
        name = code.name if code is not None else "UNKNOWN"
        return RequestError(self.address, "%s: %s" % (name, detail), code)
