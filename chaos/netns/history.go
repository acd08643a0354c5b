package netns

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
	CheckPublished  = "1 every answer was published for its key and version"
	CheckOneVersion = "2 no batch mixes versions"
	CheckIdentical  = "3 every replica of a partition holds identical, committed data"
	CheckOnce       = "4 every Lorry record applied exactly once in effect"
	CheckScenario   = "5 each scenario's own promise"
	maxExamples     = 12
)

// write is one published value or delete of a key in a publication: a
// snapshot's put (seq of the snapshot) or a Lorry record (the writer's seq).
// A put's record carries seq in UpdatedAtMs and the publication in
// ChunkerVersion, so every value read names the write that made it.
type write struct {
	seq  int64
	del  bool
	sum  [32]byte
	sure bool // committed; false: the outcome is unknown
	snap bool // part of a snapshot
}

// keySpace is the fixed set of page keys.
type keySpace struct {
	urls []string
	keys []pillar.Key
}

func newKeySpace(n int) *keySpace {
	ks := &keySpace{}
	for i := range n {
		u := fmt.Sprintf("https://netns.example/page/%05d", i)
		k, _, err := pillar.KeyOfURL(u)
		if err != nil {
			panic(err)
		}
		ks.urls, ks.keys = append(ks.urls, u), append(ks.keys, k)
	}
	return ks
}

// value is the record a put of key i in publication pub at seq writes:
// deterministic, 300 B to 9 KB.
func (ks *keySpace) value(pub string, i int, seq int64) []byte {
	text := strings.Repeat(fmt.Sprintf("%s key %d write %d. ", pub, i, seq), 10+int((seq*7919+int64(i)*31)%350))
	p := &record.PreparedPage{Url: ks.urls[i], ChunkerVersion: pub, ModelVersion: "netns",
		ContentHash: fmt.Sprintf("%x", sha256.Sum256([]byte(text))), UpdatedAtMs: seq, Title: fmt.Sprintf("key %d seq %d", i, seq)}
	p.Chunks = []*record.Chunk{{ChunkNo: 0, Text: text, Start: 0, End: int32(len(text))}}
	b, err := record.Marshal(p)
	if err != nil {
		panic(err)
	}
	return b
}

// history is what was published and what readers saw. Safe for concurrent
// use.
type history struct {
	ks    *keySpace
	parts int

	mu     sync.Mutex
	writes map[string][][]write // publication → key → writes, ascending seq
	// enqueued counts the Lorry records of sure commits per partition;
	// maybe those of commits with an unknown outcome.
	enqueued, maybe []int64
	examples        map[string][]string
	counts          map[string]int
	reads           map[string]int // by scenario window: "<scenario> ok|failed"
	firstErr        map[string]string
}

func newHistory(ks *keySpace, parts int) *history {
	return &history{ks: ks, parts: parts, writes: map[string][][]write{}, enqueued: make([]int64, parts), maybe: make([]int64, parts),
		examples: map[string][]string{}, counts: map[string]int{}, reads: map[string]int{}, firstErr: map[string]string{}}
}

func (h *history) violate(check, format string, a ...any) {
	h.counts[check]++
	if len(h.examples[check]) < maxExamples {
		h.examples[check] = append(h.examples[check], fmt.Sprintf(format, a...))
	}
}

// Violate records a violation from outside the read path.
func (h *history) Violate(check, format string, a ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.violate(check, format, a...)
}

func (h *history) pubWrites(pub string) [][]write {
	w := h.writes[pub]
	if w == nil {
		w = make([][]write, len(h.ks.keys))
		h.writes[pub] = w
	}
	return w
}

// snapshot records that pub's snapshot at seq holds every key's value.
func (h *history) snapshot(pub string, seq int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.pubWrites(pub)
	for i := range w {
		w[i] = append(w[i], write{seq: seq, sum: sha256.Sum256(h.ks.value(pub, i, seq)), sure: true, snap: true})
	}
}

// prepare records Lorry writes before their commit (a read racing the
// commit's return finds them), not yet sure.
func (h *history) prepare(pub string, keys []int, ws []write) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.pubWrites(pub)
	for j, k := range keys {
		w[k] = append(w[k], ws[j])
	}
}

// settle marks a commit's outcome.
func (h *history) settle(pub string, keys []int, seqs []int64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.pubWrites(pub)
	for j, k := range keys {
		p := h.ks.keys[k].Partition(h.parts)
		if !ok {
			h.maybe[p]++
			continue
		}
		h.enqueued[p]++
		for i := len(w[k]) - 1; i >= 0; i-- {
			if w[k][i].seq == seqs[j] {
				w[k][i].sure = true
				break
			}
		}
	}
}

// observe checks one answer of a batch read with publication version:
// found values must be a write of that key in that publication (checks 1
// and 2); an absent key needs a delete of it there.
func (h *history) observe(where, version string, key int, found bool, value []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.writes[version]
	if w == nil {
		h.violate(CheckPublished, "%s: key %d answered from publication %q, never published", where, key, version)
		return
	}
	if !found {
		for _, x := range w[key] {
			if x.del {
				return
			}
		}
		h.violate(CheckPublished, "%s: key %d absent in %s, which holds it and never deleted it", where, key, version)
		return
	}
	rec, err := record.Unmarshal(value)
	if err != nil {
		h.violate(CheckPublished, "%s: key %d: undecodable value (%d bytes): %v", where, key, len(value), err)
		return
	}
	if rec.GetChunkerVersion() != version {
		h.violate(CheckOneVersion, "%s: key %d: a value of publication %q in a batch answered from %q", where, key, rec.GetChunkerVersion(), version)
		return
	}
	seq, sum := rec.GetUpdatedAtMs(), sha256.Sum256(value)
	for _, x := range w[key] {
		if x.seq == seq {
			if x.del || x.sum != sum {
				break
			}
			return
		}
	}
	h.violate(CheckPublished, "%s: key %d in %s: value of write %d, which was not published with that content", where, key, version, seq)
}

// read counts one batch read in the scenario window.
func (h *history) read(window string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.reads[window+" ok"]++
		return
	}
	h.reads[window+" failed"]++
	if _, ok := h.firstErr[window]; !ok {
		h.firstErr[window] = err.Error()
	}
}

func (h *history) failed(window string) (int, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reads[window+" failed"], h.firstErr[window]
}

// expected is pub's state of key k after every sure write: the value's
// digest, or absent; ok is false when a write after the last sure one has
// an unknown outcome (then only replica-to-replica equality is checked).
func (h *history) expected(pub string, k int) (value []byte, present, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.writes[pub][k]
	last := -1
	for i, x := range ws {
		if x.sure {
			last = i
		}
	}
	if last < 0 {
		return nil, false, false
	}
	for _, x := range ws[last+1:] {
		if !x.sure {
			return nil, false, false
		}
	}
	x := ws[last]
	if x.del {
		return nil, false, true
	}
	return h.ks.value(pub, k, x.seq), true, true
}

// pubs lists the publications with writes.
func (h *history) pubs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for p := range h.writes {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
