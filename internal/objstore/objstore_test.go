package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/s3test"
)

// conformance is the suite every Store passes.
func conformance(t *testing.T, s Store) {
	ctx := context.Background()
	put := func(key, body string, opts *PutOptions) error {
		return s.Put(ctx, key, strings.NewReader(body), int64(len(body)), opts)
	}
	get := func(key string) string {
		t.Helper()
		b, err := ReadAll(ctx, s, key)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, k := range []string{"batches/p00001/b1/000001.sst", "batches/p00001/b1/manifest.json", "batches/p00001/b10/x", "batches/p00002/b2/x", "top"} {
		if err := put(k, "v:"+k, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := get("top"); got != "v:top" {
		t.Fatalf("get top = %q", got)
	}
	// Overwrite without options.
	if err := put("top", "second", nil); err != nil {
		t.Fatal(err)
	}
	if got := get("top"); got != "second" {
		t.Fatalf("overwrite: %q", got)
	}
	// Conditional create.
	if err := put("top", "third", &PutOptions{IfNotExists: true}); !errors.Is(err, ErrExists) {
		t.Fatalf("conditional overwrite: %v, want ErrExists", err)
	}
	if got := get("top"); got != "second" {
		t.Fatalf("conditional overwrite changed the object: %q", got)
	}
	if err := put("fresh/obj", "new", &PutOptions{IfNotExists: true}); err != nil {
		t.Fatal(err)
	}
	// Unknown size, non-seekable reader.
	if err := s.Put(ctx, "stream", io.MultiReader(strings.NewReader("ab"), strings.NewReader("cd")), -1, nil); err != nil {
		t.Fatal(err)
	}
	if got := get("stream"); got != "abcd" {
		t.Fatalf("stream: %q", got)
	}
	// Size mismatch is refused and leaves nothing.
	if err := s.Put(ctx, "short", strings.NewReader("abc"), 10, nil); err == nil {
		t.Fatal("size mismatch accepted")
	}
	if _, err := s.Stat(ctx, "short"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat after failed put: %v", err)
	}
	// Stat.
	info, err := s.Stat(ctx, "batches/p00001/b1/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != "batches/p00001/b1/manifest.json" || info.Size != int64(len("v:batches/p00001/b1/manifest.json")) || info.ModTime.IsZero() {
		t.Fatalf("stat: %+v", info)
	}
	// Missing objects.
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := s.Stat(ctx, "batches/p00001"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat of a 'directory': %v", err)
	}
	// List: prefix is a string prefix, results sorted.
	list := func(prefix string) string {
		t.Helper()
		infos, err := s.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, i := range infos {
			keys = append(keys, i.Key)
		}
		return strings.Join(keys, " ")
	}
	if got, want := list("batches/p00001/b1"), "batches/p00001/b1/000001.sst batches/p00001/b1/manifest.json batches/p00001/b10/x"; got != want {
		t.Fatalf("list b1 = %q, want %q", got, want)
	}
	if got, want := list("batches/p00001/b1/"), "batches/p00001/b1/000001.sst batches/p00001/b1/manifest.json"; got != want {
		t.Fatalf("list b1/ = %q, want %q", got, want)
	}
	if got := list("nothing/"); got != "" {
		t.Fatalf("list nothing = %q", got)
	}
	if got, want := list(""), "batches/p00001/b1/000001.sst batches/p00001/b1/manifest.json batches/p00001/b10/x batches/p00002/b2/x fresh/obj stream top"; got != want {
		t.Fatalf("list all = %q, want %q", got, want)
	}
	// Delete, including a missing object.
	if err := s.Delete(ctx, "top"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "top"); err != nil {
		t.Fatalf("delete missing: %v", err)
	}
	if _, err := s.Stat(ctx, "top"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat deleted: %v", err)
	}
	// Bad keys.
	for _, k := range []string{"", "/abs", "a//b", "a/../b", "a/./b", "a/"} {
		if err := put(k, "x", nil); !errors.Is(err, ErrBadKey) {
			t.Errorf("put %q: %v, want ErrBadKey", k, err)
		}
	}
	// Concurrent conditional creates of one key: exactly one wins.
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := put("race", strings.Repeat("x", i+1), &PutOptions{IfNotExists: true})
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, ErrExists) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d conditional creates won, want 1", wins)
	}
	// A known checksum travels with the body.
	body := "checked body"
	if err := s.Put(ctx, "checked", strings.NewReader(body), int64(len(body)), &PutOptions{SHA256: sha256Hex(body)}); err != nil {
		t.Fatal(err)
	}
	if got := get("checked"); got != body {
		t.Fatalf("checked: %q", got)
	}
	// A file round trip.
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	data := make([]byte, 300<<10)
	rand.Read(data)
	os.WriteFile(src, data, 0o644)
	if err := PutFile(ctx, s, "files/a.bin", src, &PutOptions{IfNotExists: true}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "sub", "dst")
	if err := GetFile(ctx, s, "files/a.bin", dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); !bytes.Equal(b, data) {
		t.Fatal("file round trip differs")
	}
}

func TestLocalConformance(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(context.Background(), "file://"+dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	conformance(t, s)
	// No temp files are left behind, and none are listed.
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if strings.HasPrefix(d.Name(), tmpPrefix) {
			t.Errorf("temp file left: %s", p)
		}
		return nil
	})
}

