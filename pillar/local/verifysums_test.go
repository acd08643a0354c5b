package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/pillar"
)

// TestVerifyChecksHeadsSums: Verify checks a queue
// segment's footer and heads checksums too, which heads reads (Lorry's
// head scan) check instead of the whole file: a sum recorded wrong in the
// manifest (the file and its crc32c right) fails every heads read of the
// segment, so Verify reports it, naming the file and the sum. It reports
// nothing for the good store, and a byte damaged in the file still as a
// crc32c mismatch first. On the code before, Verify checked the crc32c
// and row count only: both damaged manifests passed.
func TestVerifyChecksHeadsSums(t *testing.T) {
	for _, field := range []string{"footer_crc32c", "heads_crc32c", "crc32c-of-file"} {
		t.Run(field, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Create(dir, &Options{Partitions: 1})
			if err != nil {
				t.Fatal(err)
			}
			tx, _ := s.Begin(ctx)
			for i := range 3 {
				if err := tx.Enqueue(ctx, pillar.ExportRecord{Partition: 0, PageKey: keyOfPartition(0, 1), Op: pillar.OpPut, Value: []byte(strings.Repeat("v", 1000*(i+1)))}); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			m, _ := s.current()
			seg := m.Queue[0].Segments[0]
			if rep, err := s.Verify(ctx, nil); err != nil || !rep.OK() {
				t.Fatalf("verify of the good store: %v %+v", err, rep)
			}
			want := "checksum mismatch"
			switch field {
			case "crc32c-of-file":
				flip1(t, dir, seg.File, 4, 0x01) // the first page header
			default:
				cur, _ := os.ReadFile(filepath.Join(dir, "CURRENT"))
				path := filepath.Join(dir, "manifests", strings.TrimSpace(string(cur)))
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				sum := seg.HeadsCRC32C
				if field == "footer_crc32c" {
					sum = seg.FooterCRC32C
				}
				bad := strings.Replace(string(b), `"`+field+`":"`+sum+`"`, `"`+field+`":"00000000"`, 1)
				if bad == string(b) {
					t.Fatalf("setup: %s %s not in the manifest", field, sum)
				}
				if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
					t.Fatal(err)
				}
				want = field + " 00000000"
			}
			s2, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := s2.Verify(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Problems) != 1 || rep.Problems[0].File != seg.File || !rep.Problems[0].Corrupt || !strings.Contains(rep.Problems[0].Error, want) {
				t.Fatalf("verify with %s wrong: %+v, want one corrupt problem naming %s and saying %q", field, rep.Problems, seg.File, want)
			}
			t.Logf("%s", rep.Problems[0].Error)
		})
	}
}
