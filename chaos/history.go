package chaos

import (
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/pillar"
)

// Check names, in the order the summary prints them.
const (
	CheckConverged   = "1 committed state on every replica"
	CheckNoPhantom   = "2 no read of an uncommitted value"
	CheckMonotonic   = "3 no replica went back"
	CheckBatchChain  = "4 no batch applied twice or skipped"
	maxViolationsPer = 20
)

// op is one committed change of a key. seq is the writer's global sequence
// number; a put's record carries it in UpdatedAtMs, so a read value names
// the op that wrote it.
type op struct {
	seq  int64
	key  int
	del  bool
	sum  [32]byte // SHA-256 of the record bytes (puts)
	sure bool     // the commit returned nil; false: its outcome is unknown
}

// keySpace is the fixed set of page keys the writer changes.
type keySpace struct {
	urls []string
	keys []pillar.Key
	idx  map[pillar.Key]int
}

func newKeySpace(n int) *keySpace {
	ks := &keySpace{idx: map[pillar.Key]int{}}
	for i := range n {
		u := fmt.Sprintf("https://chaos.example/page/%04d", i)
		k, _, err := pillar.KeyOfURL(u)
		if err != nil {
			panic(err)
		}
		ks.urls, ks.keys = append(ks.urls, u), append(ks.keys, k)
		ks.idx[k] = i
	}
	return ks
}

// value builds the record a put of key i at seq writes: deterministic, with
// a size that varies from ~300 bytes to ~9 KB.
func (ks *keySpace) value(i int, seq int64) ([]byte, error) {
	text := strings.Repeat(fmt.Sprintf("key %d version %d. ", i, seq), 12+int(seq*7919%400))
	p := &record.PreparedPage{
		Url: ks.urls[i], ChunkerVersion: "chaos", ModelVersion: "chaos",
		ContentHash: fmt.Sprintf("%x", sha256.Sum256([]byte(text))), UpdatedAtMs: seq,
		Title: fmt.Sprintf("key %d seq %d", i, seq),
	}
	c := &record.Chunk{ChunkNo: 0, Text: text, Start: 0, End: int32(len(text))}
	v := make([]float32, 8)
	for j := range v {
		v[j] = float32((seq+int64(j))%17) / 17
	}
	if err := c.SetVector(v, record.Encoding_ENCODING_FLOAT16); err != nil {
		return nil, err
	}
	p.Chunks = []*record.Chunk{c}
	return record.Marshal(p)
}

// history is what the writer committed and what readers saw, with the
// violations of checks 2 and 3 found while reading. Safe for concurrent use.
type history struct {
	ks *keySpace

	mu    sync.Mutex
	bySeq map[int64]op
	byKey [][]op // ascending seq
	// enqueued counts the records of sure commits per partition; maybe
	// counts those of commits with an unknown outcome.
	enqueued, maybe []int64
	// last is the lowest version each (node, key) may show next.
	last       map[string][]int64
	violations map[string][]string
	counts     map[string]int    // violations per check (all, not only kept)
	reads      map[string]int    // reads by outcome
	readErrs   map[string]string // the first error of each failed-read kind
	phase      string            // the fault in force, "quiet", "converging"
}

func newHistory(ks *keySpace, partitions int) *history {
	return &history{ks: ks, bySeq: map[int64]op{}, byKey: make([][]op, len(ks.keys)),
		enqueued: make([]int64, partitions), maybe: make([]int64, partitions),
		last: map[string][]int64{}, violations: map[string][]string{}, counts: map[string]int{},
		reads: map[string]int{}, readErrs: map[string]string{}, phase: "quiet"}
}

// prepare records ops before their commit (so a read racing the commit's
// return finds them), not yet sure.
func (h *history) prepare(ops []op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range ops {
		o.sure = false
		h.bySeq[o.seq] = o
		h.byKey[o.key] = append(h.byKey[o.key], o)
	}
}

