package servelimit

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/servelimit/limittest"
)

func TestRecvLimit(t *testing.T) {
	if got, want := RecvLimit(1024), 1024*18+2*515+4096; got != want || got != 23558 {
		t.Fatalf("RecvLimit(1024) = %d, want %d (23,558)", got, want)
	}
	// The largest valid request fits.
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = make([]byte, 16)
	}
	big := &servepb.BatchGetRequest{Keys: keys, Version: strings.Repeat("v", MaxFieldBytes), CallerId: strings.Repeat("c", MaxFieldBytes)}
	if n := proto.Size(big); n > RecvLimit(1024) {
		t.Fatalf("the largest valid request is %d bytes, over RecvLimit %d", n, RecvLimit(1024))
	}
}

// TestCheckRefusesBeforeDecoding: a request over a limit is refused by its
// encoding alone, naming the count and the limit (or the key, short), and
// without the allocations of decoding it (one slice per key).
func TestCheckRefusesBeforeDecoding(t *testing.T) {
	c := Codec{Who: "cobbled", MaxKeys: 1024}
	good := make([][]byte, 3)
	for i := range good {
		good[i] = make([]byte, 16)
	}
	enc := func(r *servepb.BatchGetRequest) []byte { b, _ := proto.Marshal(r); return b }
	for _, tc := range []struct {
		name string
		b    []byte
		want string // "" = accepted
	}{
		{"good", enc(&servepb.BatchGetRequest{Keys: good, Version: "v1"}), ""},
		{"11,000 empty keys", limittest.EmptyKeys(22000), "11000 keys, over the limit of 1024 per request"},
		{"a 17-byte key", enc(&servepb.BatchGetRequest{Keys: [][]byte{good[0], []byte("0123456789abcdefX")}}), "key 1: 30313233343536373839616263646566…, 17 bytes, want 16"},
		{"an empty key", enc(&servepb.BatchGetRequest{Keys: [][]byte{{}}}), "key 0: empty key, 0 bytes, want 16"},
		{"a long version", enc(&servepb.BatchGetRequest{Keys: good, Version: strings.Repeat("v", 513)}), "version of 513 bytes, over the limit of 512"},
		{"a long caller id", enc(&servepb.BatchGetRequest{Keys: good, CallerId: strings.Repeat("c", 513)}), "caller id of 513 bytes, over the limit of 512"},
	} {
		var r Request
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tc.b)}, &r); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.want == "" {
			if r.Refusal != nil || r.Req == nil || len(r.Req.Keys) != 3 {
				t.Errorf("%s: refused %v / decoded %v", tc.name, r.Refusal, r.Req)
			}
			continue
		}
		if status.Code(r.Refusal) != codes.InvalidArgument || !strings.Contains(r.Refusal.Error(), tc.want) || r.Req != nil {
			t.Errorf("%s: got %v (decoded: %v), want InvalidArgument %q", tc.name, r.Refusal, r.Req != nil, tc.want)
		}
	}

	// 7,000 one-byte keys: decoding them would allocate each.
	data := mem.BufferSlice{mem.SliceBuffer(bytes.Repeat([]byte{0x0a, 0x01, 0x00}, 7000))}
	var r Request
	c.Unmarshal(data, &r)
	if !strings.Contains(status.Convert(r.Refusal).Message(), "7000 keys, over the limit of 1024") {
		t.Fatalf("7,000 keys: %v", r.Refusal)
	}
	allocs := testing.AllocsPerRun(20, func() {
		var r Request
		c.Unmarshal(data, &r)
	})
	if allocs > 20 {
		t.Errorf("refusing 7,000 keys made %.0f allocations; decoding them makes one per key", allocs)
	}
}

// TestOtherMessagesDecodeNormally: the codec reads messages other than
// the guarded request as the standard codec does.
func TestOtherMessagesDecodeNormally(t *testing.T) {
	in := &servepb.BatchGetResponse{Version: "v", Results: []*servepb.Result{{Found: true, Value: []byte("x")}}}
	b, err := Codec{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := new(servepb.BatchGetResponse)
	if err := (Codec{}).Unmarshal(b, out); err != nil || !proto.Equal(in, out) {
		t.Fatalf("got %v, %v", out, err)
	}
	plain := new(servepb.BatchGetRequest)
	raw, _ := proto.Marshal(&servepb.BatchGetRequest{Keys: make([][]byte, 5000)})
	if err := (Codec{MaxKeys: 1}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, plain); err != nil || len(plain.Keys) != 5000 {
		t.Fatalf("a plain *BatchGetRequest is decoded as is: %d keys, %v", len(plain.Keys), err)
	}
}
