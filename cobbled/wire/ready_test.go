package wire

import (
	"context"
	"testing"
	"time"

	"github.com/pillarkit/pillar/cobbled/servepb"
)

// Ready is false until every slot has a live connection, true after, and
// false again once a connection breaks or goes idle past IdleTimeout; it
// never dials.
func TestReady(t *testing.T) {
	s, addr := serveWith(t, echo, ServerOptions{})
	c := NewClient(addr, ClientOptions{Conns: 2, IdleTimeout: 300 * time.Millisecond})
	defer c.Close()
	if c.Ready() {
		t.Fatal("a new client is ready: it has no connection")
	}
	req := &servepb.BatchGetRequest{Keys: [][]byte{[]byte("k")}}
	if _, err := c.BatchGet(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if c.Ready() {
		t.Fatal("ready with one of two slots connected")
	}
	if _, err := c.BatchGet(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if !c.Ready() {
		t.Fatal("not ready with both slots connected")
	}
	time.Sleep(400 * time.Millisecond)
	if c.Ready() {
		t.Fatal("ready on connections idle past IdleTimeout")
	}
	for range 2 {
		if _, err := c.BatchGet(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if !c.Ready() {
		t.Fatal("not ready after redialling")
	}
	s.Close()
	deadline := time.Now().Add(5 * time.Second)
	for c.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("still ready 5 s after the server closed its connections")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
