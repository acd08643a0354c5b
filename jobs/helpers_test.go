package jobs_test

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/jobs"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/local"
)

// env is a store in a temp dir and a runner whose spill dir is watched.
type env struct {
	t      testing.TB
	dir    string
	tmp    string
	store  *local.Store
	runner *jobs.Local
}

func newEnv(t testing.TB) *env {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	st, err := local.Create(dir, &local.Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tmp := t.TempDir()
	return &env{t: t, dir: dir, tmp: tmp, store: st, runner: jobs.NewLocal(st, &jobs.LocalOptions{TempDir: tmp})}
}

var vocab = func() []string {
	rng := rand.New(rand.NewPCG(7, 7))
	var v []string
	for i := 0; i < 400; i++ {
		n := 2 + rng.IntN(8)
		b := make([]byte, n)
		for j := range b {
			b[j] = byte('a' + rng.IntN(26))
		}
		v = append(v, string(b))
	}
	return v
}()

// makeDocs returns n deterministic docs with text of 10..60 words.
func makeDocs(seed uint64, n int) []pillar.Doc {
	rng := rand.New(rand.NewPCG(seed, 1))
	docs := make([]pillar.Doc, n)
	for i := range docs {
		var words []string
		for j := 10 + rng.IntN(50); j > 0; j-- {
			w := vocab[rng.IntN(len(vocab))]
			if rng.IntN(7) == 0 {
				w = strings.ToUpper(w)
			}
			words = append(words, w)
		}
		u := fmt.Sprintf("https://h%d.example/%d/%d", rng.IntN(9), seed, i)
		docs[i] = pillar.Doc{PageKey: pillar.KeyOfNormalized(u).String(), URL: u, Host: fmt.Sprintf("h%d.example", rng.IntN(9)),
			Title: fmt.Sprintf("t%d-%d", seed, i), Text: strings.Join(words, " ") + ".", Version: 1}
	}
	return docs
}

func writeTable[T any](e *env, name string, rows []T) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.store.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var zero T
	// Several files, as a real table has after appends.
	for part := 0; part < 3; part++ {
		w, err := tx.WriteTable(ctx, name, zero, &pillar.WriteOptions{Mode: pillar.Replace})
		if err != nil {
			e.t.Fatal(err)
		}
		for i := part * len(rows) / 3; i < (part+1)*len(rows)/3; i++ {
			if err := w.Write(&rows[i]); err != nil {
				e.t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
}

func readTable[T any](e *env, name string) []T {
	e.t.Helper()
	ctx := context.Background()
	sn, err := e.store.Snapshot(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer sn.Release()
	rr, err := sn.ReadTable(ctx, name, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rr.Close()
	var out []T
	for rr.Next() {
		var v T
		if err := rr.Scan(&v); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rr.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) tableInfo(name string) (pillar.TableInfo, error) {
	ctx := context.Background()
	sn, err := e.store.Snapshot(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer sn.Release()
	return sn.Table(ctx, name)
}

// files lists every file under the store dir (manifests excluded: cleanup
// may retire old ones) and the runner's temp dir.
func (e *env) files() []string {
	e.t.Helper()
	var out []string
	for _, root := range []string{e.dir, e.tmp} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.Contains(p, "manifests") && !strings.HasSuffix(p, "CURRENT") {
				out = append(out, p)
			}
			return nil
		})
	}
	slices.Sort(out)
	return out
}

// assertClean checks that a failed operation left no table and no files.
func (e *env) assertClean(before []string, tables ...string) {
	e.t.Helper()
	if after := e.files(); !slices.Equal(before, after) {
		e.t.Errorf("files changed by a failed operation:\nbefore %v\nafter  %v", before, after)
	}
	for _, tb := range tables {
		if _, err := e.tableInfo(tb); err == nil {
			e.t.Errorf("table %q exists after a failed operation", tb)
		}
	}
	if ents, _ := os.ReadDir(e.tmp); len(ents) != 0 {
		e.t.Errorf("temp dir not cleaned: %v", ents)
	}
}
