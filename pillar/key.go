package pillar

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
)

// KeySize is the length of a page key in bytes.
const KeySize = 16

// Key identifies a page: the first 16 bytes of SHA-256 of its normalized URL.
// People see it as 32 lower-case hex characters (String).
type Key [KeySize]byte

// String returns the key as 32 lower-case hex characters.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// Partition returns the partition of k among p partitions:
// BigEndian.Uint64(k[0:8]) % p.
func (k Key) Partition(p int) int { return Partition(k[:], p) }

// Partition returns the partition of a raw 16-byte key among p partitions.
// It panics if key is shorter than 8 bytes or p <= 0: callers validate both.
func Partition(key []byte, p int) int {
	return int(binary.BigEndian.Uint64(key[0:8]) % uint64(p))
}

// ParseKey parses a page key written as 32 hex characters.
func ParseKey(s string) (Key, error) {
	var k Key
	if len(s) != 2*KeySize {
		return k, fmt.Errorf("pillar: page key %q: want %d hex characters, got %d", s, 2*KeySize, len(s))
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return k, fmt.Errorf("pillar: page key %q: %w", s, err)
	}
	return k, nil
}

// KeyFromBytes copies a 16-byte slice into a Key.
func KeyFromBytes(b []byte) (Key, error) {
	var k Key
	if len(b) != KeySize {
		return k, fmt.Errorf("pillar: page key %x: want %d bytes, got %d", b, KeySize, len(b))
	}
	copy(k[:], b)
	return k, nil
}

// KeyOfURL normalizes u and returns its page key and the normalized form.
func KeyOfURL(u string) (Key, string, error) {
	n, err := NormalizeURL(u)
	if err != nil {
		return Key{}, "", err
	}
	return KeyOfNormalized(n), n, nil
}

// KeyOfNormalized returns the key of an already normalized URL.
func KeyOfNormalized(n string) Key {
	sum := sha256.Sum256([]byte(n))
	var k Key
	copy(k[:], sum[:KeySize])
	return k
}

// NormalizeURL lower-cases the scheme and host, drops the fragment and the
// default port (80 for http, 443 for https) and gives an empty path as "/".
// The URL must be absolute with a host.
func NormalizeURL(raw string) (string, error) {
	n, err := normalize(raw)
	if err != nil {
		return "", err
	}
	// A normal form must be its own normal form; odd hosts (":", "::0")
	// that url.Parse accepts once but not after re-writing are refused.
	if n2, err := normalize(n); err != nil || n2 != n {
		return "", fmt.Errorf("pillar: url %q: host cannot be normalized", raw)
	}
	return n, nil
}

func normalize(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("pillar: url %q: %w", raw, err)
	}
	if u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("pillar: url %q: not absolute (need scheme and host)", raw)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return "", fmt.Errorf("pillar: url %q: no host name", raw)
	}
	port := u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") { // IPv6 literal
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	u.Host = host
	u.Fragment = ""
	u.RawFragment = ""
	if u.Path == "" && u.Opaque == "" {
		u.Path = "/"
	}
	return u.String(), nil
}

// HostOf returns the lower-cased host of a normalized URL ("" if it has none).
func HostOf(normalized string) string {
	u, err := url.Parse(normalized)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}
