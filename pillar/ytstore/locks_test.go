package ytstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yterrors"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/jobs/ytfake"
	"github.com/pillarkit/pillar/pillar"
)

// TestLockConflictIsErrConflict: a commit that must replace a table while
// another transaction holds a lock on it (an operation of that
// transaction still writing it) gets the cluster's lock conflict (code
// 402, from the FAKE cluster's implicit locks) as pillar.ErrConflict
// naming the table, and lands nothing.
func TestLockConflictIsErrConflict(t *testing.T) {
	ctx := context.Background()
	s, _ := newFakeStore(t)
	seed, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, seed, "a")
	if err := seed.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	holder, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Abort()
	ytx := holder.(jobs.YTTxer).YTTx()
	w, err := ytx.WriteTable(ctx, ypath.Path(s.tablePath("docs")), nil) // an overwrite: exclusive lock
	if err != nil {
		t.Fatal(err)
	}
	defer w.Rollback()

	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, tx, "b")
	err = tx.Commit(ctx)
	if !errors.Is(err, pillar.ErrConflict) || !strings.Contains(err.Error(), `table "docs"`) || !strings.Contains(err.Error(), "locked by another transaction") {
		t.Fatalf("commit over a locked table: %v; want ErrConflict naming the table and the lock", err)
	}
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	if ti, _ := sn.Table(ctx, "docs"); ti.Rows != 1 || sn.Info().Generation != 1 {
		t.Fatalf("after the refused commit: %+v at generation %d", ti, sn.Info().Generation)
	}
	if st := s.Stats(); st.Conflicts != 1 {
		t.Fatalf("stats %+v: want one conflict", st)
	}
}

// TestAbandonedTransactionTimesOut: a store transaction whose client died
// (pings stopped) is aborted by the cluster after its timeout; its commit
// then fails and nothing of it lands.
func TestAbandonedTransactionTimesOut(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	yc := ytfake.New(&ytfake.Options{SandboxDir: t.TempDir(), Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	s, err := Create(ctx, yc, "//tmp/pillar", &Options{Partitions: 2, PollInterval: time.Millisecond, TxTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, tx, "a")
	id := tx.(jobs.YTTxer).YTTx().ID()
	if !yc.StopPings(id) {
		t.Fatal("no such transaction on the fake")
	}
	mu.Lock()
	now = now.Add(31 * time.Second)
	mu.Unlock()
	if yc.Alive(id) {
		t.Fatal("the transaction outlived its timeout without pings")
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("a commit after the transaction timed out succeeded")
	}
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	if _, err := sn.Table(ctx, "docs"); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("the timed-out transaction's table is visible: %v", err)
	}
}

func writeDocs(t *testing.T, tx pillar.Tx, keys ...string) {
	t.Helper()
	w, err := tx.WriteTable(context.Background(), "docs", pillar.Doc{}, &pillar.WriteOptions{SortedBy: []string{"page_key"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := w.Write(&pillar.Doc{PageKey: k}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSortedWritersMustNotInterleave: two writers of one table claiming
// SortedBy whose rows interleave fail the commit with YTsaurus's sort
// order violation (the ordered merge into the sorted schema), and nothing
// lands; the embedded store trusts the claim (pillar.WriteOptions).
func TestSortedWritersMustNotInterleave(t *testing.T) {
	ctx := context.Background()
	s, _ := newFakeStore(t)
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, tx, "b", "d")
	writeDocs(t, tx, "a", "c")
	err = tx.Commit(ctx)
	if !yterrors.ContainsErrorCode(err, yterrors.CodeSortOrderViolation) {
		t.Fatalf("interleaved sorted writers: %v; want a sort order violation", err)
	}
	sn, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	if _, err := sn.Table(ctx, "docs"); !errors.Is(err, pillar.ErrNotFound) {
		t.Fatalf("docs after the refused commit: %v", err)
	}
}
