package servepb

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// BufferPool is a mem.BufferPool of size classes from 1 KiB to 128 MiB, four
// per power of two (1, 1.25, 1.5, 1.75 × 2^k: at most 25% over the size
// asked for), that, unlike grpc's tiered pools, does not zero a buffer it
// hands out: it is for callers that overwrite every byte they asked for (an
// encoded response, a gathered message), where clearing a 1 MiB class per
// ~600 KB response costs more than the copy itself. A buffer that is never
// Put back costs what an exact allocation would, within the class's slack.
// Larger requests are allocated and not pooled.
type BufferPool struct {
	classes [numClasses]sync.Pool
}

const (
	minShift   = 10 // 1 KiB: the smallest class
	maxShift   = 27 // 128 MiB: the largest
	steps      = 4  // classes per power of two
	numClasses = (maxShift-minShift)*steps + 1
)

var _ mem.BufferPool = (*BufferPool)(nil)

// class is the index and size of the smallest class holding n bytes; ok is
// false above the largest.
func class(n int) (idx, size int, ok bool) {
	if n <= 1<<minShift {
		return 0, 1 << minShift, true
	}
	e := bits.Len(uint(n - 1)) // 2^(e-1) < n ≤ 2^e
	if e > maxShift {
		return 0, 0, false
	}
	base, step := 1<<(e-1), 1<<(e-1)/steps
	k := (n - base + step - 1) / step // 1..steps
	return (e-1-minShift)*steps + k, base + k*step, true
}

// Get returns a buffer of length n with unspecified contents.
func (p *BufferPool) Get(n int) *[]byte {
	idx, size, ok := class(n)
	if !ok {
		b := make([]byte, n)
		return &b
	}
	if bp, ok := p.classes[idx].Get().(*[]byte); ok {
		*bp = (*bp)[:n]
		return bp
	}
	b := make([]byte, n, size)
	return &b
}

// Put returns a buffer obtained from Get.
func (p *BufferPool) Put(bp *[]byte) {
	c := cap(*bp)
	idx, size, ok := class(c)
	if !ok || size != c {
		return // not one of ours
	}
	p.classes[idx].Put(bp)
}
