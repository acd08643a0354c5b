// Package python_test runs the Python client's tests (clients/python/tests)
// against a real router and real cobbled nodes on loopback, and checks that
// the committed Python stubs are fresh.
//
// The Python tests need python3 with the grpc and protobuf modules (Debian:
// python3-grpcio, python3-protobuf; make deps). Without them the tests
// skip, unless PILLAR_REQUIRE_PYTHON=1, when they fail. PILLAR_PYTHON
// names the interpreter; by default the first of python3 on PATH and
// /usr/bin/python3 that imports grpc is used.
package python_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pillarkit/pillar/cobbled"
	"github.com/pillarkit/pillar/cobbled/router"
	"github.com/pillarkit/pillar/cobbled/servepb"
	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/record"
	"github.com/pillarkit/pillar/internal/rocks"
	"github.com/pillarkit/pillar/internal/testcluster"
	"github.com/pillarkit/pillar/internal/tlsconf"
	"github.com/pillarkit/pillar/pillar"
)

// requirePython reports whether a missing interpreter or module fails the
// test instead of skipping it.
func requirePython() bool { return os.Getenv("PILLAR_REQUIRE_PYTHON") == "1" }

// findPython returns an interpreter that imports grpc and protobuf, or
// skips (fails with PILLAR_REQUIRE_PYTHON=1).
func findPython(t testing.TB) string {
	t.Helper()
	cands := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("PILLAR_PYTHON"); p != "" {
		cands = []string{p}
	}
	var tried []string
	for _, c := range cands {
		path, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, c+": not found")
			continue
		}
		out, err := exec.Command(path, "-c", "import grpc, google.protobuf").CombinedOutput()
		if err == nil {
			return path
		}
		tried = append(tried, fmt.Sprintf("%s: %v: %s", path, err, bytes.TrimSpace(lastLine(out))))
	}
	msg := "no python3 with the grpc and protobuf modules (apt-get install python3-grpcio python3-protobuf, or set PILLAR_PYTHON): " + strings.Join(tried, "; ")
	if requirePython() {
		t.Fatal(msg + " (PILLAR_REQUIRE_PYTHON=1)")
	}
	t.Skip(msg)
	return ""
}

func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// unicodeTexts are chunk texts outside ASCII.
var unicodeTexts = []string{
	"naïve café — crème brûlée",
	"東京の天気は晴れです。",
	"emoji 🚀✨ and ZWJ 👩‍💻",
	"Ελληνικά, русский, עברית, العربية",
	"tab\tnewline\nquote\" backslash\\",
}

// makeRecord is the record stored under one key: chunks in float32,
// float16 and int8, one without an embedding, unicode text.
func makeRecord(url string, seed []byte) []byte {
	h := sha256.Sum256(seed)
	rng := rand.New(rand.NewChaCha8(h))
	p := &record.PreparedPage{
		Url:            url,
		ChunkerVersion: "recursive-s512-o64-test",
		ModelVersion:   "hash-d16-test",
		ContentHash:    hex.EncodeToString(h[:8]),
		UpdatedAtMs:    1_700_000_000_000 + int64(binary.BigEndian.Uint32(h[8:])),
		Title:          "Título " + unicodeTexts[int(h[12])%len(unicodeTexts)],
	}
	encs := []record.Encoding{record.Encoding_ENCODING_FLOAT32, record.Encoding_ENCODING_FLOAT16, record.Encoding_ENCODING_INT8, 0}
	off := int32(0)
	for i, enc := range encs {
		text := fmt.Sprintf("chunk %d of %s: %s", i, url, unicodeTexts[(i+int(h[13]))%len(unicodeTexts)])
		c := &record.Chunk{ChunkNo: int32(i), Text: text, Start: off, End: off + int32(len(text))}
		off += int32(len(text)) - 5 // chunks overlap
		if enc != 0 {
			dims := 16 + i*8
			v := make([]float32, dims)
			for j := range v {
				v[j] = float32(rng.NormFloat64()) * 0.3
			}
			v[0] = 1e-6 // a float16 subnormal
			if err := c.SetVector(v, enc); err != nil {
				panic(err)
			}
		}
		p.Chunks = append(p.Chunks, c)
	}
	b, err := record.Marshal(p)
	if err != nil {
		panic(err)
	}
	return b
}

