package control

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
)

// Publications (issue 18). The control plane owns every rule about them:
//
//   - A publication is registered explicitly (RegisterPublication, `pillar
//     publish --serve`) or by the first batch that names it. One registered
//     by a batch becomes live at once when nothing is live, else it is a
//     candidate that becomes live by itself once ready (so an export without
//     --serve is served once every replica holds it, as before publications).
//   - At most one publication is live, one previous and one candidate.
//     Promote: candidate -> live, live -> previous, previous -> retired.
//     Rollback swaps live and previous (twice is a roll-forward).
//     Registering a new candidate retires the old candidate.
//   - BaseSeq and readiness are derived from the registered snapshot batches
//     and the replicas' progress, never stored, so they cannot disagree.
//   - Promote refuses a candidate that is not ready (ErrNotReady naming the
//     lagging replicas) unless forced; Rollback without a retained previous
//     publication is ErrNoPrevious listing what is retained.

// noRetired, as publicationStatuses' retiredSince, leaves every retired
// publication out.
var noRetired = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// pubRow is a publications row.
type pubRow struct {
	id, role          string
	promoteWhenReady  bool
	createdAt, roleAt time.Time
}

func (s *Store) pubRows(ctx context.Context, q querier) ([]pubRow, error) {
	rows, err := q.QueryContext(ctx, `SELECT id, role, promote_when_ready, created_at_ms, role_at_ms FROM publications ORDER BY created_at_ms, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pubRow
	for rows.Next() {
		var r pubRow
		var pwr int
		var c, a int64
		if err := rows.Scan(&r.id, &r.role, &pwr, &c, &a); err != nil {
			return nil, err
		}
		r.promoteWhenReady, r.createdAt, r.roleAt = pwr != 0, time.UnixMilli(c), time.UnixMilli(a)
		out = append(out, r)
	}
	return out, rows.Err()
}

// publicationStatuses computes every registered publication (retired ones
// only when retired after retiredSince) with its base seqs, readiness and
// each assigned replica's view, from one querier (a transaction gives one
// snapshot).
func (s *Store) publicationStatuses(ctx context.Context, q querier, retiredSince time.Time) ([]PublicationStatus, error) {
	prs, err := s.pubRows(ctx, q)
	if err != nil {
		return nil, err
	}
	idx := map[string]int{}
	out := make([]PublicationStatus, 0, len(prs))
	for _, r := range prs {
		if r.role == RoleRetired && !r.roleAt.After(retiredSince) {
			continue
		}
		idx[r.id] = len(out)
		out = append(out, PublicationStatus{Publication: Publication{ID: r.id, Role: r.role, PromoteWhenReady: r.promoteWhenReady,
			CreatedAt: r.createdAt, RoleAt: r.roleAt, BaseSeq: make([]int64, s.partitions), NewestSnapshot: make([]int64, s.partitions)}})
	}
	if len(out) == 0 {
		return nil, nil
	}
	// Oldest and newest retained snapshot per (publication, partition).
	rows, err := q.QueryContext(ctx, `SELECT publication, part, MIN(seq), MAX(seq) FROM batches
		WHERE kind = 'snapshot' AND gc_state = 0 AND retracted = '' GROUP BY publication, part`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var p int
		var lo, hi int64
		if err := rows.Scan(&id, &p, &lo, &hi); err != nil {
			rows.Close()
			return nil, err
		}
		if i, ok := idx[id]; ok && p >= 0 && p < s.partitions {
			out[i].BaseSeq[p], out[i].NewestSnapshot[p] = lo, hi
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	type rep struct {
		part    int
		node    string
		state   string
		applied int64
		bytes   map[string]int64
	}
	var reps []rep
	rows, err = q.QueryContext(ctx, `SELECT a.part, a.node_id, n.state, COALESCE(p.applied_seq, 0), COALESCE(p.publication_bytes, ''), COALESCE(f.serving, 1)
		FROM assignments a
		JOIN nodes n ON n.id = a.node_id
		LEFT JOIN progress p ON p.part = a.part AND p.node_id = a.node_id
		LEFT JOIN faults f ON f.part = a.part AND f.node_id = a.node_id
		ORDER BY a.part, a.slot`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var r rep
		var raw string
		var serving int
		if err := rows.Scan(&r.part, &r.node, &r.state, &r.applied, &raw, &serving); err != nil {
			rows.Close()
			return nil, err
		}
		if r.state == StateGone {
			r.state = StateDown
		}
		if serving == 0 && r.state == StateUp {
			r.state = StateCorrupt
		}
		if raw != "" {
			_ = json.Unmarshal([]byte(raw), &r.bytes) // written by ReportApplied; unreadable = unknown
		}
		reps = append(reps, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	perPart := make([]int, s.partitions)
	for _, r := range reps {
		if r.part >= 0 && r.part < s.partitions {
			perPart[r.part]++
		}
	}
	for i := range out {
		ps := &out[i]
		ready := true
		for p := 0; p < s.partitions; p++ {
			if ps.BaseSeq[p] == 0 || perPart[p] == 0 {
				ready = false
			}
		}
		for _, r := range reps {
			h := ps.Holds(r.part, r.applied)
			ps.Replicas = append(ps.Replicas, ReplicaPublication{NodeID: r.node, Partition: r.part, AppliedSeq: r.applied, Holding: h, Bytes: r.bytes[ps.ID], State: r.state})
			ps.Assigned++
			if h {
				ps.Holding++
			} else {
				ready = false
			}
		}
		ps.Ready = ready && ps.Role != RoleRetired
	}
	return out, nil
}

// Publications returns every registered publication, retired ones last,
// with each assigned replica's view, and the live one's id.
func (s *Store) Publications(ctx context.Context) (pubs []PublicationStatus, live string, err error) {
	err = s.readTx(ctx, "list publications", func(tx *sql.Tx) error {
		pubs, err = s.publicationStatuses(ctx, tx, time.Time{})
		return err
	})
	if err != nil {
		return nil, "", err
	}
	sort.SliceStable(pubs, func(i, j int) bool {
		return roleOrder(pubs[i].Role) < roleOrder(pubs[j].Role)
	})
	for _, p := range pubs {
		if p.Role == RoleLive {
			live = p.ID
		}
	}
	return pubs, live, nil
}

func roleOrder(r string) int {
	switch r {
	case RoleLive:
		return 0
	case RoleCandidate:
		return 1
	case RolePrevious:
		return 2
	}
	return 3
}

// bumpRouting raises the routing version inside tx and tells the other
// control-plane processes.
func (s *Store) bumpRouting(ctx context.Context, tx *sql.Tx) (int64, error) {
	var version int64
	if err := tx.QueryRowContext(ctx, `UPDATE cluster SET routing_version = routing_version + 1 WHERE id = 1 RETURNING routing_version`).Scan(&version); err != nil {
		return 0, err
	}
	return version, s.notifyTx(ctx, tx, channelRouting, strconv.FormatInt(version, 10))
}

func (s *Store) setRole(ctx context.Context, tx *sql.Tx, id, role string, now time.Time) error {
	_, err := tx.ExecContext(ctx, s.q(`UPDATE publications SET role = ?, role_at_ms = ?, promote_when_ready = 0 WHERE id = ?`), role, now.UnixMilli(), id)
	return err
}

func (s *Store) roleHolder(ctx context.Context, tx *sql.Tx, role string) (string, bool, error) {
	var id string
	err := tx.QueryRowContext(ctx, s.q(`SELECT id FROM publications WHERE role = ?`), role).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return id, err == nil, err
}

// ensurePublication registers the publication a batch names when it is
// unknown (live at once when nothing is live, else a candidate promoted once
// ready), and revives a retired one that gets a new snapshot as a candidate.
// It reports whether the publications changed.
func (s *Store) ensurePublication(ctx context.Context, tx *sql.Tx, m *batch.Manifest, now time.Time) (bool, error) {
	var role string
	err := tx.QueryRowContext(ctx, s.q(`SELECT role FROM publications WHERE id = ?`), m.Publication).Scan(&role)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, hasLive, err := s.roleHolder(ctx, tx, RoleLive)
		if err != nil {
			return false, err
		}
		role, pwr := RoleCandidate, 1
		if !hasLive {
			role, pwr = RoleLive, 0
		}
		if err := s.retireCandidate(ctx, tx, role, now); err != nil {
			return false, err
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO publications (id, role, promote_when_ready, created_at_ms, role_at_ms) VALUES (?, ?, ?, ?, ?)`),
			m.Publication, role, pwr, now.UnixMilli(), now.UnixMilli())
		return true, err
	case err != nil:
		return false, err
	case role == RoleRetired && m.Kind == batch.KindSnapshot:
		if err := s.retireCandidate(ctx, tx, RoleCandidate, now); err != nil {
			return false, err
		}
		return true, s.setRole(ctx, tx, m.Publication, RoleCandidate, now)
	}
	return false, nil
}