func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, u := range []string{dir, "file://" + dir} {
		s, err := Open(ctx, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if l, ok := s.(*Local); !ok || l.Root() != dir {
			t.Fatalf("%s: %#v", u, s)
		}
	}
	for _, u := range []string{"", "gs://bucket", "s3://", "s3://b/../x"} {
		if _, err := Open(ctx, u, &Options{S3SkipCheck: true}); err == nil {
			t.Errorf("Open(%q) succeeded", u)
		}
	}
	if err := (Options{S3PartSize: 1 << 20}).Validate(); err == nil {
		t.Error("part size under 5 MiB accepted")
	}
}

func openS3Test(t *testing.T, srv *s3test.Server, endpoint, prefix string, mod func(*Options)) (Store, error) {
	o := &Options{
		S3Endpoint: endpoint, S3AccessKeyID: s3test.AccessKey, S3SecretAccessKey: s3test.SecretKey,
		S3PartSize: 5 << 20, S3MaxBackoff: 20 * time.Millisecond,
	}
	if mod != nil {
		mod(o)
	}
	return Open(context.Background(), srv.URL(prefix), o)
}

func TestS3Conformance(t *testing.T) {
	srv := s3test.Start(t)
	s, err := openS3Test(t, srv, srv.Endpoint, "some/prefix", nil)
	if err != nil {
		t.Fatal(err)
	}
	conformance(t, s)
	// The prefix is applied: the objects live under some/prefix/ in the bucket.
	if _, err := os.Stat(filepath.Join(srv.Dir, srv.Bucket, "some", "prefix", "stream")); err != nil {
		t.Fatalf("object not under the prefix: %v", err)
	}
}

// Multipart uploads (over the part size), seekable and not, conditional.
func TestS3Multipart(t *testing.T) {
	srv := s3test.Start(t)
	s, err := openS3Test(t, srv, srv.Endpoint, "", func(o *Options) { o.S3Concurrency = 3 })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := make([]byte, 12<<20+123)
	rand.Read(data)
	src := filepath.Join(t.TempDir(), "big")
	os.WriteFile(src, data, 0o644)
	if err := PutFile(ctx, s, "big/seekable", src, &PutOptions{IfNotExists: true}); err != nil {
		t.Fatal(err)
	}
	if err := PutFile(ctx, s, "big/seekable", src, &PutOptions{IfNotExists: true}); !errors.Is(err, ErrExists) {
		t.Fatalf("conditional multipart overwrite: %v, want ErrExists", err)
	}
	if err := s.Put(ctx, "big/stream", io.MultiReader(bytes.NewReader(data[:7]), bytes.NewReader(data[7:])), -1, nil); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"big/seekable", "big/stream"} {
		b, err := ReadAll(ctx, s, k)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, data) {
			t.Fatalf("%s differs", k)
		}
	}
}

// A corrupted object is caught by the SHA-256 check on download.
func TestS3ChecksumOnDownload(t *testing.T) {
	srv := s3test.Start(t)
	s, err := openS3Test(t, srv, srv.Endpoint, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	body := bytes.Repeat([]byte("pillar"), 1000)
	if err := s.Put(ctx, "obj", bytes.NewReader(body), int64(len(body)), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAll(ctx, s, "obj"); err != nil {
		t.Fatal(err)
	}
	// Flip one byte behind the server's back (same size, metadata kept).
	p := filepath.Join(srv.Dir, srv.Bucket, "obj")
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("X"), 100)
	f.Close()
	if _, err := ReadAll(ctx, s, "obj"); !errors.Is(err, ErrChecksum) {
		t.Fatalf("corrupt download: %v, want ErrChecksum", err)
	}
}

func TestS3WrongCredentials(t *testing.T) {
	srv := s3test.Start(t)
	_, err := openS3Test(t, srv, srv.Endpoint, "", func(o *Options) { o.S3SecretAccessKey = "wrong-secret" })
	if !errors.Is(err, ErrAccessDenied) {
		t.Fatalf("wrong secret: %v, want ErrAccessDenied", err)
	}
	t.Log(err)
	_, err = openS3Test(t, srv, srv.Endpoint, "", func(o *Options) { o.S3AccessKeyID = "nosuchuser" })
	if !errors.Is(err, ErrAccessDenied) {
		t.Fatalf("unknown key id: %v, want ErrAccessDenied", err)
	}
	err = func() error {
		_, err := Open(context.Background(), "s3://no-such-bucket-here/x", &Options{S3Endpoint: srv.Endpoint, S3AccessKeyID: s3test.AccessKey, S3SecretAccessKey: s3test.SecretKey})
		return err
	}()
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing bucket: %v, want ErrNotFound", err)
	}
}

