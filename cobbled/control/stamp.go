package control

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
)

// objectWriter is the part of the object store that stamping and rebuilding
// need beyond Objects; internal/objstore's Store satisfies it. A Server
// whose Objects lacks it does not stamp.
type objectWriter interface {
	Objects
	Stat(ctx context.Context, key string) (objstore.Info, error)
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Put(ctx context.Context, key string, r io.Reader, size int64, opts *objstore.PutOptions) error
}

// RetractedObject is the object, next to a batch's manifest.json, that
// records its retraction (the reason) for RebuildFromObjects.
const RetractedObject = "retracted.txt"

// Stamp states of a batch row.
const (
	stampPending  = 0 // manifest.json in the object store lacks seq/parent
	stampDone     = 1
	stampNoObject = 2 // no manifest.json to stamp (registered without objects)
)

// StampManifests writes the control-plane-assigned seq and parent into the
// object store's manifest.json of registered batches: of one batch when
// partition >= 0 and seq > 0, otherwise of up to 100 unstamped live ones.
// It returns how many rows it processed. Run does it from the GC loop (woken
// by registrations), so it never runs concurrently with a deletion there. Without an object store that can write,
// it does nothing. A batch is stamped at most once; stamping only adds the
// two fields, so what nodes verify (files, sizes, checksums) never changes.
func (s *Server) StampManifests(ctx context.Context, partition int, seq int64) (int, error) {
	w, ok := s.o.Objects.(objectWriter)
	if !ok {
		return 0, nil
	}
	q := `SELECT part, seq, manifest FROM batches WHERE stamped = 0 AND gc_state = 0 ORDER BY part, seq LIMIT 100`
	var args []any
	if partition >= 0 && seq > 0 {
		q = `SELECT part, seq, manifest FROM batches WHERE stamped = 0 AND gc_state = 0 AND part = ? AND seq = ?`
		args = []any{partition, seq}
	}
	type row struct {
		part int
		seq  int64
		raw  []byte
	}
	var todo []row
	err := func() error {
		rows, err := s.store.db.QueryContext(ctx, s.store.q(q), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.part, &r.seq, &r.raw); err != nil {
				return err
			}
			todo = append(todo, r)
		}
		return rows.Err()
	}()
	if err != nil {
		return 0, s.store.wrap("stamp manifests", err)
	}
	n := 0
	for _, r := range todo {
		var m batch.Manifest
		if err := json.Unmarshal(r.raw, &m); err != nil {
			return n, fmt.Errorf("control: stamp partition %d seq %d: stored manifest: %w", r.part, r.seq, err)
		}
		key := batch.ManifestKey(m.Partition, m.ID)
		state := stampDone
		if _, err := w.Stat(ctx, key); errors.Is(err, objstore.ErrNotFound) {
			state = stampNoObject
		} else if err != nil {
			return n, fmt.Errorf("control: stamp batch %q: %w", m.ID, err)
		} else if m.Seq > 0 {
			enc, err := m.Encode()
			if err != nil {
				return n, err
			}
			if err := w.Put(ctx, key, bytes.NewReader(enc), int64(len(enc)), nil); err != nil {
				return n, fmt.Errorf("control: stamp batch %q: %w", m.ID, err)
			}
		}
		n++
		unlock := s.store.lockWrites()
		_, err := s.store.db.ExecContext(ctx, s.store.q(`UPDATE batches SET stamped = ? WHERE part = ? AND seq = ?`), state, r.part, r.seq)
		unlock()
		if err != nil {
			return n, s.store.wrap("stamp manifests", err)
		}
	}
	return n, nil
}

// RebuildReport says what RebuildFromObjects found and did.
type RebuildReport struct {
	Manifests  int      // manifest.json objects read
	Registered int      // batches written into the log
	Partitions int      // partitions with at least one batch
	Skipped    []string // manifests left out, each with the reason
}

