package cli

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/pillarkit/pillar/cobbled/control"
)

// startControlPlane opens a sqlite control store at dir/control.db with the
// given partition count, serves an unauthenticated control plane on a
// loopback port and returns its address. The server is stopped and the
// store closed (in that order) when the test ends.
func startControlPlane(t testing.TB, ctx context.Context, dir string, parts int) string {
	t.Helper()
	db, err := control.OpenStore(ctx, "sqlite:"+filepath.Join(dir, "control.db"), &control.StoreOptions{Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	srv, err := control.NewServer(&control.Options{Store: db, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := srv.GRPCServer()
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}
