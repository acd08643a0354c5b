package cobbled

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/clock"
	"github.com/pillarkit/pillar/internal/objstore"
)

const pubA, pubB = "cv1/m", "cv2/m"

// getVersion runs one BatchGet of keys for version on n and decodes it.
func getVersion(t *testing.T, n *Node, version string, keys []string) *servepb.BatchGetResponse {
	t.Helper()
	raw := make([][]byte, len(keys))
	for i, k := range keys {
		raw[i] = []byte(k)
	}
	out, err := n.batchGet(context.Background(), &servepb.BatchGetRequest{Keys: raw, Version: version})
	must(t, err)
	var resp servepb.BatchGetResponse
	enc := out.(*servepb.Encoded)
	must(t, unmarshal(enc, &resp))
	enc.Buf.Free()
	return &resp
}

// TestPublicationsSideBySide: one database per publication; a snapshot of
// one replaces only its own; a delta of a publication without a database is
// passed; BatchGet reads exactly the version asked for (all keys), names
// it in the response, and answers KEY_NOT_SERVED naming a version it does
// not hold; everything survives a reopen.
func TestPublicationsSideBySide(t *testing.T) {
	const parts, p = 2, 1
	objects, dir := t.TempDir(), t.TempDir()
	ctx := context.Background()
	k := keysIn(5, p, parts)
	n := openTestNode(t, dir, objects, parts, nil)
	type b struct {
		kind, pub string
		ops       []op
	}
	log := []b{
		{batch.KindSnapshot, pubA, []op{{key: k[0], val: "a1"}, {key: k[1], val: "b1"}}},
		{batch.KindDelta, pubB, []op{{key: k[0], val: "nobody"}}}, // passed: B has no database yet
		{batch.KindSnapshot, pubB, []op{{key: k[0], val: "B0"}, {key: k[2], val: "B2"}}},
		{batch.KindDelta, pubA, []op{{key: k[1], val: "b4"}, {key: k[0], del: true}}},
		{batch.KindDelta, pubB, []op{{key: k[3], val: "B5"}}},
		{batch.KindSnapshot, pubA, []op{{key: k[4], val: "a6"}}}, // replaces A only
	}
	for i, x := range log {
		m := writePubBatch(t, objects, parts, p, "s-0"+string(rune('1'+i)), x.kind, x.pub, x.ops, 0)
		must(t, n.Apply(ctx, Batch{Seq: int64(i + 1), Manifest: m}))
	}
	want := map[string]model{pubA: {k[4]: "a6"}, pubB: {k[0]: "B0", k[2]: "B2", k[3]: "B5"}}
	checkPubModels(t, n, p, k, want)
	if got := counterValue(n.opts.Metrics.passed); got != 1 {
		t.Fatalf("passed %v batches, want 1", got)
	}
	st := heldStats(n, p)
	if st.AppliedSeq != 6 || len(st.Publications) != 2 || st.Publications[0].ID != pubA || st.Publications[1].ID != pubB ||
		st.Publications[0].Bytes == 0 || st.Publications[1].Bytes == 0 || !st.Serving {
		t.Fatalf("stats %+v", st)
	}

	// One version per request, named in the response.
	resp := getVersion(t, n, pubB, k)
	if resp.Version != pubB || !resp.Results[0].Found || string(resp.Results[0].Value) != "B0" || resp.Results[4].Found {
		t.Fatalf("version %s: %v", pubB, resp)
	}
	resp = getVersion(t, n, pubA, k)
	if resp.Version != pubA || resp.Results[0].Found || string(resp.Results[4].Value) != "a6" {
		t.Fatalf("version %s: %v", pubA, resp)
	}
	// A version the node does not hold: every key says so, naming it.
	resp = getVersion(t, n, "cv9/x", k[:2])
	for _, r := range resp.Results {
		if r.Status != servepb.KeyStatus_KEY_NOT_SERVED || !strings.Contains(r.Error, `"cv9/x"`) {
			t.Fatalf("unknown version: %v", r)
		}
	}
	// "" reads the live publication as the node last saw routing.
	n.observePublications(ctx, &Routing{Live: pubB, Publications: []Publication{{ID: pubA, Role: RolePrevious}, {ID: pubB, Role: RoleLive}}})
	if resp = getVersion(t, n, "", k[:1]); resp.Version != pubB || string(resp.Results[0].Value) != "B0" {
		t.Fatalf(`version "" with live %s: %v`, pubB, resp)
	}

	n.Close()
	n = openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	checkPubModels(t, n, p, k, want)
	info, err := InspectDir(dir)
	must(t, err)
	if r := info.Replicas[0]; len(r.Publications) != 2 || r.Publications[1].ID != pubB || r.Publications[1].Bytes == 0 || len(r.Leftovers) != 0 {
		t.Fatalf("inspect %+v", r)
	}
}

