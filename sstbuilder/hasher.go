package sstbuilder

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"time"
)

// tailHasher computes a file's SHA-256 while another writer appends to it,
// so hashing overlaps SST writing instead of re-reading the finished file.
// It relies on the writer only appending (SstFileWriter writes data blocks,
// then index, filter and footer, each once, in order).
type tailHasher struct {
	f    *os.File
	h    hash.Hash
	n    int64
	stop chan struct{}
	done chan error
}

const tailChunk = 1 << 20

func startTailHasher(path string) (*tailHasher, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	t := &tailHasher{f: f, h: sha256.New(), stop: make(chan struct{}), done: make(chan error, 1)}
	go t.run()
	return t, nil
}

func (t *tailHasher) run() {
	buf := make([]byte, tailChunk)
	stopping := false
	for {
		n, err := t.f.Read(buf)
		t.h.Write(buf[:n])
		t.n += int64(n)
		switch {
		case err == nil:
			continue
		case !errors.Is(err, io.EOF):
			t.done <- err
			return
		case stopping: // EOF after the writer finished: done
			t.done <- nil
			return
		}
		// At the current end of the file: wait for more, or for the writer
		// to finish (then read to the real end once more).
		select {
		case <-t.stop:
			stopping = true
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// finish is called after the writer closed the file; it returns the hash
// and size of the whole file.
func (t *tailHasher) finish() (string, int64, error) {
	close(t.stop)
	err := <-t.done
	t.f.Close()
	if err != nil {
		return "", 0, fmt.Errorf("hash: %w", err)
	}
	return hex.EncodeToString(t.h.Sum(nil)), t.n, nil
}

// abort stops the hasher without a result.
func (t *tailHasher) abort() {
	if t == nil {
		return
	}
	close(t.stop)
	<-t.done
	t.f.Close()
}
