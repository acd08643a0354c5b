package control

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pillarkit/pillar/internal/batch"
	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
)

// Backends.
const (
	BackendSQLite   = "sqlite"
	BackendPostgres = "postgres"
)

// StoreOptions configure OpenStore.
type StoreOptions struct {
	// Partitions is the deployment's partition count P. On a fresh database
	// it is required and recorded; on an existing one it must match the
	// recorded value (ErrPartitions) or be zero (use the recorded value).
	// The default value is 0.
	Partitions int
	// ConnectTimeout bounds the first connection at open. The default value
	// is 5s.
	ConnectTimeout time.Duration
	// Logger receives migration notes. The default value discards.
	Logger *slog.Logger
	// SkipIntegrityCheck skips the checks an SQLite database gets at open:
	// its write-ahead log is inspected for damage and truncation before
	// SQLite recovers it, then PRAGMA quick_check runs; either failing is
	// ErrDamaged naming the file. (PostgreSQL checks its own pages.) The
	// default value false runs them.
	SkipIntegrityCheck bool
}

func (o *StoreOptions) ensureDefaults() {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Store is the control plane's durable state in a SQL database: the batch
// log, nodes, the assignment and replica progress. The same schema and
// statements run on SQLite (modernc.org/sqlite) and PostgreSQL (pgx v5
// through database/sql). It is safe for concurrent use.
type Store struct {
	db         *sql.DB
	backend    string
	partitions int
	target     string // for error messages, without credentials
	dsn        string // PostgreSQL only: for the LISTEN connection
	// writeMu serializes writers on SQLite, which allows one writer at a
	// time anyway: queueing them here instead of in SQLite's busy handler
	// (which sleeps in growing steps) keeps throughput up under contention.
	writeMu sync.Mutex
}

// lockWrites takes the SQLite writer lock; it does nothing on PostgreSQL,
// where row locks order writers.
func (s *Store) lockWrites() func() {
	if s.backend != BackendSQLite {
		return func() {}
	}
	s.writeMu.Lock()
	return s.writeMu.Unlock
}

// OpenStore opens (and migrates) the database named by dsn:
//
//	sqlite:PATH                 an SQLite file (created with its directory)
//	postgres://user@host/db     PostgreSQL (also postgresql://)
//
// An unreachable database is an error naming it, wrapping ErrUnavailable.
func OpenStore(ctx context.Context, dsn string, opts *StoreOptions) (*Store, error) {
	var o StoreOptions
	if opts != nil {
		o = *opts
	}
	o.ensureDefaults()
	if o.Partitions < 0 {
		return nil, errf(ErrInvalid, "partitions %d must not be negative", o.Partitions)
	}
	s := &Store{}
	var err error
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
		if path == "" {
			return nil, errf(ErrInvalid, "db %q: empty sqlite path", dsn)
		}
		if dir := filepath.Dir(path); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("control: sqlite %s: %w", path, err)
			}
		}
		s.backend, s.target = BackendSQLite, "sqlite "+path
		if !o.SkipIntegrityCheck {
			if err := checkWAL(path + "-wal"); err != nil {
				return nil, err
			}
		}
		// SQLite URI filenames are percent-decoded and end at '?' or '#':
		// escape those so any path names its own file.
		uriPath := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
		s.db, err = sql.Open("sqlite", "file:"+uriPath+
			"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
		if err == nil {
			s.db.SetMaxOpenConns(8)
		}
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		s.backend, s.target, s.dsn = BackendPostgres, "postgres "+redact(dsn), dsn
		s.db, err = sql.Open("pgx", dsn)
		if err == nil {
			s.db.SetMaxOpenConns(32)
			s.db.SetMaxIdleConns(32)
			s.db.SetConnMaxIdleTime(5 * time.Minute)
		}
	default:
		return nil, errf(ErrInvalid, "db %q: want sqlite:PATH or postgres://…", redact(dsn))
	}
	if err != nil {
		return nil, fmt.Errorf("control: %s: %w", s.target, err)
	}
	pctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	err = s.db.PingContext(pctx)
	cancel()
	if err != nil {
		s.db.Close()
		return nil, fmt.Errorf("control: %s: unreachable: %w: %w", s.target, ErrUnavailable, err)
	}
	if s.backend == BackendSQLite && !o.SkipIntegrityCheck {
		if err := quickCheck(ctx, s.db, s.target); err != nil {
			s.db.Close()
			return nil, err
		}
	}
	if err := s.migrate(ctx, o.Logger); err != nil {
		s.db.Close()
		return nil, err
	}
	if err := s.initCluster(ctx, o.Partitions); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// redact drops the password from a URL-shaped DSN.
func redact(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	scheme := strings.Index(dsn, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return dsn
	}
	userinfo := dsn[scheme+3 : at]
	if i := strings.Index(userinfo, ":"); i >= 0 {
		return dsn[:scheme+3] + userinfo[:i] + ":xxx" + dsn[at:]
	}
	return dsn
}

// Backend returns BackendSQLite or BackendPostgres.
func (s *Store) Backend() string { return s.backend }

