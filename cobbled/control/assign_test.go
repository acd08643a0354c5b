package control

import (
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files under testdata/")

// TestAssignGolden runs testdata/assign.txt: each case is a command line
// ("assign partitions=N replicas=R" or "move partitions=N replicas=R"),
// the nodes one per line ("id zone"; for move, "+id zone" joins and "-id"
// leaves after the first assignment), "----", and the expected output.
func TestAssignGolden(t *testing.T) {
	path := filepath.Join("testdata", "assign.txt")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for i, block := range strings.Split(strings.TrimSpace(string(data)), "\n====\n") {
		in, want := splitCase(block)
		got := runAssignCase(t, in)
		if !*rewrite {
			if strings.TrimSpace(want) != strings.TrimSpace(got) {
				t.Errorf("case %d:\n%s\n---- got:\n%s\n---- want:\n%s", i, in, got, want)
			}
		}
		if i > 0 {
			out.WriteString("\n====\n")
		}
		out.WriteString(strings.TrimSpace(in) + "\n----\n" + strings.TrimSpace(got) + "\n")
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// splitCase splits a data-driven case at its "----" line.
func splitCase(block string) (in, want string) {
	lines := strings.Split(block, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "----" {
			return strings.Join(lines[:i], "\n"), strings.Join(lines[i+1:], "\n")
		}
	}
	return block, ""
}

func runAssignCase(t *testing.T, in string) string {
	lines := strings.Split(strings.TrimSpace(in), "\n")
	fields := strings.Fields(lines[0])
	args := map[string]int{}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%q: %v", f, err)
		}
		args[k] = n
	}
	var before, after []Candidate
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		zone := ""
		if len(f) > 1 {
			zone = f[1]
		}
		switch {
		case strings.HasPrefix(f[0], "+"):
			after = append(after, Candidate{ID: f[0][1:], Zone: zone})
		case strings.HasPrefix(f[0], "-"):
			id := f[0][1:]
			kept := after[:0]
			for _, c := range after {
				if c.ID != id {
					kept = append(kept, c)
				}
			}
			after = kept
		default:
			before = append(before, Candidate{ID: f[0], Zone: zone})
			after = append(after, Candidate{ID: f[0], Zone: zone})
		}
	}
	zoneOf := map[string]string{}
	for _, c := range append(append([]Candidate{}, before...), after...) {
		zoneOf[c.ID] = c.Zone
	}
	var b strings.Builder
	a := Assign(args["partitions"], before, args["replicas"])
	switch fields[0] {
	case "assign":
		load := map[string]int{}
		for p, ids := range a {
			fmt.Fprintf(&b, "p%d:", p)
			for _, id := range ids {
				fmt.Fprintf(&b, " %s(%s)", id, zoneOf[id])
				load[id]++
			}
			b.WriteString("\n")
		}
		b.WriteString("load:")
		for _, c := range before {
			fmt.Fprintf(&b, " %s=%d", c.ID, load[c.ID])
		}
	case "move":
		a2 := Assign(args["partitions"], after, args["replicas"])
		moved := 0
		for p := range a {
			if !equalStrings(a[p], a2[p]) {
				fmt.Fprintf(&b, "p%d: %s -> %s\n", p, strings.Join(a[p], ","), strings.Join(a2[p], ","))
				moved += len(setMinus(a2[p], a[p]))
			}
		}
		fmt.Fprintf(&b, "replicas moved: %d", moved)
	default:
		t.Fatalf("unknown command %q", fields[0])
	}
	return b.String()
}

func setMinus(a, b []string) []string {
	in := map[string]bool{}
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
		}
	}
	return out
}

func zonesOf(ids []string, zone map[string]string) int {
	z := map[string]bool{}
	for _, id := range ids {
		z[zone[id]] = true
	}
	return len(z)
}

// checkAssignment checks the static properties of one assignment.
func checkAssignment(t *testing.T, label string, nodes []Candidate, a [][]string, replicas int) {
	t.Helper()
	zone := map[string]string{}
	zones := map[string]bool{}
	for _, n := range nodes {
		zone[n.ID] = n.Zone
		zones[n.Zone] = true
	}
	want := min(replicas, len(nodes))
	for p, ids := range a {
		if len(ids) != want {
			t.Fatalf("%s: p%d has %d replicas %v, want %d", label, p, len(ids), ids, want)
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("%s: p%d: node %s twice in %v", label, p, id, ids)
			}
			if _, ok := zone[id]; !ok {
				t.Fatalf("%s: p%d: unknown node %s", label, p, id)
			}
			seen[id] = true
		}
		if got, want := zonesOf(ids, zone), min(want, len(zones)); got != want {
			t.Fatalf("%s: p%d: replicas %v span %d zones, want %d", label, p, ids, got, want)
		}
	}
}

