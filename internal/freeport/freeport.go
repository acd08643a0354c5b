// Package freeport hands out loopback TCP addresses for servers that a test,
// the demo or the chaos harness starts as separate processes, where the port
// must be chosen before the process binds it.
//
// Invariants:
//   - An address is never taken from the kernel's ephemeral range
//     (/proc/sys/net/ipv4/ip_local_port_range). The usual "listen on :0 and
//     close" trick returns an ephemeral port, which any outgoing connection
//     (to PostgreSQL, S3, a peer) may take as its source port before the
//     child binds it; CI lost a chaos run that way ("bind: address already in
//     use" on a port handed out a second earlier).
//   - Within one process no port is handed out twice. Processes start at
//     random offsets so that parallel test binaries rarely meet.
//   - A port is returned only after binding it succeeded a moment ago.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

const lowest = 20000 // below this live well-known services (PostgreSQL 5432, Redis 6379, …)

var (
	mu       sync.Mutex
	next     int
	lo, hi   int // the range handed out: [lo, hi)
	rangeErr error
)

func setup() {
	hi = 32768 // Linux's default ephemeral low bound
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				hi = v
			}
		}
	}
	lo = lowest
	if hi-lo < 1000 { // an unusual ephemeral range: take the space above it instead
		lo, hi = 61000, 65535
	}
	next = lo + rand.IntN(hi-lo)
}

// Addr returns "127.0.0.1:PORT" with a port outside the ephemeral range that
// was free a moment ago and that this process has not handed out before.
func Addr() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if hi == 0 {
		setup()
	}
	if rangeErr != nil {
		return "", rangeErr
	}
	for tries := 0; tries < hi-lo; tries++ {
		port := next
		next++
		if next >= hi {
			next = lo
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		return addr, nil
	}
	rangeErr = fmt.Errorf("freeport: no free port in 127.0.0.1:[%d,%d)", lo, hi)
	return "", rangeErr
}
