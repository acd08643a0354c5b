package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/s3test"
	"github.com/pillarkit/pillar/sstbuilder"
)

// corruptSource marks the batches FaultCorruptObject registers.
const corruptSource = "chaos: corrupt object with matching manifest"

// corruptValue is what the corrupt batch would write: never a committed
// value, so check 2 catches a replica that serves it.
var corruptValue = bytes.Repeat([]byte("chaos-corrupt "), 24)

// injectCorruptObject registers, in one partition, a delta batch whose SST
// is damaged inside a data block while the manifest's size and SHA-256
// match the damaged bytes (a file corrupted before it was hashed, or a
// lying manifest). Its puts name real keys with a value never committed.
// Every replica must refuse it before ingest (block checksum verification)
// and keep serving the partition's previous data; the control plane shows
// the fault. The heal is the documented repair: `pillar control retract`
// (RetractBatch) — replicas skip the batch and apply Lorry's batches after
// it, so nothing is lost.
func (r *run) injectCorruptObject(f Fault) (func() error, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
	defer cancel()
	r.corruptN++
	p := (int(r.o.Seed) + r.corruptN) % r.o.Partitions
	var rows []sstbuilder.Row
	for _, k := range r.ks.keys {
		if k.Partition(r.o.Partitions) == p && len(rows) < 8 {
			rows = append(rows, sstbuilder.Row{Key: append([]byte(nil), k[:]...), Value: corruptValue})
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no key of partition %d", p)
	}
	sortRows(rows)
	id := fmt.Sprintf("chaos-corrupt-%d-%d", r.o.Seed, r.corruptN)
	dir, err := os.MkdirTemp(r.dir, "corrupt-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	m, paths, err := sstbuilder.BuildPartition(ctx, sstbuilder.SliceRows(rows), &sstbuilder.BuildOptions{
		Dir: dir, Partition: p, Partitions: r.o.Partitions, Kind: batch.KindDelta, BatchID: id, Source: corruptSource})
	if err != nil {
		return nil, err
	}
	// Damage a byte of the first data block (the footer, index and
	// properties stay intact, so the file opens), then make the manifest
	// match the damaged file.
	b, err := os.ReadFile(paths[0])
	if err != nil {
		return nil, err
	}
	b[60] ^= 0x20
	if err := os.WriteFile(paths[0], b, 0o644); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	m.Files[0].SHA256 = hex.EncodeToString(sum[:])
	objs, err := objstore.Open(ctx, r.objURL(), &objstore.Options{S3Endpoint: r.s3end, S3Region: s3test.Region,
		S3AccessKeyID: s3test.AccessKey, S3SecretAccessKey: s3test.SecretKey})
	if err != nil {
		return nil, err
	}
	if _, err := sstbuilder.Upload(ctx, objs, m, paths); err != nil {
		return nil, fmt.Errorf("upload corrupt batch %s: %w", id, err)
	}
	seq, err := r.client.RegisterBatch(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("register corrupt batch %s: %w", id, err)
	}
	r.say("corrupt-object: batch %s registered as partition %d seq %d (SST damaged, manifest matching)", id, p, seq)
	return func() error {
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
		defer cancel()
		// What the replicas said about it while it was there.
		if rt, err := r.client.GetRouting(ctx); err == nil && p < len(rt.Replicas) {
			for _, rep := range rt.Replicas[p] {
				if strings.Contains(rep.Fault, "corrupt batch "+id) {
					r.sum.CorruptDetected++
				}
				if rep.AppliedSeq >= seq {
					r.sum.CorruptApplied = append(r.sum.CorruptApplied, fmt.Sprintf("%s applied %s (seq %d) before its retraction", rep.NodeID, id, seq))
				}
			}
		}
		if _, err := r.client.RetractBatch(ctx, id, "chaos: corrupt object with matching manifest"); err != nil {
			return fmt.Errorf("retract %s: %w", id, err)
		}
		r.say("corrupt-object: batch %s retracted (replica detections so far: %d)", id, r.sum.CorruptDetected)
		return nil
	}, nil
}

func sortRows(rows []sstbuilder.Row) {
	sort.Slice(rows, func(i, j int) bool { return bytes.Compare(rows[i].Key, rows[j].Key) < 0 })
}

// isCorruptBatch reports whether a listed batch is one FaultCorruptObject
// registered; it must be retracted by the end of the run.
func isCorruptBatch(e control.BatchEntry) bool { return e.Manifest.Source == corruptSource }