// TestAssignProperties checks, over many random clusters, that every
// partition gets min(3, nodes) distinct nodes spread over as many zones as
// possible, that the result does not depend on node order, and that a join
// or a leave moves only the replicas it must: on a join only the new node
// enters (replacing at most one replica per partition), on a leave only the
// partitions that held the node change, each by one replacement.
func TestAssignProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	const replicas = 3
	for iter := 0; iter < 300; iter++ {
		partitions := 1 + rng.Intn(96)
		nNodes := 1 + rng.Intn(14)
		nZones := 1 + rng.Intn(5)
		var nodes []Candidate
		for i := 0; i < nNodes; i++ {
			nodes = append(nodes, Candidate{ID: fmt.Sprintf("node-%d-%d", iter, i), Zone: fmt.Sprintf("z%d", rng.Intn(nZones))})
		}
		label := fmt.Sprintf("iter %d (P=%d, %d nodes, %d zones)", iter, partitions, nNodes, nZones)
		a := Assign(partitions, nodes, replicas)
		checkAssignment(t, label, nodes, a, replicas)

		shuffled := append([]Candidate(nil), nodes...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for p, ids := range Assign(partitions, shuffled, replicas) {
			if !equalStrings(ids, a[p]) {
				t.Fatalf("%s: p%d depends on node order: %v vs %v", label, p, ids, a[p])
			}
		}

		// Join.
		joined := Candidate{ID: fmt.Sprintf("new-%d", iter), Zone: fmt.Sprintf("z%d", rng.Intn(nZones+1))}
		withNew := append(append([]Candidate(nil), nodes...), joined)
		b := Assign(partitions, withNew, replicas)
		checkAssignment(t, label+" after join", withNew, b, replicas)
		gained := 0
		for p := range a {
			in, out := setMinus(b[p], a[p]), setMinus(a[p], b[p])
			if len(in) > 1 || (len(in) == 1 && in[0] != joined.ID) {
				t.Fatalf("%s: join of %s: p%d gained %v (%v -> %v)", label, joined.ID, p, in, a[p], b[p])
			}
			if len(out) > len(in) || (nNodes < replicas && len(out) != 0) {
				t.Fatalf("%s: join: p%d lost %v (%v -> %v)", label, p, out, a[p], b[p])
			}
			gained += len(in)
		}
		// The newcomer takes a fair share: with enough partitions it is not
		// left idle.
		if partitions >= 32 && gained == 0 {
			t.Fatalf("%s: the new node got no replica", label)
		}

		// Leave.
		if nNodes < 2 {
			continue
		}
		leaver := nodes[rng.Intn(nNodes)]
		var rest []Candidate
		for _, n := range nodes {
			if n.ID != leaver.ID {
				rest = append(rest, n)
			}
		}
		c := Assign(partitions, rest, replicas)
		checkAssignment(t, label+" after leave", rest, c, replicas)
		for p := range a {
			in, out := setMinus(c[p], a[p]), setMinus(a[p], c[p])
			held := len(setMinus(a[p], []string{leaver.ID})) != len(a[p])
			if !held && (len(in) != 0 || len(out) != 0) {
				t.Fatalf("%s: leave of %s: p%d changed without holding it: %v -> %v", label, leaver.ID, p, a[p], c[p])
			}
			if held && (len(out) != 1 || out[0] != leaver.ID || len(in) > 1) {
				t.Fatalf("%s: leave of %s: p%d moved too much: %v -> %v", label, leaver.ID, p, a[p], c[p])
			}
		}
	}
}

// TestAssignBalance checks that replicas spread evenly enough over equal
// nodes: no node holds more than twice its fair share.
func TestAssignBalance(t *testing.T) {
	var nodes []Candidate
	for i := 0; i < 12; i++ {
		nodes = append(nodes, Candidate{ID: fmt.Sprintf("n%02d", i), Zone: fmt.Sprintf("z%d", i%3)})
	}
	a := Assign(1024, nodes, 3)
	load := map[string]int{}
	for _, ids := range a {
		for _, id := range ids {
			load[id]++
		}
	}
	fair := 1024 * 3 / 12
	var loads []int
	for _, n := range nodes {
		loads = append(loads, load[n.ID])
		if load[n.ID] > 2*fair || load[n.ID] < fair/2 {
			t.Errorf("node %s holds %d replicas, fair share %d", n.ID, load[n.ID], fair)
		}
	}
	sort.Ints(loads)
	t.Logf("loads: %v (fair %d)", loads, fair)
}
