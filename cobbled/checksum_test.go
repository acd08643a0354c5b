package cobbled

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestChecksumComparesReplicas: two replicas that applied the same batches
// have equal checksums over the whole key range, reopened or not; a replica
// one delta behind differs, as does one that applied every batch after a
// delta it never saw (the defect a convergence check must catch).
func TestChecksumComparesReplicas(t *testing.T) {
	const parts, p = 4, 1
	objects := t.TempDir()
	steps, _ := testSteps(p, parts)
	bs, models := writeSteps(t, objects, parts, p, "c", steps)
	ctx := context.Background()
	sum := func(n *Node) Checksum {
		t.Helper()
		cs, err := n.Checksum(p, "")
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	a := openTestNode(t, t.TempDir(), objects, parts, nil)
	defer a.Close()
	bDir := t.TempDir()
	b := openTestNode(t, bDir, objects, parts, nil)
	for _, x := range bs {
		must(t, a.Apply(ctx, x))
		must(t, b.Apply(ctx, x))
	}
	ca, cb := sum(a), sum(b)
	if ca != cb {
		t.Fatalf("same batches, different checksums:\n%+v\n%+v", ca, cb)
	}
	if want := int64(len(models[len(bs)])); ca.Keys != want || ca.AppliedSeq != int64(len(bs)) || ca.First == "" || ca.Last < ca.First {
		t.Fatalf("checksum %+v: want %d keys at seq %d", ca, want, len(bs))
	}
	b.Close()
	b = openTestNode(t, bDir, objects, parts, nil)
	defer b.Close()
	if cb := sum(b); cb != ca {
		t.Fatalf("after reopen: %+v, want %+v", cb, ca)
	}

	// One delta behind.
	c := openTestNode(t, t.TempDir(), objects, parts, nil)
	defer c.Close()
	for _, x := range bs[:len(bs)-1] {
		must(t, c.Apply(ctx, x))
	}
	if cc := sum(c); cc.SHA256 == ca.SHA256 || cc.AppliedSeq == ca.AppliedSeq {
		t.Fatalf("a replica one batch behind has the same checksum: %+v", cc)
	}

	// The last delta skipped but recorded as applied: same applied seq, other data.
	d := openTestNode(t, t.TempDir(), objects, parts, nil)
	defer d.Close()
	for i, x := range bs {
		if i == len(bs)-1 {
			pt := d.part(p)
			pt.applyMu.Lock()
			pt.st.Seq = x.Seq
			pt.applied.Store(x.Seq)
			pt.applyMu.Unlock()
			continue
		}
		must(t, d.Apply(ctx, x))
	}
	if cd := sum(d); cd.AppliedSeq != ca.AppliedSeq || cd.SHA256 == ca.SHA256 {
		t.Fatalf("a replica that skipped a delta: %+v; the complete one: %+v", cd, ca)
	}

	// Over HTTP: one partition, every held one, a bad and an unheld one.
	srv := httptest.NewServer(a.ChecksumHandler())
	defer srv.Close()
	var one Checksum
	getJSON(t, srv.URL+"/checksum?partition=1", http.StatusOK, &one)
	if one != ca {
		t.Fatalf("GET ?partition=1: %+v, want %+v", one, ca)
	}
	var all []Checksum
	getJSON(t, srv.URL+"/checksum", http.StatusOK, &all)
	if len(all) != 1 || all[0] != ca {
		t.Fatalf("GET /checksum: %+v", all)
	}
	getJSON(t, srv.URL+"/checksum?partition=x", http.StatusBadRequest, nil)
	getJSON(t, srv.URL+"/checksum?partition=2", http.StatusNotFound, nil)
	getJSON(t, srv.URL+"/checksum?partition=1&version=nope/none", http.StatusNotFound, nil)
	if _, err := a.Checksum(3, ""); !errors.Is(err, ErrNotServed) {
		t.Fatalf("unheld partition: %v", err)
	}
}

func getJSON(t *testing.T, url string, code int, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != code {
		t.Fatalf("GET %s: %s, want %d", url, resp.Status, code)
	}
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
}