// TestLegacyStateFormat: a replica written before publications
// (state.json {"db","seq","batch"}) opens as the "" publication and keeps
// working; the state written afterwards still names "db" for older
// binaries.
func TestLegacyStateFormat(t *testing.T) {
	const parts, p = 2, 0
	objects, dir := t.TempDir(), t.TempDir()
	ctx := context.Background()
	steps, universe := testSteps(p, parts)
	bs, models := writeSteps(t, objects, parts, p, "l", steps[:3])
	n := openTestNode(t, dir, objects, parts, nil)
	for _, b := range bs[:2] {
		must(t, n.Apply(ctx, b))
	}
	n.Close()
	pdir := filepath.Join(dir, partDirName(p))
	st, err := readState(pdir)
	must(t, err)
	old, _ := json.Marshal(map[string]any{"db": st.Pubs[""].DB, "seq": st.Seq, "batch": st.Batch})
	must(t, os.WriteFile(filepath.Join(pdir, stateFile), old, 0o644))

	n = openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	checkModel(t, n, p, universe, models[2])
	must(t, n.Apply(ctx, bs[2]))
	checkModel(t, n, p, universe, models[3])
	b, err := os.ReadFile(filepath.Join(pdir, stateFile))
	must(t, err)
	var raw map[string]any
	must(t, json.Unmarshal(b, &raw))
	if raw["db"] != st.Pubs[""].DB || raw["seq"] != float64(3) {
		t.Fatalf("state after the legacy open: %s", b)
	}
}

// TestRetireGraceDropsOnlyRetired: a publication the routing lists as
// retired keeps its databases for RetireGrace (on the node's clock), then
// they are dropped; live, previous and candidate publications, and one the
// routing does not mention, are never dropped. A dropped publication's
// later batches are passed while the routing says it is retired; once it
// is registered again, its next snapshot is applied.
func TestRetireGraceDropsOnlyRetired(t *testing.T) {
	const parts = 2
	objects, dir := t.TempDir(), t.TempDir()
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	opt := func(o *Options) { o.Clock = clk; o.RetireGrace = time.Minute }
	n := openTestNode(t, dir, objects, parts, opt)
	pubs := []string{"cv1/m", "cv2/m", "cv3/m", "cv4/m", "cv5/m"} // live, previous, candidate, retired, unlisted
	keys := map[int][]string{}
	for p := range parts {
		keys[p] = keysIn(1, p, parts)
		for i, pub := range pubs {
			m := writePubBatch(t, objects, parts, p, "r"+string(rune('0'+p))+"-"+string(rune('1'+i)), batch.KindSnapshot, pub, []op{{key: keys[p][0], val: pub}}, 0)
			must(t, n.Apply(ctx, Batch{Seq: int64(i + 1), Manifest: m}))
		}
	}
	r := &Routing{Live: pubs[0], Publications: []Publication{
		{ID: pubs[0], Role: RoleLive}, {ID: pubs[1], Role: RolePrevious}, {ID: pubs[2], Role: RoleCandidate}, {ID: pubs[3], Role: RoleRetired}}}
	if d := n.observePublications(ctx, r); len(d) != 0 {
		t.Fatalf("dropped %v at once", d)
	}
	clk.Advance(59 * time.Second)
	if d := n.observePublications(ctx, r); len(d) != 0 {
		t.Fatalf("dropped %v before the grace passed", d)
	}
	clk.Advance(time.Second)
	if d := n.observePublications(ctx, r); !slices.Equal(d, []string{pubs[3]}) {
		t.Fatalf("dropped %v, want only the retired %s", d, pubs[3])
	}
	check := func(n *Node) {
		t.Helper()
		for p := range parts {
			held := map[string]bool{}
			for _, ps := range heldStats(n, p).Publications {
				held[ps.ID] = true
			}
			for i, pub := range pubs {
				if held[pub] != (i != 3) {
					t.Fatalf("partition %d: publication %s held=%v", p, pub, held[pub])
				}
				if i != 3 {
					checkPubModels(t, n, p, keys[p], map[string]model{pub: {keys[p][0]: pub}})
				}
			}
			gens, _ := filepath.Glob(filepath.Join(dir, partDirName(p), "db-*"))
			if len(gens) != 4 {
				t.Fatalf("partition %d: generations %v, want 4", p, gens)
			}
		}
	}
	check(n)
	n.Close()
	n = openTestNode(t, dir, objects, parts, opt)
	defer n.Close()
	check(n)
	// A later batch of the dropped publication is passed, not applied.
	n.observePublications(ctx, r)
	m := writePubBatch(t, objects, parts, 0, "late", batch.KindSnapshot, pubs[3], []op{{key: keys[0][0], val: "late"}}, 0)
	must(t, n.Apply(ctx, Batch{Seq: 6, Manifest: m}))
	if got := counterValue(n.opts.Metrics.passed); got != 1 {
		t.Fatalf("passed %v, want 1", got)
	}
	check(n)
	// Registered again (a candidate once more): its next snapshot applies.
	r.Publications[3].Role = RoleCandidate
	n.observePublications(ctx, r)
	m = writePubBatch(t, objects, parts, 0, "again", batch.KindSnapshot, pubs[3], []op{{key: keys[0][0], val: "again"}}, 0)
	must(t, n.Apply(ctx, Batch{Seq: 7, Manifest: m}))
	checkPubModels(t, n, 0, keys[0], map[string]model{pubs[3]: {keys[0][0]: "again"}})
	st, err := readState(filepath.Join(dir, partDirName(0)))
	must(t, err)
	if slices.Contains(st.Retired, pubs[3]) {
		t.Fatalf("state still lists %s as retired here: %+v", pubs[3], st)
	}
	// The live one is never dropped, even if a confused table says retired.
	r.Publications[0].Role = RoleRetired
	clk.Advance(time.Hour)
	n.observePublications(ctx, r)
	clk.Advance(time.Hour)
	if d := n.observePublications(ctx, r); len(d) != 0 {
		t.Fatalf("dropped %v: the live publication", d)
	}
}

