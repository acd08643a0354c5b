package pipeline_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar/ingest"
	"github.com/pillarkit/pillar/pillar/local"
)

// Example opens a store, ingests a folder of HTML pages, and runs the two
// backfills: chunks under one chunker version, then embeddings of those
// chunks under one model. Each backfill commits in slices, so an
// interrupted one resumes where it stopped; a second run finds nothing
// pending.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "pillar-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	site := filepath.Join(dir, "site")
	os.MkdirAll(filepath.Join(site, "docs"), 0o755)
	for name, body := range map[string]string{
		"index.html":      "<html><head><title>Home</title></head><body><p>Welcome to the example site.</p></body></html>",
		"docs/intro.html": "<html><head><title>Intro</title></head><body><p>Pillar keeps clean text, chunks and embeddings side by side.</p></body></html>",
	} {
		os.WriteFile(filepath.Join(site, name), []byte(body), 0o644)
	}

	st, err := local.Create(filepath.Join(dir, "store"), &local.Options{Partitions: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	stats, err := ingest.Run(ctx, st, ingest.Options{From: site, BaseURL: "https://example.org/"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ingested pages:", stats.New)

	chunks, err := pipeline.Rechunk(ctx, st, "recursive:size=512,overlap=64", pipeline.Options{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("chunked pages:", chunks.PendingPages)
	vecs, err := pipeline.Embed(ctx, st, chunks.Version, "hash:dim=8", pipeline.Options{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("embedded pages:", vecs.PendingPages)
	again, err := pipeline.Rechunk(ctx, st, "recursive:size=512,overlap=64", pipeline.Options{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pending on a second run:", again.PendingPages)
	// Output:
	// ingested pages: 2
	// chunked pages: 2
	// embedded pages: 2
	// pending on a second run: 0
}
