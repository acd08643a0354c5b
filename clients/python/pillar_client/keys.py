"""Page keys: the first 16 bytes of SHA-256 of a page's normalized URL.

This is a port of pillar.KeyOfURL / pillar.NormalizeURL (pillar/key.go),
which normalizes with Go's net/url (Parse, then URL.String): the scheme
and host are lower-cased, the fragment and the default port (80 for http,
443 for https) dropped, an empty path given as "/". Everything else (the
path's and query's escaping, user info) is kept as Go's net/url writes
it, so a URL string gives the same key in Python and in Go; the Go test
(clients/python/client_test.go) checks this on many URLs, odd ones
included. Go's module is at go 1.26, so hosts with more than one colon in
http(s) URLs are refused (GODEBUG urlstrictcolons=1).
"""

import codecs
import hashlib
import ipaddress

KEY_SIZE = 16

__all__ = ["KEY_SIZE", "InvalidURL", "key_of_url", "normalize_url", "key_of_normalized", "parse_key"]


class InvalidURL(ValueError):
    """A URL that pillar.NormalizeURL refuses."""


# Go's encoding modes (net/url).
_PATH, _PATH_SEGMENT, _HOST, _ZONE, _USER_PASSWORD, _QUERY_COMPONENT, _FRAGMENT = range(7)


def _should_escape(c, mode):
    """net/url shouldEscape for one byte c (an int)."""
    if 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A or 0x30 <= c <= 0x39:
        return False
    ch = chr(c)
    if mode in (_HOST, _ZONE) and ch in "!$&'()*+,;=:[]<>\"":
        return False
    if ch in "-_.~":
        return False
    if ch in "$&+,/:;=?@":
        if mode == _PATH:
            return ch == "?"
        if mode == _PATH_SEGMENT:
            return ch in "/;,?"
        if mode == _USER_PASSWORD:
            return ch in "@/?:"
        if mode == _QUERY_COMPONENT:
            return True
        if mode == _FRAGMENT:
            return False
    if mode == _FRAGMENT and ch in "!()*":
        return False
    return True


_HEX = b"0123456789abcdefABCDEF"
_UPPERHEX = "0123456789ABCDEF"


def _ishex(c):
    return c in _HEX


def _unhex(c):
    return 9 * (c >> 6) + (c & 15)


def _unescape(s, mode):
    """net/url unescape on bytes s; raises InvalidURL."""
    n = 0
    has_plus = False
    i = 0
    while i < len(s):
        c = s[i]
        if c == 0x25:  # %
            n += 1
            if i + 2 >= len(s) or not _ishex(s[i + 1]) or not _ishex(s[i + 2]):
                raise InvalidURL("invalid URL escape %r" % s[i:i + 3].decode("utf-8", "replace"))
            if mode == _HOST and _unhex(s[i + 1]) < 8 and s[i:i + 3] != b"%25":
                raise InvalidURL("invalid URL escape %r" % s[i:i + 3].decode())
            if mode == _ZONE:
                v = _unhex(s[i + 1]) << 4 | _unhex(s[i + 2])
                if s[i:i + 3] != b"%25" and v != 0x20 and _should_escape(v, _HOST):
                    raise InvalidURL("invalid URL escape %r" % s[i:i + 3].decode())
            i += 3
        elif c == 0x2B:  # +
            has_plus = mode == _QUERY_COMPONENT
            i += 1
        else:
            if mode in (_HOST, _ZONE) and c < 0x80 and _should_escape(c, mode):
                raise InvalidURL("invalid character %r in host name" % chr(c))
            i += 1
    if n == 0 and not has_plus:
        return s
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c == 0x25:
            out.append(_unhex(s[i + 1]) << 4 | _unhex(s[i + 2]))
            i += 3
            continue
        if c == 0x2B:
            out.append(0x20 if mode == _QUERY_COMPONENT else 0x2B)
        else:
            out.append(c)
        i += 1
    return bytes(out)


def _escape(s, mode):
    out = []
    for c in s:
        if c == 0x20 and mode == _QUERY_COMPONENT:
            out.append("+")
        elif _should_escape(c, mode):
            out.append("%" + _UPPERHEX[c >> 4] + _UPPERHEX[c & 15])
        else:
            out.append(chr(c))
    return "".join(out).encode("ascii")


def _valid_encoded(s, mode):
    for c in s:
        if chr(c) in "!$&'()*+,;=:@[]%":
            continue
        if _should_escape(c, mode):
            return False
    return True


def _valid_optional_port(port):
    if port == b"":
        return True
    if port[:1] != b":":
        return False
    return all(0x30 <= c <= 0x39 for c in port[1:])