// retireCandidate retires the current candidate before a new one takes its
// place (role is the newcomer's role; nothing happens unless candidate).
func (s *Store) retireCandidate(ctx context.Context, tx *sql.Tx, role string, now time.Time) error {
	if role != RoleCandidate {
		return nil
	}
	_, err := tx.ExecContext(ctx, s.q(`UPDATE publications SET role = ?, role_at_ms = ?, promote_when_ready = 0 WHERE role = ?`), RoleRetired, now.UnixMilli(), RoleCandidate)
	return err
}

// PublicationChange is the outcome of a publication call.
type PublicationChange struct {
	Publication    PublicationStatus
	RoutingVersion int64
	WasLive        string // the live publication before (Promote, Rollback)
	Unchanged      bool
}

// RegisterPublication registers id as the candidate (retiring the previous
// candidate), or returns it unchanged when it is registered and not retired
// (promoteWhenReady is then updated if asked for). A retired id becomes the
// candidate again; its batches are listed again only if they were not
// collected yet (otherwise a new export rebuilds it). With promoteWhenReady
// it becomes live once ready, at once when nothing is live.
func (s *Store) RegisterPublication(ctx context.Context, id string, promoteWhenReady bool, now time.Time) (PublicationChange, error) {
	var ch PublicationChange
	if err := batch.ValidPublication(id); err != nil {
		return ch, errf(ErrInvalid, "register publication: %v", err)
	}
	err := s.tx(ctx, "register publication "+strconv.Quote(id), func(tx *sql.Tx) error {
		if _, err := s.lockCluster(ctx, tx); err != nil {
			return err
		}
		var role string
		var pwr int
		err := tx.QueryRowContext(ctx, s.q(`SELECT role, promote_when_ready FROM publications WHERE id = ?`), id).Scan(&role, &pwr)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		switch {
		case err == nil && role != RoleRetired:
			ch.Unchanged = true
			if promoteWhenReady && role == RoleCandidate && pwr == 0 {
				ch.Unchanged = false
				if _, err := tx.ExecContext(ctx, s.q(`UPDATE publications SET promote_when_ready = 1 WHERE id = ?`), id); err != nil {
					return err
				}
			}
		case err == nil: // retired: the candidate again
			if err := s.retireCandidate(ctx, tx, RoleCandidate, now); err != nil {
				return err
			}
			if err := s.setRole(ctx, tx, id, RoleCandidate, now); err != nil {
				return err
			}
			if promoteWhenReady {
				if _, err := tx.ExecContext(ctx, s.q(`UPDATE publications SET promote_when_ready = 1 WHERE id = ?`), id); err != nil {
					return err
				}
			}
		default:
			_, hasLive, err := s.roleHolder(ctx, tx, RoleLive)
			if err != nil {
				return err
			}
			role, p := RoleCandidate, 0
			if promoteWhenReady {
				p = 1
			}
			if promoteWhenReady && !hasLive {
				role, p = RoleLive, 0
			}
			if err := s.retireCandidate(ctx, tx, role, now); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO publications (id, role, promote_when_ready, created_at_ms, role_at_ms) VALUES (?, ?, ?, ?, ?)`),
				id, role, p, now.UnixMilli(), now.UnixMilli()); err != nil {
				return err
			}
		}
		if !ch.Unchanged {
			v, err := s.bumpRouting(ctx, tx)
			if err != nil {
				return err
			}
			ch.RoutingVersion = v
		}
		return nil
	})
	if err != nil {
		return ch, err
	}
	return s.finishChange(ctx, ch, id)
}

// finishChange fills in the publication's status (and the routing version
// when the call changed nothing).
func (s *Store) finishChange(ctx context.Context, ch PublicationChange, id string) (PublicationChange, error) {
	pubs, _, err := s.Publications(ctx)
	if err != nil {
		return ch, err
	}
	for _, p := range pubs {
		if p.ID == id {
			ch.Publication = p
		}
	}
	if ch.RoutingVersion == 0 {
		if ch.RoutingVersion, err = s.RoutingVersion(ctx); err != nil {
			return ch, err
		}
	}
	return ch, nil
}

// Promote makes id (the candidate when id is "") live: the live publication
// becomes previous and the previous one is retired. A publication that is
// not ready is refused with ErrNotReady naming the lagging replicas, unless
// force. Promoting the live publication changes nothing. A previous
// publication may be promoted too (a roll-forward by name).
func (s *Store) Promote(ctx context.Context, id string, force bool, now time.Time) (PublicationChange, error) {
	var ch PublicationChange
	acted := id
	err := s.tx(ctx, "promote", func(tx *sql.Tx) error {
		if _, err := s.lockCluster(ctx, tx); err != nil {
			return err
		}
		pubs, err := s.publicationStatuses(ctx, tx, time.Time{})
		if err != nil {
			return err
		}
		var target *PublicationStatus
		for i := range pubs {
			p := &pubs[i]
			if p.Role == RoleLive {
				ch.WasLive = p.ID
			}
			if (id == "" && p.Role == RoleCandidate) || (id != "" && p.ID == id) {
				target = p
			}
		}
		switch {
		case target == nil && id == "":
			return errf(ErrNotFound, "promote: there is no candidate publication (register one with `pillar publish --serve`); %s", retainedList(pubs))
		case target == nil:
			return errf(ErrNotFound, "promote: publication %q is not registered; %s", id, retainedList(pubs))
		}
		acted = target.ID
		switch {
		case target.Role == RoleLive:
			ch.Unchanged = true
			return nil
		case target.Role == RoleRetired:
			return errf(ErrNotReady, "promote: publication %q is retired; rebuild it with `pillar publish --serve` for its pair", target.ID)
		case !target.Ready && !force:
			lag := target.Lagging()
			more := ""
			if len(lag) > 10 {
				more = fmt.Sprintf(" and %d more", len(lag)-10)
				lag = lag[:10]
			}
			return errf(ErrNotReady, "promote: publication %q is not ready: %d of %d replicas hold it; lagging: %s%s (wait with `pillar publish --serve --wait`, or --force)",
				target.ID, target.Holding, target.Assigned, strings.Join(lag, ", "), more)
		}
		return s.makeLive(ctx, tx, &ch, target.ID, now)
	})
	if err != nil {
		return ch, err
	}
	return s.finishChange(ctx, ch, acted)
}

// makeLive switches target live inside tx: the live one becomes previous
// and a previous one that is not the target is retired.
func (s *Store) makeLive(ctx context.Context, tx *sql.Tx, ch *PublicationChange, target string, now time.Time) error {
	prev, hasPrev, err := s.roleHolder(ctx, tx, RolePrevious)
	if err != nil {
		return err
	}
	if hasPrev && prev != target {
		if err := s.setRole(ctx, tx, prev, RoleRetired, now); err != nil {
			return err
		}
	}
	live, hasLive, err := s.roleHolder(ctx, tx, RoleLive)
	if err != nil {
		return err
	}
	if hasLive && live != target {
		if err := s.setRole(ctx, tx, live, RolePrevious, now); err != nil {
			return err
		}
		ch.WasLive = live
	}
	if err := s.setRole(ctx, tx, target, RoleLive, now); err != nil {
		return err
	}
	ch.Publication.ID = target
	v, err := s.bumpRouting(ctx, tx)
	ch.RoutingVersion = v
	return err
}

// retainedList names the retained publications for an error message.
func retainedList(pubs []PublicationStatus) string {
	var parts []string
	for _, p := range pubs {
		if p.Role == RoleRetired {
			continue
		}
		r := "not ready"
		if p.Ready {
			r = "ready"
		}
		parts = append(parts, fmt.Sprintf("%q (%s, %s)", p.ID, p.Role, r))
	}
	if len(parts) == 0 {
		return "no publication is retained"
	}
	return "retained: " + strings.Join(parts, ", ")
}

// RollbackPublication makes the previous publication live again and the
// live one previous, in one transaction; a second call rolls forward. It
// fails with ErrNoPrevious, listing the retained publications, when there
// is no previous one, and with ErrNotReady when the previous one is no
// longer held by every replica (unless force).
func (s *Store) RollbackPublication(ctx context.Context, force bool, now time.Time) (PublicationChange, error) {
	var ch PublicationChange
	err := s.tx(ctx, "rollback", func(tx *sql.Tx) error {
		if _, err := s.lockCluster(ctx, tx); err != nil {
			return err
		}
		pubs, err := s.publicationStatuses(ctx, tx, noRetired)
		if err != nil {
			return err
		}
		var prev *PublicationStatus
		for i := range pubs {
			if pubs[i].Role == RolePrevious {
				prev = &pubs[i]
			}
		}
		if prev == nil {
			return errf(ErrNoPrevious, "rollback: no previous publication is retained to go back to; %s. To serve an older pair again, rebuild it: `pillar publish --serve --chunks <version> --model <model>` (exports it) then `pillar promote`", retainedList(pubs))
		}
		if !prev.Ready && !force {
			return errf(ErrNotReady, "rollback: previous publication %q is not held by every replica (%d of %d; lagging: %s); --force switches anyway",
				prev.ID, prev.Holding, prev.Assigned, strings.Join(prev.Lagging(), ", "))
		}
		return s.makeLive(ctx, tx, &ch, prev.ID, now)
	})
	if err != nil {
		return ch, err
	}
	return s.finishChange(ctx, ch, ch.Publication.ID)
}

// Retire retires a publication that is not live: its batches (and objects)
// are deleted after RetireGrace, and nodes drop its database. Retiring a
// retired one changes nothing.
func (s *Store) Retire(ctx context.Context, id string, now time.Time) (PublicationChange, error) {
	var ch PublicationChange
	err := s.tx(ctx, "retire "+strconv.Quote(id), func(tx *sql.Tx) error {
		if _, err := s.lockCluster(ctx, tx); err != nil {
			return err
		}
		var role string
		err := tx.QueryRowContext(ctx, s.q(`SELECT role FROM publications WHERE id = ?`), id).Scan(&role)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return errf(ErrNotFound, "retire: publication %q is not registered", id)
		case err != nil:
			return err
		case role == RoleLive:
			return errf(ErrInvalid, "retire: publication %q is live; promote or roll back to another one first", id)
		case role == RoleRetired:
			ch.Unchanged = true
			return nil
		}
		if err := s.setRole(ctx, tx, id, RoleRetired, now); err != nil {
			return err
		}
		ch.RoutingVersion, err = s.bumpRouting(ctx, tx)
		return err
	})
	if err != nil {
		return ch, err
	}
	return s.finishChange(ctx, ch, id)
}

// PromoteReady promotes the candidate that asked to be promoted once ready,
// if it is ready now. It returns the change, or nil when nothing happened.
func (s *Store) PromoteReady(ctx context.Context, now time.Time) (*PublicationChange, error) {
	var id string
	err := s.db.QueryRowContext(ctx, s.q(`SELECT id FROM publications WHERE role = ? AND promote_when_ready = 1`), RoleCandidate).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap("promote when ready", err)
	}
	ch, err := s.Promote(ctx, id, false, now)
	if errors.Is(err, ErrNotReady) || errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &ch, nil
}

// MarkRetired marks as collected the batches of the publications retired
// before before (their grace period is over) that every assigned replica of
// their partition has applied (or passed); their objects are then deleted
// like any collected batch, leaving holes in the log that replicas skip. It
// returns how many it marked.
func (s *Store) MarkRetired(ctx context.Context, before time.Time) (int64, error) {
	var marked int64
	err := s.tx(ctx, "gc retired", func(tx *sql.Tx) error {
		if _, err := s.lockCluster(ctx, tx); err != nil {
			return err
		}
		// Only batches every assigned replica has moved past: one a replica
		// listed may still be downloaded (a partition without replicas
		// keeps them).
		rows, err := tx.QueryContext(ctx, `SELECT a.part, MIN(COALESCE(p.applied_seq, 0)) FROM assignments a
			LEFT JOIN progress p ON p.part = a.part AND p.node_id = a.node_id GROUP BY a.part ORDER BY a.part`)
		if err != nil {
			return err
		}
		floors := map[int]int64{}
		for rows.Next() {
			var part int
			var min int64
			if err := rows.Scan(&part, &min); err != nil {
				rows.Close()
				return err
			}
			floors[part] = min
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for part, min := range floors {
			res, err := tx.ExecContext(ctx, s.q(`UPDATE batches SET gc_state = 1 WHERE part = ? AND seq <= ? AND gc_state = 0 AND publication IN
				(SELECT id FROM publications WHERE role = ? AND role_at_ms < ?)`), part, min, RoleRetired, before.UnixMilli())
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			marked += n
		}
		if marked > 0 {
			_, err = s.bumpRouting(ctx, tx)
		}
		return err
	})
	return marked, err
}

// retentionFloors returns, per partition, the smallest seq garbage
// collection must keep for the publications that are not retired: for
// each, its newest snapshot that every assigned replica applied (minApplied
// is per partition), or, when there is none, its oldest live batch. A
// partition absent from the result has no such publication's batch.
func (s *Store) retentionFloors(ctx context.Context, tx *sql.Tx, minApplied map[int]int64) (map[int]int64, error) {
	type key struct {
		pub  string
		part int
	}
	first := map[key]int64{}
	applied := map[key]int64{} // newest snapshot at or below minApplied
	scan := func(query string, fn func(k key, seq int64)) error {
		rows, err := tx.QueryContext(ctx, s.q(query), RoleRetired)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k key
			var seq int64
			if err := rows.Scan(&k.pub, &k.part, &seq); err != nil {
				return err
			}
			fn(k, seq)
		}
		return rows.Err()
	}
	err := scan(`SELECT b.publication, b.part, MIN(b.seq) FROM batches b JOIN publications pu ON pu.id = b.publication
		WHERE pu.role <> ? AND b.gc_state = 0 GROUP BY b.publication, b.part`, func(k key, seq int64) { first[k] = seq })
	if err != nil {
		return nil, err
	}
	err = scan(`SELECT b.publication, b.part, b.seq FROM batches b JOIN publications pu ON pu.id = b.publication
		WHERE pu.role <> ? AND b.kind = 'snapshot' AND b.gc_state = 0 AND b.retracted = ''`, func(k key, seq int64) {
		if seq <= minApplied[k.part] && seq > applied[k] {
			applied[k] = seq
		}
	})
	if err != nil {
		return nil, err
	}
	floors := map[int]int64{}
	for k, f := range first {
		if a := applied[k]; a > 0 {
			f = a
		}
		if have, ok := floors[k.part]; !ok || f < have {
			floors[k.part] = f
		}
	}
	return floors, nil
}