// 500/503/SlowDown answers are retried with backoff; past MaxAttempts the
// error is clear and the object does not exist.
func TestS3Faults(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint)
	var logBuf syncBuffer
	s, err := openS3Test(t, srv, proxy.Endpoint, "", func(o *Options) {
		o.S3MaxAttempts = 4
		o.Logger = slog.New(slog.NewTextHandler(&logBuf, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, status := range []int{500, 503} {
		proxy.FailNext(3, status, "PUT")
		if err := s.Put(ctx, "flaky", strings.NewReader("data"), 4, nil); err != nil {
			t.Fatalf("status %d x3 then success: %v", status, err)
		}
	}
	if _, inj := proxy.Counts(); inj != 6 {
		t.Fatalf("injected %d failures, want 6", inj)
	}
	if !strings.Contains(logBuf.String(), "retrying request S3/PutObject") {
		t.Fatalf("retries not logged: %q", logBuf.String())
	}
	proxy.FailAll(503, "PUT")
	err = s.Put(ctx, "doomed", strings.NewReader("data"), 4, &PutOptions{IfNotExists: true})
	if err == nil || !strings.Contains(err.Error(), "attempts") || !strings.Contains(err.Error(), "doomed") {
		t.Fatalf("persistent 503: %v", err)
	}
	t.Log(err)
	proxy.Heal()
	if _, err := s.Stat(ctx, "doomed"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("failed put left an object: %v", err)
	}
	// Multipart under faults: parts and completion are retried.
	proxy.FailNext(2, 500, "PUT")
	data := make([]byte, 11<<20)
	rand.Read(data)
	if err := s.Put(ctx, "bigflaky", bytes.NewReader(data), int64(len(data)), &PutOptions{IfNotExists: true}); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadAll(ctx, s, "bigflaky"); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("bigflaky: %v", err)
	}
}

func TestS3Unreachable(t *testing.T) {
	addr, err := s3test.FreeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Open(context.Background(), "s3://bucket/x", &Options{
		S3Endpoint: "http://" + addr, S3AccessKeyID: "a", S3SecretAccessKey: "b",
		S3MaxAttempts: 3, S3MaxBackoff: 10 * time.Millisecond,
	})
	if err == nil || !strings.Contains(err.Error(), "attempts") {
		t.Fatalf("unreachable: %v", err)
	}
	t.Logf("%v (after %v)", err, time.Since(start))
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// A wrong caller checksum: the local store refuses the Put; S3 records it and
// the download fails verification. Either way nobody reads bad bytes.
func TestWrongCallerChecksum(t *testing.T) {
	ctx := context.Background()
	l, _ := OpenLocal(t.TempDir())
	if err := l.Put(ctx, "x", strings.NewReader("abc"), 3, &PutOptions{SHA256: sha256Hex("abd")}); !errors.Is(err, ErrChecksum) {
		t.Fatalf("local: %v", err)
	}
	if _, err := l.Stat(ctx, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("local kept a bad object: %v", err)
	}
	srv := s3test.Start(t)
	s, err := openS3Test(t, srv, srv.Endpoint, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "x", strings.NewReader("abc"), 3, &PutOptions{SHA256: sha256Hex("abd")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAll(ctx, s, "x"); !errors.Is(err, ErrChecksum) {
		t.Fatalf("s3: %v", err)
	}
}

// A server that accepts connections and never answers (a peer gone silent)
// ends each attempt after S3Timeout, and the request fails after
// S3MaxAttempts instead of waiting on the kernel's TCP timeouts.
func TestS3SilentPeer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	start := time.Now()
	_, err = Open(context.Background(), "s3://bucket/x", &Options{
		S3Endpoint: "http://" + lis.Addr().String(), S3AccessKeyID: "a", S3SecretAccessKey: "b",
		S3MaxAttempts: 2, S3MaxBackoff: 10 * time.Millisecond, S3Timeout: 300 * time.Millisecond,
	})
	took := time.Since(start)
	if err == nil {
		t.Fatal("a silent server answered")
	}
	if took > 10*time.Second {
		t.Fatalf("took %v against a silent server with S3Timeout 300ms and 2 attempts: %v", took, err)
	}
	t.Logf("%v (after %v)", err, took)
}
