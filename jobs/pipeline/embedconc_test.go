package pipeline

import (
	"testing"
	"time"

	"github.com/pillarkit/pillar/jobs/embedder/fakemodel"
	"github.com/pillarkit/pillar/pillar"
)

// TestEmbedKeepsModelBusy: with EmbedConcurrency 3 the embed job keeps
// three requests at the (fake, slow, failing) model at once, retries the
// injected failures and completes the version with one vector per chunk.
func TestEmbedKeepsModelBusy(t *testing.T) {
	st := newStore(t, 120)
	r, err := Rechunk(ctx, st, "recursive:size=64,overlap=8", Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := fakemodel.Start(fakemodel.Options{Dim: 8, Slots: 3, Latency: 20 * time.Millisecond, FailEvery: 5})
	defer srv.Close()
	e, err := Embed(ctx, st, r.Version, srv.Spec(",backoff=1ms"), Options{EmbedConcurrency: 3, Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := st.Snapshot(ctx)
	v, err := pillar.LoadVersion(ctx, sn, e.Version)
	if err != nil || v.State != pillar.StateComplete || v.Rows != r.Rows {
		t.Fatalf("embeddings version %+v (chunks: %d rows) %v", v, r.Rows, err)
	}
	s := srv.Stats()
	if s.MaxInFlight < 3 {
		t.Fatalf("at most %d requests at the model at once, want 3: %+v", s.MaxInFlight, s)
	}
	if s.Failed == 0 || s.Inputs < r.Rows {
		t.Fatalf("no injected failure retried, or fewer inputs than chunks (%d): %+v", r.Rows, s)
	}
}