def _valid_userinfo(s):
    for ch in _go_decode(s):
        if "A" <= ch <= "Z" or "a" <= ch <= "z" or "0" <= ch <= "9":
            continue
        if ch in "-._:~!$&'()*+,;=%@":
            continue
        return False
    return True


def _parse_host(scheme, host):
    open_idx = host.rfind(b"[")
    if open_idx > 0:
        raise InvalidURL("invalid IP-literal")
    if open_idx == 0:
        close_idx = host.rfind(b"]")
        if close_idx < 0:
            raise InvalidURL("missing ']' in host")
        colon_port = host[close_idx + 1:]
        if not _valid_optional_port(colon_port):
            raise InvalidURL("invalid port %r after host" % colon_port.decode("utf-8", "replace"))
        colon_port = _unescape(colon_port, _HOST)
        hostname = host[1:close_idx]
        zone = hostname.find(b"%25")
        if zone >= 0:
            unescaped = _unescape(hostname[:zone], _HOST) + _unescape(hostname[zone:], _ZONE)
        else:
            unescaped = _unescape(hostname, _HOST)
        _check_ip_literal(unescaped)
        return b"[" + unescaped + b"]" + colon_port
    i = host.find(b":")
    if i != -1:
        last = host.rfind(b":")
        if last != i and scheme not in (b"http", b"https"):
            i = last
        if not _valid_optional_port(host[i:]):
            raise InvalidURL("invalid port %r after host" % host[i:].decode("utf-8", "replace"))
    return _unescape(host, _HOST)


def _check_ip_literal(b):
    """netip.ParseAddr, refusing IPv4 (Go: "invalid IP-literal")."""
    try:
        s = b.decode("ascii")
    except UnicodeDecodeError:
        raise InvalidURL("invalid host: %r" % b) from None
    addr, _, zone = s.partition("%")
    if "%" in s and zone == "":
        raise InvalidURL("invalid host: %r: zone must be a non-empty string" % s)
    if ":" not in addr:
        try:
            ipaddress.IPv4Address(addr)
        except ValueError:
            raise InvalidURL("invalid host: %r" % s) from None
        if zone:
            raise InvalidURL("invalid host: %r" % s)
        raise InvalidURL("invalid IP-literal")
    try:
        ipaddress.IPv6Address(addr)
    except ValueError:
        raise InvalidURL("invalid host: %r" % s) from None


def _go_replace(err):
    # Go decodes invalid UTF-8 one byte at a time: one U+FFFD per byte.
    return "\ufffd", err.start + 1


codecs.register_error("pillar-go-replace", _go_replace)


def _go_decode(b):
    return b.decode("utf-8", "pillar-go-replace")


def _go_lower(b):
    """strings.ToLower on UTF-8 bytes (simple case mapping, per rune)."""
    if all(c < 0x80 for c in b):
        return b.lower()
    out = []
    for ch in _go_decode(b):
        lo = ch.lower()
        if len(lo) != 1:  # full case mapping (only U+0130): Go maps runes one to one
            lo = "i" if ch == "\u0130" else ch
        out.append(lo)
    return "".join(out).encode("utf-8")


# unicode.IsSpace (the White_Space property), which strings.TrimSpace trims.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


class _URL:
    __slots__ = ("scheme", "opaque", "user", "host", "path", "raw_path", "raw_query", "force_query")

    def __init__(self):
        self.scheme = b""
        self.opaque = b""
        self.user = None  # (username, password or None)
        self.host = b""
        self.path = b""
        self.raw_path = b""
        self.raw_query = b""
        self.force_query = False


def _get_scheme(raw):
    for i, c in enumerate(raw):
        if 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A:
            continue
        if 0x30 <= c <= 0x39 or c in b"+-.":
            if i == 0:
                return b"", raw
            continue
        if c == 0x3A:
            if i == 0:
                raise InvalidURL("missing protocol scheme")
            return raw[:i], raw[i + 1:]
        return b"", raw
    return b"", raw


def _parse(raw):
    """net/url.Parse (fragment checked, then dropped)."""
    raw, sep, frag = raw.partition(b"#")
    if any(c < 0x20 or c == 0x7F for c in raw):
        raise InvalidURL("net/url: invalid control character in URL")
    u = _URL()
    if raw == b"*":
        u.path = b"*"
        return u
    u.scheme, rest = _get_scheme(raw)
    u.scheme = u.scheme.lower()
    if rest.endswith(b"?") and rest.count(b"?") == 1:
        u.force_query = True
        rest = rest[:-1]
    else:
        rest, _, u.raw_query = rest.partition(b"?")
    if not rest.startswith(b"/"):
        if u.scheme:
            u.opaque = rest
            if frag:
                _unescape(frag, _FRAGMENT)
            return u
        if b":" in rest.partition(b"/")[0]:
            raise InvalidURL("first path segment in URL cannot contain colon")
    if (u.scheme or not rest.startswith(b"///")) and rest.startswith(b"//"):
        authority, rest = rest[2:], b""
        i = authority.find(b"/")
        if i >= 0:
            authority, rest = authority[:i], authority[i:]
        u.user, u.host = _parse_authority(u.scheme, authority)
    p = _unescape(rest, _PATH)
    u.path = p
    u.raw_path = b"" if _escape(p, _PATH) == rest else rest
    if frag:
        _unescape(frag, _FRAGMENT)
    return u


