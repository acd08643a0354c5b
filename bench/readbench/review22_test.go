package readbench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/rocks"
)

// Review of eed9d2f and c2cce82 against the bare floor. R5: bare/interleaved
// is "the floor the node's BatchGet is held to" (the same MultiGet, with
// nothing of the node around it). Since eed9d2f the node keeps index and
// filter blocks in its table readers (one block-cache lookup per key, not
// three) and since c2cce82 reads all its partitions in one cgo call; the
// bare floor still opens its databases with rocks.TableConfig.Options
// (index and filter in the cache: three lookups a key) and calls mget.Get
// once per partition. The floor now does more work per key than the node,
// so a node-to-floor ratio no longer measures what the node adds. The test
// checks the first half (its table readers hold the filter, as the node's
// do: TestIndexAndFilterInTableReaders).
func TestReview22BareFloorReadsLikeTheNode(t *testing.T) {
	const keys = 8000
	opts, err := rocks.TableConfig{}.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer opts.Destroy()
	env := grocksdb.NewDefaultEnvOptions()
	defer env.Destroy()
	sst := filepath.Join(t.TempDir(), "000001.sst")
	w := grocksdb.NewSSTFileWriter(env, opts)
	if err := w.Open(sst); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if err := w.Put([]byte(fmt.Sprintf("k%015d", i)), []byte("v")); err != nil { // 16-byte keys, sorted
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	w.Destroy()
	s, err := openBare(t.TempDir(), []string{sst}, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	mem, err := strconv.ParseInt(s.dbs[0].GetProperty("rocksdb.estimate-table-readers-mem"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// 8000 keys × 10 bits of filter = 10,000 bytes in the readers, as on
	// a node; with index and filter in the block cache a few hundred.
	if mem < keys {
		t.Errorf("the bare floor's table readers hold %d bytes for %d keys: its index and filter blocks are in the block cache, the node's (eed9d2f) are not", mem, keys)
	}
}

// R6: a89757b made wire the default --transport of `router serve` and
// `bench read`, but the docs still say gRPC is the default, and the
// command given for the gRPC run (no --transport) now runs wire.
func TestReview22DocsTransportDefault(t *testing.T) {
	for _, f := range []struct {
		path  string
		stale []string
	}{
		{"../../README.md", []string{"gRPC stays the default", "(the default transport)"}},
		{"results/README.md", []string{"(router over gRPC, the default"}},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ")
		for _, s := range f.stale {
			if i := strings.Index(text, s); i >= 0 {
				t.Errorf("%s: %q: the default transport is wire since a89757b (…%s…)", f.path, s, text[max(0, i-100):min(len(text), i+len(s)+40)])
			}
		}
		for ln, line := range strings.Split(string(b), "\n") {
			cmd, comment, _ := strings.Cut(line, "#")
			if strings.Contains(cmd, "pillar bench read") && !strings.Contains(cmd, "--transport") &&
				strings.Contains(strings.ToLower(comment), "grpc") {
				t.Errorf("%s:%d: %q runs the router over wire now (add --transport grpc)", f.path, ln+1, strings.TrimSpace(line))
			}
		}
	}
}
