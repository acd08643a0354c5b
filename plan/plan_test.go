package plan

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// reference is the issue's workload: `pillar plan --rps 200000
// --keys-per-request 12.5 --item-size 50KB --pages 2e9 --updates-per-s 5000
// --replicas 3 --zones 3`.
var reference = Workload{RPS: 200000, KeysPerRequest: 12.5, ItemBytes: 50000, Pages: 2e9, UpdatesPerS: 5000, Replicas: 3, Zones: 3}

func prices(t testing.TB) *Prices {
	t.Helper()
	p, err := DefaultPrices()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func compute(t testing.TB, w Workload, o Options) *Result {
	t.Helper()
	r, err := Compute(w, o, prices(t))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDynamoDBRounding(t *testing.T) {
	for _, c := range []struct {
		size   float64
		strong bool
		want   float64
	}{
		{4100, true, 2}, {4100, false, 1}, // the example: 4.1 KB
		{4096, true, 1}, {4096, false, 0.5}, // exactly one 4 KB unit
		{1, true, 1}, {1, false, 0.5}, // a tiny item still costs a unit
		{8192, true, 2}, {8193, true, 3}, {8193, false, 1.5},
		{50020, true, 13}, {50020, false, 6.5}, // the reference item
	} {
		if got := ReadUnits(c.size, c.strong); got != c.want {
			t.Errorf("ReadUnits(%v, strong=%v) = %v, want %v", c.size, c.strong, got, c.want)
		}
	}
	for _, c := range []struct{ size, want float64 }{{1, 1}, {1024, 1}, {1025, 2}, {4100, 5}, {50020, 49}} {
		if got := WriteUnits(c.size); got != c.want {
			t.Errorf("WriteUnits(%v) = %v, want %v", c.size, got, c.want)
		}
	}
	for _, c := range []struct{ keys, size, want float64 }{
		{12.5, 50020, 1},      // 13 items, 650 KB: one call
		{100, 1000, 1},        // 100 items: one call
		{101, 1000, 2},        // over 100 items
		{100, 400 << 10, 3},   // 40 MB: over 16 MB twice
		{40, 400 << 10, 1},    // 16,384,000 B fits 16 MiB
		{41, 400 << 10, 2},    // one item more does not
		{250, 100 << 10, 3},   // 250 items: 3 by count (25 MB needs 2 by size)
		{1, dynamoMaxItem, 1}, // one item is one call
	} {
		if got := BatchGetCalls(c.keys, c.size); got != c.want {
			t.Errorf("BatchGetCalls(%v keys, %v B) = %v, want %v", c.keys, c.size, got, c.want)
		}
	}
	// Through the model: a 4,080-byte value plus 20 bytes of attribute
	// names and key is a 4.1 KB item.
	w := reference
	w.ItemBytes = 4080
	ev := compute(t, w, Options{})
	st := compute(t, w, Options{StronglyConsistent: true})
	if ev.DynamoDB.ReadUnitsPerItem != 1 || st.DynamoDB.ReadUnitsPerItem != 2 || ev.DynamoDB.WriteUnitsPerItem != 5 {
		t.Errorf("4.1 KB item: eventual %v, strong %v read units, %v write units; want 1, 2, 5",
			ev.DynamoDB.ReadUnitsPerItem, st.DynamoDB.ReadUnitsPerItem, ev.DynamoDB.WriteUnitsPerItem)
	}
	if r := st.DynamoDB.OnDemand[0].Monthly / ev.DynamoDB.OnDemand[0].Monthly; r < 1.999 || r > 2.001 {
		t.Errorf("strongly consistent reads cost %v× eventually consistent ones, want 2×", r)
	}
}

func TestGoldenReference(t *testing.T) {
	p := prices(t)
	r, err := Compute(reference, Options{}, p)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	r.Text(&b)
	rows, err := Sensitivity(reference, Options{}, p, SensitivityItemBytes, SensitivityRPS)
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString("\n")
	SensitivityText(&b, rows)
	golden(t, "reference.golden", b.Bytes())

	// The figures the golden file shows, checked by hand once more.
	if r.Serving.Nodes != 231 || r.Serving.Limit != "storage" {
		t.Errorf("reference: %d nodes limited by %s, want 231 by storage", r.Serving.Nodes, r.Serving.Limit)
	}
	if !(r.RatioProvisioned < 0.8) {
		t.Errorf("reference: Pillar is %.2f of DynamoDB provisioned; the reference system claims at least 20%% cheaper", r.RatioProvisioned)
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./plan -run Golden -update` to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (rerun with -update if the change is intended):\n%s", path, got)
	}
}

func needs(r *Result) map[string]int {
	m := map[string]int{}
	for _, n := range r.Serving.Needs {
		m[n.Name] = n.Nodes
	}
	return m
}

// TestNodeCountMonotone checks the node count (and the need each input
// feeds) moves the right way as each input changes, from three starting
// points limited by different needs.
func TestNodeCountMonotone(t *testing.T) {
	egressBound := reference
	egressBound.RPS, egressBound.Pages = 400000, 5e8
	cpuBound := reference
	cpuBound.ItemBytes, cpuBound.Pages = 1000, 3e9
	for _, base := range []Workload{reference, egressBound, cpuBound} {
		r0 := compute(t, base, Options{})
		t.Logf("base %+v: %d nodes, limit %s", base, r0.Serving.Nodes, r0.Serving.Limit)
		type change struct {
			name string
			from func(*Workload) // applied to both sides
			w    func(*Workload)
			o    func(*Options)
			need string // the need that must move strictly
			dir  int    // +1 up, -1 down
		}
		for _, c := range []change{
			{name: "rps ×2", w: func(w *Workload) { w.RPS *= 2 }, need: "egress", dir: +1},
			{name: "rps ×2 (cpu)", w: func(w *Workload) { w.RPS *= 2 }, need: "cpu", dir: +1},
			{name: "keys ×2", w: func(w *Workload) { w.KeysPerRequest *= 2 }, need: "egress", dir: +1},
			{name: "item ×2", w: func(w *Workload) { w.ItemBytes *= 2 }, need: "storage", dir: +1},
			{name: "item ×2 (egress)", w: func(w *Workload) { w.ItemBytes *= 2 }, need: "egress", dir: +1},
			{name: "pages ×2", w: func(w *Workload) { w.Pages *= 2 }, need: "storage", dir: +1},
			{name: "replicas 2→3", from: func(w *Workload) { w.Replicas = 2 }, w: func(w *Workload) { w.Replicas = 3 }, need: "storage", dir: +1},
			{name: "retained versions 2→3", o: func(o *Options) { o.RetainedVersions = 3 }, need: "storage", dir: +1},
			{name: "compression 1→0.5", o: func(o *Options) { o.Compression = 0.5 }, need: "storage", dir: -1},
			{name: "disk fill 0.7→0.35", o: func(o *Options) { o.DiskFill = 0.35 }, need: "storage", dir: +1},
			{name: "NIC share 0.5→0.25", o: func(o *Options) { o.NICShare = 0.25 }, need: "egress", dir: +1},
			{name: "hedge rate 3.5%→50%", o: func(o *Options) { o.HedgeRate = ptr(0.5) }, need: "egress", dir: +1},
			{name: "per-core rate ÷2", o: func(o *Options) { o.KeysPerCoreS = DefaultKeysPerCoreS / 2 }, need: "cpu", dir: +1},
			{name: "per-core rate ×2", o: func(o *Options) { o.KeysPerCoreS = DefaultKeysPerCoreS * 2 }, need: "cpu", dir: -1},
			{name: "CPU target 0.6→0.3", o: func(o *Options) { o.CPUTarget = 0.3 }, need: "cpu", dir: +1},
			{name: "bigger instance", o: func(o *Options) { o.Instance = "i4i.8xlarge" }, need: "storage", dir: -1},
		} {
			w, o, r0 := base, Options{}, r0
			if c.from != nil {
				c.from(&w)
				r0 = compute(t, w, o)
			}
			if c.w != nil {
				c.w(&w)
			}
			if c.o != nil {
				c.o(&o)
			}
			r1 := compute(t, w, o)
			n0, n1 := needs(r0)[c.need], needs(r1)[c.need]
			if c.dir > 0 && !(n1 > n0) || c.dir < 0 && !(n1 < n0) {
				t.Errorf("%s: %s need went %d → %d, want it to move %+d", c.name, c.need, n0, n1, c.dir)
			}
			d0, d1 := r0.Serving.Nodes, r1.Serving.Nodes
			if c.dir > 0 && d1 < d0 || c.dir < 0 && d1 > d0 {
				t.Errorf("%s: nodes went %d → %d, against the change", c.name, d0, d1)
			}
			if c.need == r0.Serving.Limit && d1 == d0 && needs(r1)[c.need] != n0 {
				// The limiting need moved: the node count must follow
				// unless another need took over at the same count.
				if r1.Serving.Limit == c.need {
					t.Errorf("%s: the limiting need %s moved %d → %d but nodes stayed %d", c.name, c.need, n0, n1, d0)
				}
			}
		}
		// Updates per second feed Lorry and the object store, not the
		// node count.
		w := base
		w.UpdatesPerS *= 10
		if r1 := compute(t, w, Options{}); r1.Serving.Nodes != r0.Serving.Nodes || !(r1.Lorry.Workers > r0.Lorry.Workers) {
			t.Errorf("updates ×10: nodes %d → %d (want unchanged), Lorry workers %d → %d (want more)", r0.Serving.Nodes, r1.Serving.Nodes, r0.Lorry.Workers, r1.Lorry.Workers)
		}
	}
}

func TestNodeCountShape(t *testing.T) {
	for _, w := range []Workload{
		{RPS: 1, KeysPerRequest: 1, ItemBytes: 100, Pages: 10, Replicas: 3, Zones: 3},
		{RPS: 123457, KeysPerRequest: 7, ItemBytes: 30000, Pages: 1e9, Replicas: 2, Zones: 3},
		{RPS: 5000, KeysPerRequest: 12, ItemBytes: 50000, Pages: 1e8, Replicas: 3, Zones: 1},
		{RPS: 77777, KeysPerRequest: 3, ItemBytes: 9000, Pages: 3e8, Replicas: 5, Zones: 5},
	} {
		r := compute(t, w, Options{})
		if n := r.Serving.Nodes; n < w.Replicas || n%w.Zones != 0 {
			t.Errorf("%+v: %d nodes, want at least %d replicas and a multiple of %d zones", w, n, w.Replicas, w.Zones)
		}
		if w.Zones == 1 && (r.CrossAZ.BytesPerS != 0 || r.Pillar[1].Monthly != 0) {
			t.Errorf("one zone: %v cross-AZ bytes/s, want none", r.CrossAZ.BytesPerS)
		}
		if w.Replicas < w.Zones && !(r.CrossAZ.SameZoneFraction < 1) {
			t.Errorf("%d replicas in %d zones: same-zone fraction %v, want below 1", w.Replicas, w.Zones, r.CrossAZ.SameZoneFraction)
		}
	}
}

func TestCrossAZAndLorry(t *testing.T) {
	r := compute(t, reference, Options{HedgeRate: ptr(0.0)})
	if r.CrossAZ.BytesPerS != 0 {
		t.Errorf("same-zone replicas, no hedging: %v cross-AZ bytes/s, want 0", r.CrossAZ.BytesPerS)
	}
	r = compute(t, reference, Options{HedgeRate: ptr(0.1), SameZoneFraction: ptr(0.5)})
	if got := r.CrossAZ.CrossFraction; got < 0.5999 || got > 0.6001 {
		t.Errorf("cross fraction %v, want 0.5 + 0.1", got)
	}
	// A longer batch age means fewer, larger delta batches: fewer PUTs and
	// registrations.
	slow := compute(t, reference, Options{LorryBatchAge: 30 * time.Second})
	fast := compute(t, reference, Options{})
	if !(slow.ObjectStore.LorryBatchesPerS < fast.ObjectStore.LorryBatchesPerS/5) || !(slow.ObjectStore.PutsPerMonth < fast.ObjectStore.PutsPerMonth) {
		t.Errorf("batch age 30s: %v batches/s vs %v at 1s", slow.ObjectStore.LorryBatchesPerS, fast.ObjectStore.LorryBatchesPerS)
	}
	if len(fast.Warnings) == 0 || !strings.Contains(fast.Warnings[0], "--lorry-batch-age") {
		t.Errorf("reference at 1s batches: warnings %q, want the control-plane warning", fast.Warnings)
	}
	// A measured batch rate replaces the derived one.
	if r := compute(t, reference, Options{LorryBatchesPerS: 10}); r.ObjectStore.LorryBatchesPerS != 10 || !(r.ControlPlane.RegisterPerS < 11) {
		t.Errorf("measured 10 batches/s: %v batches/s, %v registrations/s", r.ObjectStore.LorryBatchesPerS, r.ControlPlane.RegisterPerS)
	}
	// No updates: no Lorry batches, no workers.
	w := reference
	w.UpdatesPerS = 0
	if r := compute(t, w, Options{}); r.ObjectStore.LorryBatchesPerS != 0 || r.Lorry.Workers != 0 {
		t.Errorf("no updates: %v batches/s, %d workers", r.ObjectStore.LorryBatchesPerS, r.Lorry.Workers)
	}
}

func TestBadInput(t *testing.T) {
	p := prices(t)
	for _, c := range []struct {
		name string
		w    func(*Workload)
		o    Options
		want string
	}{
		{"negative rps", func(w *Workload) { w.RPS = -5 }, Options{}, "--rps -5"},
		{"zero keys", func(w *Workload) { w.KeysPerRequest = 0 }, Options{}, "--keys-per-request"},
		{"zero item", func(w *Workload) { w.ItemBytes = 0 }, Options{}, "--item-size"},
		{"item over 400 KB", func(w *Workload) { w.ItemBytes = 500e3 }, Options{}, "400 KB"},
		{"zero pages", func(w *Workload) { w.Pages = 0 }, Options{}, "--pages"},
		{"negative updates", func(w *Workload) { w.UpdatesPerS = -1 }, Options{}, "--updates-per-s"},
		{"zero replicas", func(w *Workload) { w.Replicas = 0 }, Options{}, "--replicas 0"},
		{"zero zones", func(w *Workload) { w.Zones = 0 }, Options{}, "--zones 0"},
		{"replicas over zones", func(w *Workload) { w.Replicas, w.Zones = 4, 3 }, Options{}, "--replicas 4 > --zones 3"},
		{"NIC share over 1", nil, Options{NICShare: 1.5}, "--nic-share"},
		{"negative hedge rate", nil, Options{HedgeRate: ptr(-0.1)}, "--hedge-rate"},
		{"same zone over 1", nil, Options{SameZoneFraction: ptr(1.2)}, "--same-zone"},
		{"unknown instance", nil, Options{Instance: "x1.huge"}, `--instance "x1.huge"`},
		{"instance without disk", nil, Options{Instance: "m5.2xlarge"}, "no local disk"},
	} {
		w := reference
		if c.w != nil {
			c.w(&w)
		}
		_, err := Compute(w, c.o, p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
	// Replicas above zones is fine in one zone.
	w := reference
	w.Zones = 1
	if _, err := Compute(w, Options{}, p); err != nil {
		t.Errorf("3 replicas in 1 zone: %v", err)
	}
}

func TestPriceFile(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "prices-aws-us-east-1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePrices(good, "good.yaml"); err != nil {
		t.Fatalf("shipped price file: %v", err)
	}
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"unknown field", "  storage_gb_month:\n    value: 0.25", "  storage_gb_mnth:\n    value: 0.25", "storage_gb_mnth"},
		{"bad date", `date: "2026-12-01"`, `date: "Dec 2026"`, `date "Dec 2026"`},
		{"missing source", "source: https://aws.amazon.com/dynamodb/pricing/on-demand/", "source: ''", "source: missing"},
		{"negative price", "value: 0.125", "value: -0.125", "dynamodb.on_demand_read_per_million: value -0.125"},
		{"not a number", "value: 0.125", "value: cheap", "cannot unmarshal"},
		{"zero hours", "hours_per_month: 730", "hours_per_month: 0", "hours_per_month"},
		{"no vcpus", "vcpus: 16", "vcpus: 0", "instances.i4i.4xlarge.vcpus"},
	} {
		bad := strings.Replace(string(good), c.old, c.new, 1)
		if bad == string(good) {
			t.Fatalf("%s: %q not in the price file", c.name, c.old)
		}
		_, err := ParsePrices([]byte(bad), "bad.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.yaml") {
			t.Errorf("%s: error %v, want one naming bad.yaml and %q", c.name, err, c.want)
		}
	}
	// A section left out entirely.
	cut := good[:bytes.Index(good, []byte("\ns3:"))]
	if _, err := ParsePrices(append(cut, []byte("\ninstances: {}\n")...), "cut.yaml"); err == nil || !strings.Contains(err.Error(), "s3.storage_gb_month: missing") {
		t.Errorf("file without s3: %v", err)
	}
	if _, err := LoadPrices(filepath.Join(t.TempDir(), "none.yaml")); err == nil {
		t.Error("missing price file: no error")
	}
	// Every figure of the shipped file has a date and a source (Validate
	// requires it); the default is the embedded copy of that file.
	p := prices(t)
	if p.DynamoDB.StorageGBMonth.Value != 0.25 || p.Instances["i4i.4xlarge"].DiskGB != 3750 {
		t.Errorf("embedded prices differ from the file: %+v", p.DynamoDB.StorageGBMonth)
	}
}

func TestReadBench(t *testing.T) {
	path := filepath.Join("testdata", "bench-results.json")
	b, err := ReadBench(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	// testdata/bench-results.json: healthy 804.4 req/s × 12 keys on 2
	// CPUs, 840 hedges over 24,136 primaries.
	if b.KeysPerCoreS < 4800 || b.KeysPerCoreS > 4850 || b.HedgeRate < 0.0347 || b.HedgeRate > 0.0349 {
		t.Errorf("bench: %+v", b)
	}
	var o Options
	b.Apply(&o)
	r := compute(t, reference, o)
	d := compute(t, reference, Options{})
	if !(needs(r)["cpu"] > needs(d)["cpu"]) {
		t.Errorf("a slower measured rate (%v keys/s per CPU) did not raise the CPU need: %d vs %d", b.KeysPerCoreS, needs(r)["cpu"], needs(d)["cpu"])
	}
	// The caller's own figures win over the benchmark's.
	o = Options{KeysPerCoreS: 1234, HedgeRate: ptr(0.2)}
	b.Apply(&o)
	if o.KeysPerCoreS != 1234 || *o.HedgeRate != 0.2 {
		t.Errorf("Apply overrode the caller's options: %+v", o)
	}
	if _, err := ReadBench(path, 0); err == nil || !strings.Contains(err.Error(), "--bench-cpus") {
		t.Errorf("no CPU count: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "r.json")
	os.WriteFile(bad, []byte(`{"Options":{"batch_keys":12},"Results":[{"Scenario":"redis","RPS":5}]}`), 0o644)
	if _, err := ReadBench(bad, 2); err == nil || !strings.Contains(err.Error(), "no healthy scenario") {
		t.Errorf("no healthy scenario: %v", err)
	}
	os.WriteFile(bad, []byte(`not json`), 0o644)
	if _, err := ReadBench(bad, 2); err == nil || !strings.Contains(err.Error(), "--bench") {
		t.Errorf("not JSON: %v", err)
	}
}

func TestPlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cost.png")
	if err := Plot(path, reference, Options{}, prices(t), []float64{50e3, 200e3, 500e3}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("plot: %v, %d bytes", err, len(b))
	}
}
