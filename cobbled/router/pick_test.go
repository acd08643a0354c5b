package router

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata files with the current output")

// TestPickData runs the replica-choice cases in testdata/pick.txt.
func TestPickData(t *testing.T) {
	const path = "testdata/pick.txt"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if !strings.HasPrefix(line, "pick") {
			out.WriteString(line + "\n")
			continue
		}
		start := i
		var reps []string
		for i++; i < len(lines) && lines[i] != "----"; i++ {
			reps = append(reps, lines[i])
		}
		var want []string
		for i++; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		got := runPick(t, line, reps)
		fmt.Fprintf(&out, "%s\n%s\n----\n%s\n", line, strings.Join(reps, "\n"), got)
		if i < len(lines) {
			out.WriteString("\n")
		}
		if !*rewrite && got != strings.Join(want, "\n") {
			t.Errorf("%s:%d: %s\ngot:  %s\nwant: %s", path, start+1, line, got, strings.Join(want, "\n"))
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimSuffix(out.String(), "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func runPick(t *testing.T, cmd string, reps []string) string {
	t.Helper()
	o := Options{Source: RoutingFunc(nil)}
	var tried []string
	var version, role string
	var base int64 = -1
	for _, arg := range strings.Fields(cmd)[1:] {
		k, v, _ := strings.Cut(arg, "=")
		switch k {
		case "zone":
			o.Zone = v
		case "max-lag":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			o.MaxLagBatches = n
		case "tried":
			tried = strings.Split(v, ",")
		case "version":
			version = v
		case "role":
			role = v
		case "base":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			base = n
		default:
			t.Fatalf("%s: unknown argument %s", cmd, arg)
		}
	}
	o.ensureDefaults()
	r := &Router{opts: o, nodes: map[string]*node{}}
	rt := &control.Routing{Version: 1, Partitions: 1, Replicas: [][]control.Replica{nil}, NewestSeq: []int64{1000}}
	type tweak struct {
		ejected   bool
		notServed bool
		ewma      time.Duration
		idle      time.Duration
		p50       time.Duration
		out       int64
	}
	tweaks := map[string]tweak{}
	for _, line := range reps {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("replica line %q: want id zone state [options]", line)
		}
		rep := control.Replica{NodeID: f[0], Addr: "127.0.0.1:1", Zone: f[1], State: f[2], AppliedSeq: 1000}
		var tw tweak
		for _, opt := range f[3:] {
			k, v, _ := strings.Cut(opt, "=")
			var err error
			switch k {
			case "lag":
				var n int64
				n, err = strconv.ParseInt(v, 10, 64)
				rep.AppliedSeq = 1000 - n
			case "ejected":
				tw.ejected = true
			case "notserved":
				tw.notServed = true
			case "ewma":
				tw.ewma, err = time.ParseDuration(v)
			case "p50":
				tw.p50, err = time.ParseDuration(v)
			case "idle":
				tw.idle, err = time.ParseDuration(v)
			case "out":
				tw.out, err = strconv.ParseInt(v, 10, 64)
			default:
				err = fmt.Errorf("unknown option")
			}
			if err != nil {
				t.Fatalf("replica line %q: %s: %v", line, opt, err)
			}
		}
		rt.Replicas[0] = append(rt.Replicas[0], rep)
		tweaks[rep.NodeID] = tw
	}
	if version != "" {
		if role == "" {
			role = control.RoleLive
		}
		rt.Publications = []control.Publication{{ID: version, Role: role, BaseSeq: []int64{max(base, 0)}}}
		if role == control.RoleLive {
			rt.Live = version
		}
	}
	if err := r.install(rt); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, n := range r.nodes {
			n.conn.Close()
		}
	}()
	byID := map[string]*node{}
	for _, n := range r.nodes {
		byID[n.id] = n
		tw := tweaks[n.id]
		if tw.ejected {
			n.ejectUntil.Store(time.Now().Add(time.Hour).UnixNano())
		}
		n.ewmaNanos.Store(int64(tw.ewma))
		n.lat.count.Store(int64(max(scoreSamples, o.MinSamples))) // measured
		n.lat.p50.Store(int64(tw.p50))
		if tw.idle > 0 {
			n.lastObs.Store(time.Now().Add(-tw.idle).UnixNano())
		} else {
			n.lastObs.Store(time.Now().UnixNano())
		}
		n.outstanding.Store(tw.out)
		if tw.notServed {
			n.markNotServed(version, 0, time.Now().Add(time.Hour))
		}
	}
	g := &gather{r: r, t: r.table.Load()}
	pt := &part{p: 0}
	if version != "" {
		if g.c = r.resolve(g.t, &ReadOptions{Version: version}); g.c.err != nil {
			return "none: " + g.c.err.Error()
		}
		allow, err := g.versionFilter(0)
		if err != nil {
			return "none: " + err.Error()
		}
		pt.allow = allow
	}
	for _, id := range tried {
		pt.tried = append(pt.tried, byID[id])
	}
	chosen := map[string]bool{}
	for range 300 {
		n := g.pick(pt, nil)
		if n == nil {
			return "none: " + g.noReplica(pt).Error()
		}
		chosen[n.id] = true
	}
	var ids []string
	for id := range chosen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return "chosen: " + strings.Join(ids, " ")
}