// TestCorruptPublicationRebuild: a block of one publication's database
// goes bad. Reads of it fail for the bad keys and then answer
// KEY_NOT_SERVED while it is rebuilt from the batch log; the other
// publication keeps serving throughout (so the replica stays routed), and
// the rebuilt publication serves the right data again.
func TestCorruptPublicationRebuild(t *testing.T) {
	const parts, p = 2, 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tmp := t.TempDir()
	objects := filepath.Join(tmp, "objects")
	_, cc := startControl(t, ctx, tmp, parts)
	ks := keysIn(4, p, parts)
	for _, m := range []batch.Manifest{
		writePubBatch(t, objects, parts, p, "a1", batch.KindSnapshot, pubA, []op{{key: ks[0], val: "a"}, {key: ks[1], val: "b"}}, 0),
		writePubBatch(t, objects, parts, p, "b1", batch.KindSnapshot, pubB, []op{{key: ks[0], val: "B"}}, 0),
		writePubBatch(t, objects, parts, p, "a2", batch.KindDelta, pubA, []op{{key: ks[2], val: "c"}}, 0),
	} {
		_, err := cc.RegisterBatch(ctx, &m)
		must(t, err)
	}
	nodeDir := filepath.Join(tmp, "n1")
	n, stop := runNodeStop(t, ctx, "n1", nodeDir, objects, cc)
	waitFor(t, "seq 3", 20*time.Second, func() bool { return replicaOf(t, ctx, cc, p, "n1").AppliedSeq == 3 })
	pp := n.part(p)
	pp.applyMu.Lock()
	gen := pp.st.Pubs[pubA].DB
	pp.applyMu.Unlock()
	files, err := filepath.Glob(filepath.Join(pp.dir, gen, "*.sst"))
	must(t, err)
	slices.Sort(files)
	stop()
	b, err := os.ReadFile(files[0]) // publication A's snapshot
	must(t, err)
	b[60] ^= 0x20
	must(t, os.WriteFile(files[0], b, 0o644))
	n = runNode(t, ctx, "n1", nodeDir, objects, cc)

	resp := getVersion(t, n, pubA, []string{ks[2], ks[0]})
	if r := resp.Results[0]; r.Status != servepb.KeyStatus_KEY_OK || string(r.Value) != "c" {
		t.Fatalf("good key of the corrupt publication: %v", r)
	}
	if r := resp.Results[1]; r.Status != servepb.KeyStatus_KEY_ERROR || !strings.Contains(r.Error, "Corruption") {
		t.Fatalf("bad key: %v", r)
	}
	// B serves throughout.
	if resp = getVersion(t, n, pubB, ks[:1]); string(resp.Results[0].Value) != "B" {
		t.Fatalf("other publication: %v", resp)
	}
	waitFor(t, "publication A rebuilt and the fault cleared", 20*time.Second, func() bool {
		st := heldStats(n, p)
		rep := replicaOf(t, ctx, cc, p, "n1")
		all := len(st.Publications) == 2
		for _, ps := range st.Publications {
			all = all && ps.Serving
		}
		return all && st.Serving && rep.Fault == "" && rep.State == control.StateUp && st.AppliedSeq == 3
	})
	if c := counterValue(n.opts.Metrics.rebuilds); c != 1 {
		t.Fatalf("rebuilds %v", c)
	}
	checkPubModels(t, n, p, ks, map[string]model{pubA: {ks[0]: "a", ks[1]: "b", ks[2]: "c"}, pubB: {ks[0]: "B"}})
}

