package router

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/testcluster"
	"github.com/pillarkit/pillar/internal/tlsconf"
)

// BenchmarkTLSCost measures what TLS costs the read path: two clusters
// with the same data (1200 keys, values 100 B–100 KiB, 12-key batches),
// one serving plaintext and one mutual TLS (certificates from
// tlsconf.DevCerts, ECDSA P-256, TLS 1.3), each with its own router. Each
// iteration sends the same batch through both routers, alternating which
// goes first, so the machine's noise falls on both alike; it reports p50
// and p99 per path and the TLS/plaintext ratios. Hedging is off and the
// routers are pinned to one zone, so both do the same work on the nodes.
// Connections are set up before the timed loop: the figures are the steady
// cost (record encryption), not handshakes.
//
//	go test -run '^$' -bench TLSCost -benchtime 4000x ./cobbled/router/
func BenchmarkTLSCost(b *testing.B) {
	for _, tr := range []string{TransportGRPC, TransportWire} {
		b.Run(tr, func(b *testing.B) {
			dir := b.TempDir()
			if _, err := tlsconf.DevCerts(dir, tlsconf.DevOptions{Names: []string{"node/n1", "router"}}); err != nil {
				b.Fatal(err)
			}
			srv, err := tlsconf.NewReloader(tlsconf.Files{Cert: filepath.Join(dir, "node-n1.pem"), Key: filepath.Join(dir, "node-n1.key"), CA: filepath.Join(dir, "ca.pem")}, tlsconf.Options{Poll: -1})
			if err != nil {
				b.Fatal(err)
			}
			serverTLS, err := srv.ServerConfig()
			if err != nil {
				b.Fatal(err)
			}
			cli, err := tlsconf.NewReloader(tlsconf.Files{Cert: filepath.Join(dir, "router.pem"), Key: filepath.Join(dir, "router.key"), CA: filepath.Join(dir, "ca.pem")}, tlsconf.Options{Poll: -1})
			if err != nil {
				b.Fatal(err)
			}
			data := func(o *testcluster.Options) { o.Keys = 1200; o.MaxValue = 100 << 10; o.CacheBytes = 256 << 20 }
			plainC := startCluster(b, data)
			tlsC := startCluster(b, func(o *testcluster.Options) { data(o); o.TLS = serverTLS })
			plain := newRouter(b, plainC, func(o *Options) { o.Zone = "zone-a"; o.DisableHedging = true; o.Transport = tr })
			secure := newRouter(b, tlsC, func(o *Options) {
				o.Zone = "zone-a"
				o.DisableHedging = true
				o.Transport = tr
				o.NodeTLS = cli.ClientConfig()
			})
			// The TLS cluster's nodes do speak TLS: a handshake with the
			// router's client certificate succeeds.
			conn, err := tls.Dial("tcp", tlsC.Members()[0].Addr, cli.ClientConfig())
			if err != nil {
				b.Fatalf("TLS handshake with the TLS cluster's node: %v", err)
			}
			conn.Close()
			compareTLS(b, plainC.Batches(12), plain, secure)
		})
	}
}

// compareTLS warms both routers (caches and connections), then times the
// same batch through each, alternating the order, and reports p50 and p99
// of each path and their ratios.
func compareTLS(b *testing.B, batches [][][]byte, plain, secure *Router) {
	ctx := context.Background()
	for range 2 {
		for _, keys := range batches {
			for _, r := range []*Router{plain, secure} {
				res, err := r.BatchGet(ctx, keys)
				if err != nil {
					b.Fatal(err)
				}
				for i, x := range res {
					if !x.Found || x.Err != nil {
						b.Fatalf("key %q: found %v, err %v", keys[i], x.Found, x.Err)
					}
				}
			}
		}
	}
	var lat [2][]time.Duration
	n := 0
	for b.Loop() {
		keys := batches[n%len(batches)]
		first := n % 2
		n++
		for k := range 2 {
			i := (first + k) % 2
			r := []*Router{plain, secure}[i]
			t0 := time.Now()
			if _, err := r.BatchGet(ctx, keys); err != nil {
				b.Fatal(err)
			}
			lat[i] = append(lat[i], time.Since(t0))
		}
	}
	q := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds())
	}
	b.ReportMetric(q(lat[0], 0.5), "plain-p50-µs")
	b.ReportMetric(q(lat[0], 0.99), "plain-p99-µs")
	b.ReportMetric(q(lat[1], 0.5), "tls-p50-µs")
	b.ReportMetric(q(lat[1], 0.99), "tls-p99-µs")
	b.ReportMetric(q(lat[1], 0.5)/q(lat[0], 0.5), "tls/plain-p50")
	b.ReportMetric(q(lat[1], 0.99)/q(lat[0], 0.99), "tls/plain-p99")
}
