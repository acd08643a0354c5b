package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestAddrOutsideEphemeralAndUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
		_, p, _ := net.SplitHostPort(a)
		port, _ := strconv.Atoi(p)
		if port < lo || port >= hi {
			t.Fatalf("%s outside [%d,%d)", a, lo, hi)
		}
		if port >= 32768 && hi <= 32768 {
			t.Fatalf("%s is in the ephemeral range", a)
		}
	}
}

func TestAddrSkipsBoundPort(t *testing.T) {
	a, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	_ = a
	// Occupy the next candidate; Addr must skip it.
	mu.Lock()
	cand := next
	mu.Unlock()
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cand)))
	if err != nil {
		t.Skipf("cannot occupy %d: %v", cand, err)
	}
	defer l.Close()
	b, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	if b == l.Addr().String() {
		t.Fatalf("handed out bound %s", b)
	}
}
