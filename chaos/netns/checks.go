package netns

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/lorry"
)

// partKeys is the key space's keys of partition p, in key order.
func (r *run) partKeys(p int) []int {
	var ks []int
	for i, k := range r.ks.keys {
		if k.Partition(r.o.Partitions) == p {
			ks = append(ks, i)
		}
	}
	sort.Slice(ks, func(a, b int) bool { return bytes.Compare(r.ks.keys[ks[a]][:], r.ks.keys[ks[b]][:]) < 0 })
	return ks
}

// expectedChecksum is what cobbled.Checksum of pub's partition p must be
// after every committed write; ok is false when a write's outcome is
// unknown.
func (r *run) expectedChecksum(pub string, p int) (sum string, keys int64, ok bool) {
	h := sha256.New()
	var lenbuf [2 * binary.MaxVarintLen64]byte
	for _, k := range r.partKeys(p) {
		v, present, known := r.h.expected(pub, k)
		if !known {
			return "", 0, false
		}
		if !present {
			continue
		}
		kb := r.ks.keys[k][:]
		n := binary.PutUvarint(lenbuf[:], uint64(len(kb)))
		n += binary.PutUvarint(lenbuf[n:], uint64(len(v)))
		h.Write(lenbuf[:n])
		h.Write(kb)
		h.Write(v)
		keys++
	}
	return hex.EncodeToString(h.Sum(nil)), keys, true
}

func (r *run) fetchChecksum(ctx context.Context, n *node, p int, pub string) (cobbled.Checksum, error) {
	u := fmt.Sprintf("http://%s/checksum?partition=%d&version=%s", n.httpAddr(), p, url.QueryEscape(pub))
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return cobbled.Checksum{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b strings.Builder
		buf := make([]byte, 512)
		k, _ := resp.Body.Read(buf)
		b.Write(buf[:k])
		return cobbled.Checksum{}, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(b.String()))
	}
	var cs cobbled.Checksum
	return cs, json.NewDecoder(resp.Body).Decode(&cs)
}

// checkIdentical is check 3: for every publication that is not retired and
// every partition, each replica holding it has the checksum of the whole
// key range that the committed writes give (or, where an outcome is
// unknown, the same one as every other replica). A replica that differs
// is read key by key to name the keys and their range.
func (r *run) checkIdentical(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	pubs, _, err := r.c.admin.ListPublications(cctx)
	if err != nil {
		r.h.Violate(CheckIdentical, "publications: %v", err)
		return
	}
	compared := 0
	known := map[string]bool{}
	for _, p := range r.h.pubs() {
		known[p] = true
	}
	for _, ps := range pubs {
		if ps.Role == control.RoleRetired || !known[ps.ID] {
			continue
		}
		byPart := map[int][]string{}
		for _, rep := range ps.Replicas {
			if rep.Holding {
				byPart[rep.Partition] = append(byPart[rep.Partition], rep.NodeID)
			}
		}
		for p := 0; p < r.o.Partitions; p++ {
			want, wantKeys, known := r.expectedChecksum(ps.ID, p)
			sums := map[string][]string{}
			for _, id := range byPart[p] {
				n := r.nodeByID(id)
				if n == nil {
					r.h.Violate(CheckIdentical, "partition %d %s: replica %s is not running", p, ps.ID, id)
					continue
				}
				cs, err := r.fetchChecksum(cctx, n, p, ps.ID)
				if err != nil {
					r.h.Violate(CheckIdentical, "partition %d %s: replica %s: %v", p, ps.ID, id, err)
					continue
				}
				compared++
				sums[cs.SHA256] = append(sums[cs.SHA256], id)
				if known && cs.SHA256 != want {
					r.h.Violate(CheckIdentical, "partition %d %s: replica %s (seq %d) holds %d keys, checksum %.12s; committed: %d keys, %.12s; %s",
						p, ps.ID, id, cs.AppliedSeq, cs.Keys, cs.SHA256, wantKeys, want, r.diffKeys(cctx, n, p, ps.ID))
				}
			}
			if len(sums) > 1 {
				var parts []string
				for s, ids := range sums {
					parts = append(parts, fmt.Sprintf("%s: %.12s", strings.Join(ids, ","), s))
				}
				sort.Strings(parts)
				r.h.Violate(CheckIdentical, "partition %d %s: replicas differ (%s)", p, ps.ID, strings.Join(parts, "; "))
			}
			if len(byPart[p]) < 3 && ps.Role == control.RoleLive {
				r.h.Violate(CheckIdentical, "partition %d: only %d replicas hold live %s", p, len(byPart[p]), ps.ID)
			}
		}
	}
	r.sum.ChecksumsCompared = compared
}