def _parse_authority(scheme, authority):
    i = authority.rfind(b"@")
    host = _parse_host(scheme, authority if i < 0 else authority[i + 1:])
    if i < 0:
        return None, host
    userinfo = authority[:i]
    if not _valid_userinfo(userinfo):
        raise InvalidURL("net/url: invalid userinfo")
    if b":" not in userinfo:
        return (_unescape(userinfo, _USER_PASSWORD), None), host
    name, _, password = userinfo.partition(b":")
    return (_unescape(name, _USER_PASSWORD), _unescape(password, _USER_PASSWORD)), host


def _split_host_port(host_port):
    host, port = host_port, b""
    colon = host.rfind(b":")
    if colon != -1 and _valid_optional_port(host[colon:]):
        host, port = host[:colon], host[colon + 1:]
    if host.startswith(b"[") and host.endswith(b"]"):
        host = host[1:-1]
    return host, port


def _escaped_path(u):
    if u.raw_path and _valid_encoded(u.raw_path, _PATH):
        try:
            if _unescape(u.raw_path, _PATH) == u.path:
                return u.raw_path
        except InvalidURL:
            pass
    if u.path == b"*":
        return b"*"
    return _escape(u.path, _PATH)


def _string(u):
    """URL.String (no fragment: normalization drops it)."""
    out = bytearray()
    if u.scheme:
        out += u.scheme + b":"
    if u.opaque:
        out += u.opaque
    else:
        if u.scheme or u.host or u.user is not None:
            if u.host or u.path or u.user is not None:
                out += b"//"
            if u.user is not None:
                out += _escape(u.user[0], _USER_PASSWORD)
                if u.user[1] is not None:
                    out += b":" + _escape(u.user[1], _USER_PASSWORD)
                out += b"@"
            if u.host:
                out += _escape(u.host, _HOST)
        path = _escaped_path(u)
        if path and path[:1] != b"/" and u.host:
            out += b"/"
        if not out and b":" in path.partition(b"/")[0]:
            out += b"./"
        out += path
    if u.force_query or u.raw_query:
        out += b"?" + u.raw_query
    return bytes(out)


def _normalize(raw):
    u = _parse(raw.strip(_GO_SPACE).encode("utf-8"))
    if not u.scheme or not u.host:
        raise InvalidURL("not absolute (need scheme and host)")
    hostname, port = _split_host_port(u.host)
    host = _go_lower(hostname)
    if not host:
        raise InvalidURL("no host name")
    if (u.scheme == b"http" and port == b"80") or (u.scheme == b"https" and port == b"443"):
        port = b""
    if b":" in host:
        host = b"[" + host + b"]"
    if port:
        host += b":" + port
    u.host = host
    if not u.path and not u.opaque:
        u.path = b"/"
    return _string(u).decode("utf-8", "surrogateescape")


def normalize_url(url):
    """Returns the normal form of url, as pillar.NormalizeURL does.

    Raises InvalidURL for a URL Go refuses (not absolute, no host, a bad
    escape or port, a control character, ...)."""
    if not isinstance(url, str):
        raise TypeError("url must be a str, got %s" % type(url).__name__)
    try:
        n = _normalize(url)
        try:
            ok = _normalize(n) == n
        except InvalidURL:
            ok = False
        if not ok:
            raise InvalidURL("host cannot be normalized")
    except InvalidURL as e:
        raise InvalidURL("pillar: url %r: %s" % (url, e)) from None
    except UnicodeEncodeError as e:
        raise InvalidURL("pillar: url %r: not valid Unicode: %s" % (url, e)) from None
    return n


def key_of_normalized(normalized):
    """The page key (16 bytes) of an already normalized URL."""
    return hashlib.sha256(normalized.encode("utf-8", "surrogateescape")).digest()[:KEY_SIZE]


def key_of_url(url):
    """The page key (16 bytes) of url: pillar.KeyOfURL."""
    return key_of_normalized(normalize_url(url))


def parse_key(s):
    """A page key written as 32 hex characters -> 16 bytes."""
    if len(s) != 2 * KEY_SIZE:
        raise ValueError("page key %r: want %d hex characters, got %d" % (s, 2 * KEY_SIZE, len(s)))
    return bytes.fromhex(s)