// Partitions returns the recorded partition count P.
func (s *Store) Partitions() int { return s.partitions }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.wrap("ping", s.db.PingContext(ctx))
}

// q rewrites '?' placeholders to PostgreSQL's $n. Statements never contain a
// literal '?'.
func (s *Store) q(query string) string {
	if s.backend != BackendPostgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// wrap annotates a database error with the operation, and marks errors that
// mean "the database is not reachable right now" with ErrUnavailable.
// Errors that already carry a control sentinel pass through.
func (s *Store) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var w *wrapped
	if errors.As(err, &w) {
		return err
	}
	if isUnavailable(err) {
		return fmt.Errorf("control: %s: %s: %w: %w", s.target, op, ErrUnavailable, err)
	}
	return fmt.Errorf("control: %s: %s: %w", s.target, op, err)
}

func isUnavailable(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 08: connection exception; 53: insufficient resources; 57P0x:
		// shutdown / cannot connect now.
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "53") ||
			strings.HasPrefix(pe.Code, "57P")
	}
	if pgconn.Timeout(err) || pgconn.SafeToRetry(err) {
		return true
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == 5 || c == 6 // SQLITE_BUSY, SQLITE_LOCKED
	}
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection refused")
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "23505"
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == 2067 || se.Code() == 1555 // SQLITE_CONSTRAINT_UNIQUE, _PRIMARYKEY
	}
	return false
}

// tx runs fn in a transaction (IMMEDIATE on SQLite: it takes the write lock
// up front, so concurrent writers queue instead of failing to upgrade).
func (s *Store) tx(ctx context.Context, op string, fn func(*sql.Tx) error) error {
	defer s.lockWrites()()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap(op, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return s.wrap(op, err)
	}
	return s.wrap(op, tx.Commit())
}

// readTx runs fn in a read-only transaction: one consistent snapshot, and
// on SQLite a deferred BEGIN that does not take the write lock.
func (s *Store) readTx(ctx context.Context, op string, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return s.wrap(op, err)
	}
	defer tx.Rollback()
	return s.wrap(op, fn(tx))
}

