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

// TestBareFloorReadsLikeTheNode: bare/interleaved is the floor the node's
// BatchGet is held to (the same MultiGet with nothing of the node around
// it), so its databases must be opened as the node opens them. The node
// keeps index and filter blocks in its table readers (one block-cache
// lookup per key, not three); a floor that kept them in the block cache
// would do more work per key than the node, and the node-to-floor ratio
// would no longer measure what the node adds.
func TestBareFloorReadsLikeTheNode(t *testing.T) {
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
		t.Errorf("the bare floor's table readers hold %d bytes for %d keys: its index and filter blocks are in the block cache, the node's are not", mem, keys)
	}
}

// TestDocsTransportDefault: wire is the default --transport of `router
// serve` and `bench read`. The docs must not call gRPC the default, and a
// command documented as the gRPC run must say --transport grpc.
func TestDocsTransportDefault(t *testing.T) {
	for _, f := range []struct {
		path  string
		stale []string
	}{
		{"../../README.md", []string{"gRPC stays the default", "gRPC (the default transport)", "(router over gRPC, the default"}},
		{"../../docs/benchmarks.md", []string{"gRPC stays the default", "gRPC (the default transport)", "(router over gRPC, the default"}},
		{"../../docs/operations.md", []string{"gRPC stays the default", "gRPC (the default transport)", "(router over gRPC, the default"}},
	} {
		b, err := os.ReadFile(f.path)
		if os.IsNotExist(err) && f.path != "../../README.md" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ")
		for _, s := range f.stale {
			if i := strings.Index(text, s); i >= 0 {
				t.Errorf("%s: %q: the default transport is wire (…%s…)", f.path, s, text[max(0, i-100):min(len(text), i+len(s)+40)])
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
