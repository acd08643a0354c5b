package lorry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/objstore"
	"github.com/pillarkit/pillar/internal/s3test"
)

// TestS3Outage runs Lorry against a real S3 server (versitygw on loopback)
// behind a fault-injecting proxy: while every PUT fails with 503 the worker
// keeps retrying and commits nothing; once S3 heals the backlog is
// delivered, each range registered once, and the replicas read the values
// back from S3.
func TestS3Outage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := s3test.Start(t)
	proxy := s3test.NewFaultProxy(t, srv.Endpoint)
	s3, err := objstore.Open(ctx, srv.URL("lorry"), &objstore.Options{
		S3Endpoint: proxy.Endpoint, S3AccessKeyID: s3test.AccessKey, S3SecretAccessKey: s3test.SecretKey,
		S3MaxAttempts: 2, S3MaxBackoff: 10 * time.Millisecond,
	})
	must(t, err)
	const parts = 2
	e := newEnv(t, parts)
	e.objs = &faultObjects{Store: s3}
	w := e.worker(e.opts("w"))
	runWorker(t, w)

	var universe []string
	want := map[string]string{}
	counts := make([]int64, parts)
	put := func(round int) {
		var rs []rec
		for p := 0; p < parts; p++ {
			for _, k := range keysIn(3, p, parts) {
				v := fmt.Sprintf("round %d", round)
				rs = append(rs, rec{key: k, val: v})
				want[k], counts[p] = v, counts[p]+1
				universe = append(universe, k)
			}
		}
		e.enqueue(rs...)
	}
	put(0)
	waitFor(t, "first round delivered", 20*time.Second, func() bool { return e.state(0).Offset == 3 && e.state(1).Offset == 3 })
	proxy.FailAll(503, "PUT")
	put(1)
	put(2)
	// Wait for PUTs to fail (a fixed sleep is a guess a loaded machine
	// can miss), then check that nothing was committed past them.
	waitFor(t, "PUTs refused by the failing proxy", 20*time.Second, func() bool {
		_, injected := proxy.Counts()
		return injected >= 2
	})
	if e.state(0).Offset != 3 || e.state(1).Offset != 3 {
		t.Fatalf("committed during the S3 outage: %+v %+v", e.state(0), e.state(1))
	}
	proxy.Heal()
	waitFor(t, "backlog delivered", 30*time.Second, func() bool {
		return e.state(0).Offset == counts[0] && e.state(1).Offset == counts[1]
	})
	for p := 0; p < parts; p++ {
		e.checkChain(p, counts[p])
	}
	e.checkServed(want, universe)
}