func (s *Store) migrate(ctx context.Context, log *slog.Logger) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at_ms BIGINT NOT NULL)`); err != nil {
		return s.wrap("create schema_migrations", err)
	}
	var have int
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return s.wrap("read schema version", err)
	}
	if have > SchemaVersion {
		return fmt.Errorf("control: %s: schema version %d is newer than this binary's %d", s.target, have, SchemaVersion)
	}
	for _, m := range migrations {
		if m.version <= have {
			continue
		}
		err := s.tx(ctx, fmt.Sprintf("migration %d (%s)", m.version, m.name), func(tx *sql.Tx) error {
			for _, st := range m.stmts {
				if _, err := tx.ExecContext(ctx, st); err != nil {
					return fmt.Errorf("%.40s…: %w", st, err)
				}
			}
			if m.post != nil {
				if err := m.post(ctx, tx); err != nil {
					return fmt.Errorf("data upgrade: %w", err)
				}
			}
			_, err := tx.ExecContext(ctx, s.q(`INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (?, ?, ?)`),
				m.version, m.name, time.Now().UnixMilli())
			return err
		})
		if err != nil {
			return err
		}
		log.Info("control: migrated", "db", s.target, "version", m.version, "name", m.name)
	}
	return nil
}

func (s *Store) initCluster(ctx context.Context, partitions int) error {
	return s.tx(ctx, "init cluster", func(tx *sql.Tx) error {
		var recorded int
		err := tx.QueryRowContext(ctx, `SELECT partitions FROM cluster WHERE id = 1`).Scan(&recorded)
		switch {
		case err == nil:
			if partitions != 0 && partitions != recorded {
				return errf(ErrPartitions, "%s: database records %d partitions, asked for %d", s.target, recorded, partitions)
			}
			s.partitions = recorded
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if partitions == 0 {
			return errf(ErrInvalid, "%s: new database: the partition count is required", s.target)
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO cluster (id, partitions, routing_version, created_at_ms) VALUES (1, ?, 1, ?)`),
			partitions, time.Now().UnixMilli()); err != nil {
			return err
		}
		for p := 0; p < partitions; p++ {
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO partitions (part) VALUES (?)`), p); err != nil {
				return err
			}
		}
		s.partitions = partitions
		return nil
	})
}

// lockCluster serializes the transactions that read and rewrite the
// assignment (reconcile, GC marking) on PostgreSQL; on SQLite every write
// transaction is already exclusive.
func (s *Store) lockCluster(ctx context.Context, tx *sql.Tx) (version int64, err error) {
	q := `SELECT routing_version FROM cluster WHERE id = 1`
	if s.backend == BackendPostgres {
		q += ` FOR UPDATE`
	}
	err = tx.QueryRowContext(ctx, q).Scan(&version)
	return version, err
}

// CheckManifest validates m against itself and the recorded partition count.
func (s *Store) CheckManifest(m *batch.Manifest) error {
	if err := m.Validate(); err != nil {
		return errf(ErrInvalid, "register batch: %v", err)
	}
	if m.Partitions != s.partitions {
		return errf(ErrPartitions, "batch %q: manifest for %d partitions, control plane has %d", m.ID, m.Partitions, s.partitions)
	}
	return nil
}

// RegisterBatch appends a batch to its partition's log and returns its seq.
// Registering an id again with the same manifest (compared without the
// control-plane-assigned Seq and Parent) returns the original seq and
// existed=true; with a different manifest it fails with ErrConflict.
// Concurrent calls never leave a gap: the seq is taken under the partition
// row's lock in the same transaction as the insert.
//
// Ordering: a snapshot whose Supersedes is beyond the queue end covered by
// the partition's registered deltas is refused with ErrNotDelivered
// (retryable once those deltas are registered). The stored manifest carries
// its Seq and Parent (the id of the partition's previous batch).
func (s *Store) RegisterBatch(ctx context.Context, m *batch.Manifest, now time.Time) (seq int64, existed bool, err error) {
	if err := s.CheckManifest(m); err != nil {
		return 0, false, err
	}
	canon := m.Canonical()
	raw, err := json.Marshal(canon)
	if err != nil {
		return 0, false, fmt.Errorf("control: batch %q: encode manifest: %w", m.ID, err)
	}
	for attempt := 0; ; attempt++ {
		err = s.tx(ctx, "register batch "+m.ID, func(tx *sql.Tx) error {
			var ok bool
			if seq, ok, err = s.existingBatch(ctx, tx, canon.ID, raw); err != nil || ok {
				existed = ok
				return err
			}
			// A snapshot (it moves its publication's base seqs) or a batch
			// of an unregistered publication changes the routing: take the
			// cluster lock first, in the same order as every other writer
			// of the routing version (cluster, then partition rows).
			touchesRouting := m.Kind == batch.KindSnapshot
			if !touchesRouting {
				var one int
				err := tx.QueryRowContext(ctx, s.q(`SELECT 1 FROM publications WHERE id = ?`), m.Publication).Scan(&one)
				if errors.Is(err, sql.ErrNoRows) {
					touchesRouting = true
				} else if err != nil {
					return err
				}
			}
			if touchesRouting {
				if _, err := s.lockCluster(ctx, tx); err != nil {
					return err
				}
			}
			var delivered int64
			if err := tx.QueryRowContext(ctx, s.q(`UPDATE partitions SET newest_seq = newest_seq + 1, newest_at_ms = ? WHERE part = ? RETURNING newest_seq, delivered_end`),
				now.UnixMilli(), m.Partition).Scan(&seq, &delivered); err != nil {
				return err
			}
			if m.Kind == batch.KindSnapshot && m.Supersedes > delivered {
				return errf(ErrNotDelivered, "batch %q: snapshot of partition %d supersedes export-queue offsets below %d, but the registered deltas cover only up to %d: register those deltas first (run Lorry), then retry",
					m.ID, m.Partition, m.Supersedes, delivered)
			}
			if m.Kind == batch.KindDelta && m.QueueEnd > delivered {
				if _, err := tx.ExecContext(ctx, s.q(`UPDATE partitions SET delivered_end = ? WHERE part = ?`), m.QueueEnd, m.Partition); err != nil {
					return err
				}
			}
			stamped := *canon
			stamped.Seq = seq
			if seq > 1 {
				// The previous seq may be a collected row; it keeps its id.
				if err := tx.QueryRowContext(ctx, s.q(`SELECT id FROM batches WHERE part = ? AND seq = ?`), m.Partition, seq-1).Scan(&stamped.Parent); err != nil && !errors.Is(err, sql.ErrNoRows) {
					return err
				}
			}
			full, err := json.Marshal(&stamped)
			if err != nil {
				return err
			}
			// A concurrent registration of the same id that committed
			// since the check above makes the insert fail with a unique
			// violation; the retry below then finds it. The seq taken
			// here rolls back with the insert, so no gap is left.
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO batches (part, seq, id, kind, manifest, registered_at_ms, parent, publication) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
				m.Partition, seq, m.ID, m.Kind, string(full), now.UnixMilli(), stamped.Parent, m.Publication); err != nil {
				return err
			}
			if touchesRouting {
				if _, err := s.ensurePublication(ctx, tx, m, now); err != nil {
					return err
				}
				if _, err := s.bumpRouting(ctx, tx); err != nil {
					return err
				}
			}
			return s.notifyTx(ctx, tx, channelBatches, strconv.Itoa(m.Partition))
		})
		switch {
		case err != nil && isUniqueViolation(err) && attempt < 5:
			// The same id was inserted concurrently (possibly for another
			// partition); the next attempt finds it.
			continue
		case err != nil:
			return 0, false, err
		}
		return seq, existed, nil
	}
}

// existingBatch finds batch id; raw is the canonical JSON of the manifest
// being registered, compared with the stored one made canonical.
func (s *Store) existingBatch(ctx context.Context, tx *sql.Tx, id string, raw []byte) (int64, bool, error) {
	var seq int64
	var have string
	err := tx.QueryRowContext(ctx, s.q(`SELECT seq, manifest FROM batches WHERE id = ?`), id).Scan(&seq, &have)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	var stored batch.Manifest
	if err := json.Unmarshal([]byte(have), &stored); err != nil {
		return 0, false, fmt.Errorf("batch %q: stored manifest: %w", id, err)
	}
	canon, err := json.Marshal(stored.Canonical())
	if err != nil {
		return 0, false, err
	}
	if string(canon) != string(raw) {
		return 0, false, errf(ErrConflict, "batch %q: already registered (partition seq %d) with a different manifest", id, seq)
	}
	return seq, true, nil
}

// Retraction is the result of RetractBatch.
type Retraction struct {
	Partition int
	Seq       int64
	Already   bool // it was retracted before (the first reason stays)
}

// RetractBatch marks batch id bad for the reason why: it stays in the log
// with its seq (ids are never reused), replicas skip it, and it never
// counts as a garbage-collection floor. Unknown ids fail with ErrNotFound.
func (s *Store) RetractBatch(ctx context.Context, id, why string) (Retraction, error) {
	var r Retraction
	if strings.TrimSpace(why) == "" {
		return r, errf(ErrInvalid, "retract batch %q: a reason is required", id)
	}
	err := s.tx(ctx, "retract batch "+id, func(tx *sql.Tx) error {
		var have string
		err := tx.QueryRowContext(ctx, s.q(`SELECT part, seq, retracted FROM batches WHERE id = ?`), id).Scan(&r.Partition, &r.Seq, &have)
		if errors.Is(err, sql.ErrNoRows) {
			return errf(ErrNotFound, "retract batch %q: not registered", id)
		}
		if err != nil {
			return err
		}
		if have != "" {
			r.Already = true
			return nil
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE batches SET retracted = ? WHERE id = ?`), why, id); err != nil {
			return err
		}
		return s.notifyTx(ctx, tx, channelBatches, strconv.Itoa(r.Partition))
	})
	return r, err
}

