package router_test

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/pillarkit/pillar/cobbled/router"
	"github.com/pillarkit/pillar/internal/testcluster"
)

// A BatchGet through the router: one Result per key, in request order.
// In production Source is the control plane (control.Dial's *Client); here
// it is a three-node loopback cluster of real cobbled nodes.
func ExampleRouter_BatchGet() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "router-example")
	defer os.RemoveAll(dir)
	cluster, err := testcluster.Start(ctx, testcluster.Options{Dir: dir, Partitions: 4, Keys: 40, MaxValue: 4096})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()

	r, err := router.New(ctx, router.Options{Source: cluster, Zone: "zone-a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()

	keys := cluster.Keys()[:3]
	absent := bytes.Repeat([]byte{0xff}, 16)
	results, err := r.BatchGet(ctx, append(keys, absent))
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, res := range results[:3] {
		fmt.Println(res.Found, bytes.Equal(res.Value, cluster.Value(keys[i])))
	}
	fmt.Println(results[3].Found, results[3].Err)
	// Output:
	// true true
	// true true
	// true true
	// false <nil>
}
