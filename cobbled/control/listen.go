package control

import (
	"context"
	"database/sql"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgreSQL notification channels. A registration notifies channelBatches
// with the partition number and a routing change notifies channelRouting
// with the new version, inside the writing transaction, so listeners hear of
// it only once it is committed.
const (
	channelBatches = "pillar_control_batches"
	channelRouting = "pillar_control_routing"
)

func (s *Store) notifyTx(ctx context.Context, tx *sql.Tx, channel, payload string) error {
	if s.backend != BackendPostgres {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
	return err
}

// Listener receives the store's change notifications.
type Listener struct {
	// Batch is called with the partition of a newly registered batch.
	Batch func(partition int)
	// Routing is called when the routing version changes.
	Routing func()
	// Resync is called after (re)connecting, when notifications may have
	// been missed: wake everything.
	Resync func()
}

// Listen delivers notifications of registrations and routing changes made
// by any control-plane process on the same PostgreSQL database, until ctx
// is done. It reconnects after errors (waiting retry between attempts) and
// calls Resync after each (re)connection. On SQLite it returns at once:
// one process owns an SQLite file.
func (s *Store) Listen(ctx context.Context, l Listener, retry time.Duration, log *slog.Logger) {
	if s.backend != BackendPostgres {
		return
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, l)
		if ctx.Err() != nil {
			return
		}
		log.Warn("control: listen for notifications", "db", s.target, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

func (s *Store) listenOnce(ctx context.Context, l Listener) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.Connect(cctx, s.dsn)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, ch := range []string{channelBatches, channelRouting} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return err
		}
	}
	if l.Resync != nil {
		l.Resync()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case channelBatches:
			if p, err := strconv.Atoi(n.Payload); err == nil && l.Batch != nil && p >= 0 && p < s.partitions {
				l.Batch(p)
			}
		case channelRouting:
			if l.Routing != nil {
				l.Routing()
			}
		}
	}
}
