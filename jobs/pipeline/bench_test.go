package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/ingest"
	"github.com/pillarkit/pillar/pillar/local"
	"github.com/pillarkit/pillar/subsets"
)

const pgDocs = "/usr/share/doc/postgresql-doc-15/html"

// BenchmarkStagesPostgresDocs measures each pipeline stage on the PostgreSQL
// HTML docs (about 1,170 pages), on a fresh store per iteration: pages/s for
// every stage and chunks/s for rechunk and embed. Each stage's goroutines
// carry the profiler label stage=<name>.
func BenchmarkStagesPostgresDocs(b *testing.B) {
	if _, err := os.Stat(pgDocs); err != nil {
		b.Skip("postgresql-doc-15 not installed (make deps)")
	}
	set, err := subsets.ReadFile("../../testdata/policies.yaml")
	if err != nil {
		b.Fatal(err)
	}
	type stage struct {
		name string
		run  func(st pillar.Store) (pages, chunks int64, err error)
	}
	var cv string
	stages := []stage{
		{"rechunk", func(st pillar.Store) (int64, int64, error) {
			r, err := Rechunk(ctx, st, "recursive:size=512,overlap=64", Options{})
			if err != nil {
				return 0, 0, err
			}
			cv = r.Version
			return r.Pages, r.Rows, nil
		}},
		{"embed-hash384", func(st pillar.Store) (int64, int64, error) {
			r, err := Embed(ctx, st, cv, "hash:dim=384", Options{})
			if err != nil {
				return 0, 0, err
			}
			return r.Pages, r.Rows, nil
		}},
		{"subsets-recompute", func(st pillar.Store) (int64, int64, error) {
			r, err := Recompute(ctx, st, set, time.Now(), Options{})
			if err != nil {
				return 0, 0, err
			}
			return r.Docs, 0, nil
		}},
		{"publish", func(st pillar.Store) (int64, int64, error) {
			r, err := Publish(ctx, st, cv, "hash:dim=384", Options{})
			if err != nil {
				return 0, 0, err
			}
			return int64(r.Export.Desired), 0, nil
		}},
		{"export", func(st pillar.Store) (int64, int64, error) {
			r, p, err := Export(ctx, st, &memSink{}, Options{})
			if err != nil {
				return 0, 0, err
			}
			return r.Pages, 0, p.Commit("bench", "-")
		}},
	}
	dur := make([]time.Duration, len(stages))
	pages := make([]int64, len(stages))
	chunks := make([]int64, len(stages))
	for i := 0; i < b.N; i++ {
		st, err := local.Create(filepath.Join(b.TempDir(), "s"), &local.Options{Partitions: 64})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ingest.Run(ctx, st, ingest.Options{From: pgDocs, BaseURL: "https://www.postgresql.org/docs/15/"}); err != nil {
			b.Fatal(err)
		}
		for j, s := range stages {
			t0 := time.Now()
			var p, c int64
			// The label follows the stage's goroutines into the profile:
			// go tool pprof -tagfocus=stage=embed-hash384 … (-cpuprofile).
			pprof.Do(ctx, pprof.Labels("stage", s.name), func(context.Context) { p, c, err = s.run(st) })
			if err != nil {
				b.Fatalf("%s: %v", s.name, err)
			}
			dur[j] += time.Since(t0)
			pages[j] += p
			chunks[j] += c
		}
	}
	for j, s := range stages {
		sec := dur[j].Seconds()
		b.ReportMetric(float64(pages[j])/sec, s.name+"-pages/s")
		if chunks[j] > 0 {
			b.ReportMetric(float64(chunks[j])/sec, s.name+"-chunks/s")
		}
	}
}
