package control

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
)

// migration is one versioned schema step. The same SQL runs on SQLite and
// PostgreSQL, so it sticks to the common subset: INTEGER, BIGINT, TEXT,
// composite primary keys, UNIQUE, partial indexes.
type migration struct {
	version int
	name    string
	stmts   []string
	// post, when set, runs after stmts in the same transaction (data
	// upgrades that SQL alone cannot do portably).
	post func(ctx context.Context, tx *sql.Tx) error
}

// migrations are applied in order, each in its own transaction, and recorded
// in schema_migrations. Never edit a released step; append a new one.
var migrations = []migration{
	{1, "initial schema", []string{
		`CREATE TABLE cluster (
			id INTEGER PRIMARY KEY,
			partitions INTEGER NOT NULL,
			routing_version BIGINT NOT NULL,
			created_at_ms BIGINT NOT NULL)`,
		`CREATE TABLE partitions (
			part INTEGER PRIMARY KEY,
			newest_seq BIGINT NOT NULL DEFAULT 0,
			newest_at_ms BIGINT NOT NULL DEFAULT 0,
			collected_through BIGINT NOT NULL DEFAULT 0)`,
		// gc_state: 0 live, 1 collected (no longer listed; objects being
		// deleted), 2 objects deleted. Rows stay so that re-registering a
		// collected id still answers its original seq.
		`CREATE TABLE batches (
			part INTEGER NOT NULL,
			seq BIGINT NOT NULL,
			id TEXT NOT NULL UNIQUE,
			kind TEXT NOT NULL,
			manifest TEXT NOT NULL,
			registered_at_ms BIGINT NOT NULL,
			gc_state INTEGER NOT NULL DEFAULT 0,
			PRIMARY KEY (part, seq))`,
		`CREATE INDEX batches_gc_pending ON batches (part, seq) WHERE gc_state = 1`,
		`CREATE TABLE nodes (
			id TEXT PRIMARY KEY,
			addr TEXT NOT NULL,
			zone TEXT NOT NULL,
			state TEXT NOT NULL,
			registered_at_ms BIGINT NOT NULL,
			last_heartbeat_ms BIGINT NOT NULL)`,
		`CREATE TABLE assignments (
			part INTEGER NOT NULL,
			slot INTEGER NOT NULL,
			node_id TEXT NOT NULL,
			PRIMARY KEY (part, slot))`,
		`CREATE TABLE progress (
			part INTEGER NOT NULL,
			node_id TEXT NOT NULL,
			applied_seq BIGINT NOT NULL,
			applied_at_ms BIGINT NOT NULL,
			PRIMARY KEY (part, node_id))`,
	}, nil},
	// Integrity and ordering (issue 19).
	//   partitions.delivered_end: the highest queue_end of the partition's
	//     registered deltas; a snapshot superseding more is refused.
	//   batches.parent: the id of the batch before it in its partition.
	//   batches.retracted: non-empty = retracted for this reason.
	//   batches.stamped: 1 once manifest.json in the object store carries
	//     seq and parent (Server stamps it after registration).
	//   faults: each replica's last reported fault.
	{2, "integrity and ordering", []string{
		`ALTER TABLE partitions ADD COLUMN delivered_end BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE batches ADD COLUMN parent TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE batches ADD COLUMN retracted TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE batches ADD COLUMN stamped INTEGER NOT NULL DEFAULT 0`,
		`CREATE INDEX batches_unstamped ON batches (part, seq) WHERE stamped = 0`,
		`CREATE TABLE faults (
			part INTEGER NOT NULL,
			node_id TEXT NOT NULL,
			batch_id TEXT NOT NULL,
			reason TEXT NOT NULL,
			serving INTEGER NOT NULL,
			at_ms BIGINT NOT NULL,
			PRIMARY KEY (part, node_id))`,
	}, backfillDelivered},
	// Serving publications (issue 18).
	//   batches.publication: the manifest's publication ('' = legacy).
	//   publications: one row per registered publication with its role
	//     (candidate, live, previous, retired); base seqs are derived from
	//     the snapshot batches (batches_snapshots), not stored.
	//   progress.publication_bytes: JSON {publication: bytes} as the node
	//     last reported it.
	// A database that already holds batches gets the legacy publication ''
	// as live, so it goes on serving what it served.
	{3, "serving publications", []string{
		`ALTER TABLE batches ADD COLUMN publication TEXT NOT NULL DEFAULT ''`,
		`CREATE INDEX batches_snapshots ON batches (publication, part, seq) WHERE kind = 'snapshot'`,
		`CREATE INDEX batches_by_publication ON batches (publication, seq) WHERE gc_state = 0`,
		`CREATE TABLE publications (
			id TEXT PRIMARY KEY,
			role TEXT NOT NULL,
			promote_when_ready INTEGER NOT NULL DEFAULT 0,
			created_at_ms BIGINT NOT NULL,
			role_at_ms BIGINT NOT NULL)`,
		`ALTER TABLE progress ADD COLUMN publication_bytes TEXT NOT NULL DEFAULT ''`,
	}, legacyPublication},
}

// legacyPublication registers the legacy publication ” as live when the
// database already holds batches (all of them are the legacy one's: their
// manifests predate the publication field).
func legacyPublication(ctx context.Context, tx *sql.Tx) error {
	var n int64
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM batches`).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	now := time.Now().UnixMilli()
	_, err := tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO publications (id, role, promote_when_ready, created_at_ms, role_at_ms) VALUES ('', 'live', 0, %d, %d)`, now, now))
	return err
}

// backfillDelivered sets partitions.delivered_end for deltas registered
// before manifests had typed queue ranges: Lorry's ordinary batches then
// named their range only in Source, "lorry:p<P>:<first>-<last>". Without
// this, an upgraded control plane would refuse every bulk snapshot until
// Lorry delivered a new delta. It reads legacy text once; nothing written
// since relies on it.
func backfillDelivered(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT part, manifest FROM batches WHERE kind = 'delta'`)
	if err != nil {
		return err
	}
	ends := map[int]int64{}
	for rows.Next() {
		var part int
		var raw string
		if err := rows.Scan(&part, &raw); err != nil {
			rows.Close()
			return err
		}
		var m batch.Manifest
		if json.Unmarshal([]byte(raw), &m) != nil {
			continue
		}
		var p int
		var first, last int64
		var rest string
		if n, _ := fmt.Sscanf(m.Source, "lorry:p%d:%d-%d%s", &p, &first, &last, &rest); n >= 3 && p == part && last >= first && rest == "" {
			ends[part] = max(ends[part], last+1)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for part, end := range ends {
		// The same statement text on both backends ('?' placeholders are
		// not rewritten here: use literals).
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE partitions SET delivered_end = %d WHERE part = %d AND delivered_end < %d`, end, part, end)); err != nil {
			return err
		}
	}
	return nil
}

// SchemaVersion is the schema version this binary migrates to.
var SchemaVersion = migrations[len(migrations)-1].version
