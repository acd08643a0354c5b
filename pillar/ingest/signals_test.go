package ingest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

func readAllSignals(t *testing.T, path string) ([]pillar.Signal, []int64, error) {
	t.Helper()
	var out []pillar.Signal
	var lines []int64
	err := ReadSignals(path, func(line int64, s pillar.Signal) error {
		out, lines = append(out, s), append(lines, line)
		return nil
	})
	return out, lines, err
}

// TestReadSignals: CSV by url or page_key, numbers and strings; Parquet with
// typed columns and nulls; errors name the file and line.
func TestReadSignals(t *testing.T) {
	dir := t.TempDir()
	k, _, _ := pillar.KeyOfURL("https://ex.org/a")
	csvPath := filepath.Join(dir, "s.csv")
	os.WriteFile(csvPath, []byte("url,score,lang\nhttps://ex.org/a, 0.5 ,de\n"), 0o644)
	got, lines, err := readAllSignals(t, csvPath)
	if err != nil {
		t.Fatal(err)
	}
	want := []pillar.Signal{{PageKey: k.String(), Name: "score", Num: 0.5, IsNum: true}, {PageKey: k.String(), Name: "lang", Str: "de"}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] || lines[0] != 2 {
		t.Fatalf("csv: %+v %v", got, lines)
	}

	type row struct {
		PageKey string   `parquet:"page_key"`
		Score   *float64 `parquet:"score,optional"`
		Spam    bool     `parquet:"spam"`
	}
	half := 0.25
	pq := filepath.Join(dir, "s.parquet")
	if err := parquet.WriteFile(pq, []row{{k.String(), &half, true}, {k.String(), nil, false}}); err != nil {
		t.Fatal(err)
	}
	got, lines, err = readAllSignals(t, pq)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Name != "score" || got[0].Num != 0.25 || got[1].Name != "spam" || got[1].Num != 1 ||
		got[2].Name != "spam" || got[2].Num != 0 || !got[2].IsNum || lines[2] != 3 {
		t.Fatalf("parquet: %+v %v", got, lines)
	}

	for body, want := range map[string]string{
		"name,score\nx,1\n":                 `first column must be "url" or "page_key"`,
		"page_key,score\nnot-hex,1\n":       "bad.csv:2",
		"url,score\nhttps://ex.org/a,1,2\n": "bad.csv:2",
	} {
		bad := filepath.Join(dir, "bad.csv")
		os.WriteFile(bad, []byte(body), 0o644)
		if _, _, err := readAllSignals(t, bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}
