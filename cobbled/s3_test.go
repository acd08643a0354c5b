package cobbled

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/s3test"
)

// TestApplyFromS3 ingests batches from a real S3 server (versitygw on
// 127.0.0.1) behind a fault proxy: failed GETs are retried (by the object
// store, then by the node), and a truncated object is caught by the node's
// own verification.
func TestApplyFromS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 server")
	}
	srv := s3test.Start(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint)
	ctx := context.Background()
	store, err := objstore.Open(ctx, srv.URL("pillar"), &objstore.Options{
		S3Endpoint: proxy.Endpoint, S3AccessKeyID: s3test.AccessKey, S3SecretAccessKey: s3test.SecretKey,
		S3MaxAttempts: 2, S3MaxBackoff: 10 * time.Millisecond,
	})
	must(t, err)

	const parts, p = 4, 2
	local := t.TempDir()
	steps, universe := testSteps(p, parts)
	bs, models := writeSteps(t, local, parts, p, "s3", steps[:3])
	put := func(key string, data []byte) {
		must(t, store.Put(ctx, key, strings.NewReader(string(data)), int64(len(data)), nil))
	}
	for _, b := range bs {
		for _, f := range b.Manifest.Files {
			key := batch.Prefix(p, b.Manifest.ID) + f.Name
			data, err := os.ReadFile(filepath.Join(local, filepath.FromSlash(key)))
			must(t, err)
			put(key, data)
		}
	}
	n, err := Open(ctx, Options{ID: "n1", Dir: t.TempDir(), Partitions: parts, CacheBytes: 8 << 20, Objects: store})
	must(t, err)
	defer n.Close()

	must(t, n.Apply(ctx, bs[0]))
	checkModel(t, n, p, universe, models[1])

	proxy.FailNext(1, 503, "GET") // the store's own retry absorbs it
	must(t, n.Apply(ctx, bs[1]))
	checkModel(t, n, p, universe, models[2])

	// A truncated object: the node's size/sha256 check refuses it, and the
	// replica stays at seq 2 until the object is whole again.
	f := bs[2].Manifest.Files[0]
	key := batch.Prefix(p, bs[2].Manifest.ID) + f.Name
	whole, err := os.ReadFile(filepath.Join(local, filepath.FromSlash(key)))
	must(t, err)
	must(t, store.Delete(ctx, key))
	put(key, whole[:len(whole)/2])
	if err := n.Apply(ctx, bs[2]); err == nil {
		t.Fatal("truncated object applied")
	}
	checkModel(t, n, p, universe, models[2])
	must(t, store.Delete(ctx, key))
	put(key, whole)
	must(t, n.Apply(ctx, bs[2]))
	checkModel(t, n, p, universe, models[3])
}