// TestRunPublicationsWithControlPlane: the ingest loop against the real
// control plane: each publication's snapshot lands in its own database,
// the bytes of each reach the control plane (ListPublications), a
// promotion reaches the node's view of live, and a publication the control
// plane retires is dropped from disk after RetireGrace while the live and
// previous ones stay.
func TestRunPublicationsWithControlPlane(t *testing.T) {
	const parts = 2
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tmp := t.TempDir()
	objects := filepath.Join(tmp, "objects")
	_, cc := startControl(t, ctx, tmp, parts)
	pubs := []string{"cv1/m", "cv2/m", "cv3/m"}
	keys := map[int][]string{0: keysIn(2, 0, parts), 1: keysIn(2, 1, parts)}
	publish := func(pub string) {
		for p := range parts {
			m := writePubBatch(t, objects, parts, p, "snap-"+strings.ReplaceAll(pub, "/", "-")+"-"+string(rune('0'+p)), batch.KindSnapshot, pub,
				[]op{{key: keys[p][0], val: pub}, {key: keys[p][1], val: pub + "!"}}, 0)
			_, err := cc.RegisterBatch(ctx, &m)
			must(t, err)
		}
	}
	objs, err := objstore.Open(ctx, objects, nil)
	must(t, err)
	nodeDir := filepath.Join(tmp, "n1")
	n, err := Open(ctx, Options{ID: "n1", Addr: "127.0.0.1:1", Dir: nodeDir, CacheBytes: 1 << 20, Control: FromControlClient(cc), Objects: objs,
		LongPoll: 200 * time.Millisecond, Heartbeat: 20 * time.Millisecond, RetryBackoff: 5 * time.Millisecond, RetryBackoffMax: 50 * time.Millisecond,
		RetireGrace: 50 * time.Millisecond})
	must(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(rctx) }()
	defer func() { stop(); <-done; n.Close() }()

	holds := func(pub string) func() bool {
		return func() bool {
			ps, _, err := cc.ListPublications(ctx)
			if err != nil {
				return false
			}
			for _, x := range ps {
				if x.ID == pub {
					return x.Ready
				}
			}
			return false
		}
	}
	_, err = cc.RegisterPublication(ctx, pubs[0], true)
	must(t, err)
	publish(pubs[0])
	waitFor(t, pubs[0]+" ready", 20*time.Second, holds(pubs[0]))
	for i, pub := range pubs[1:] {
		_, err = cc.RegisterPublication(ctx, pub, false)
		must(t, err)
		publish(pub)
		waitFor(t, pub+" ready", 20*time.Second, holds(pub))
		_, err = cc.Promote(ctx, pub, false)
		must(t, err)
		waitFor(t, "the node to see "+pub+" live", 20*time.Second, func() bool { return n.Stats().Live == pub })
		if i == 0 {
			// Both on disk, each reported with its own bytes.
			waitFor(t, "publication bytes at the control plane", 20*time.Second, func() bool {
				ps, _, err := cc.ListPublications(ctx)
				if err != nil {
					return false
				}
				got := 0
				for _, x := range ps {
					for _, r := range x.Replicas {
						if r.NodeID == "n1" && r.Bytes > 0 {
							got++
						}
					}
				}
				return got == 2*parts
			})
		}
	}
	// pubs[0] is retired now (promoting pubs[2] retired the previous
	// pubs[0]); its databases go after the grace, the others stay.
	defer func() {
		if t.Failed() {
			info, _ := InspectDir(nodeDir)
			rt, _ := cc.GetRouting(ctx)
			t.Logf("inspect %+v\nrouting live %q publications %+v", info, rt.Live, rt.Publications)
		}
	}()
	waitFor(t, pubs[0]+" dropped from disk", 20*time.Second, func() bool {
		info, err := InspectDir(nodeDir)
		if err != nil {
			return false
		}
		for _, r := range info.Replicas {
			if len(r.Publications) != 2 || r.Publications[0].ID != pubs[1] || r.Publications[1].ID != pubs[2] {
				return false
			}
		}
		return len(info.Replicas) == parts
	})
	for p := range parts {
		checkPubModels(t, n, p, keys[p], map[string]model{
			pubs[1]: {keys[p][0]: pubs[1], keys[p][1]: pubs[1] + "!"},
			pubs[2]: {keys[p][0]: pubs[2], keys[p][1]: pubs[2] + "!"}})
	}
	if resp := getVersion(t, n, "", keys[0][:1]); resp.Version != pubs[2] {
		t.Fatalf(`version "" reads %q, want the live %s`, resp.Version, pubs[2])
	}
}
