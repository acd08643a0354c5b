package control

import (
	"context"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
)

// TestMultiInstanceLongPoll runs two control-plane processes' worth of
// servers on one PostgreSQL database: a long poll on one wakes when a batch
// is registered through the other (LISTEN/NOTIFY), and so does a routing
// watch.
func TestMultiInstanceLongPoll(t *testing.T) {
	var pg backend
	for _, b := range backends() {
		if b.name == BackendPostgres {
			pg = b
		}
	}
	dsn := pg.dsn(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := startEnv(t, dsn, 4, nil)
	b := startEnv(t, dsn, 0, nil) // P from the database
	go a.srv.Run(ctx)
	go b.srv.Run(ctx)
	time.Sleep(300 * time.Millisecond) // listeners connect

	got := make(chan []BatchEntry, 1)
	go func() {
		list, err := b.client.ListBatches(ctx, 2, 0, 0, 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- list
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if _, err := a.client.RegisterBatch(ctx, manifest("multi-1", 2, 4, batch.KindDelta)); err != nil {
		t.Fatal(err)
	}
	list := <-got
	if len(list) != 1 || list[0].Manifest.ID != "multi-1" {
		t.Fatalf("waiter on the other instance got %v", list)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("waiter on the other instance woke after %v", d)
	}

	r0, err := b.client.GetRouting(ctx)
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan int64, 1)
	go func() {
		r, err := b.client.WatchRouting(ctx, r0.Version, 5*time.Second)
		if err != nil {
			t.Error(err)
			watched <- 0
			return
		}
		watched <- r.Version
	}()
	time.Sleep(200 * time.Millisecond)
	start = time.Now()
	if err := a.client.RegisterNode(ctx, Node{"mn1", "127.0.0.1:9500", "a"}); err != nil {
		t.Fatal(err)
	}
	if v := <-watched; v <= r0.Version || time.Since(start) > time.Second {
		t.Fatalf("routing watch on the other instance: version %d (was %d) after %v", v, r0.Version, time.Since(start))
	}
}
