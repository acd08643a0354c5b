package ingest

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/s3test"
)

// TestIngestFromS3: an s3:// prefix (a real S3 server, versitygw, on
// loopback) holding the wget crawl and a JSONL shard, beside an object
// that is neither: both are ingested, one object on disk at a time, and
// the summary names the objects.
func TestIngestFromS3(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	objs, err := objstore.Open(ctx, srv.URL("crawls/2026-11"), &objstore.Options{S3Endpoint: srv.Endpoint, S3Region: s3test.Region,
		S3AccessKeyID: s3test.AccessKey, S3SecretAccessKey: s3test.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	warc, err := os.ReadFile("testdata/crawl/site.warc.gz")
	if err != nil {
		t.Fatal(err)
	}
	jsonl := []byte(`{"url": "https://ds.test/s3", "text": "A page from a dataset shard in S3."}` + "\n")
	for key, b := range map[string][]byte{"site.warc.gz": warc, "shard-0.jsonl": jsonl, "README.txt": []byte("not a crawl")} {
		if err := objs.Put(ctx, key, bytes.NewReader(b), int64(len(b)), nil); err != nil {
			t.Fatal(err)
		}
	}
	tmp := t.TempDir()
	st := newStore(t)
	s := ingestInto(t, st, Options{From: srv.URL("crawls/2026-11"), Objects: objs, TempDir: tmp})
	if s.New != 5 {
		t.Fatalf("%d new pages, want the crawl's 4 and the shard's 1\n%s", s.New, s.Summary())
	}
	if _, ex := outcome(s, OutcomeStatus4xx); len(ex) == 0 || !strings.HasPrefix(ex[0], "site.warc.gz@") {
		t.Errorf("examples %v do not name the object", ex)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left in the temporary folder: %v", left)
	}
	empty, _ := objstore.Open(ctx, srv.URL("nothing-here"), &objstore.Options{S3Endpoint: srv.Endpoint, S3Region: s3test.Region,
		S3AccessKeyID: s3test.AccessKey, S3SecretAccessKey: s3test.SecretKey})
	if _, err := Run(ctx, newStore(t), Options{From: srv.URL("nothing-here"), Objects: empty}); err == nil || !strings.Contains(err.Error(), "no crawl or dataset objects") {
		t.Errorf("an empty prefix: %v", err)
	}
}