// settle marks ops' commit outcome: ok=true committed, false unknown.
func (h *history) settle(ops []op, partitions int, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range ops {
		p := h.ks.keys[o.key].Partition(partitions)
		if ok {
			o.sure = true
			h.bySeq[o.seq] = o
			ks := h.byKey[o.key]
			for i := len(ks) - 1; i >= 0; i-- {
				if ks[i].seq == o.seq {
					ks[i].sure = true
					break
				}
			}
			h.enqueued[p]++
		} else {
			h.maybe[p]++
		}
	}
}

func (h *history) violate(check, format string, a ...any) {
	h.counts[check]++
	if len(h.violations[check]) < maxViolationsPer {
		h.violations[check] = append(h.violations[check], fmt.Sprintf(format, a...))
	}
}

// observe checks one read result. node is "" for reads through the router
// (only check 2 applies: different replicas may be at different versions).
func (h *history) observe(node string, key int, found bool, value []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var seq int64
	if found {
		rec, err := record.Unmarshal(value)
		if err != nil {
			h.violate(CheckNoPhantom, "%s key %d: undecodable value (%d bytes): %v", nodeName(node), key, len(value), err)
			return
		}
		seq = rec.GetUpdatedAtMs()
		o, ok := h.bySeq[seq]
		switch {
		case !ok:
			h.violate(CheckNoPhantom, "%s key %d: value with seq %d that the writer never wrote", nodeName(node), key, seq)
			return
		case o.del || o.key != key:
			h.violate(CheckNoPhantom, "%s key %d: value claims seq %d, which was %s of key %d", nodeName(node), key, seq, opName(o), o.key)
			return
		case o.sum != sha256.Sum256(value):
			h.violate(CheckNoPhantom, "%s key %d: seq %d: content differs from what was committed", nodeName(node), key, seq)
			return
		}
	}
	if node == "" {
		return
	}
	last := h.last[node]
	if last == nil {
		last = make([]int64, len(h.ks.keys))
		h.last[node] = last
	}
	if found {
		if seq < last[key] {
			h.violate(CheckMonotonic, "%s key %d: showed seq %d after version %d", node, key, seq, last[key])
			return
		}
		last[key] = seq
		return
	}
	if last[key] == 0 {
		return // never seen yet: absent is every key's first version
	}
	if o, ok := h.bySeq[last[key]]; ok && o.del {
		return // still the delete it showed before
	}
	// Absent after a put: a later delete must explain it.
	for _, o := range h.byKey[key] {
		if o.seq > last[key] && o.del {
			last[key] = o.seq
			return
		}
	}
	h.violate(CheckMonotonic, "%s key %d: absent after showing seq %d, and no later delete was committed", node, key, last[key])
}

// final returns what a replica must show for key after convergence: the
// acceptable outcomes (absent: sum zero with del) given commits of unknown
// outcome at the end.
func (h *history) final(key int) []op {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := h.byKey[key]
	var out []op
	for i := len(ops) - 1; i >= 0; i-- {
		out = append(out, ops[i])
		if ops[i].sure {
			return out
		}
	}
	return append(out, op{seq: 0, key: key, del: true, sure: true}) // never written
}

func nodeName(n string) string {
	if n == "" {
		return "router"
	}
	return n
}

func opName(o op) string {
	if o.del {
		return "a delete"
	}
	return "a put"
}

func (h *history) countRead(kind string) {
	h.mu.Lock()
	h.reads[kind]++
	h.mu.Unlock()
}

// countReadErr counts a failed read and keeps the first error of its kind.
// The kind is suffixed with the fault in force (or "after a fault" in the
// quiet time between faults), so failures can be told apart by cause.
func (h *history) countReadErr(kind string, err error) {
	h.mu.Lock()
	kind += " [" + h.phase + "]"
	h.reads[kind]++
	if _, ok := h.readErrs[kind]; !ok {
		h.readErrs[kind] = err.Error()
	}
	h.mu.Unlock()
}

func (h *history) setPhase(p string) {
	h.mu.Lock()
	h.phase = p
	h.mu.Unlock()
}

func (h *history) snapshotReads() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int, len(h.reads))
	for k, v := range h.reads {
		out[k] = v
	}
	return out
}

func (h *history) firstReadErrs() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]string, len(h.readErrs))
	for k, v := range h.readErrs {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
