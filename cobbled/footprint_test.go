package cobbled

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pillarkit/pillar/internal/batch"
)

// diskUsage returns the bytes allocated on disk under dir (st_blocks, so
// preallocated space counts), and the part of it that is SST files.
func diskUsage(t *testing.T, dir string) (total, sst int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		n := st.Blocks * 512
		total += n
		if strings.HasSuffix(path, ".sst") {
			sst += n
		}
		return nil
	})
	must(t, err)
	return total, sst
}

// TestPartitionFootprint measures a replica's fixed disk cost: the space a
// partition database takes beyond its SST files (MANIFEST, WAL, LOG,
// OPTIONS, CURRENT, state.json), after a snapshot and a few deltas. The
// figure is in the README (operations); the test fails if it grows past
// 128 KiB per partition (it was 4 MiB, from the MANIFEST preallocation).
func TestPartitionFootprint(t *testing.T) {
	const parts = 16
	objects, dir := t.TempDir(), t.TempDir()
	n := openTestNode(t, dir, objects, parts, nil)
	defer n.Close()
	ctx := context.Background()
	for p := 0; p < parts; p++ {
		ks := keysIn(4, p, parts)
		for seq := 1; seq <= 4; seq++ {
			kind := batch.KindDelta
			if seq == 1 {
				kind = batch.KindSnapshot
			}
			m := writeBatch(t, objects, parts, p, fmt.Sprintf("f%d-%d", p, seq), kind, []op{{key: ks[seq-1], val: "v"}}, 0)
			must(t, n.Apply(ctx, Batch{Seq: int64(seq), Manifest: m}))
		}
	}
	total, sst := diskUsage(t, dir)
	per := (total - sst) / parts
	t.Logf("%d partitions: %d bytes on disk, %d of them SST files: %d bytes (%.0f KiB) fixed cost per partition", parts, total, sst, per, float64(per)/1024)
	if testing.Verbose() {
		filepath.WalkDir(filepath.Join(dir, partDirName(0)), func(path string, d fs.DirEntry, err error) error {
			if info, err := d.Info(); err == nil && !d.IsDir() {
				t.Logf("  %s: %d bytes, %d allocated", strings.TrimPrefix(path, dir), info.Size(), info.Sys().(*syscall.Stat_t).Blocks*512)
			}
			return nil
		})
	}
	if per > 128<<10 {
		t.Fatalf("fixed cost %d bytes per partition, over 128 KiB", per)
	}
}
