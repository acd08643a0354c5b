package chaos

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestScheduleSeededEveryKind(t *testing.T) {
	for _, tc := range []struct {
		phase time.Duration
		n     int
	}{{time.Minute, len(AllFaults)}, {5 * time.Minute, 30}} {
		a := Schedule(7, tc.phase, AllFaults, 3)
		if !reflect.DeepEqual(a, Schedule(7, tc.phase, AllFaults, 3)) {
			t.Fatal("same seed, different schedules")
		}
		if reflect.DeepEqual(a, Schedule(8, tc.phase, AllFaults, 3)) {
			t.Fatal("seeds 7 and 8 give the same schedule")
		}
		if len(a) != tc.n {
			t.Fatalf("%s: %d faults, want %d", tc.phase, len(a), tc.n)
		}
		seen := map[string]bool{}
		var end time.Duration
		for _, f := range a {
			seen[f.Kind] = true
			if f.At < end {
				t.Fatalf("fault %v starts before the previous one ended (%s)", f, end)
			}
			if f.For <= 0 || f.Target == "" {
				t.Fatalf("fault %v", f)
			}
			end = f.At + f.For
		}
		if end > tc.phase {
			t.Fatalf("faults run until %s, past the %s phase", end, tc.phase)
		}
		for _, k := range AllFaults {
			if !seen[k] {
				t.Fatalf("%s: kind %s missing", tc.phase, k)
			}
		}
	}
}

func TestParseFaultsAndValidate(t *testing.T) {
	if k, err := ParseFaults("kill-node, partition"); err != nil || len(k) != 2 {
		t.Fatalf("%v %v", k, err)
	}
	if _, err := ParseFaults("kill-node,meteor"); err == nil || !strings.Contains(err.Error(), `"meteor"`) {
		t.Fatalf("unknown kind: %v", err)
	}
	o := Options{Duration: time.Second, Partitions: -1}
	o.ensureDefaults()
	err := o.Validate()
	for _, want := range []string{"Pillar", "duration 1s", "partitions -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate: %v, want it to mention %q", err, want)
		}
	}
}