// Fault is a replica's reported fault.
type Fault struct {
	Node      string
	Partition int
	BatchID   string // the refused batch; "" for a fault of the replica itself
	Reason    string // shown as is: "corrupt batch <id>: <why>", "corrupt replica: <why>"
	Serving   bool   // false: the replica does not serve the partition (routers skip it)
}

// ReportFault records (or, with an empty Reason, clears) a replica's fault.
// A fault with Serving=false also resets the replica's progress to 0 (it
// rebuilds the partition from the log) and, like any change of Serving,
// bumps the routing version so routers stop (or resume) sending it reads.
func (s *Store) ReportFault(ctx context.Context, f Fault, now time.Time) (routingChanged bool, err error) {
	if err := s.checkPartition(f.Partition); err != nil {
		return false, err
	}
	err = s.tx(ctx, "report fault", func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, s.q(`SELECT 1 FROM nodes WHERE id = ?`), f.Node).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return errf(ErrUnknownNode, "report fault: node %q is not registered", f.Node)
		}
		if err != nil {
			return err
		}
		wasServing := true
		var serving int
		err = tx.QueryRowContext(ctx, s.q(`SELECT serving FROM faults WHERE part = ? AND node_id = ?`), f.Partition, f.Node).Scan(&serving)
		if err == nil {
			wasServing = serving != 0
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if f.Reason == "" {
			f.Serving = true
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM faults WHERE part = ? AND node_id = ?`), f.Partition, f.Node); err != nil {
				return err
			}
		} else {
			sv := 0
			if f.Serving {
				sv = 1
			}
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO faults (part, node_id, batch_id, reason, serving, at_ms) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (part, node_id) DO UPDATE SET batch_id = excluded.batch_id, reason = excluded.reason, serving = excluded.serving, at_ms = excluded.at_ms`),
				f.Partition, f.Node, f.BatchID, f.Reason, sv, now.UnixMilli()); err != nil {
				return err
			}
		}
		if !f.Serving {
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM progress WHERE part = ? AND node_id = ?`), f.Partition, f.Node); err != nil {
				return err
			}
		}
		if f.Serving == wasServing {
			return nil
		}
		routingChanged = true
		var version int64
		if err := tx.QueryRowContext(ctx, `UPDATE cluster SET routing_version = routing_version + 1 WHERE id = 1 RETURNING routing_version`).Scan(&version); err != nil {
			return err
		}
		return s.notifyTx(ctx, tx, channelRouting, strconv.FormatInt(version, 10))
	})
	return routingChanged, err
}

// PartitionHead is a partition's log position.
type PartitionHead struct {
	NewestSeq        int64
	NewestAt         time.Time // zero when the log is empty
	CollectedThrough int64     // batches at or below were garbage-collected
}

func (s *Store) checkPartition(p int) error {
	if p < 0 || p >= s.partitions {
		return errf(ErrInvalid, "partition %d out of range [0,%d)", p, s.partitions)
	}
	return nil
}

// ListBatches returns up to limit live batches of partition with seq >
// afterSeq, in seq order, and the partition's head.
func (s *Store) ListBatches(ctx context.Context, partition int, afterSeq int64, limit int) ([]BatchEntry, PartitionHead, error) {
	raws, head, err := s.listRaw(ctx, partition, afterSeq, limit)
	if err != nil {
		return nil, head, err
	}
	out := make([]BatchEntry, len(raws))
	for i, r := range raws {
		out[i] = BatchEntry{Seq: r.seq, RegisteredAt: r.registeredAt, Retracted: r.retracted}
		if err := json.Unmarshal(r.manifest, &out[i].Manifest); err != nil {
			return nil, head, fmt.Errorf("control: %s: partition %d seq %d: stored manifest: %w", s.target, partition, r.seq, err)
		}
	}
	return out, head, nil
}

// rawEntry is a batch with its manifest as stored (canonical JSON), so the
// server can pass it on without decoding and re-encoding.
type rawEntry struct {
	seq          int64
	manifest     []byte
	registeredAt time.Time
	retracted    string
}

func (s *Store) listRaw(ctx context.Context, partition int, afterSeq int64, limit int) ([]rawEntry, PartitionHead, error) {
	var head PartitionHead
	if err := s.checkPartition(partition); err != nil {
		return nil, head, err
	}
	if afterSeq < 0 {
		return nil, head, errf(ErrInvalid, "partition %d: after seq %d is negative", partition, afterSeq)
	}
	var out []rawEntry
	err := func() error {
		var at int64
		if err := s.db.QueryRowContext(ctx, s.q(`SELECT newest_seq, newest_at_ms, collected_through FROM partitions WHERE part = ?`), partition).
			Scan(&head.NewestSeq, &at, &head.CollectedThrough); err != nil {
			return err
		}
		if at > 0 {
			head.NewestAt = time.UnixMilli(at)
		}
		if afterSeq >= head.NewestSeq {
			return nil
		}
		rows, err := s.db.QueryContext(ctx, s.q(`SELECT seq, manifest, registered_at_ms, retracted FROM batches
			WHERE part = ? AND seq > ? AND gc_state = 0 ORDER BY seq LIMIT ?`), partition, afterSeq, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e rawEntry
			var ms int64
			if err := rows.Scan(&e.seq, &e.manifest, &ms, &e.retracted); err != nil {
				return err
			}
			e.registeredAt = time.UnixMilli(ms)
			out = append(out, e)
		}
		return rows.Err()
	}()
	if err != nil {
		return nil, head, s.wrap(fmt.Sprintf("list batches of partition %d", partition), err)
	}
	return out, head, nil
}

// UpsertNode registers a node or updates its address and zone, and records a
// heartbeat. It reports whether the routing may have changed (new node, new
// address or zone, or a node that was not up).
func (s *Store) UpsertNode(ctx context.Context, n Node, now time.Time) (changed bool, err error) {
	if n.ID == "" || n.Addr == "" {
		return false, errf(ErrInvalid, "register node %q: id and address are required", n.ID)
	}
	err = s.tx(ctx, "register node "+n.ID, func(tx *sql.Tx) error {
		var addr, zone, state string
		err := tx.QueryRowContext(ctx, s.q(`SELECT addr, zone, state FROM nodes WHERE id = ?`), n.ID).Scan(&addr, &zone, &state)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		changed = err != nil || addr != n.Addr || zone != n.Zone || state != StateUp
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO nodes (id, addr, zone, state, registered_at_ms, last_heartbeat_ms)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, zone = excluded.zone, last_heartbeat_ms = excluded.last_heartbeat_ms`),
			n.ID, n.Addr, n.Zone, "new", now.UnixMilli(), now.UnixMilli())
		return err
	})
	return changed, err
}

