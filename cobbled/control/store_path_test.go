package control

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestSQLitePathWithURIChars: a path with '#', '?' or '%' names its own
// file (SQLite URIs would otherwise cut it short and share a database).
func TestSQLitePathWithURIChars(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a#1.db", "a?x=1.db", "a%20b.db"} {
		path := filepath.Join(dir, name)
		st, err := OpenStore(context.Background(), "sqlite:"+path, &StoreOptions{Partitions: 4})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		st.Close()
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s: database not created at its own path: %v", name, err)
		}
	}
}
