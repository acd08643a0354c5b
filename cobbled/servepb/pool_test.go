package servepb

import "testing"

func TestBufferPool(t *testing.T) {
	var p BufferPool
	for _, n := range []int{0, 1, 1024, 1025, 600 << 10, 1 << 20, 3<<20 + 5} {
		b := p.Get(n)
		if len(*b) != n || cap(*b) < n {
			t.Fatalf("Get(%d): len %d cap %d", n, len(*b), cap(*b))
		}
		p.Put(b)
		b2 := p.Get(n)
		if len(*b2) != n {
			t.Fatalf("second Get(%d): len %d", n, len(*b2))
		}
	}
	p.Put(&[]byte{1, 2, 3}) // foreign buffers are dropped, not pooled
	odd := make([]byte, 3000)
	p.Put(&odd)
	if b := p.Get(2048); cap(*b) != 2048 {
		t.Fatalf("class of 2048: cap %d", cap(*b))
	}
}
