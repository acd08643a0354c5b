package netns

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
)

// writer commits Lorry records (puts and deletes of the key space) to the
// embedded store's export queue for the publication it targets, logging each
// to committed.log. It writes only for a publication whose snapshot is
// registered, so every record of it lands after its snapshot.
type writer struct {
	c    *cluster
	h    *history
	ks   *keySpace
	rate float64

	mu      sync.Mutex // held by a commit and by a publication switch
	pub     string
	present map[string][]bool
	rng     *rand.Rand
	log     *bufio.Writer
	logf    *os.File

	seq     atomic.Int64 // shared by snapshots and records
	commits atomic.Int64
	errs    atomic.Int64
}

func newWriter(c *cluster, h *history, ks *keySpace, seed int64) (*writer, error) {
	f, err := os.Create(filepath.Join(c.dir, "committed.log"))
	if err != nil {
		return nil, err
	}
	w := &writer{c: c, h: h, ks: ks, rate: c.o.CommitsPerSecond, present: map[string][]bool{}, rng: rand.New(rand.NewPCG(uint64(seed), 3)),
		log: bufio.NewWriter(f), logf: f}
	fmt.Fprintf(w.log, "# seq publication key op sha256 outcome (seed %d)\n", seed)
	return w, nil
}

func (w *writer) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log.Flush()
	w.logf.Close()
}

// commit writes n changes to distinct keys at priority pri.
func (w *writer) commit(ctx context.Context, n int, pri string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	pub := w.pub
	if pub == "" {
		return nil
	}
	present := w.present[pub]
	used := map[int]bool{}
	var keys []int
	var ws []write
	var seqs []int64
	var recs []pillar.ExportRecord
	for len(keys) < min(n, len(w.ks.keys)) {
		k := w.rng.IntN(len(w.ks.keys))
		if used[k] {
			continue
		}
		used[k] = true
		seq := w.seq.Add(1)
		x := write{seq: seq}
		rec := pillar.ExportRecord{Partition: int32(w.ks.keys[k].Partition(w.c.o.Partitions)), PageKey: w.ks.keys[k].String(),
			Cause: fmt.Sprintf("netns seq %d", seq), Priority: pri, Publication: pub}
		if present[k] && w.rng.IntN(10) < 2 {
			x.del, rec.Op = true, pillar.OpDelete
		} else {
			v := w.ks.value(pub, k, seq)
			x.sum, rec.Op, rec.Value = sha256.Sum256(v), pillar.OpPut, v
		}
		keys, ws, seqs, recs = append(keys, k), append(ws, x), append(seqs, seq), append(recs, rec)
	}
	w.h.prepare(pub, keys, ws)
	err := w.enqueue(ctx, recs)
	w.h.settle(pub, keys, seqs, err == nil)
	outcome := "ok"
	if err != nil {
		outcome = "unknown"
		w.errs.Add(1)
	} else {
		w.commits.Add(1)
	}
	for j, k := range keys {
		if err == nil {
			present[k] = !ws[j].del
		}
		op := "put"
		if ws[j].del {
			op = "delete"
		}
		fmt.Fprintf(w.log, "%d %s %s %s %x %s\n", seqs[j], pub, w.ks.keys[k], op, ws[j].sum, outcome)
	}
	return err
}

func (w *writer) enqueue(ctx context.Context, recs []pillar.ExportRecord) error {
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tx, err := w.c.store.Begin(cctx)
	if err != nil {
		return err
	}
	if err := tx.Enqueue(cctx, recs...); err != nil {
		tx.Abort()
		return err
	}
	if err := tx.Commit(cctx); err != nil {
		tx.Abort()
		return err
	}
	return nil
}

// loop commits at the configured rate until stop: 1–4 fresh changes, or one
// time in four a bulk one of 4–12.
func (w *writer) loop(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(time.Duration(float64(time.Second) / w.rate))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, pri := 1+rand.IntN(4), pillar.PriorityFresh
		if rand.IntN(4) == 0 {
			n, pri = 4+rand.IntN(9), pillar.PriorityBulk
		}
		if err := w.commit(ctx, n, pri); err != nil {
			w.c.say("writer: commit: %v", err)
		}
	}
}

// publish builds a snapshot of publication pub holding a value of every key
// (an export written here, as the export job writes one), has `pillar sst
// build` on the processing host build, upload and register it, and then
// points the writer at pub. The export's queue ends are taken with the
// writer held, so no record of the previous publication is left between
// them and the switch.
func (w *writer) publish(ctx context.Context, pub string) error {
	w.mu.Lock()
	seq := w.seq.Add(1)
	st, err := lorry.Status(ctx, w.c.store, time.Now())
	if err != nil {
		w.mu.Unlock()
		return err
	}
	ends := make([]int64, w.c.o.Partitions)
	for _, s := range st {
		ends[s.Partition] = s.QueueEnd
	}
	w.mu.Unlock()
	id := fmt.Sprintf("snap-%d", seq)
	dir := filepath.Join(w.c.dir, "exports", id)
	ew, err := sstbuilder.NewExportWriter(dir, w.c.o.Partitions, "snapshot", &sstbuilder.ExportOptions{ID: id, Source: "netns " + pub})
	if err != nil {
		return err
	}
	ew.SetQueueEnds(ends)
	ew.SetPublication(pub)
	order := make([]int, len(w.ks.keys))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return w.ks.keys[order[a]].String() < w.ks.keys[order[b]].String() })
	for _, k := range order {
		if err := ew.Write(sstbuilder.ExportRow{PageKey: w.ks.keys[k].String(), Seq: seq, Op: pillar.OpPut, Value: w.ks.value(pub, k, seq)}); err != nil {
			ew.Abort()
			return err
		}
	}
	if _, err := ew.Close(); err != nil {
		return err
	}
	w.h.snapshot(pub, seq)
	if _, err := w.c.run(ctx, 3*time.Minute, append([]string{"sst", "build", "--export", dir, "--objstore", w.c.objURL(),
		"--wait-delivered", "2m"}, w.c.adminFlags()...)...); err != nil {
		return err
	}
	w.mu.Lock()
	w.pub = pub
	if w.present[pub] == nil {
		p := make([]bool, len(w.ks.keys))
		for i := range p {
			p[i] = true
		}
		w.present[pub] = p
	}
	w.mu.Unlock()
	return nil
}
