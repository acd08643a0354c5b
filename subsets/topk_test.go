package subsets

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// refTop is the obvious reference: sort everything, take k.
func refTop(ms []Match, k int, desc bool) []string {
	c := append([]Match(nil), ms...)
	t := &TopK{desc: desc}
	sort.Slice(c, func(i, j int) bool { return t.better(&c[i], &c[j]) })
	if len(c) > k {
		c = c[:k]
	}
	keys := make([]string, len(c))
	for i := range c {
		keys[i] = c[i].PageKey
	}
	return keys
}

func TestTopKMatchesSortReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := r.IntN(300)
		k := 1 + r.IntN(20)
		desc := r.IntN(2) == 0
		ms := make([]Match, n)
		for i := range ms {
			ms[i] = Match{PageKey: fmt.Sprintf("%032x", r.Uint64()), Score: float64(r.IntN(10)), NoScore: r.IntN(10) == 0}
		}
		want := refTop(ms, k, desc)
		// Any push order gives the same ranking.
		for shuffle := 0; shuffle < 3; shuffle++ {
			r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
			tk := NewTopK(k, desc, "by x")
			for _, m := range ms {
				tk.Push(m)
			}
			got := tk.Ranked()
			if len(got) != len(want) {
				t.Fatalf("trial %d: %d kept, want %d", trial, len(got), len(want))
			}
			for i := range got {
				if got[i].PageKey != want[i] {
					t.Fatalf("trial %d (k=%d desc=%v): rank %d is %s, want %s", trial, k, desc, i+1, got[i].PageKey, want[i])
				}
			}
			if tk.Seen() != int64(n) {
				t.Fatalf("Seen %d, want %d", tk.Seen(), n)
			}
			mem := tk.Members()
			for i := 1; i < len(mem); i++ {
				if mem[i-1].PageKey >= mem[i].PageKey {
					t.Fatalf("Members not sorted by key")
				}
			}
			tk.Reset()
			if len(tk.Ranked()) != 0 || tk.Seen() != 0 {
				t.Fatal("Reset left state")
			}
		}
	}
}

// TestTopKPerHost: the top 1,000 pages per host by score, with many hosts.
func TestTopKPerHost(t *testing.T) {
	set, err := Parse("p.yaml", []byte(`
signals: {score: number}
policies:
  - name: top-per-host
    exported: true
    top: {k: 1000, per: host, by: score desc}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	hosts := []int{5, 999, 1000, 1001, 4000}
	var matches []Match
	byHost := map[string][]Match{}
	for h, n := range hosts {
		host := fmt.Sprintf("h%d.example", h)
		for i := 0; i < n; i++ {
			p := Page{Key: fmt.Sprintf("%016x%016x", r.Uint64(), r.Uint64()), Host: host,
				Signals: map[string]SignalValue{"score": {Num: float64(r.IntN(500)) / 100, IsNum: true}}}
			ms := set.Eval(&p, testAsOf)
			if len(ms) != 1 || ms[0].Group != host {
				t.Fatalf("eval: %+v", ms)
			}
			matches = append(matches, ms...)
			byHost[host] = append(byHost[host], ms[0])
		}
	}
	members, err := set.Members("top-per-host", matches)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	for _, m := range members {
		in[m.PageKey] = true
	}
	total := 0
	for h, n := range hosts {
		host := fmt.Sprintf("h%d.example", h)
		want := refTop(byHost[host], 1000, true)
		total += len(want)
		if len(want) != min(n, 1000) {
			t.Fatalf("%s: reference kept %d", host, len(want))
		}
		for _, k := range want {
			if !in[k] {
				t.Fatalf("%s: %s should be a member", host, k)
			}
		}
	}
	if len(members) != total {
		t.Fatalf("%d members, want %d", len(members), total)
	}
	if _, err := set.NewTopK("nope"); err == nil {
		t.Error("NewTopK of an unknown subset succeeded")
	}
}

func TestNewTopKPanicsOnZero(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewTopK(0) did not panic")
		}
	}()
	NewTopK(0, true, "")
}
