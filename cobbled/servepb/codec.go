package servepb

import (
	"runtime"
	"sync"
	"weak"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// ClientCodec is a client-side gRPC codec that decodes a BatchGetResponse
// with one copy: the received frames are gathered into one buffer that the
// Result values then alias (the standard codec gathers, then copies every
// value again), and allocates all Results at once. Other messages go
// through the standard proto codec. Use it with CallOption (or DialOptions,
// which includes it).
//
// With Pooled false, the buffer is a fresh allocation and values stay valid
// as long as the response is referenced. With Pooled true, the buffer comes
// from a pool and the caller must call Release(resp) once it no longer uses
// any value: this saves a large allocation per response (and the GC and page
// faults it costs), which matters to a router that re-encodes values and
// drops them at once.
type ClientCodec struct{ Pooled bool }

var protoCodec = encoding.GetCodecV2(proto.Name)

// Marshal implements encoding.CodecV2.
func (ClientCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }

// Unmarshal implements encoding.CodecV2.
func (c ClientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	resp, ok := v.(*BatchGetResponse)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	if !c.Pooled {
		return DecodeBatchGetResponse(data.Materialize(), resp)
	}
	bufp := decodePool.Get(data.Len())
	data.CopyTo(*bufp)
	return DecodePooled(bufp, resp)
}

// pooled ties each response decoded into a pooled buffer to that buffer
// until Release. Its keys are weak and a cleanup drops the entry once the
// response is unreachable, so an unreleased response (Release is optional
// for wire.Client and router callers) is collected with its buffer instead
// of being kept here for ever. The cleanup does not return the buffer to
// the pool: values taken from the response (a router's Results) may still
// alias it.
var (
	decodePool = new(BufferPool)
	pooledMu   sync.Mutex
	pooled     = map[weak.Pointer[BatchGetResponse]]pooledBuf{}
)

type pooledBuf struct {
	bufp    *[]byte
	cleanup runtime.Cleanup
}

// forget drops an unreleased response's entry (its cleanup).
func forget(w weak.Pointer[BatchGetResponse]) {
	pooledMu.Lock()
	delete(pooled, w)
	pooledMu.Unlock()
}

// PooledBuffer returns a buffer of n bytes (contents unspecified) from the
// pool behind Release, for a transport that reads a response into it and
// decodes it with DecodePooled (package wire does). A buffer that is not
// handed to DecodePooled goes back with PutBuffer, or is simply dropped.
func PooledBuffer(n int) *[]byte { return decodePool.Get(n) }

// PutBuffer returns a buffer from PooledBuffer that no response aliases.
func PutBuffer(bufp *[]byte) { decodePool.Put(bufp) }

// DecodePooled decodes *bufp into resp (values alias it) and ties the
// buffer to resp: Release(resp) returns it to the pool. On error the buffer
// is returned at once.
func DecodePooled(bufp *[]byte, resp *BatchGetResponse) error {
	if err := DecodeBatchGetResponse(*bufp, resp); err != nil {
		decodePool.Put(bufp)
		return err
	}
	w := weak.Make(resp)
	c := runtime.AddCleanup(resp, forget, w)
	pooledMu.Lock()
	old, had := pooled[w]
	pooled[w] = pooledBuf{bufp: bufp, cleanup: c}
	pooledMu.Unlock()
	if had { // resp decoded again unreleased: its old buffer goes to the GC
		old.cleanup.Stop()
	}
	return nil
}

// Release returns the buffer behind a response decoded by a Pooled
// ClientCodec to the pool; its values must not be used afterwards. It is a
// no-op for other responses.
func Release(resp *BatchGetResponse) {
	w := weak.Make(resp)
	pooledMu.Lock()
	e, ok := pooled[w]
	delete(pooled, w)
	pooledMu.Unlock()
	if ok {
		e.cleanup.Stop()
		resp.Results = nil
		decodePool.Put(e.bufp)
	}
}

// DecodeBatchGetResponse decodes b into resp; the values alias b. It
// accepts exactly the protobuf encodings of BatchGetResponse (unknown fields
// are skipped).
func DecodeBatchGetResponse(b []byte, resp *BatchGetResponse) error {
	n := 0 // count results first: one allocation for all of them
	for rest := b; len(rest) > 0; {
		num, typ, l := protowire.ConsumeTag(rest)
		if l < 0 {
			return protowire.ParseError(l)
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[l:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		if num == 1 && typ == protowire.BytesType {
			n++
		}
		rest = rest[l+m:]
	}
	results := make([]Result, n)
	resp.Results = make([]*Result, 0, n)
	resp.Version = ""
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		b = b[l:]
		if num == 2 && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			resp.Version = string(v)
			b = b[m:]
			continue
		}
		if num != 1 || typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b)
			b = b[m:]
			continue
		}
		inner, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		b = b[m:]
		r := &results[len(resp.Results)]
		if err := decodeResult(inner, r); err != nil {
			return err
		}
		resp.Results = append(resp.Results, r)
	}
	return nil
}

func decodeResult(b []byte, r *Result) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		var m int
		switch {
		case num == 1 && typ == protowire.VarintType:
			var v uint64
			v, m = protowire.ConsumeVarint(b)
			r.Found = v != 0
		case num == 2 && typ == protowire.BytesType:
			r.Value, m = protowire.ConsumeBytes(b)
		case num == 3 && typ == protowire.VarintType:
			var v uint64
			v, m = protowire.ConsumeVarint(b)
			r.Status = KeyStatus(v)
		case num == 4 && typ == protowire.BytesType:
			var v []byte
			v, m = protowire.ConsumeBytes(b)
			r.Error = string(v)
		default:
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return protowire.ParseError(m)
		}
		b = b[m:]
	}
	return nil
}

// Name implements encoding.CodecV2; the wire format is plain protobuf.
func (ClientCodec) Name() string { return proto.Name }

// CallOption selects ClientCodec (not pooled) for a call.
func CallOption() grpc.CallOption { return grpc.ForceCodecV2(ClientCodec{}) }

// PooledCallOption selects ClientCodec{Pooled: true} for a call: the caller
// must Release the response.
func PooledCallOption() grpc.CallOption { return grpc.ForceCodecV2(ClientCodec{Pooled: true}) }