// RebuildFromObjects rebuilds the batch log of an empty database from the
// manifests in the object store. Each partition's stamped manifests (those
// with a seq) are ordered by seq and must form a chain: each one's parent
// is the batch before it. The chain is taken from its newest break (a
// missing seq, a parent that does not match) on, or from the start; the
// batches before the first one taken are recorded as collected (the
// garbage collector deleted them, or they are lost), so replicas behind
// start from a snapshot. A chain must start with a snapshot unless it
// starts at seq 1. Unstamped manifests (a crash between registration and
// stamping, or a batch never registered) are skipped and listed: their
// producers register them again (idempotently, by id). Replica progress is
// not in the object store: nodes report it again (a node re-registers and
// re-reports its applied seq on its next tick).
//
// The database must hold no batches (a fresh one: `pillar control rebuild`
// refuses anything else).
func (s *Store) RebuildFromObjects(ctx context.Context, objs Objects, now time.Time) (RebuildReport, error) {
	var rep RebuildReport
	w, ok := objs.(objectWriter)
	if !ok {
		return rep, errf(ErrInvalid, "rebuild: the object store cannot be read")
	}
	var have int64
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM batches`).Scan(&have); err != nil {
		return rep, s.wrap("rebuild", err)
	}
	if have > 0 {
		return rep, errf(ErrInvalid, "rebuild: %s already holds %d batches; rebuild into a fresh database", s.target, have)
	}
	infos, err := objs.List(ctx, "batches/")
	if err != nil {
		return rep, fmt.Errorf("control: rebuild: list batches/: %w", err)
	}
	byPart := map[int][]*batch.Manifest{}
	retracted := map[string]string{} // manifest key -> reason
	for _, info := range infos {
		if !strings.HasSuffix(info.Key, "/"+RetractedObject) {
			continue
		}
		b, err := objstore.ReadAll(ctx, w, info.Key)
		if err != nil {
			return rep, fmt.Errorf("control: rebuild: %s: %w", info.Key, err)
		}
		why := strings.TrimSpace(string(b))
		if why == "" {
			why = "retracted"
		}
		retracted[strings.TrimSuffix(info.Key, RetractedObject)+"manifest.json"] = why
	}
	for _, info := range infos {
		if !strings.HasSuffix(info.Key, "/manifest.json") {
			continue
		}
		rep.Manifests++
		rc, err := w.Get(ctx, info.Key)
		if err != nil {
			return rep, fmt.Errorf("control: rebuild: %s: %w", info.Key, err)
		}
		b, err := io.ReadAll(io.LimitReader(rc, 16<<20))
		rc.Close()
		if err != nil {
			return rep, fmt.Errorf("control: rebuild: %s: %w", info.Key, err)
		}
		m, err := batch.Decode(b)
		switch {
		case err != nil:
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: %v", info.Key, err))
		case m.Partitions != s.partitions:
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: for %d partitions, control plane has %d", info.Key, m.Partitions, s.partitions))
		case batch.ManifestKey(m.Partition, m.ID) != info.Key:
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: names batch %s of partition %d", info.Key, m.ID, m.Partition))
		case m.Seq == 0:
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: no seq (not stamped: registered by an older control plane, or never registered); its producer registers it again", info.Key))
		default:
			byPart[m.Partition] = append(byPart[m.Partition], m)
		}
	}
	parts := make([]int, 0, len(byPart))
	for p := range byPart {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	err = s.tx(ctx, "rebuild", func(tx *sql.Tx) error {
		for _, p := range parts {
			ms := byPart[p]
			sort.Slice(ms, func(i, j int) bool { return ms[i].Seq < ms[j].Seq })
			start := 0
			for i := 1; i < len(ms); i++ {
				if ms[i].Seq == ms[i-1].Seq {
					return errf(ErrConflict, "rebuild: partition %d: batches %q and %q both claim seq %d", p, ms[i-1].ID, ms[i].ID, ms[i].Seq)
				}
				if ms[i].Seq != ms[i-1].Seq+1 || ms[i].Parent != ms[i-1].ID {
					start = i
				}
			}
			// After a break, the log can only restart from a snapshot.
			for start < len(ms) && ms[start].Seq > 1 && ms[start].Kind != batch.KindSnapshot {
				start++
			}
			for _, m := range ms[:start] {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("partition %d: batch %s (seq %d): not in the unbroken chain from the last snapshot (a predecessor's manifest is missing)", p, m.ID, m.Seq))
			}
			chain := ms[start:]
			if len(chain) == 0 {
				continue
			}
			rep.Partitions++
			var delivered int64
			for _, m := range chain {
				full, err := json.Marshal(m)
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO batches (part, seq, id, kind, manifest, registered_at_ms, parent, stamped, retracted) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)`),
					p, m.Seq, m.ID, m.Kind, string(full), now.UnixMilli(), m.Parent, retracted[batch.ManifestKey(p, m.ID)]); err != nil {
					return fmt.Errorf("partition %d batch %s: %w", p, m.ID, err)
				}
				delivered = max(delivered, m.QueueEnd, m.Supersedes)
				rep.Registered++
			}
			last := chain[len(chain)-1]
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE partitions SET newest_seq = ?, newest_at_ms = ?, collected_through = ?, delivered_end = ? WHERE part = ?`),
				last.Seq, now.UnixMilli(), chain[0].Seq-1, delivered, p); err != nil {
				return err
			}
		}
		return nil
	})
	return rep, err
}
