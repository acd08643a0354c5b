package objstore

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/s3test"
)

// BenchmarkPut uploads a 64 MiB file to the local store and to versitygw on
// loopback with 1 and 4 parts in flight (8 MiB parts), and downloads it with
// checksum verification.
//
//	go test ./internal/objstore -run '^$' -bench Put -benchtime 3x
func BenchmarkPut(b *testing.B) {
	ctx := context.Background()
	src := filepath.Join(b.TempDir(), "src")
	data := make([]byte, 64<<20)
	rand.Read(data)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		b.Fatal(err)
	}
	srv := s3test.Start(b)
	stores := []struct {
		name string
		open func() (Store, error)
	}{
		{"local", func() (Store, error) { return OpenLocal(b.TempDir()) }},
	}
	for _, c := range []int{1, 4} {
		stores = append(stores, struct {
			name string
			open func() (Store, error)
		}{fmt.Sprintf("s3-concurrency-%d", c), func() (Store, error) {
			return Open(ctx, srv.URL(fmt.Sprintf("bench%d", c)), &Options{S3Endpoint: srv.Endpoint, S3AccessKeyID: s3test.AccessKey,
				S3SecretAccessKey: s3test.SecretKey, S3PartSize: 8 << 20, S3Concurrency: c})
		}})
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			s, err := st.open()
			if err != nil {
				b.Fatal(err)
			}
			var put, get time.Duration
			for i := 0; b.Loop(); i++ {
				key := fmt.Sprintf("obj-%d", i)
				t0 := time.Now()
				if err := PutFile(ctx, s, key, src, &PutOptions{IfNotExists: true}); err != nil {
					b.Fatal(err)
				}
				put += time.Since(t0)
				t0 = time.Now()
				if err := GetFile(ctx, s, key, filepath.Join(b.TempDir(), "dst")); err != nil {
					b.Fatal(err)
				}
				get += time.Since(t0)
			}
			b.ReportMetric(float64(len(data))/1e6/(put.Seconds()/float64(b.N)), "put-MB/s")
			b.ReportMetric(float64(len(data))/1e6/(get.Seconds()/float64(b.N)), "get-MB/s")
		})
	}
}
