package servepb

import (
	"bytes"
	"runtime"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// TestDecodeBatchGetResponse checks the hand decoder against the generated
// code on every field combination, including unknown fields.
func TestDecodeBatchGetResponse(t *testing.T) {
	want := &BatchGetResponse{Results: []*Result{
		{Found: true, Value: bytes.Repeat([]byte("v"), 300)},
		{},
		{Found: true},
		{Status: KeyStatus_KEY_NOT_SERVED, Error: "partition 3 not served by node n1"},
		{Status: KeyStatus_KEY_ERROR, Error: "boom"},
	}}
	b, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, 0x10, 0x07) // unknown field 2 (varint)
	var got BatchGetResponse
	if err := DecodeBatchGetResponse(b, &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, want) {
		t.Fatalf("got %v, want %v", &got, want)
	}
	for _, bad := range [][]byte{{0x0a, 0x05, 0x08}, {0x0a}, {0x0a, 0x02, 0x12, 0x09}} {
		if err := DecodeBatchGetResponse(bad, &got); err == nil {
			t.Errorf("%x: no error", bad)
		}
	}
}

func TestPooledCodecRelease(t *testing.T) {
	want := &BatchGetResponse{Results: []*Result{{Found: true, Value: []byte("abc")}, {}}}
	b, _ := proto.Marshal(want)
	var resp BatchGetResponse
	if err := (ClientCodec{Pooled: true}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:3]), mem.SliceBuffer(b[3:])}, &resp); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&resp, want) {
		t.Fatalf("got %v", &resp)
	}
	Release(&resp)
	if resp.Results != nil {
		t.Fatal("Release kept the results that alias the pooled buffer")
	}
	pooledMu.Lock()
	defer pooledMu.Unlock()
	if len(pooled) != 0 {
		t.Fatalf("%d buffers still tracked", len(pooled))
	}
}

// An unreleased pooled response must not be kept alive by the pool's
// bookkeeping: once unreachable its entry goes (Release is optional).
func TestPooledUnreleasedIsCollected(t *testing.T) {
	b, _ := proto.Marshal(&BatchGetResponse{Results: []*Result{{Found: true, Value: []byte("abc")}}})
	tracked := func() int {
		pooledMu.Lock()
		defer pooledMu.Unlock()
		return len(pooled)
	}
	before := tracked()
	func() {
		for range 10 {
			bufp := PooledBuffer(len(b))
			copy(*bufp, b)
			if err := DecodePooled(bufp, new(BatchGetResponse)); err != nil {
				t.Fatal(err)
			}
		}
	}()
	if n := tracked(); n != before+10 {
		t.Fatalf("%d responses tracked, want %d", n, before+10)
	}
	for i := 0; tracked() > before; i++ {
		if i == 1000 {
			t.Fatalf("%d unreleased, unreachable responses still tracked after %d collections", tracked()-before, i)
		}
		runtime.GC()
		runtime.Gosched()
	}
}
