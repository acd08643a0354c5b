package cobbled

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	ctl := newFakeControl(1)
	for _, c := range []struct {
		o    Options
		want string // "" = valid
	}{
		{Options{Dir: "d"}, ""},
		{Options{}, "Dir is required"},
		{Options{Dir: "d", Control: ctl}, "ID and Addr are required"},
		{Options{Dir: "d", Control: ctl, ID: "n1", Addr: "a:1"}, "Objects is required"},
		{Options{Dir: "d", CacheBytes: 1000}, "under 1 MiB"},
		{Options{Dir: "d", RetryBackoff: time.Minute, RetryBackoffMax: time.Second}, "at most RetryBackoffMax"},
		{Options{Dir: "d", FaultDelay: FaultDelay{Fraction: 2}}, "FaultDelay"},
		{Options{Dir: "d", Partitions: -1}, "negative"},
	} {
		err := c.o.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: got %v, want %q", c.o, err, c.want)
		}
	}
}

func TestOpenCorruptState(t *testing.T) {
	dir := t.TempDir()
	n := openTestNode(t, dir, t.TempDir(), 2, nil)
	_, err := n.addPartition(1)
	must(t, err)
	n.Close()
	must(t, os.WriteFile(filepath.Join(dir, partDirName(1), stateFile), []byte("{not json"), 0o644))
	_, err = Open(context.Background(), Options{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "partition 1") || !strings.Contains(err.Error(), "corrupt state") {
		t.Fatalf("got %v, want an error naming partition 1's corrupt state", err)
	}
}

func TestInspectDir(t *testing.T) {
	const parts = 3
	objects, dir := t.TempDir(), t.TempDir()
	n := openTestNode(t, dir, objects, parts, nil)
	steps, _ := testSteps(2, parts)
	bs, _ := writeSteps(t, objects, parts, 2, "i", steps[:2])
	for _, b := range bs {
		must(t, n.Apply(context.Background(), b))
	}
	info, err := InspectDir(dir) // while the node is open
	must(t, err)
	n.Close()
	if info.Partitions != parts || len(info.Replicas) != 1 {
		t.Fatalf("%+v", info)
	}
	r := info.Replicas[0]
	if r.Partition != 2 || r.AppliedSeq != 2 || r.Batch != "i-02" || r.Generation != "db-000001" || len(r.Publications) != 1 || r.Publications[0].Bytes != r.Bytes || r.Bytes == 0 {
		t.Fatalf("%+v", r)
	}
}