// urlPages are the pages stored under their URL keys (pillar.KeyOfURL):
// twelve, for batch_get by URL.
var urlPages = []string{
	"https://example.com/",
	"https://Example.COM:443/a/b?x=1&y=2",
	"http://example.com:8080/path with space",
	"https://bücher.example/straße?q=ü",
	"https://example.org/%7Euser/index.html#section",
	"http://[::1]:9000/ipv6",
	"https://example.net/a%2Fb/c",
	"https://news.example/2024/05/article?id=42&ref=home",
	"http://user:pa%3Ass@example.com/private",
	"https://example.com/東京/天気",
	"https://EXAMPLE.com/trailing/",
	"https://example.com/q?",
}

func syntheticURL(key []byte) string { return fmt.Sprintf("https://synthetic.example/page/%x", key) }

type env struct {
	t        testing.TB
	dir      string
	cluster  *testcluster.Cluster
	router   *router.Router
	addr     string // plaintext router
	tlsAddr  string // mutual TLS router
	certs    string
	control  string // control HTTP base URL
	dead     string
	urlKeys  [][]byte
	mu       sync.Mutex
	plainSrv *grpc.Server
}

// startEnv runs a cluster (3 nodes, 8 partitions, 3 replicas), the URL
// pages applied as a second batch, and two routers' gRPC servers on one
// router: plaintext and mutual TLS (clients need a pillar://reader/*
// certificate).
func startEnv(t testing.TB, keys int) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, dir: t.TempDir()}
	c, err := testcluster.Start(ctx, testcluster.Options{Dir: filepath.Join(e.dir, "cluster"), Partitions: 8, Keys: keys, CacheBytes: 8 << 20,
		Values: func(key []byte) []byte { return makeRecord(syntheticURL(key), key) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e.cluster = c
	if err := e.applyURLPages(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := router.New(ctx, router.Options{Source: c, Zone: "zone-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	e.router = r

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = lis.Addr().String()
	e.servePlain(lis)
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.plainSrv != nil {
			e.plainSrv.Stop()
		}
	})

	e.certs = filepath.Join(e.dir, "certs")
	if _, err := tlsconf.DevCerts(e.certs, tlsconf.DevOptions{Names: []string{"router", "reader", "writer/lorry"}}); err != nil {
		t.Fatal(err)
	}
	rl, err := tlsconf.NewReloader(tlsconf.Files{Cert: filepath.Join(e.certs, "router.pem"), Key: filepath.Join(e.certs, "router.key"),
		CA: filepath.Join(e.certs, "ca.pem")}, tlsconf.Options{Poll: -1})
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := rl.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.tlsAddr = tl.Addr().String()
	tsrv := router.NewServer(r).GRPCServer()
	go tsrv.Serve(tlsconf.NewListener(tl, scfg, tlsconf.ListenerOptions{Allow: []string{"pillar://reader/*"}}))
	t.Cleanup(tsrv.Stop)

	// A dead address: a port that was just free.
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.dead = dl.Addr().String()
	dl.Close()

	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.control = "http://" + hl.Addr().String()
	hs := &http.Server{Handler: e.controlHandler()}
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Close() })
	return e
}

func (e *env) servePlain(lis net.Listener) {
	srv := router.NewServer(e.router).GRPCServer()
	e.mu.Lock()
	e.plainSrv = srv
	e.mu.Unlock()
	go srv.Serve(lis)
}

// controlHandler lets the Python tests act on the cluster between calls:
// POST /node/kill?i=N, /node/restart?i=N, /router/stop, /router/start.
func (e *env) controlHandler() http.Handler {
	mux := http.NewServeMux()
	member := func(w http.ResponseWriter, r *http.Request) *testcluster.Member {
		i, err := strconv.Atoi(r.URL.Query().Get("i"))
		if err != nil || i < 0 || i >= len(e.cluster.Members()) {
			http.Error(w, "bad node index", http.StatusBadRequest)
			return nil
		}
		return e.cluster.Members()[i]
	}
	mux.HandleFunc("POST /node/kill", func(w http.ResponseWriter, r *http.Request) {
		if m := member(w, r); m != nil {
			m.Kill()
			fmt.Fprintln(w, "killed", m.ID, m.Addr)
		}
	})
	mux.HandleFunc("POST /node/restart", func(w http.ResponseWriter, r *http.Request) {
		if m := member(w, r); m != nil {
			if err := m.Restart(r.Context(), cobbled.FaultDelay{}); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			fmt.Fprintln(w, "restarted", m.ID, m.Addr)
		}
	})
	mux.HandleFunc("POST /router/stop", func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		srv := e.plainSrv
		e.plainSrv = nil
		e.mu.Unlock()
		if srv != nil {
			srv.Stop()
		}
		fmt.Fprintln(w, "stopped", e.addr)
	})
	mux.HandleFunc("POST /router/start", func(w http.ResponseWriter, r *http.Request) {
		var lis net.Listener
		var err error
		for try := 0; try < 100; try++ { // a just-closed port may linger briefly
			if lis, err = net.Listen("tcp", e.addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		e.servePlain(lis)
		fmt.Fprintln(w, "started", e.addr)
	})
	return mux
}

// applyURLPages writes the URL pages as one delta batch per partition
// (seq 2) and applies it on every node (each holds every partition).
func (e *env) applyURLPages(ctx context.Context) error { return e.applyPages(ctx, urlPages, 2, true) }

// applyPages writes the pages of urls under their URL keys as batch seq
// of their partitions and applies it on every node; remember adds their
// keys to e.urlKeys.
func (e *env) applyPages(ctx context.Context, urls []string, seq int64, remember bool) error {
	c := e.cluster
	byPart := map[int][][]byte{}
	vals := map[string][]byte{}
	for _, u := range urls {
		k, _, err := pillar.KeyOfURL(u)
		if err != nil {
			return err
		}
		if remember {
			e.urlKeys = append(e.urlKeys, k[:])
		}
		p := pillar.Partition(k[:], c.Partitions())
		byPart[p] = append(byPart[p], k[:])
		vals[string(k[:])] = makeRecord(u, k[:])
	}
	for p, keys := range byPart {
		m, err := writeDelta(c.ObjectsDir(), p, c.Partitions(), seq, keys, vals)
		if err != nil {
			return err
		}
		for _, mem := range c.Members() {
			if err := mem.Node().Apply(ctx, cobbled.Batch{Seq: seq, Manifest: *m}); err != nil {
				return fmt.Errorf("apply URL pages of partition %d to %s: %w", p, mem.ID, err)
			}
		}
	}
	return nil
}

func writeDelta(objects string, p, parts int, seq int64, keys [][]byte, vals map[string][]byte) (*batch.Manifest, error) {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, bytes.Compare)
	id := fmt.Sprintf("pyclient-urls-s%d-p%05d", seq, p)
	m := &batch.Manifest{Format: batch.FormatVersion, ID: id, Partition: p, Partitions: parts, Kind: batch.KindDelta,
		Source: "clients/python test: URL pages", CreatedAtMS: time.Now().UnixMilli(), Keys: int64(len(keys))}
	dir := filepath.Join(objects, filepath.FromSlash(batch.Prefix(p, id)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	opts, err := rocks.TableConfig{}.Options(nil)
	if err != nil {
		return nil, err
	}
	defer opts.Destroy()
	envo := grocksdb.NewDefaultEnvOptions()
	defer envo.Destroy()
	w := grocksdb.NewSSTFileWriter(envo, opts)
	defer w.Destroy()
	path := filepath.Join(dir, "000001.sst")
	if err := w.Open(path); err != nil {
		return nil, err
	}
	if err := w.Put(batch.MetaKey, []byte(id)); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if err := w.Put(k, vals[string(k)]); err != nil {
			return nil, err
		}
	}
	if err := w.Finish(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	m.Files = []batch.File{{Name: "000001.sst", Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:]), Keys: int64(len(keys))}}
	m.Smallest, m.Largest = hex.EncodeToString(keys[0]), hex.EncodeToString(keys[len(keys)-1])
	if err := m.Validate(); err != nil {
		return nil, err
	}
	enc, err := m.Encode()
	if err != nil {
		return nil, err
	}
	return m, os.WriteFile(filepath.Join(dir, "manifest.json"), enc, 0o644)
}

// Expectations, as the Go side decodes them.
type expChunk struct {
	ChunkNo  int32    `json:"chunk_no"`
	Text     string   `json:"text"`
	Start    int32    `json:"start"`
	End      int32    `json:"end"`
	Encoding string   `json:"encoding"`
	Bits     []uint32 `json:"embedding_bits"` // math.Float32bits of each element; null without an embedding
}

type expRecord struct {
	URL            string     `json:"url"`
	Title          string     `json:"title"`
	ContentHash    string     `json:"content_hash"`
	ChunkerVersion string     `json:"chunker_version"`
	ModelVersion   string     `json:"model_version"`
	UpdatedAtMS    int64      `json:"updated_at_ms"`
	Chunks         []expChunk `json:"chunks"`
}

type keyVector struct {
	URL        string `json:"url"`
	OK         bool   `json:"ok"`
	Key        string `json:"key,omitempty"`
	Normalized string `json:"normalized,omitempty"`
	Error      string `json:"error,omitempty"`
}

type expectations struct {
	Records    map[string]expRecord `json:"records"` // key hex ->
	URLPages   []keyVector          `json:"url_pages"`
	Synthetic  []string             `json:"synthetic_keys"`
	Absent     string               `json:"absent_key"`
	KeyVectors []keyVector          `json:"key_vectors"`
}

func expectRecord(t testing.TB, v []byte) expRecord {
	t.Helper()
	p, err := record.Unmarshal(v)
	if err != nil {
		t.Fatal(err)
	}
	r := expRecord{URL: p.GetUrl(), Title: p.GetTitle(), ContentHash: p.GetContentHash(), ChunkerVersion: p.GetChunkerVersion(),
		ModelVersion: p.GetModelVersion(), UpdatedAtMS: p.GetUpdatedAtMs()}
	for _, c := range p.GetChunks() {
		vec, err := c.Vector()
		if err != nil {
			t.Fatal(err)
		}
		ec := expChunk{ChunkNo: c.GetChunkNo(), Text: c.GetText(), Start: c.GetStart(), End: c.GetEnd()}
		if vec != nil {
			ec.Encoding = c.GetEncoding().Short()
			for _, x := range vec {
				ec.Bits = append(ec.Bits, math.Float32bits(x))
			}
		}
		r.Chunks = append(r.Chunks, ec)
	}
	return r
}

func vectorOf(u string) keyVector {
	k, n, err := pillar.KeyOfURL(u)
	if err != nil {
		return keyVector{URL: u, Error: err.Error()}
	}
	return keyVector{URL: u, OK: true, Key: k.String(), Normalized: n}
}

// keyCases are URLs whose key the Python port must compute as Go does
// (or refuse as Go does).
var keyCases = []string{
	"https://example.com", "HTTPS://EXAMPLE.COM/", "http://example.com:80/", "https://example.com:443/x", "http://example.com:443/",
	"https://example.com:8443", "http://example.com:/", "http://example.com:080/", " https://example.com/trim\t", "\u00a0https://example.com/nbsp\u3000",
	"https://example.com/a#frag", "https://example.com/a#bad%zz", "https://example.com/a?b#c", "https://example.com/?", "https://example.com/a?b?",
	"https://example.com/a b", "https://example.com/%41%42", "https://example.com/%2f%2F", "https://example.com/%zz", "https://example.com/%",
	"https://example.com/ü", "https://example.com/%C3%BC", "https://example.com/a;b,c@d:e&f=g+h$i!j'k(l)m*n~o", "https://example.com/[x]",
	"https://Bücher.DE/", "https://xn--bcher-kva.de/", "https://%41.com/", "https://a%C3%A9.com/", "https://İstanbul.example/",
	"http://[::1]/", "http://[::1]:80/", "http://[FE80::1%25en0]:8080/", "http://[fe80::1%en0]/", "http://[1.2.3.4]/", "http://[::1/",
	"http://a:b:c/", "ftp://a:b:21/x", "http://::/", "http://:/", "http://:80/", "http:///path", "http:/path", "http:opaque", "mailto:a@b.c",
	"//example.com/x", "example.com/x", "/relative", "", "*", "1http://x/", ":foo", "http://user@example.com/", "http://user:@example.com/",
	"http://us%20er:p%40ss@example.com/", "http://us er@example.com/", "http://a@b@example.com/", "http://example.com/\x7f", "http://exa\nmple.com/",
	"HtTp://ExAmPlE.cOm/PaTh?QuErY=VaLuE", "https://example.com/a/../b/./c", "https://example.com//double//slash", "https://example.com/?q=a+b%20c",
	"https://example.com/?q=ü", "https://example.com/#", "https://exam_ple.com/", "https://exa mple.com/", "https://exa%20mple.com/",
	"https://example.com:99999/", "https://example.com:-1/", "http://[::ffff:1.2.3.4]/", "http://[v1.fe]/", "http://example.com/%e2%82%ac",
	"http://example.com/~tilde", "http://example.com/%7e", "http://[::1]:/x", "http://example.com./", "https://EXAMPLE.com/Ä?Ä#Ä",
	"http://xn--n3h.example/☃", "http://example.com/a%2", "http://example.com/?%zz", "git+ssh://host/repo", "h.t-t+p://host/",
}

// fuzzURLs are deterministic random URLs built from awkward pieces.
func fuzzURLs(n int) []string {
	rng := rand.New(rand.NewPCG(7, 11))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	schemes := []string{"http", "HTTP", "https", "HttpS", "ftp", "ws", "", "x-y", "1x"}
	seps := []string{"://", "://", "://", ":", ":/", "//", ":///"}
	users := []string{"", "", "", "u@", "u:p@", "u%40x:p%3A@", "ü@", "a b@", "u:p:q@", "@"}
	hosts := []string{"example.com", "EXAMPLE.com", "Bücher.de", "a.b", "127.0.0.1", "[::1]", "[::FFFF:1.2.3.4]", "[fe80::1%25lo]", "[x]",
		"a%41", "a%C3%A9", "a%zz", "ex ample", "ex_ample", "İ", "ÀÉ", "xn--bcher-kva.de", "", "a:b", "::", "[::1", "a]"}
	ports := []string{"", "", "", ":80", ":443", ":8080", ":", ":0", ":x", ":080", ":99999"}
	pathPieces := []string{"/", "a", "B", "%41", "%2F", "%2f", "%zz", "%", " ", "ü", "東", ";", ",", "@", ":", "+", "=", "&", "$", "!", "'",
		"(", "*", "[", "]", "~", "%7E", "%C3%BC", "%E2%82", "\"", "<", "^", "`", "{", "|", "\\", ".", ".."}
	tails := []string{"", "", "?", "?a=b", "?a b", "?ü=1", "?a?b", "?%zz", "#", "#f", "#%zz", "#a b", "?q#f", "\t", " "}
	out := make([]string, 0, n)
	for range n {
		var b strings.Builder
		b.WriteString(pick(schemes))
		b.WriteString(pick(seps))
		b.WriteString(pick(users))
		b.WriteString(pick(hosts))
		b.WriteString(pick(ports))
		for range rng.IntN(6) {
			b.WriteString(pick(pathPieces))
		}
		b.WriteString(pick(tails))
		out = append(out, b.String())
	}
	return out
}

func writeExpectations(t testing.TB, e *env) string {
	t.Helper()
	ex := expectations{Records: map[string]expRecord{}}
	for i, u := range urlPages {
		k := e.urlKeys[i]
		ex.URLPages = append(ex.URLPages, vectorOf(u))
		ex.Records[hex.EncodeToString(k)] = expectRecord(t, makeRecord(u, k))
	}
	for _, k := range e.cluster.Keys()[:12] {
		ex.Synthetic = append(ex.Synthetic, hex.EncodeToString(k))
		ex.Records[hex.EncodeToString(k)] = expectRecord(t, e.cluster.Value(k))
	}
	ex.Absent = strings.Repeat("ff", 16)
	for _, u := range append(slices.Clone(keyCases), fuzzURLs(3000)...) {
		ex.KeyVectors = append(ex.KeyVectors, vectorOf(u))
	}
	b, err := json.MarshalIndent(ex, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.dir, "expectations.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// pythonEnv is the environment of a Python run: its imports and the
// test cluster's addresses.
func pythonEnv(e *env, expect string) []string {
	abs, _ := filepath.Abs(".")
	return append(os.Environ(),
		"PYTHONPATH="+abs,
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1",
		"PILLAR_TEST_EXPECT="+expect,
		"PILLAR_TEST_ROUTER="+e.addr,
		"PILLAR_TEST_TLS_ROUTER="+e.tlsAddr,
		"PILLAR_TEST_CA="+filepath.Join(e.certs, "ca.pem"),
		"PILLAR_TEST_CERT="+filepath.Join(e.certs, "reader.pem"),
		"PILLAR_TEST_KEY="+filepath.Join(e.certs, "reader.key"),
		"PILLAR_TEST_OTHER_CERT="+filepath.Join(e.certs, "writer-lorry.pem"),
		"PILLAR_TEST_OTHER_KEY="+filepath.Join(e.certs, "writer-lorry.key"),
		"PILLAR_TEST_CONTROL="+e.control,
		"PILLAR_TEST_DEAD="+e.dead,
		fmt.Sprintf("PILLAR_TEST_NODES=%d", len(e.cluster.Members())),
	)
}

// TestPythonClient runs clients/python/tests against a real router (plaintext
// and mutual TLS) over real cobbled nodes; the Python tests kill and restart
// nodes and the router through a small HTTP control (controlHandler).
func TestPythonClient(t *testing.T) {
	py := findPython(t)
	e := startEnv(t, 96)
	expect := writeExpectations(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", "clients/python/tests", "-v")
	cmd.Dir = "../.."
	cmd.Env = pythonEnv(e, expect)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python tests failed (%v):\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("python tests:\n%s", out)
	}
}

// TestREADMEPythonExample runs the README's Python example as written,
// against the test router instead of the quick start's 127.0.0.1:7200:
// it must print the page it reads.
func TestREADMEPythonExample(t *testing.T) {
	py := findPython(t)
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```python\n")
	code, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !strings.Contains(code, "127.0.0.1:7200") {
		t.Fatalf("README.md has no Python example reading from 127.0.0.1:7200")
	}
	e := startEnv(t, 24)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.applyPages(ctx, []string{"https://www.postgresql.org/docs/15/sql-select.html"}, 3, false); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, py, "-c", strings.ReplaceAll(code, "127.0.0.1:7200", e.addr))
	cmd.Env = pythonEnv(e, "")
	t.Logf("README example ran against %s", e.addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's Python example failed (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "https://www.postgresql.org/docs/15/sql-select.html Título") {
		t.Fatalf("the README's Python example printed:\n%s\nwant the page's URL and title", out)
	}
}

// TestStubsFresh regenerates the Python stubs into a temporary directory
// with gen-stubs.sh and compares them with the committed ones
// (pillar_client/_gen): run `make python-stubs` after changing a .proto.
func TestStubsFresh(t *testing.T) {
	for _, tool := range []string{"protoc", "grpc_python_plugin"} {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err2 := os.Stat("/usr/bin/" + tool); err2 == nil {
				continue
			}
			msg := tool + " not found (apt-get install protobuf-compiler protobuf-compiler-grpc)"
			if requirePython() {
				t.Fatal(msg + " (PILLAR_REQUIRE_PYTHON=1)")
			}
			t.Skip(msg)
		}
	}
	tmp := t.TempDir()
	if out, err := exec.Command("./gen-stubs.sh", tmp).CombinedOutput(); err != nil {
		t.Fatalf("gen-stubs.sh: %v\n%s", err, out)
	}
	if diffs := compareDirs(t, "pillar_client/_gen", tmp); len(diffs) > 0 {
		t.Fatalf("the committed Python stubs are stale (run make python-stubs and commit clients/python/pillar_client/_gen):\n%s", strings.Join(diffs, "\n"))
	}
}

// compareDirs lists the differences between the regular files of two
// directories (caches ignored).
func compareDirs(t *testing.T, committed, fresh string) []string {
	t.Helper()
	read := func(dir string) map[string][]byte {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string][]byte{}
		for _, en := range ents {
			if !en.Type().IsRegular() || strings.HasSuffix(en.Name(), ".pyc") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, en.Name()))
			if err != nil {
				t.Fatal(err)
			}
			m[en.Name()] = b
		}
		return m
	}
	a, b := read(committed), read(fresh)
	var diffs []string
	for name, x := range b {
		y, ok := a[name]
		switch {
		case !ok:
			diffs = append(diffs, name+": generated, not committed")
		case !bytes.Equal(x, y):
			diffs = append(diffs, fmt.Sprintf("%s: differs (%d bytes committed, %d generated)", name, len(y), len(x)))
		}
	}
	for name := range a {
		if _, ok := b[name]; !ok {
			diffs = append(diffs, name+": committed, not generated")
		}
	}
	slices.Sort(diffs)
	return diffs
}

// BenchmarkPythonVsGo reads the same batches through the same router
// (plaintext gRPC on loopback) with the Go gRPC client (servepb, records
// decoded with internal/record, vectors included) and with the Python
// client (bench.py), and reports both clients' per-batch p50 and mean and
// the ratio Python/Go. Run it once:
//
//	go test ./clients/python -run '^$' -bench PythonVsGo -benchtime 1x
func BenchmarkPythonVsGo(b *testing.B) {
	py := findPython(b)
	e := startEnv(b, 480)
	const perBatch, rounds, warmup = 20, 20, 2
	batches := e.cluster.Batches(perBatch)
	var lines []string
	for _, bt := range batches {
		var hs []string
		for _, k := range bt {
			hs = append(hs, hex.EncodeToString(k))
		}
		lines = append(lines, strings.Join(hs, ","))
	}
	bf := filepath.Join(e.dir, "batches.txt")
	if err := os.WriteFile(bf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	cl := servepb.NewServeClient(conn)
	ctx := context.Background()
	for b.Loop() {
		var times []time.Duration
		for r := range warmup + rounds {
			for _, bt := range batches {
				t0 := time.Now()
				resp, err := cl.BatchGet(ctx, &servepb.BatchGetRequest{Keys: bt})
				if err != nil {
					b.Fatal(err)
				}
				for _, res := range resp.GetResults() {
					p, err := record.Unmarshal(res.GetValue())
					if err != nil {
						b.Fatal(err)
					}
					for _, c := range p.GetChunks() {
						if _, err := c.Vector(); err != nil {
							b.Fatal(err)
						}
					}
				}
				dt := time.Since(t0)
				if r >= warmup {
					times = append(times, dt)
				}
			}
		}
		slices.Sort(times)
		var sum time.Duration
		for _, d := range times {
			sum += d
		}
		goP50 := float64(times[len(times)/2].Microseconds()) / 1e3
		goMean := float64(sum.Microseconds()) / 1e3 / float64(len(times))

		cmd := exec.Command(py, "bench.py", "--router", e.addr, "--batches", bf, "--rounds", strconv.Itoa(rounds), "--warmup", strconv.Itoa(warmup))
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("bench.py: %v\n%s", err, out)
		}
		var pyRes struct {
			P50  float64 `json:"p50_ms"`
			Mean float64 `json:"mean_ms"`
		}
		if err := json.Unmarshal(lastLine(out), &pyRes); err != nil {
			b.Fatalf("bench.py output %q: %v", out, err)
		}
		b.ReportMetric(goP50, "go-p50-ms")
		b.ReportMetric(goMean, "go-mean-ms")
		b.ReportMetric(pyRes.P50, "py-p50-ms")
		b.ReportMetric(pyRes.Mean, "py-mean-ms")
		b.ReportMetric(pyRes.P50/goP50, "py/go-p50")
		b.ReportMetric(pyRes.Mean/goMean, "py/go-mean")
		b.Logf("%d batches of %d keys, %d rounds: Go p50 %.3f ms mean %.3f ms; Python p50 %.3f ms mean %.3f ms; Python/Go p50 %.2fx mean %.2fx",
			len(batches), perBatch, rounds, goP50, goMean, pyRes.P50, pyRes.Mean, pyRes.P50/goP50, pyRes.Mean/goMean)
	}
}
