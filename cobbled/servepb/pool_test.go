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

// Every size gets the smallest class at or above it, within 25% above it
// (from 1 KiB up), and classes are distinct and increasing.
func TestBufferClasses(t *testing.T) {
	last := 0
	for n := 1; n <= 1<<maxShift; n = n*9/8 + 1 {
		idx, size, ok := class(n)
		if !ok || size < n || (n > 1<<minShift && float64(size) > 1.25*float64(n)) {
			t.Fatalf("class(%d) = %d, %d, %v", n, idx, size, ok)
		}
		if idx2, size2, _ := class(size); idx2 != idx || size2 != size {
			t.Fatalf("class(%d) = %d/%d but class(%d) = %d/%d", n, idx, size, size, idx2, size2)
		}
		if idx < last || idx >= numClasses {
			t.Fatalf("class(%d) index %d after %d (of %d)", n, idx, last, numClasses)
		}
		last = idx
	}
	if _, _, ok := class(1<<maxShift + 1); ok {
		t.Fatal("a class above the largest")
	}
}
