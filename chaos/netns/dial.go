package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// dialFrom returns a dialer whose connections start in namespace ns: the
// socket is created on an OS thread moved into ns (setns), so its traffic
// leaves through that namespace's link and firewall, and the thread is moved
// back before it is released. A socket keeps its namespace for life, so the
// connection works from any goroutine afterwards.
func dialFrom(ns string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			c, err := dialInNS(ctx, ns, addr)
			ch <- res{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

func dialInNS(ctx context.Context, ns, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("netns %s: %w", ns, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("setns %s: %w", ns, err)
	}
	// net.Dialer creates the socket on this thread before it waits for the
	// connect in the poller.
	var d net.Dialer
	c, derr := d.DialContext(ctx, "tcp", addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays in ns: leave it locked so the runtime retires it.
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("setns back from %s: %w", ns, err)
	}
	runtime.UnlockOSThread()
	return c, derr
}