// Heartbeat records that node id is alive; it reports whether the node's
// recorded state was not up (so the routing must be reconciled).
func (s *Store) Heartbeat(ctx context.Context, id string, now time.Time) (wasDown bool, err error) {
	var state string
	defer s.lockWrites()()
	err = s.db.QueryRowContext(ctx, s.q(`UPDATE nodes SET last_heartbeat_ms = ? WHERE id = ? RETURNING state`), now.UnixMilli(), id).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return false, errf(ErrUnknownNode, "heartbeat: node %q is not registered", id)
	}
	if err != nil {
		return false, s.wrap("heartbeat "+id, err)
	}
	return state != StateUp, nil
}

// ReportApplied records that node applied partition's batches through seq.
// The seq must exist (1..newest) and must not go below the recorded one;
// reporting the same seq again is a no-op.
func (s *Store) ReportApplied(ctx context.Context, node string, partition int, seq int64, now time.Time) error {
	_, err := s.ReportAppliedBytes(ctx, node, partition, seq, nil, now)
	return err
}

// ReportAppliedBytes is ReportApplied that also records the bytes of each
// publication's database on the replica (nil: keep what was recorded). It
// reports whether the replica passed a snapshot of a publication that is
// not retired: it may hold a publication it did not hold before, so the
// routing version was bumped (routers learn it without polling progress).
func (s *Store) ReportAppliedBytes(ctx context.Context, node string, partition int, seq int64, pubBytes map[string]int64, now time.Time) (routingChanged bool, err error) {
	if err := s.checkPartition(partition); err != nil {
		return false, err
	}
	err = s.reportApplied(ctx, node, partition, seq, pubBytes, now)
	if errors.Is(err, errCrossed) {
		err = s.tx(ctx, "report applied", func(tx *sql.Tx) error {
			if _, err := s.lockCluster(ctx, tx); err != nil {
				return err
			}
			_, err := s.bumpRouting(ctx, tx)
			return err
		})
		return err == nil, err
	}
	return false, err
}

