package cli

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// brokenStore is a FAKE store whose snapshots fail (an unreadable store).
type brokenStore struct{ pillar.Store }

func (brokenStore) Snapshot(ctx context.Context) (pillar.Snapshot, error) {
	return nil, errors.New("disk gone")
}

// TestLorryHealthz: /healthz answers 200 "ok" while the store is readable
// and 503 with the error once it is not.
func TestLorryHealthz(t *testing.T) {
	st, err := local.Create(filepath.Join(t.TempDir(), "store"), &local.Options{Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	h := lorryHealth(st)
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != "ok" {
		t.Fatalf("healthy: %d %q", rec.Code, rec.Body.String())
	}
	defer st.Close()
	rec = httptest.NewRecorder()
	lorryHealth(brokenStore{st})(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "store: disk gone") {
		t.Fatalf("closed store: %d %q", rec.Code, rec.Body.String())
	}
}
