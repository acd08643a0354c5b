package cobbled

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/keyfmt"
)

// TestForeignKeysRefused: a batch file whose first or last key is not of
// its manifest's partition is refused before it is ingested, naming the
// file, the key (short) and both partitions; nothing of it is served and
// the staging directory is cleared.
func TestForeignKeysRefused(t *testing.T) {
	const parts = 4
	own := keysIn(6, 1, parts)
	foreign := keysIn(6, 2, parts)
	slices.Sort(own)
	slices.Sort(foreign)
	// A file that starts with its own keys and ends with one of another
	// partition: the largest foreign key above every own key.
	var tail string
	for tail == "" {
		for _, k := range keysIn(50, 2, parts) {
			if k > own[len(own)-1] && (tail == "" || k > tail) {
				tail = k
			}
		}
	}
	for _, c := range []struct {
		name  string
		keys  []string
		which string
		bad   string
	}{
		{"every key of another partition", foreign, "first", foreign[0]},
		{"the last key of another partition", append(slices.Clone(own), tail), "last", tail},
	} {
		t.Run(c.name, func(t *testing.T) {
			objects, dir := t.TempDir(), t.TempDir()
			var ops []op
			for _, k := range c.keys {
				ops = append(ops, op{key: k, val: "v"})
			}
			m := writeBatch(t, objects, parts, 1, "foreign-1", batch.KindSnapshot, ops, 100)
			n := openTestNode(t, dir, objects, parts, nil)
			defer n.Close()
			err := n.Apply(context.Background(), Batch{Seq: 1, Manifest: m})
			if !errors.Is(err, ErrForeignKey) {
				t.Fatalf("Apply: %v, want ErrForeignKey", err)
			}
			for _, w := range []string{"000001.sst", c.which + " key (" + keyfmt.Short([]byte(c.bad)) + ")", "is in partition 2 of 4", "the manifest's partition is 1"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if got := n.part(1).applied.Load(); got != 0 {
				t.Errorf("applied seq %d after the refusal", got)
			}
			if _, err := os.Stat(filepath.Join(dir, partDirName(1), "staging")); !os.IsNotExist(err) {
				t.Errorf("staging left behind: %v", err)
			}
		})
	}

	// The same keys under their own partition's manifest apply.
	objects := t.TempDir()
	var ops []op
	for _, k := range foreign {
		ops = append(ops, op{key: k, val: "v"})
	}
	m := writeBatch(t, objects, parts, 2, "own-1", batch.KindSnapshot, ops, 100)
	n := openTestNode(t, t.TempDir(), objects, parts, nil)
	defer n.Close()
	must(t, n.Apply(context.Background(), Batch{Seq: 1, Manifest: m}))
}