func (s *Store) reportApplied(ctx context.Context, node string, partition int, seq int64, pubBytes map[string]int64, now time.Time) error {
	var one int
	err := s.db.QueryRowContext(ctx, s.q(`SELECT 1 FROM nodes WHERE id = ?`), node).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return errf(ErrUnknownNode, "report applied: node %q is not registered", node)
	}
	if err != nil {
		return s.wrap("report applied", err)
	}
	var newest int64
	if err := s.db.QueryRowContext(ctx, s.q(`SELECT newest_seq FROM partitions WHERE part = ?`), partition).Scan(&newest); err != nil {
		return s.wrap("report applied", err)
	}
	if seq < 1 || seq > newest {
		return errf(ErrNotFound, "report applied: node %q partition %d: seq %d does not exist (newest is %d)", node, partition, seq, newest)
	}
	var before int64
	if err := s.db.QueryRowContext(ctx, s.q(`SELECT applied_seq FROM progress WHERE part = ? AND node_id = ?`), partition, node).Scan(&before); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s.wrap("report applied", err)
	}
	bytesJSON := ""
	if pubBytes != nil {
		b, err := json.Marshal(pubBytes)
		if err != nil {
			return fmt.Errorf("control: report applied: publication bytes: %w", err)
		}
		bytesJSON = string(b)
	}
	unlock := s.lockWrites()
	res, err := s.db.ExecContext(ctx, s.q(`INSERT INTO progress (part, node_id, applied_seq, applied_at_ms, publication_bytes) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (part, node_id) DO UPDATE SET applied_seq = excluded.applied_seq, applied_at_ms = excluded.applied_at_ms,
			publication_bytes = CASE WHEN excluded.publication_bytes = '' THEN progress.publication_bytes ELSE excluded.publication_bytes END
		WHERE progress.applied_seq <= excluded.applied_seq`), partition, node, seq, now.UnixMilli(), bytesJSON)
	unlock()
	if err != nil {
		return s.wrap("report applied", err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		var have int64
		_ = s.db.QueryRowContext(ctx, s.q(`SELECT applied_seq FROM progress WHERE part = ? AND node_id = ?`), partition, node).Scan(&have)
		return errf(ErrBackwards, "report applied: node %q partition %d: seq %d is below the recorded %d", node, partition, seq, have)
	}
	if seq > before {
		// Passed a snapshot of a publication that is not retired: it may
		// hold that publication now.
		var one int
		err := s.db.QueryRowContext(ctx, s.q(`SELECT 1 FROM batches b JOIN publications pu ON pu.id = b.publication
			WHERE b.part = ? AND b.kind = 'snapshot' AND b.seq > ? AND b.seq <= ? AND b.gc_state = 0 AND b.retracted = '' AND pu.role <> ? LIMIT 1`),
			partition, before, seq, RoleRetired).Scan(&one)
		if err == nil {
			return errCrossed
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return s.wrap("report applied", err)
		}
	}
	return nil
}

// errCrossed is reportApplied's "recorded, and the replica passed a
// snapshot" (ReportAppliedBytes turns it into a routing bump).
var errCrossed = errors.New("crossed a snapshot")

// RemoveNode deletes a node and its progress rows; unless force, only a
// node that is not up. The caller reconciles afterwards.
func (s *Store) RemoveNode(ctx context.Context, id string, force bool) error {
	return s.tx(ctx, "remove node "+id, func(tx *sql.Tx) error {
		if _, err := s.lockCluster(ctx, tx); err != nil {
			return err
		}
		var state string
		err := tx.QueryRowContext(ctx, s.q(`SELECT state FROM nodes WHERE id = ?`), id).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return errf(ErrUnknownNode, "remove node: node %q is not registered", id)
		}
		if err != nil {
			return err
		}
		if state == StateUp && !force {
			return errf(ErrNodeUp, "remove node: node %q is up (stop it first, or force)", id)
		}
		for _, q := range []string{`DELETE FROM progress WHERE node_id = ?`, `DELETE FROM nodes WHERE id = ?`} {
			if _, err := tx.ExecContext(ctx, s.q(q), id); err != nil {
				return err
			}
		}
		return nil
	})
}

// NodeRecord is a node row.
type NodeRecord struct {
	Node
	State         string
	RegisteredAt  time.Time
	LastHeartbeat time.Time
}

// ReconcileFunc computes, from the nodes and the current assignment, every
// node's state and the new assignment. It must be pure.
type ReconcileFunc func(nodes []NodeRecord, current [][]string) (states map[string]string, assign [][]string)

