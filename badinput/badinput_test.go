package badinput

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/cobbled/router"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/internal/servelimit/limittest"
	"github.com/pillarkit/pillar/jobs/chunker"
	"github.com/pillarkit/pillar/jobs/embedder"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/sstbuilder"
	"github.com/pillarkit/pillar/subsets"
)

// bad is one bad input: what it is, the call that must reject it, and the
// error it must get: errors.Is(err, is) when is is set, and every one of
// words in err.Error().
type bad struct {
	area  string
	name  string
	call  func(t *testing.T) error
	is    error
	words []string
}

func keyIn(partition, partitions int, n int) pillar.Key {
	for i := 0; ; i++ {
		k := pillar.KeyOfNormalized("https://bad.example/" + string(rune('a'+i%26)) + strings.Repeat("x", i/26))
		if k.Partition(partitions) == partition {
			if n == 0 {
				return k
			}
			n--
		}
	}
}

func goodRecord() *record.PreparedPage {
	c := &record.Chunk{ChunkNo: 0, Text: "hello", End: 5}
	if err := c.SetVector([]float32{1, 2, 3, 4}, record.Encoding_ENCODING_FLOAT32); err != nil {
		panic(err)
	}
	return &record.PreparedPage{Url: "https://bad.example/", Chunks: []*record.Chunk{c}}
}

func goodManifest() *batch.Manifest {
	return &batch.Manifest{Format: batch.FormatVersion, ID: "b-1", Partition: 1, Partitions: 4, Kind: batch.KindDelta,
		Files: []batch.File{{Name: "000001.sst", Size: 10, SHA256: strings.Repeat("ab", 32), Keys: 1}}, Keys: 1,
		Smallest: keyIn(1, 4, 0).String(), Largest: keyIn(1, 4, 0).String(), Source: "test"}
}

// built is a real one-key batch of partition 1 of 4, uploaded to a local
// object store.
type built struct {
	objs     *objstore.Local
	objDir   string
	manifest *batch.Manifest
}

var (
	buildOnce sync.Once
	buildRes  *built
	buildErr  error
)

func buildBatch(t *testing.T) *built {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "badinput-")
		if err != nil {
			buildErr = err
			return
		}
		b, err := sstbuilder.NewBuilder(&sstbuilder.BuildOptions{Dir: filepath.Join(dir, "sst"), Partition: 1, Partitions: 4,
			Kind: batch.KindDelta, BatchID: "good-1"})
		if err != nil {
			buildErr = err
			return
		}
		v, _ := record.Marshal(goodRecord())
		k := keyIn(1, 4, 0)
		if buildErr = b.Add(sstbuilder.Row{Key: k[:], Seq: 1, Value: v}); buildErr != nil {
			return
		}
		m, files, err := b.Finish()
		if err != nil {
			buildErr = err
			return
		}
		objDir := filepath.Join(dir, "objects")
		objs, err := objstore.OpenLocal(objDir)
		if err != nil {
			buildErr = err
			return
		}
		if m, err = sstbuilder.Upload(context.Background(), objs, m, files); err != nil {
			buildErr = err
			return
		}
		buildRes = &built{objs: objs, objDir: objDir, manifest: m}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildRes
}

