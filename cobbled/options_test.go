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