// Reconcile applies fn under the cluster lock and, if any state or
// assignment changed, writes them and bumps the routing version. It returns
// the (possibly new) version.
func (s *Store) Reconcile(ctx context.Context, fn ReconcileFunc) (version int64, changed bool, err error) {
	err = s.tx(ctx, "reconcile", func(tx *sql.Tx) error {
		var err error
		if version, err = s.lockCluster(ctx, tx); err != nil {
			return err
		}
		nodes, err := s.nodes(ctx, tx)
		if err != nil {
			return err
		}
		current, err := s.assignment(ctx, tx)
		if err != nil {
			return err
		}
		states, assign := fn(nodes, current)
		for _, n := range nodes {
			st, ok := states[n.ID]
			if !ok || st == n.State {
				continue
			}
			changed = true
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE nodes SET state = ? WHERE id = ?`), st, n.ID); err != nil {
				return err
			}
		}
		for p := 0; p < s.partitions; p++ {
			var want []string
			if p < len(assign) {
				want = assign[p]
			}
			if equalStrings(current[p], want) {
				continue
			}
			changed = true
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM assignments WHERE part = ?`), p); err != nil {
				return err
			}
			for slot, id := range want {
				if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO assignments (part, slot, node_id) VALUES (?, ?, ?)`), p, slot, id); err != nil {
					return err
				}
			}
		}
		if changed {
			if err := tx.QueryRowContext(ctx, `UPDATE cluster SET routing_version = routing_version + 1 WHERE id = 1 RETURNING routing_version`).Scan(&version); err != nil {
				return err
			}
			return s.notifyTx(ctx, tx, channelRouting, strconv.FormatInt(version, 10))
		}
		return nil
	})
	return version, changed, err
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) nodes(ctx context.Context, q querier) ([]NodeRecord, error) {
	rows, err := q.QueryContext(ctx, `SELECT id, addr, zone, state, registered_at_ms, last_heartbeat_ms FROM nodes ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []NodeRecord
	for rows.Next() {
		var n NodeRecord
		var reg, hb int64
		if err := rows.Scan(&n.ID, &n.Addr, &n.Zone, &n.State, &reg, &hb); err != nil {
			return nil, err
		}
		n.RegisteredAt, n.LastHeartbeat = time.UnixMilli(reg), time.UnixMilli(hb)
		out = append(out, n)
	}
	return out, rows.Err()
}

func (s *Store) assignment(ctx context.Context, q querier) ([][]string, error) {
	out := make([][]string, s.partitions)
	rows, err := q.QueryContext(ctx, `SELECT part, node_id FROM assignments ORDER BY part, slot`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var p int
		var id string
		if err := rows.Scan(&p, &id); err != nil {
			return nil, err
		}
		if p >= 0 && p < len(out) {
			out[p] = append(out[p], id)
		}
	}
	return out, rows.Err()
}

// Nodes returns every registered node with its replica count.
func (s *Store) Nodes(ctx context.Context) ([]NodeStatus, error) {
	nodes, err := s.nodes(ctx, s.db)
	if err != nil {
		return nil, s.wrap("list nodes", err)
	}
	assign, err := s.assignment(ctx, s.db)
	if err != nil {
		return nil, s.wrap("list nodes", err)
	}
	count := map[string]int{}
	for _, ids := range assign {
		for _, id := range ids {
			count[id]++
		}
	}
	out := make([]NodeStatus, len(nodes))
	for i, n := range nodes {
		out[i] = NodeStatus{Node: n.Node, State: n.State, LastHeartbeat: n.LastHeartbeat, RegisteredAt: n.RegisteredAt, Replicas: count[n.ID]}
	}
	return out, nil
}

// RoutingVersion returns the current routing version.
func (s *Store) RoutingVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, `SELECT routing_version FROM cluster WHERE id = 1`).Scan(&v)
	return v, s.wrap("routing version", err)
}