func TestTCPProxyCutHeal(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	p, err := NewTCPProxy("127.0.0.1:0", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	echo := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
		if string(b) != "ping" {
			return errors.New("bad echo " + string(b))
		}
		return nil
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := echo(c); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if err := echo(c); err == nil {
		t.Fatal("an open connection survived Cut")
	}
	c2, err := net.Dial("tcp", p.Addr)
	if err == nil {
		if echo(c2) == nil {
			t.Fatal("a new connection worked while cut")
		}
		c2.Close()
	}
	p.Heal()
	c3, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := echo(c3); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
	if p.Dropped.Load() < 2 {
		t.Fatalf("dropped %d, want at least 2", p.Dropped.Load())
	}
}

func TestS3ProxyModes(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	var gotHost string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotHost = r.Host
		if r.Method == http.MethodPut {
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Len", string(rune('0'+len(b)%10)))
			return
		}
		_, _ = w.Write(body)
	}))
	defer up.Close()
	p, err := NewS3Proxy(up.URL, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	get := func() ([]byte, int, error) {
		resp, err := http.Get(p.Endpoint + "/bucket/key")
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return b, resp.StatusCode, err
	}
	if b, code, err := get(); err != nil || code != 200 || !bytes.Equal(b, body) {
		t.Fatalf("pass: %d %v", code, err)
	}
	if !strings.HasPrefix(gotHost, "127.0.0.1:") || gotHost == strings.TrimPrefix(up.URL, "http://") {
		t.Fatalf("upstream saw Host %q, want the proxy's (signatures cover it)", gotHost)
	}
	p.Set(S3Error, 1, 0)
	if b, code, err := get(); err != nil || (code != 500 && code != 503) || !bytes.Contains(b, []byte("<Error>")) {
		t.Fatalf("error: %d %v %.80s", code, err, b)
	}
	p.Set(S3Truncate, 1, 0)
	if b, _, err := get(); err == nil || len(b) >= len(body) {
		t.Fatalf("truncate: %d bytes, err %v", len(b), err)
	}
	p.Set(S3BitFlip, 1, 0)
	b, code, err := get()
	if err != nil || code != 200 || len(b) != len(body) || sha256.Sum256(b) == sha256.Sum256(body) {
		t.Fatalf("bitflip: %d %v, %d bytes", code, err, len(b))
	}
	diff := 0
	for i := range b {
		for x := b[i] ^ body[i]; x != 0; x &= x - 1 {
			diff++
		}
	}
	if diff != 1 {
		t.Fatalf("bitflip flipped %d bits", diff)
	}
	// Truncation and bit flips leave uploads alone.
	req, _ := http.NewRequest(http.MethodPut, p.Endpoint+"/bucket/key", strings.NewReader("hello"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("put under bitflip: %v", err)
	}
	resp.Body.Close()
	p.Set(S3Slow, 1, 300*time.Millisecond)
	t0 := time.Now()
	if _, code, err := get(); err != nil || code != 200 || time.Since(t0) < 300*time.Millisecond {
		t.Fatalf("slow: %d %v after %s", code, err, time.Since(t0))
	}
	p.Set(S3Cut, 1, 0)
	if _, _, err := get(); err == nil {
		t.Fatal("cut: request succeeded")
	}
	p.Heal()
	if b, code, err := get(); err != nil || code != 200 || !bytes.Equal(b, body) {
		t.Fatalf("healed: %d %v", code, err)
	}
	if q, inj := p.Counts(); inj < 5 || q < 8 { // the client may retry the cut GET once
		t.Fatalf("counts: %d requests, %d injected", q, inj)
	}
}

// TestHistoryCatchesViolations feeds the checker read results a broken
// system could give and checks it reports each.
func TestHistoryCatchesViolations(t *testing.T) {
	ks := newKeySpace(4)
	h := newHistory(ks, 2)
	put := func(seq int64, key int) []byte {
		v, err := ks.value(key, seq)
		if err != nil {
			t.Fatal(err)
		}
		ops := []op{{seq: seq, key: key, sum: sha256.Sum256(v)}}
		h.prepare(ops)
		h.settle(ops, 2, true)
		return v
	}
	del := func(seq int64, key int) {
		ops := []op{{seq: seq, key: key, del: true}}
		h.prepare(ops)
		h.settle(ops, 2, true)
	}
	v1 := put(1, 0)
	v2 := put(2, 0)
	del(3, 0)
	v4 := put(4, 0)
	// A correct replica: absent, v1, v2, absent (delete 3), v4.
	for _, x := range []struct {
		found bool
		v     []byte
	}{{false, nil}, {true, v1}, {true, v2}, {false, nil}, {true, v4}} {
		h.observe("n1", 0, x.found, x.v)
	}
	if len(h.violations) != 0 {
		t.Fatalf("correct sequence flagged: %v", h.violations)
	}
	// Going back: v4 then v2 on n1.
	h.observe("n1", 0, true, v2)
	// Absent after v4 with no later delete.
	h.observe("n2", 0, true, v4)
	h.observe("n2", 0, false, nil)
	// Through the router any committed version is fine.
	h.observe("", 0, true, v1)
	if h.counts[CheckMonotonic] != 2 {
		t.Fatalf("monotonic violations %d, want 2: %v", h.counts[CheckMonotonic], h.violations)
	}
	// Phantoms: a value never written, changed content, another key's value.
	v9, _ := ks.value(0, 9)
	h.observe("", 0, true, v9)
	bad := bytes.Clone(v2)
	bad[len(bad)-1] ^= 1
	h.observe("n3", 0, true, bad)
	h.observe("", 1, true, v1)
	h.observe("", 2, true, []byte("garbage"))
	if h.counts[CheckNoPhantom] != 4 {
		t.Fatalf("phantom violations %d, want 4: %v", h.counts[CheckNoPhantom], h.violations[CheckNoPhantom])
	}
	if f := h.final(0); len(f) != 1 || f[0].seq != 4 {
		t.Fatalf("final(0) = %+v", f)
	}
	if f := h.final(3); len(f) != 1 || !f[0].del {
		t.Fatalf("final of a key never written = %+v", f)
	}
	// A commit with an unknown outcome: either state is acceptable.
	ops := []op{{seq: 5, key: 0, del: true}}
	h.prepare(ops)
	h.settle(ops, 2, false)
	if f := h.final(0); len(f) != 2 || f[0].seq != 5 || f[1].seq != 4 {
		t.Fatalf("final(0) with an unknown commit = %+v", f)
	}
}