// applyTo opens a fresh node (4 partitions) and applies manifest m from the
// object store.
func applyTo(t *testing.T, objs cobbled.ObjectGetter, m *batch.Manifest) error {
	n, err := cobbled.Open(context.Background(), cobbled.Options{Dir: t.TempDir(), Partitions: 4, Objects: objs, CacheBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Apply(ctx, cobbled.Batch{Seq: 1, Manifest: *m})
}

func controlStore(t *testing.T) *control.Store {
	s, err := control.OpenStore(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "control.db"), &control.StoreOptions{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testRouter(t *testing.T, maxKeys int) *router.Router {
	rt := &control.Routing{Version: 1, Partitions: 4, Replicas: make([][]control.Replica, 4), NewestSeq: make([]int64, 4), NewestAt: make([]time.Time, 4)}
	r, err := router.New(context.Background(), router.Options{
		Source:     router.RoutingFunc(func(context.Context) (*control.Routing, error) { return rt, nil }),
		MaxKeys:    maxKeys,
		Partitions: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// servedNode serves a fresh node's gRPC server (4 partitions, none
// loaded) on 127.0.0.1 and returns a connection to it that can send raw
// request bytes (limittest.Raw).
func servedNode(t *testing.T, mod func(*cobbled.Options)) *grpc.ClientConn {
	o := cobbled.Options{Dir: t.TempDir(), Partitions: 4, CacheBytes: 8 << 20}
	if mod != nil {
		mod(&o)
	}
	n, err := cobbled.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return serveGRPC(t, n.NewGRPCServer())
}

// servedRouter serves a router's gRPC server (testRouter's) on 127.0.0.1
// and returns a connection to it that can send raw request bytes.
func servedRouter(t *testing.T) *grpc.ClientConn {
	return serveGRPC(t, router.NewServer(testRouter(t, 0)).GRPCServer())
}

func serveGRPC(t *testing.T, gs *grpc.Server) *grpc.ClientConn {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return limittest.Dial(t, lis.Addr().String())
}

// sendThen sends req on conn, then a good request on the same connection,
// which must be answered: the refusal of req must leave the connection
// usable. It returns req's error.
func sendThen(t *testing.T, conn *grpc.ClientConn, req any) error {
	_, err := limittest.Send(context.Background(), conn, req)
	k := keyIn(0, 4, 0)
	if _, gerr := limittest.Send(context.Background(), conn, &servepb.BatchGetRequest{Keys: [][]byte{k[:]}}); gerr != nil {
		t.Fatalf("the connection after the refusal: %v", gerr)
	}
	return err
}

// busyNode is a node answering MaxInFlight 1 request at once, its reads
// delayed 2 s, with a client keeping a request in flight; another
// connection's request (each probe given up after 300 ms, freeing the
// slot should it have taken it) is refused.
func busyNode(t *testing.T) error {
	conn := servedNode(t, func(o *cobbled.Options) {
		o.MaxInFlight = 1
		o.FaultDelay = cobbled.FaultDelay{Fraction: 1, Delay: 2 * time.Second}
	})
	k := keyIn(0, 4, 0)
	req := &servepb.BatchGetRequest{Keys: [][]byte{k[:]}}
	hold, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		for hold.Err() == nil {
			limittest.Send(hold, conn, req)
		}
	}()
	other := limittest.Dial(t, conn.Target()) // one connection opens at most MaxInFlight streams
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := limittest.Send(ctx, other, req)
		cancel()
		if status.Code(err) == codes.ResourceExhausted || time.Now().After(deadline) {
			return err
		}
	}
}

// foreignKeyBatch is a batch of partition 2's keys uploaded as partition 1's.
func foreignKeyBatch(t *testing.T) (*objstore.Local, *batch.Manifest) {
	b, err := sstbuilder.NewBuilder(&sstbuilder.BuildOptions{Dir: t.TempDir(), Partition: 2, Partitions: 4, Kind: batch.KindSnapshot, BatchID: "foreign-1"})
	if err != nil {
		t.Fatal(err)
	}
	k := keyIn(2, 4, 0)
	if err := b.Add(sstbuilder.Row{Key: k[:], Seq: 1, Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	m, files, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	m.Partition = 1
	objs, err := objstore.OpenLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if m, err = sstbuilder.Upload(context.Background(), objs, m, files); err != nil {
		t.Fatal(err)
	}
	return objs, m
}

func exportWriter(t *testing.T) *sstbuilder.PartitionWriter {
	w, err := sstbuilder.NewPartitionWriter(t.TempDir(), 1, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

var (
	pillarOnce sync.Once
	pillarBin  string
	pillarErr  error
)

// cliRun runs the pillar binary (built once) and returns its error with its
// output, or nil when it exited 0.
func cliRun(t *testing.T, args ...string) error {
	pillarOnce.Do(func() {
		dir, err := os.MkdirTemp("", "badinput-cli-")
		if err != nil {
			pillarErr = err
			return
		}
		pillarBin = filepath.Join(dir, "pillar")
		if out, err := exec.Command("go", "build", "-o", pillarBin, "../cmd/pillar").CombinedOutput(); err != nil {
			pillarErr = errors.New(string(out))
		}
	})
	if pillarErr != nil {
		t.Fatalf("go build ../cmd/pillar: %v", pillarErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pillarBin, args...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return errors.New(string(out))
	}
	return nil
}

func writeFile(t *testing.T, name, content string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func policy(where string) string {
	return "policies:\n  - name: p\n    exported: true\n    where: " + where + "\n"
}

func table() []bad {
	ctx := context.Background()
	rows := []bad{
		// Malformed pages: URLs, keys, encoded records.
		{"page", "relative URL", func(*testing.T) error { _, _, err := pillar.KeyOfURL("/docs/a.html"); return err }, nil, []string{"not absolute"}},
		{"page", "URL without host", func(*testing.T) error { _, _, err := pillar.KeyOfURL("https:///a"); return err }, nil, []string{"pillar: url"}},
		{"page", "URL that does not parse", func(*testing.T) error { _, _, err := pillar.KeyOfURL("http://[::1"); return err }, nil, []string{"pillar: url"}},
		{"page", "record bytes that are not protobuf", func(*testing.T) error { _, err := record.Unmarshal([]byte{0xff, 0xff, 0xff}); return err }, record.ErrCorrupt, nil},
		{"page", "record without a URL", func(*testing.T) error { _, err := record.Marshal(&record.PreparedPage{Title: "x"}); return err }, record.ErrCorrupt, []string{"no url"}},
		{"page", "record chunk with a negative dims", func(*testing.T) error {
			p := goodRecord()
			p.Chunks[0].Dims = -1
			_, err := record.Marshal(p)
			return err
		}, record.ErrCorrupt, []string{"dims -1"}},
		{"page", "record embedding shorter than dims", func(*testing.T) error {
			p := goodRecord()
			p.Chunks[0].Embedding = p.Chunks[0].Embedding[:5]
			_, err := record.Marshal(p)
			return err
		}, record.ErrCorrupt, []string{"embedding of 5 bytes"}},
		{"page", "record with an unknown embedding encoding", func(*testing.T) error {
			p := goodRecord()
			p.Chunks[0].Encoding = 42
			_, err := record.Marshal(p)
			return err
		}, record.ErrCorrupt, []string{"encoding"}},
		{"page", "unknown embedding encoding name", func(*testing.T) error { _, err := record.ParseEncoding("bfloat16"); return err }, nil, []string{`"bfloat16"`}},

		// Bad policies.
		{"policy", "YAML syntax error", func(*testing.T) error { _, err := subsets.Parse("p.yaml", []byte("policies: [\n")); return err }, subsets.ErrInvalid, nil},
		{"policy", "unknown field", func(*testing.T) error {
			_, err := subsets.Parse("p.yaml", []byte("policies:\n  - name: p\n    wher: url ~ \"a\"\n"))
			return err
		}, subsets.ErrInvalid, nil},
		{"policy", "where clause that does not parse", func(*testing.T) error { _, err := subsets.Parse("p.yaml", []byte(policy(`'url ~ '`))); return err }, subsets.ErrInvalid, nil},
		{"policy", "unknown attribute", func(*testing.T) error {
			_, err := subsets.Parse("p.yaml", []byte(policy(`'colour == "red"'`)))
			return err
		}, subsets.ErrInvalid, []string{"colour"}},
		{"policy", "type mismatch", func(*testing.T) error { _, err := subsets.Parse("p.yaml", []byte(policy(`'url > 3'`))); return err }, subsets.ErrInvalid, nil},
		{"policy", "bad regular expression", func(*testing.T) error { _, err := subsets.Parse("p.yaml", []byte(policy(`'url ~ "("'`))); return err }, subsets.ErrInvalid, nil},
		{"policy", "duplicate policy name", func(*testing.T) error {
			_, err := subsets.Parse("p.yaml", []byte("policies:\n  - name: p\n    where: url ~ \"a\"\n  - name: p\n    where: url ~ \"b\"\n"))
			return err
		}, subsets.ErrInvalid, nil},
		{"policy", "policy without a name", func(*testing.T) error {
			_, err := subsets.Parse("p.yaml", []byte("policies:\n  - where: url ~ \"a\"\n"))
			return err
		}, subsets.ErrInvalid, nil},
		{"policy", "policy file that does not exist", func(*testing.T) error { _, err := subsets.ReadFile("/nonexistent/policies.yaml"); return err }, os.ErrNotExist, nil},

		// Bad chunker and model parameters.
		{"chunker", "unknown chunker", func(*testing.T) error { _, err := chunker.Parse("sentences:size=10"); return err }, chunker.ErrUnknownChunker, nil},
		{"chunker", "size 0", func(*testing.T) error { _, err := chunker.Parse("recursive:size=0"); return err }, chunker.ErrBadParam, nil},
		{"chunker", "overlap not below size", func(*testing.T) error { _, err := chunker.Parse("recursive:size=100,overlap=100"); return err }, chunker.ErrBadParam, nil},
		{"chunker", "size that is not a number", func(*testing.T) error { _, err := chunker.Parse("tokens:size=big"); return err }, chunker.ErrBadParam, nil},
		{"chunker", "unknown parameter", func(*testing.T) error { _, err := chunker.Parse("tokens:size=10,colour=red"); return err }, chunker.ErrBadParam, nil},
		{"model", "unknown embedder", func(*testing.T) error { _, err := embedder.Parse("word2vec:dim=3", nil); return err }, embedder.ErrUnknownModel, nil},
		{"model", "dimension 0", func(*testing.T) error { _, err := embedder.Parse("hash:dim=0", nil); return err }, embedder.ErrBadParam, nil},
		{"model", "dimension not a number", func(*testing.T) error { _, err := embedder.Parse("hash:dim=many", nil); return err }, embedder.ErrBadParam, nil},

		// Bad vectors.
		{"vector", "wrong dimension count", func(*testing.T) error { return embedder.CheckVector(3, []float32{1, 2}, 3) }, embedder.ErrBadVector, []string{"2 dimensions, want 3"}},
		{"vector", "NaN", func(*testing.T) error { return embedder.CheckVector(0, []float32{1, float32(math.NaN())}, 2) }, embedder.ErrBadVector, []string{"NaN"}},
		{"vector", "infinity", func(*testing.T) error { return embedder.CheckVector(0, []float32{float32(math.Inf(1))}, 1) }, embedder.ErrBadVector, []string{"Inf"}},
		{"vector", "encoded vector of the wrong length", func(*testing.T) error {
			_, err := record.DecodeVector(make([]byte, 7), 2, record.Encoding_ENCODING_FLOAT32, 0)
			return err
		}, record.ErrCorrupt, nil},

		// Out-of-order and malformed export rows.
		{"export", "rows out of key order", func(t *testing.T) error {
			w := exportWriter(t)
			defer w.Close()
			a, b := keyIn(1, 4, 0).String(), keyIn(1, 4, 1).String()
			if a < b {
				a, b = b, a
			}
			if err := w.Write(sstbuilder.ExportRow{PageKey: a, Op: pillar.OpDelete, Seq: 1}); err != nil {
				return err
			}
			return w.Write(sstbuilder.ExportRow{PageKey: b, Op: pillar.OpDelete, Seq: 2})
		}, sstbuilder.ErrOutOfOrder, nil},
		{"export", "same key, seq not increasing", func(t *testing.T) error {
			w := exportWriter(t)
			defer w.Close()
			k := keyIn(1, 4, 0).String()
			if err := w.Write(sstbuilder.ExportRow{PageKey: k, Op: pillar.OpDelete, Seq: 5}); err != nil {
				return err
			}
			return w.Write(sstbuilder.ExportRow{PageKey: k, Op: pillar.OpDelete, Seq: 5})
		}, sstbuilder.ErrOutOfOrder, nil},
		{"export", "key of another partition", func(t *testing.T) error {
			w := exportWriter(t)
			defer w.Close()
			return w.Write(sstbuilder.ExportRow{PageKey: keyIn(2, 4, 0).String(), Op: pillar.OpDelete})
		}, sstbuilder.ErrWrongPartition, nil},
		{"export", "upper-case key", func(t *testing.T) error {
			w := exportWriter(t)
			defer w.Close()
			return w.Write(sstbuilder.ExportRow{PageKey: strings.ToUpper(keyIn(1, 4, 0).String()), Op: pillar.OpDelete})
		}, sstbuilder.ErrBadKey, nil},
		{"export", "unknown op", func(t *testing.T) error {
			w := exportWriter(t)
			defer w.Close()
			return w.Write(sstbuilder.ExportRow{PageKey: keyIn(1, 4, 0).String(), Op: "upsert"})
		}, nil, []string{`op "upsert"`}},
		{"export", "delete with a value", func(t *testing.T) error {
			w := exportWriter(t)
			defer w.Close()
			return w.Write(sstbuilder.ExportRow{PageKey: keyIn(1, 4, 0).String(), Op: pillar.OpDelete, Value: []byte("x")})
		}, nil, []string{"delete with a 1-byte value"}},
		{"export", "SST rows out of order", func(t *testing.T) error {
			b, err := sstbuilder.NewBuilder(&sstbuilder.BuildOptions{Dir: t.TempDir(), Partition: 1, Partitions: 4, BatchID: "b-1", Kind: batch.KindDelta})
			if err != nil {
				return err
			}
			defer b.Abort()
			x, y := keyIn(1, 4, 0), keyIn(1, 4, 1)
			if x.String() < y.String() {
				x, y = y, x
			}
			if err := b.Add(sstbuilder.Row{Key: x[:], Seq: 1, Delete: true}); err != nil {
				return err
			}
			return b.Add(sstbuilder.Row{Key: y[:], Seq: 1, Delete: true})
		}, sstbuilder.ErrOutOfOrder, nil},

		// Oversize values.
		{"oversize", "value over the SST builder's limit", func(t *testing.T) error {
			b, err := sstbuilder.NewBuilder(&sstbuilder.BuildOptions{Dir: t.TempDir(), Partition: 1, Partitions: 4, BatchID: "b-1", MaxValueSize: 1024})
			if err != nil {
				return err
			}
			defer b.Abort()
			k := keyIn(1, 4, 0)
			return b.Add(sstbuilder.Row{Key: k[:], Seq: 1, Value: make([]byte, 1025)})
		}, sstbuilder.ErrValueTooLarge, []string{"1025 bytes"}},

		// Corrupt manifests and SST files.
		{"manifest", "not JSON", func(*testing.T) error { _, err := batch.Decode([]byte("{\"format\":1,")); return err }, nil, []string{"manifest"}},
		{"manifest", "newer format", func(*testing.T) error { m := goodManifest(); m.Format = 99; return m.Validate() }, nil, []string{"format 99"}},
		{"manifest", "bad sha256", func(*testing.T) error { m := goodManifest(); m.Files[0].SHA256 = "xyz"; return m.Validate() }, nil, []string{"sha256"}},
		{"manifest", "bad batch id", func(*testing.T) error { m := goodManifest(); m.ID = "Bad ID/1"; return m.Validate() }, nil, []string{"Bad ID/1"}},
		{"manifest", "unknown kind", func(*testing.T) error { m := goodManifest(); m.Kind = "merge"; return m.Validate() }, nil, []string{"merge"}},
		{"manifest", "partition out of range", func(*testing.T) error { m := goodManifest(); m.Partition = 9; return m.Validate() }, nil, []string{"partition"}},
		{"manifest", "file named ..", func(*testing.T) error { m := goodManifest(); m.Files[0].Name = ".."; return m.Validate() }, nil, []string{`file name ".."`}},
		{"manifest", "file named .", func(*testing.T) error { m := goodManifest(); m.Files[0].Name = "."; return m.Validate() }, nil, []string{`file name "."`}},
		{"manifest", "file name with a path separator", func(*testing.T) error { m := goodManifest(); m.Files[0].Name = "../x.sst"; return m.Validate() }, nil, []string{`file name "../x.sst" has a path separator`}},
		{"manifest", "file name with a backslash", func(*testing.T) error { m := goodManifest(); m.Files[0].Name = `a\b.sst`; return m.Validate() }, nil, []string{"has a path separator"}},
		{"sst", "downloaded SST file with a flipped byte", func(t *testing.T) error {
			b := buildBatch(t)
			src := filepath.Join(b.objDir, filepath.FromSlash(batch.Prefix(1, b.manifest.ID)+b.manifest.Files[0].Name))
			data, err := os.ReadFile(src)
			if err != nil {
				return err
			}
			objs, err := objstore.OpenLocal(t.TempDir())
			if err != nil {
				return err
			}
			m := *b.manifest
			data[len(data)/2] ^= 0x10
			if err := objs.Put(context.Background(), batch.Prefix(1, m.ID)+m.Files[0].Name, strings.NewReader(string(data)), int64(len(data)), nil); err != nil {
				return err
			}
			return applyTo(t, objs, &m)
		}, cobbled.ErrChecksum, nil},
		{"sst", "manifest for another partition count", func(t *testing.T) error {
			b := buildBatch(t)
			m := *b.manifest
			m.Partitions = 8
			return applyTo(t, b.objs, &m)
		}, cobbled.ErrForeignManifest, nil},

		{"sst", "keys outside the manifest's partition", func(t *testing.T) error {
			objs, m := foreignKeyBatch(t)
			return applyTo(t, objs, m)
		}, cobbled.ErrForeignKey, []string{"foreign-1/000001-", "first key (", "is in partition 2 of 4", "the manifest's partition is 1"}},

		// Bad batch registrations.
		{"register", "invalid manifest", func(t *testing.T) error {
			m := goodManifest()
			m.Files = nil
			_, _, err := controlStore(t).RegisterBatch(ctx, m, time.Now())
			return err
		}, control.ErrInvalid, nil},
		{"register", "other partition count", func(t *testing.T) error {
			m := goodManifest()
			m.Partitions = 8
			_, _, err := controlStore(t).RegisterBatch(ctx, m, time.Now())
			return err
		}, control.ErrPartitions, nil},
		{"register", "same id, different content", func(t *testing.T) error {
			s := controlStore(t)
			if _, _, err := s.RegisterBatch(ctx, goodManifest(), time.Now()); err != nil {
				return err
			}
			m := goodManifest()
			m.Source = "another"
			_, _, err := s.RegisterBatch(ctx, m, time.Now())
			return err
		}, control.ErrConflict, nil},

		// Bad keys and oversize read requests.
		{"read", "key of 15 bytes", func(t *testing.T) error {
			_, err := testRouter(t, 0).BatchGet(ctx, [][]byte{make([]byte, 15)})
			return err
		}, router.ErrBadKey, nil},
		{"read", "empty request", func(t *testing.T) error { _, err := testRouter(t, 0).BatchGet(ctx, nil); return err }, router.ErrEmpty, nil},
		{"read", "more keys than the limit", func(t *testing.T) error {
			keys := make([][]byte, 11)
			for i := range keys {
				k := keyIn(0, 4, i)
				keys[i] = k[:]
			}
			_, err := testRouter(t, 10).BatchGet(ctx, keys)
			return err
		}, router.ErrTooManyKeys, nil},
		{"read", "node: 16 MiB of empty keys over gRPC (decode amplification)", func(t *testing.T) error {
			return sendThen(t, servedNode(t, nil), limittest.EmptyKeys(16<<20))
		}, nil, []string{"ResourceExhausted", "larger than max (16777216 vs. 23558)"}},
		{"read", "router: 16 MiB of empty keys over gRPC (decode amplification)", func(t *testing.T) error {
			return sendThen(t, servedRouter(t), limittest.EmptyKeys(16<<20))
		}, nil, []string{"ResourceExhausted", "larger than max (16777216 vs. 23558)"}},
		{"read", "node: 7,000 keys within the receive limit, refused before decoding", func(t *testing.T) error {
			return sendThen(t, servedNode(t, nil), limittest.Raw(bytes.Repeat([]byte{0x0a, 0x01, 0x00}, 7000)))
		}, nil, []string{"InvalidArgument", "7000 keys, over the limit of 1024"}},
		{"read", "router: 7,000 keys within the receive limit, refused before decoding", func(t *testing.T) error {
			return sendThen(t, servedRouter(t), limittest.Raw(bytes.Repeat([]byte{0x0a, 0x01, 0x00}, 7000)))
		}, nil, []string{"InvalidArgument", "7000 keys, over the limit of 1024"}},
		{"read", "router: 8 MiB key over gRPC", func(t *testing.T) error {
			return sendThen(t, servedRouter(t), limittest.OneKey(8<<20))
		}, nil, []string{"ResourceExhausted", "larger than max (8388613 vs. 23558)"}},
		{"read", "router: 16 KiB key over gRPC, quoted short", func(t *testing.T) error {
			err := sendThen(t, servedRouter(t), limittest.OneKey(16<<10))
			if err != nil && len(err.Error()) > 200 {
				t.Errorf("a %d-byte error", len(err.Error()))
			}
			return err
		}, nil, []string{"InvalidArgument", "key 0: 00000000000000000000000000000000…, 16384 bytes, want 16"}},
		{"read", "router: 8 MiB key through Read, quoted short", func(t *testing.T) error {
			_, err := testRouter(t, 0).BatchGet(ctx, [][]byte{make([]byte, 8<<20)})
			if err != nil && len(err.Error()) > 200 {
				t.Errorf("a %d-byte error", len(err.Error()))
			}
			return err
		}, router.ErrBadKey, []string{"key 0: 00000000000000000000000000000000…, 8388608 bytes, want 16"}},
		{"read", "node: a request past MaxInFlight", busyNode, nil, []string{"ResourceExhausted", "1 requests in flight"}},
		{"read", "page key of 31 hex characters", func(*testing.T) error { _, err := pillar.ParseKey(strings.Repeat("a", 31)); return err }, nil, []string{"want 32 hex characters"}},
		{"read", "page key that is not hex", func(*testing.T) error { _, err := pillar.ParseKey(strings.Repeat("g", 32)); return err }, nil, []string{"pillar: page key"}},
		{"read", "raw key of 17 bytes", func(*testing.T) error { _, err := pillar.KeyFromBytes(make([]byte, 17)); return err }, nil, []string{"got 17"}},

		// Bad CLI flags and config files.
		{"cli", "unknown command", func(t *testing.T) error { return cliRun(t, "frobnicate") }, nil, []string{"frobnicate"}},
		{"cli", "missing required flag", func(t *testing.T) error {
			return cliRun(t, "cobbled", "serve", "--data", "d", "--control", "x:1", "--objstore", "o")
		}, nil, []string{"--id", "not set"}},
		{"cli", "duration that does not parse", func(t *testing.T) error { return cliRun(t, "chaos", "--plan", "--seed", "1", "--duration", "soon") }, nil, []string{"soon"}},
		{"cli", "unknown fault kind", func(t *testing.T) error { return cliRun(t, "chaos", "--plan", "--seed", "1", "--faults", "meteor") }, nil, []string{`"meteor"`}},
		{"cli", "policy file with a bad where clause", func(t *testing.T) error {
			return cliRun(t, "subsets", "validate", "--policies", writeFile(t, "p.yaml", policy(`'url ~ '`)))
		}, nil, []string{"p.yaml"}},
		{"cli", "manifest file that is not JSON", func(t *testing.T) error {
			return cliRun(t, "control", "register", "--control", "127.0.0.1:1", "--manifest", writeFile(t, "m.json", "{"))
		}, nil, []string{"manifest"}},
		{"cli", "control-plane database URL of an unknown kind", func(t *testing.T) error {
			return cliRun(t, "control", "serve", "--db", "nope://x", "--partitions", "4", "--no-auth", "--listen", "127.0.0.1:0", "--http", "")
		}, nil, []string{`"nope://x"`, "sqlite:PATH or postgres://"}},
		{"cli", "cache size that does not parse", func(t *testing.T) error {
			return cliRun(t, "cobbled", "serve", "--id", "n1", "--data", "d", "--control", "127.0.0.1:1", "--objstore", "o", "--cache", "lots")
		}, nil, []string{`"lots"`}},
		{"cli", "bad page key argument", func(t *testing.T) error { return cliRun(t, "get", "--node", "127.0.0.1:1", "not-a-key") }, nil, []string{"not-a-key"}},
	}
	return append(rows, tlsRows()...)
}

// TestBadInput runs the table: every bad input is rejected with its error.
func TestBadInput(t *testing.T) {
	for _, tc := range table() {
		t.Run(tc.area+"/"+tc.name, func(t *testing.T) {
			if tc.area == "cli" && testing.Short() {
				t.Skip("builds the pillar binary")
			}
			err := tc.call(t)
			if err == nil {
				t.Fatalf("%s: %s was accepted", tc.area, tc.name)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("%s: %s: error %q does not wrap %q", tc.area, tc.name, err, tc.is)
			}
			t.Logf("rejected: %v", err)
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%s: %s: error %q does not mention %q", tc.area, tc.name, err, w)
				}
			}
		})
	}
}
