package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/lorry"
)

// checkFinal is check 1: every key on every replica shows its last committed
// op (the value for a put, absent for a delete or a key never written).
func (r *run) checkFinal(ctx context.Context) {
	var bad []string
	total := 0
	checked := 0
	for _, n := range r.nodes {
		errs, c := r.checkNodeFinal(ctx, n)
		checked += c
		total += len(errs)
		for _, e := range errs {
			if len(bad) < maxViolationsPer {
				bad = append(bad, e)
			}
		}
	}
	r.sum.FinalChecked = checked
	r.sum.check(CheckConverged, bad, total)
}

func (r *run) checkNodeFinal(ctx context.Context, n *node) ([]string, int) {
	conn, err := grpc.NewClient(n.directAddr, append(servepb.DialOptions(0), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return []string{fmt.Sprintf("%s: dial: %v", n.id, err)}, 0
	}
	defer conn.Close()
	cl := servepb.NewServeClient(conn)
	var bad []string
	checked := 0
	const step = 50
	for lo := 0; lo < r.o.Keys; lo += step {
		hi := min(lo+step, r.o.Keys)
		var raw [][]byte
		for k := lo; k < hi; k++ {
			raw = append(raw, r.ks.keys[k][:])
		}
		var resp *servepb.BatchGetResponse
		for attempt := 0; ; attempt++ {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err = cl.BatchGet(cctx, &servepb.BatchGetRequest{Keys: raw})
			cancel()
			if err == nil || attempt == 5 {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			return append(bad, fmt.Sprintf("%s: BatchGet: %v", n.id, err)), checked
		}
		for i, x := range resp.Results {
			k := lo + i
			checked++
			if x.Status != servepb.KeyStatus_KEY_OK {
				bad = append(bad, fmt.Sprintf("%s key %d (%s): %s %s", n.id, k, r.ks.keys[k], x.Status, x.Error))
				continue
			}
			want := r.hist.final(k)
			ok := false
			for _, o := range want {
				if o.del && !x.Found {
					ok = true
				}
				if !o.del && x.Found {
					sum := sha256.Sum256(x.Value)
					ok = ok || bytes.Equal(sum[:], o.sum[:])
				}
			}
			if !ok {
				got := "absent"
				if x.Found {
					got = fmt.Sprintf("a value of %d bytes", len(x.Value))
				}
				bad = append(bad, fmt.Sprintf("%s key %d (%s): shows %s, last committed: %s seq %d", n.id, k, r.ks.keys[k], got, opName(want[0]), want[0].seq))
			}
		}
	}
	return bad, checked
}

// checkChain is check 4: per partition, the registered Lorry batches cover
// the queue offsets [0, end) exactly once, in order (none twice, none
// skipped), end is what the writer enqueued, Lorry committed all of it, and
// every replica applied the newest batch.
func (r *run) checkChain(ctx context.Context) {
	var bad []string
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ls, err := lorry.Status(cctx, r.store, time.Now())
	if err != nil {
		r.sum.check(CheckBatchChain, []string{"lorry status: " + err.Error()}, 1)
		return
	}
	batches := 0
	for _, s := range ls {
		p := s.Partition
		next := int64(0)
		ids := map[string]bool{}
		var after int64
		for {
			bs, err := r.client.ListBatches(cctx, p, after, 1000, 0)
			if err != nil {
				bad = append(bad, fmt.Sprintf("partition %d: list batches: %v", p, err))
				break
			}
			if len(bs) == 0 {
				break
			}
			for _, b := range bs {
				after = b.Seq
				batches++
				if ids[b.Manifest.ID] {
					bad = append(bad, fmt.Sprintf("partition %d: batch %s registered twice", p, b.Manifest.ID))
				}
				ids[b.Manifest.ID] = true
				if isCorruptBatch(b) {
					// Not Lorry's: injected by FaultCorruptObject, and
					// repaired by retracting it.
					if b.Retracted == "" {
						bad = append(bad, fmt.Sprintf("partition %d: corrupt batch %s (seq %d) was not retracted", p, b.Manifest.ID, b.Seq))
					}
					continue
				}
				if strings.Contains(b.Manifest.Source, ":fresh:") || strings.Contains(b.Manifest.Source, ":replay:") {
					// Fresh-lane batches deliver fresh records ahead of the
					// bulk ones around them, replays re-deliver: they claim
					// no queue range. The ordinary batches (bulk, and fresh
					// records riding along) still cover every offset.
					continue
				}
				// The queue range travels in the manifest's typed fields.
				first, last := b.Manifest.QueueFirst, b.Manifest.QueueEnd-1
				if b.Manifest.Partition != p || b.Manifest.Kind != batch.KindDelta || b.Manifest.QueueEnd <= b.Manifest.QueueFirst {
					bad = append(bad, fmt.Sprintf("partition %d: batch %s: %s of partition %d, queue range [%d,%d)", p, b.Manifest.ID, b.Manifest.Kind, b.Manifest.Partition, b.Manifest.QueueFirst, b.Manifest.QueueEnd))
					continue
				}
				switch {
				case first < next:
					bad = append(bad, fmt.Sprintf("partition %d: batch %s (seq %d) covers [%d,%d], overlapping what came before (up to %d): applied twice", p, b.Manifest.ID, b.Seq, first, last, next-1))
				case first > next:
					bad = append(bad, fmt.Sprintf("partition %d: batch %s (seq %d) covers [%d,%d]: offsets [%d,%d) skipped", p, b.Manifest.ID, b.Seq, first, last, next, first))
				}
				next = max(next, last+1)
			}
		}
		r.hist.mu.Lock()
		sure, maybe := r.hist.enqueued[p], r.hist.maybe[p]
		r.hist.mu.Unlock()
		if next < sure || next > sure+maybe {
			bad = append(bad, fmt.Sprintf("partition %d: registered batches cover [0,%d), the writer committed %d records (+%d unknown)", p, next, sure, maybe))
		}
		if s.Committed != next || s.QueueEnd != next || s.Pending != nil || s.FreshPending != nil {
			bad = append(bad, fmt.Sprintf("partition %d: Lorry committed offset %d, queue end %d, pending %v, fresh pending %v; batches cover [0,%d)",
				p, s.Committed, s.QueueEnd, s.Pending != nil, s.FreshPending != nil, next))
		}
	}
	rt, err := r.client.GetRouting(cctx)
	if err != nil {
		bad = append(bad, "routing: "+err.Error())
	} else {
		for p, reps := range rt.Replicas {
			for _, rep := range reps {
				if rep.AppliedSeq != rt.NewestSeq[p] {
					bad = append(bad, fmt.Sprintf("partition %d: replica %s applied seq %d, newest %d", p, rep.NodeID, rep.AppliedSeq, rt.NewestSeq[p]))
				}
			}
		}
	}
	r.sum.Batches = batches
	// A replica that applied a corrupt batch (instead of refusing it) lost
	// data or served garbage: the chain check fails with it.
	bad = append(bad, r.sum.CorruptApplied...)
	n := len(bad)
	if len(bad) > maxViolationsPer {
		bad = bad[:maxViolationsPer]
	}
	r.sum.check(CheckBatchChain, bad, n)
}