// diffKeys reads every key of partition p from n and names the ones that
// differ from the committed state, with their range.
func (r *run) diffKeys(ctx context.Context, n *node, p int, pub string) string {
	cl, closeFn, err := r.c.dialServe(n.addr())
	if err != nil {
		return "key diff: " + err.Error()
	}
	defer closeFn()
	keys := r.partKeys(p)
	var bad []int
	for lo := 0; lo < len(keys); lo += 100 {
		hi := min(lo+100, len(keys))
		var raw [][]byte
		for _, k := range keys[lo:hi] {
			raw = append(raw, r.ks.keys[k][:])
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cl.BatchGet(cctx, &servepb.BatchGetRequest{Keys: raw, Version: pub})
		cancel()
		if err != nil {
			return "key diff: " + err.Error()
		}
		for i, x := range resp.Results {
			k := keys[lo+i]
			v, present, known := r.h.expected(pub, k)
			if !known {
				continue
			}
			if x.Status != servepb.KeyStatus_KEY_OK || x.Found != present || (present && !bytes.Equal(x.Value, v)) {
				bad = append(bad, k)
			}
		}
	}
	if len(bad) == 0 {
		return "no key of the key space differs (extra keys?)"
	}
	first, last := r.ks.keys[bad[0]], r.ks.keys[bad[len(bad)-1]]
	return fmt.Sprintf("%d keys differ, key range [%s, %s]", len(bad), first, last)
}

// checkOnce is check 4: per partition, the registered delta batches cover
// the queue offsets [0, end) exactly once in order (none twice, none
// skipped), end is what the writer committed, and Lorry committed it all.
// With check 3 (every replica holds what the records give) every record is
// applied on every replica exactly once in effect.
func (r *run) checkOnce(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ls, err := lorry.Status(cctx, r.c.store, time.Now())
	if err != nil {
		r.h.Violate(CheckOnce, "lorry status: %v", err)
		return
	}
	batches := 0
	for _, s := range ls {
		p := s.Partition
		next := int64(0)
		ids := map[string]bool{}
		var after int64
		for {
			bs, err := r.c.admin.ListBatches(cctx, p, after, 1000, 0)
			if err != nil {
				r.h.Violate(CheckOnce, "partition %d: list batches: %v", p, err)
				break
			}
			if len(bs) == 0 {
				break
			}
			for _, b := range bs {
				after = b.Seq
				batches++
				if ids[b.Manifest.ID] {
					r.h.Violate(CheckOnce, "partition %d: batch %s registered twice", p, b.Manifest.ID)
				}
				ids[b.Manifest.ID] = true
				if b.Manifest.Kind != batch.KindDelta || strings.Contains(b.Manifest.Source, ":fresh:") || strings.Contains(b.Manifest.Source, ":replay:") {
					continue // snapshots, and fresh-lane or replay batches, claim no queue range
				}
				first, end := b.Manifest.QueueFirst, b.Manifest.QueueEnd
				switch {
				case end <= first:
					r.h.Violate(CheckOnce, "partition %d: batch %s: queue range [%d,%d)", p, b.Manifest.ID, first, end)
				case first < next:
					r.h.Violate(CheckOnce, "partition %d: batch %s (seq %d) covers [%d,%d), overlapping what came before (up to %d): applied twice", p, b.Manifest.ID, b.Seq, first, end, next)
				case first > next:
					r.h.Violate(CheckOnce, "partition %d: batch %s (seq %d) covers [%d,%d): offsets [%d,%d) skipped", p, b.Manifest.ID, b.Seq, first, end, next, first)
				}
				next = max(next, end)
			}
		}
		r.h.mu.Lock()
		sure, maybe := r.h.enqueued[p], r.h.maybe[p]
		r.h.mu.Unlock()
		if next < sure || next > sure+maybe {
			r.h.Violate(CheckOnce, "partition %d: registered batches cover [0,%d), the writer committed %d records (+%d unknown)", p, next, sure, maybe)
		}
		if s.Committed != next || s.QueueEnd != next {
			r.h.Violate(CheckOnce, "partition %d: Lorry committed offset %d, queue end %d; batches cover [0,%d)", p, s.Committed, s.QueueEnd, next)
		}
	}
	r.sum.Batches = batches
}

// sabotage deletes a contiguous range of keys of one partition from one
// replica's live database while its node is down, then restarts the node:
// a replica whose catch-up lost data. Check 3 must name the partition and
// the range.
func (r *run) sabotage(ctx context.Context) error {
	if _, err := r.waitConverged(ctx, 3*time.Minute); err != nil {
		return err
	}
	n := r.c.nodes[0]
	const p = 0
	n.p.hold(true)
	n.p.kill()
	defer func() { n.p.hold(false) }()
	raw, err := os.ReadFile(filepath.Join(n.data, fmt.Sprintf("p%05d", p), "state.json"))
	if err != nil {
		return err
	}
	var st struct {
		Pubs map[string]struct {
			DB string `json:"db"`
		} `json:"pubs"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return err
	}
	gen := st.Pubs[r.live].DB
	if gen == "" {
		return fmt.Errorf("%s partition %d: no database of %s in state.json", n.id, p, r.live)
	}
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	db, err := grocksdb.OpenDb(opts, filepath.Join(n.data, fmt.Sprintf("p%05d", p), gen))
	if err != nil {
		return err
	}
	// Five neighbouring keys that the committed state holds (a key a delete
	// already removed would not differ).
	keys := r.partKeys(p)
	lo := -1
	for i := len(keys) / 3; i+5 <= len(keys) && lo < 0; i++ {
		all := true
		for _, k := range keys[i : i+5] {
			if _, present, known := r.h.expected(r.live, k); !present || !known {
				all = false
				break
			}
		}
		if all {
			lo = i
		}
	}
	if lo < 0 {
		return fmt.Errorf("partition %d: no five neighbouring keys present in %s", p, r.live)
	}
	wo := grocksdb.NewDefaultWriteOptions()
	for _, k := range keys[lo : lo+5] {
		if err := db.Delete(wo, r.ks.keys[k][:]); err != nil {
			wo.Destroy()
			db.Close()
			return err
		}
	}
	wo.Destroy()
	db.Close()
	r.say("sabotage: deleted keys [%s, %s] of partition %d from %s's %s", r.ks.keys[keys[lo]], r.ks.keys[keys[lo+4]], p, n.id, r.live)
	r.sum.Sabotaged = fmt.Sprintf("partition %d on %s, key range [%s, %s]", p, n.id, r.ks.keys[keys[lo]], r.ks.keys[keys[lo+4]])
	n.p.hold(false)
	if err := n.p.start(); err != nil {
		return err
	}
	return n.p.waitListening(60 * time.Second)
}
