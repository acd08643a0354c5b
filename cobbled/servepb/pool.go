package servepb

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// BufferPool is a mem.BufferPool of power-of-two classes from 1 KiB to
// 128 MiB that, unlike grpc's tiered pools, does not zero a buffer it hands
// out: it is for callers that overwrite every byte they asked for (an
// encoded response, a gathered message), where clearing a 1 MiB class per
// ~600 KB response costs more than the copy itself. Larger requests are
// allocated and not pooled.
type BufferPool struct {
	classes [maxClass - minClass + 1]sync.Pool
}

const (
	minClass = 10 // 1 KiB
	maxClass = 27 // 128 MiB
)

var _ mem.BufferPool = (*BufferPool)(nil)

func class(n int) int {
	if n <= 1<<minClass {
		return minClass
	}
	return bits.Len(uint(n - 1))
}

// Get returns a buffer of length n with unspecified contents.
func (p *BufferPool) Get(n int) *[]byte {
	c := class(n)
	if c > maxClass {
		b := make([]byte, n)
		return &b
	}
	if bp, ok := p.classes[c-minClass].Get().(*[]byte); ok {
		*bp = (*bp)[:n]
		return bp
	}
	b := make([]byte, n, 1<<c)
	return &b
}

// Put returns a buffer obtained from Get.
func (p *BufferPool) Put(bp *[]byte) {
	c := cap(*bp)
	if c < 1<<minClass || c > 1<<maxClass || c&(c-1) != 0 {
		return // not one of ours
	}
	p.classes[bits.Len(uint(c))-1-minClass].Put(bp)
}
