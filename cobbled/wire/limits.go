package wire

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// reqScan checks an encoded BatchGetRequest's fields as its bytes arrive,
// before anything is decoded: the keys are counted and each key's length
// is checked when its length prefix arrives, so a request over a limit is
// refused having cost no more than the bytes read so far.
type reqScan struct {
	off   int // where the next field starts (past the bytes read while a field's payload arrives)
	keys  int
	other int // bytes of fields other than keys
}

// check scans the complete fields of msg, the first bytes of a message of
// n bytes. It returns a refusal (a gRPC status error) for a request over a
// limit, or err for bytes that are not a BatchGetRequest's encoding; both
// nil while the request is within its limits so far.
func (q *reqScan) check(msg []byte, n int, o *ServerOptions) (refusal, err error) {
	for q.off < len(msg) {
		b := msg[q.off:]
		num, typ, tn := protowire.ConsumeTag(b)
		if tn < 0 {
			return nil, q.parseErr(tn, len(msg), n)
		}
		hn, size := tn, 0 // bytes before the field's payload, and the payload's
		switch typ {
		case protowire.BytesType:
			l, vn := protowire.ConsumeVarint(b[tn:])
			if vn < 0 {
				return nil, q.parseErr(vn, len(msg), n)
			}
			if l > uint64(n-q.off-tn-vn) {
				return nil, fmt.Errorf("field %d of %d bytes past the end of the %d-byte message", num, l, n)
			}
			hn, size = tn+vn, int(l)
		case protowire.VarintType:
			vn := protowire.ConsumeFieldValue(num, typ, b[tn:])
			if vn < 0 {
				return nil, q.parseErr(vn, len(msg), n)
			}
			hn += vn
		case protowire.Fixed32Type:
			size = 4
		case protowire.Fixed64Type:
			size = 8
		default:
			return nil, fmt.Errorf("field %d of wire type %d (a BatchGetRequest has none)", num, typ)
		}
		if q.off+hn+size > n {
			return nil, fmt.Errorf("field %d past the end of the %d-byte message", num, n)
		}
		if num == 1 && typ == protowire.BytesType {
			if q.keys+1 > o.MaxKeys {
				return status.Errorf(codes.InvalidArgument, "wire: BatchGet: more than %d keys, over the limit of %d per request", o.MaxKeys, o.MaxKeys), nil
			}
			if size > o.MaxKeyBytes {
				k := msg[q.off+hn:]
				if len(k) < min(size, shortKeyBytes) && len(msg) < n {
					return nil, nil // wait for the bytes the error quotes
				}
				return status.Errorf(codes.InvalidArgument, "wire: BatchGet: key %d (%s): over the limit of %d bytes", q.keys, shortKey(k[:min(len(k), size)], size), o.MaxKeyBytes), nil
			}
			q.keys++
		} else if q.other += hn + size; q.other > maxOtherBytes {
			return status.Errorf(codes.InvalidArgument, "wire: BatchGet: %d bytes of fields other than keys, over the limit of %d", q.other, maxOtherBytes), nil
		}
		q.off += hn + size
	}
	return nil, nil
}

// parseErr is nil for a field cut short by the end of the bytes read so
// far (the rest is on its way), else the encoding's error.
func (q *reqScan) parseErr(code, have, n int) error {
	err := protowire.ParseError(code)
	if errors.Is(err, io.ErrUnexpectedEOF) && have < n {
		return nil
	}
	return err
}

// shortKeyBytes is how much of a key an error quotes.
const shortKeyBytes = 32

// shortKey quotes a key of n bytes in an error by its first bytes
// (prefix, up to shortKeyBytes of them, in hex) and its length: never the
// whole of a long key, which would make the error as long as the key.
func shortKey(prefix []byte, n int) string {
	if len(prefix) > shortKeyBytes {
		prefix = prefix[:shortKeyBytes]
	}
	if len(prefix) < n {
		return fmt.Sprintf("%x…, %d bytes", prefix, n)
	}
	return fmt.Sprintf("%x, %d bytes", prefix, n)
}

// logLimiter writes at most one log line per reason per interval, so a
// client that sends bad frames cannot flood the log; each line counts the
// lines of its reason suppressed since the one before. Reasons are a
// fixed set of constants, so its map stays small.
type logLimiter struct {
	l     *slog.Logger
	every time.Duration

	mu   sync.Mutex
	last map[string]*logState
}

type logState struct {
	at         time.Time
	suppressed int
}

func (ll *logLimiter) warn(reason, msg string, args ...any) {
	now := time.Now()
	ll.mu.Lock()
	st := ll.last[reason]
	if st == nil {
		st = &logState{}
		ll.last[reason] = st
	} else if now.Sub(st.at) < ll.every {
		st.suppressed++
		ll.mu.Unlock()
		return
	}
	suppressed := st.suppressed
	st.at, st.suppressed = now, 0
	ll.mu.Unlock()
	ll.l.Warn(msg, append(args, "reason", reason, "suppressed", suppressed)...)
}
