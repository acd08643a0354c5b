package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
)

// Magic opens every wire connection (client → node).
const Magic = "PLWIRE1\n"

// Frame kinds.
const (
	KindRequest  = 1
	KindResponse = 2
	KindError    = 3
	KindCancel   = 4
)

// headerLen is the length, kind and id fields.
const headerLen = 4 + 1 + 8

// DefaultMaxFrame bounds a frame's length field unless options say
// otherwise: a response of the node's default MaxResponseBytes (64 MiB) plus
// room for its encoding.
const DefaultMaxFrame = 65 << 20

// frame is one decoded frame header.
type frame struct {
	kind byte
	id   uint64
	n    int // payload bytes
}

// readHeader reads a frame header from r and checks it against maxFrame.
// peer names the other side in errors.
func readHeader(r *bufio.Reader, peer string, maxFrame int) (frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	l := binary.BigEndian.Uint32(h[:4])
	f := frame{kind: h[4], id: binary.BigEndian.Uint64(h[5:])}
	if l < headerLen-4 {
		return f, fmt.Errorf("wire: peer %s: frame length %d below the %d-byte header", peer, l, headerLen-4)
	}
	if int64(l) > int64(maxFrame) {
		return f, fmt.Errorf("wire: peer %s: frame of %d bytes over the limit of %d", peer, l, maxFrame)
	}
	if f.kind < KindRequest || f.kind > KindCancel {
		return f, fmt.Errorf("wire: peer %s: frame of unknown kind %d (request id %d)", peer, f.kind, f.id)
	}
	f.n = int(l) - (headerLen - 4)
	return f, nil
}

// putHeader encodes a header for a payload of n bytes.
func putHeader(h *[headerLen]byte, kind byte, id uint64, n int) {
	binary.BigEndian.PutUint32(h[:4], uint32(headerLen-4+n))
	h[4] = kind
	binary.BigEndian.PutUint64(h[5:], id)
}

// writeFrame writes header and payload parts with one writev.
func writeFrame(c net.Conn, kind byte, id uint64, parts ...[]byte) error {
	var h [headerLen]byte
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	putHeader(&h, kind, id, n)
	bufs := make(net.Buffers, 0, 1+len(parts))
	bufs = append(bufs, h[:])
	bufs = append(bufs, parts...)
	_, err := bufs.WriteTo(c)
	return err
}