// Routing reads the routing table: per partition its assigned replicas with
// address, zone, state and progress, and the partition head. Lag is computed
// against now.
func (s *Store) Routing(ctx context.Context, now time.Time) (*Routing, error) {
	r := &Routing{Partitions: s.partitions, GeneratedAt: now,
		Replicas: make([][]Replica, s.partitions), NewestSeq: make([]int64, s.partitions), NewestAt: make([]time.Time, s.partitions)}
	err := s.readTx(ctx, "routing", func(tx *sql.Tx) error {
		// On PostgreSQL (READ COMMITTED) each statement has its own
		// snapshot; the version is read first, so it is never newer than
		// the rows it comes with.
		if err := tx.QueryRowContext(ctx, `SELECT routing_version FROM cluster WHERE id = 1`).Scan(&r.Version); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT part, newest_seq, newest_at_ms FROM partitions ORDER BY part`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var p int
			var seq, at int64
			if err := rows.Scan(&p, &seq, &at); err != nil {
				rows.Close()
				return err
			}
			if p >= 0 && p < s.partitions {
				r.NewestSeq[p] = seq
				if at > 0 {
					r.NewestAt[p] = time.UnixMilli(at)
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.QueryContext(ctx, `SELECT a.part, a.node_id, n.addr, n.zone, n.state, COALESCE(p.applied_seq, 0), COALESCE(b.registered_at_ms, 0),
				COALESCE(f.reason, ''), COALESCE(f.serving, 1)
			FROM assignments a
			JOIN nodes n ON n.id = a.node_id
			LEFT JOIN progress p ON p.part = a.part AND p.node_id = a.node_id
			LEFT JOIN batches b ON b.part = a.part AND b.seq = COALESCE(p.applied_seq, 0) + 1
			LEFT JOIN faults f ON f.part = a.part AND f.node_id = a.node_id
			ORDER BY a.part, a.slot`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p int
			var rep Replica
			var pending int64
			var serving int
			if err := rows.Scan(&p, &rep.NodeID, &rep.Addr, &rep.Zone, &rep.State, &rep.AppliedSeq, &pending, &rep.Fault, &serving); err != nil {
				return err
			}
			if p < 0 || p >= s.partitions {
				continue
			}
			if rep.State == StateGone {
				rep.State = StateDown
			}
			if serving == 0 && rep.State == StateUp {
				rep.State = StateCorrupt
			}
			rep.LagBatches = r.NewestSeq[p] - rep.AppliedSeq
			if rep.LagBatches > 0 && pending > 0 {
				rep.Lag = max(0, now.Sub(time.UnixMilli(pending)))
			}
			r.Replicas[p] = append(r.Replicas[p], rep)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		pubs, err := s.publicationStatuses(ctx, tx, now.Add(-RetiredListed))
		if err != nil {
			return err
		}
		for _, p := range pubs {
			r.Publications = append(r.Publications, p.Publication)
			if p.Role == RoleLive {
				r.Live = p.ID
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Collectable is a garbage-collected batch whose objects may still exist.
type Collectable struct {
	Partition int
	ID        string
	Seq       int64
}

// MarkCollectable marks, per partition, every batch before the newest
// snapshot that all assigned replicas have applied as collected: it is no
// longer listed and its objects may be deleted. Partitions without assigned
// replicas are left alone. It returns how many batches it marked.
func (s *Store) MarkCollectable(ctx context.Context) (int64, error) {
	var marked int64
	err := s.tx(ctx, "gc mark", func(tx *sql.Tx) error {
		if _, err := s.lockCluster(ctx, tx); err != nil {
			return err
		}
		type floor struct {
			part       int
			minApplied int64
			collected  int64
		}
		rows, err := tx.QueryContext(ctx, `SELECT a.part, MIN(COALESCE(p.applied_seq, 0)), MAX(pt.collected_through)
			FROM assignments a
			JOIN partitions pt ON pt.part = a.part
			LEFT JOIN progress p ON p.part = a.part AND p.node_id = a.node_id
			GROUP BY a.part ORDER BY a.part`)
		if err != nil {
			return err
		}
		var floors []floor
		for rows.Next() {
			var f floor
			if err := rows.Scan(&f.part, &f.minApplied, &f.collected); err != nil {
				rows.Close()
				return err
			}
			if f.minApplied > f.collected+1 {
				floors = append(floors, f)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		// The publications that are not retired keep their newest snapshot
		// every replica applied (or their first batch) and all after it.
		minApplied := map[int]int64{}
		for _, f := range floors {
			minApplied[f.part] = f.minApplied
		}
		retain, err := s.retentionFloors(ctx, tx, minApplied)
		if err != nil {
			return err
		}
		for _, f := range floors {
			var snap sql.NullInt64
			if err := tx.QueryRowContext(ctx, s.q(`SELECT MAX(seq) FROM batches WHERE part = ? AND kind = ? AND seq <= ? AND gc_state = 0 AND retracted = ''`),
				f.part, batch.KindSnapshot, f.minApplied).Scan(&snap); err != nil {
				return err
			}
			if keep, ok := retain[f.part]; ok && snap.Valid && keep < snap.Int64 {
				snap.Int64 = keep
			}
			if !snap.Valid || snap.Int64 <= f.collected+1 {
				continue
			}
			res, err := tx.ExecContext(ctx, s.q(`UPDATE batches SET gc_state = 1 WHERE part = ? AND seq < ? AND gc_state = 0`), f.part, snap.Int64)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			marked += n
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE partitions SET collected_through = ? WHERE part = ?`), snap.Int64-1, f.part); err != nil {
				return err
			}
		}
		return nil
	})
	return marked, err
}

// PendingCollections returns up to limit collected batches whose objects
// have not been deleted yet.
func (s *Store) PendingCollections(ctx context.Context, limit int) ([]Collectable, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT part, id, seq FROM batches WHERE gc_state = 1 ORDER BY part, seq LIMIT ?`), limit)
	if err != nil {
		return nil, s.wrap("gc pending", err)
	}
	defer rows.Close()
	var out []Collectable
	for rows.Next() {
		var c Collectable
		if err := rows.Scan(&c.Partition, &c.ID, &c.Seq); err != nil {
			return nil, s.wrap("gc pending", err)
		}
		out = append(out, c)
	}
	return out, s.wrap("gc pending", rows.Err())
}

// FinishCollection records that a collected batch's objects are deleted.
func (s *Store) FinishCollection(ctx context.Context, id string) error {
	defer s.lockWrites()()
	_, err := s.db.ExecContext(ctx, s.q(`UPDATE batches SET gc_state = 2 WHERE id = ? AND gc_state = 1`), id)
	return s.wrap("gc finish "+id, err)
}
