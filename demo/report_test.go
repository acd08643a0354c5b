package demo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run that failed in step 1 still writes a report, and the report says
// why it failed.
func TestReportOfAFailedRun(t *testing.T) {
	dir := t.TempDir()
	path, err := writeReport(dir, &Report{Corpus: "x", Failure: "demo: 1. ingest: no page of x went into the store"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "## FAILED\n\ndemo: 1. ingest: no page of x went into the store") || strings.Contains(string(b), "Passed") {
		t.Fatalf("report:\n%s", b)
	}
	if filepath.Base(path) != "demo-report.md" {
		t.Fatal(path)
	}
}
