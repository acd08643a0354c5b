package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Fault kinds.
const (
	FaultKillNode    = "kill-node"    // kill -9 a cobbled node, restart it after For
	FaultKillLorry   = "kill-lorry"   // kill -9 Lorry, restart it after For
	FaultKillControl = "kill-control" // kill -9 the control plane, restart it after For
	FaultS3Error     = "s3-error"     // object-store requests answered 500/503
	FaultS3Slow      = "s3-slow"      // object-store requests delayed
	FaultS3Truncate  = "s3-truncate"  // downloads cut short
	FaultS3BitFlip   = "s3-bitflip"   // downloads with one bit flipped
	FaultPartition   = "partition"    // a node cut off from the control plane, the object store and readers
	FaultDiskFull    = "disk-full"    // a node's data file system filled up
	// FaultCorruptObject registers a batch whose SST is damaged while its
	// manifest (size, SHA-256) matches; the heal retracts it.
	FaultCorruptObject = "corrupt-object"
)

// AllFaults lists every fault kind.
var AllFaults = []string{FaultKillNode, FaultKillLorry, FaultKillControl, FaultS3Error, FaultS3Slow,
	FaultS3Truncate, FaultS3BitFlip, FaultPartition, FaultDiskFull, FaultCorruptObject}

// Fault is one scheduled fault.
type Fault struct {
	At     time.Duration // after the start of the fault phase
	For    time.Duration // how long it lasts
	Kind   string
	Target string  // "n1".."nN", "lorry", "nodes" (every node), "all"
	Frac   float64 // fraction of object-store requests hit
	Delay  time.Duration
}

func (f Fault) String() string {
	s := fmt.Sprintf("%8s +%-6s %-12s %s", f.At.Round(100*time.Millisecond), f.For.Round(100*time.Millisecond), f.Kind, f.Target)
	if f.Frac > 0 {
		s += fmt.Sprintf(" frac=%.2f", f.Frac)
	}
	if f.Delay > 0 {
		s += fmt.Sprintf(" delay=%s", f.Delay)
	}
	return s
}

// Schedule derives the fault schedule of a run from its seed: the phase is
// cut into slots of about 10 s (at least one per kind); the first slots hold
// every kind once in a seeded order, the rest seeded picks. A fault starts
// in the first fifth of its slot and lasts 40–70 % of it, so faults do not
// overlap and the system gets a little quiet time between them.
func Schedule(seed int64, phase time.Duration, kinds []string, nodes int) []Fault {
	if len(kinds) == 0 || phase <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0xc4a05))
	n := max(len(kinds), int(phase/(10*time.Second)))
	slot := phase / time.Duration(n)
	order := append([]string(nil), kinds...)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for len(order) < n {
		order = append(order, kinds[rng.IntN(len(kinds))])
	}
	node := func() string { return fmt.Sprintf("n%d", 1+rng.IntN(nodes)) }
	out := make([]Fault, 0, n)
	for i, kind := range order {
		f := Fault{Kind: kind,
			At:  time.Duration(i)*slot + time.Duration(rng.Float64()*0.2*float64(slot)),
			For: time.Duration((0.4 + 0.3*rng.Float64()) * float64(slot))}
		switch kind {
		case FaultKillNode, FaultPartition, FaultDiskFull:
			f.Target = node()
		case FaultKillLorry:
			f.Target = "lorry"
		case FaultKillControl:
			f.Target = "control"
		case FaultCorruptObject:
			f.Target = "a partition"
		case FaultS3Error, FaultS3Slow:
			f.Target = []string{node(), "lorry", "all"}[rng.IntN(3)]
			f.Frac = []float64{0.3, 0.6, 1}[rng.IntN(3)]
			if kind == FaultS3Slow {
				f.Delay = time.Duration(200+rng.IntN(1800)) * time.Millisecond
			}
		case FaultS3Truncate, FaultS3BitFlip:
			f.Target = []string{node(), "nodes"}[rng.IntN(2)]
			f.Frac = []float64{0.3, 0.6, 1}[rng.IntN(3)]
		}
		out = append(out, f)
	}
	return out
}

// ParseFaults parses a comma-separated list of fault kinds ("all" or ""
// for every kind).
func ParseFaults(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" || s == "all" {
		return append([]string(nil), AllFaults...), nil
	}
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		ok := false
		for _, a := range AllFaults {
			ok = ok || a == k
		}
		if !ok {
			return nil, fmt.Errorf("chaos: fault kind %q: want one of %s", k, strings.Join(AllFaults, ", "))
		}
		out = append(out, k)
	}
	return out, nil
}
