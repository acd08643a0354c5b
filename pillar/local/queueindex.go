package local

import (
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/pillarkit/pillar/pillar"
)

// The queue index ("Queue index" in doc.go): a manifest names a
// partition's newest queue segments itself (the tail) and the older ones
// through immutable index files, tiered by level.

const (
	// defaultQueueFanout is how many tail segments make an index file of
	// level 0, and how many index files of one level merge into one of
	// the next.
	defaultQueueFanout = 16
	// queueMaxLevel is the highest level a merge makes: an index file of
	// it lists fanout^(queueMaxLevel+1) segments (65,536: ~9 MB of JSON).
	// Files of this level are not merged further; a manifest names one per
	// 65,536 segments.
	queueMaxLevel = 3
	// indexCacheSegments bounds the segments of decoded index files a
	// Store keeps in memory (about 150 bytes each).
	indexCacheSegments = 1 << 17
)

// indexFile is the content of an index file (JSON).
type indexFile struct {
	Format    int       `json:"format"`
	Partition int       `json:"partition"`
	Level     int       `json:"level"`
	Segments  []segment `json:"segments"`
}

func (s *Store) fanout() int {
	if s.opts.queueFanout > 1 {
		return s.opts.queueFanout
	}
	return defaultQueueFanout
}

// indexCache keeps decoded index files by name (they are immutable), least
// recently used out first.
type indexCache struct {
	mu     sync.Mutex
	n      int        // segments held
	ll     *list.List // of *indexCached, most recently used first
	byName map[string]*list.Element
}

type indexCached struct {
	name string
	segs []segment
}

func (c *indexCache) get(name string) ([]segment, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byName[name]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*indexCached).segs, true
	}
	return nil, false
}

func (c *indexCache) put(name string, segs []segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ll == nil {
		c.ll, c.byName = list.New(), map[string]*list.Element{}
	}
	if _, ok := c.byName[name]; ok {
		return
	}
	c.byName[name] = c.ll.PushFront(&indexCached{name, segs})
	c.n += len(segs)
	for c.n > indexCacheSegments && c.ll.Len() > 1 {
		e := c.ll.Back()
		ic := e.Value.(*indexCached)
		c.ll.Remove(e)
		delete(c.byName, ic.name)
		c.n -= len(ic.segs)
	}
}

func (c *indexCache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byName[name]; ok {
		c.ll.Remove(e)
		delete(c.byName, name)
		c.n -= len(e.Value.(*indexCached).segs)
	}
}

// loadIndex returns the segments an index file lists, checked against the
// manifest entry naming it (size, checksum, offsets); a mismatch wraps
// pillar.ErrCorrupt.
func (s *Store) loadIndex(ctx context.Context, partition int, r indexRef) ([]segment, error) {
	if segs, ok := s.index.get(r.File); ok {
		return segs, nil
	}
	f, err := s.openData(ctx, r.File, r.Bytes, r.CRC32C)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("index file %s: %w", r.File, err)
	}
	segs, err := decodeIndex(b, partition, r)
	if err != nil {
		return nil, err
	}
	s.index.put(r.File, segs)
	return segs, nil
}

// decodeIndex decodes an index file and checks it lists what its manifest
// entry says.
func decodeIndex(b []byte, partition int, r indexRef) ([]segment, error) {
	var ix indexFile
	if err := json.Unmarshal(b, &ix); err != nil {
		return nil, fmt.Errorf("index file %s: %v: %w", r.File, err, pillar.ErrCorrupt)
	}
	bad := func(what string) error {
		return fmt.Errorf("index file %s: %s does not match the manifest's entry (partition %d, offsets [%d,%d), %d segments): %w",
			r.File, what, partition, r.First, r.First+r.Count, r.Segments, pillar.ErrCorrupt)
	}
	if ix.Format > 1 {
		return nil, fmt.Errorf("index file %s: format %d: %w", r.File, ix.Format, pillar.ErrNewerFormat)
	}
	if ix.Level != r.Level {
		return nil, bad(fmt.Sprintf("level %d (the entry says %d)", ix.Level, r.Level))
	}
	if ix.Partition != partition {
		return nil, bad(fmt.Sprintf("partition %d", ix.Partition))
	}
	if len(ix.Segments) != r.Segments || len(ix.Segments) == 0 {
		return nil, bad(fmt.Sprintf("%d segments", len(ix.Segments)))
	}
	next := r.First
	for _, sg := range ix.Segments {
		if sg.First != next || sg.Count <= 0 {
			return nil, bad(fmt.Sprintf("segment %s at offset %d (count %d, expected offset %d)", sg.File, sg.First, sg.Count, next))
		}
		next += sg.Count
	}
	if next != r.First+r.Count {
		return nil, bad(fmt.Sprintf("offsets up to %d", next))
	}
	return ix.Segments, nil
}

// eachSegment calls fn with each segment of partition p's queue q that
// holds an offset at or past from, in offset order, until fn returns
// false or an error.
func (s *Store) eachSegment(ctx context.Context, p int, q *queueEntry, from int64, fn func(segment) (bool, error)) error {
	visit := func(segs []segment) (bool, error) {
		j := sort.Search(len(segs), func(j int) bool { return segs[j].First+segs[j].Count > from })
		for ; j < len(segs); j++ {
			if more, err := fn(segs[j]); err != nil || !more {
				return false, err
			}
		}
		return true, nil
	}
	i := sort.Search(len(q.Index), func(i int) bool { return q.Index[i].First+q.Index[i].Count > from })
	for ; i < len(q.Index); i++ {
		segs, err := s.loadIndex(ctx, p, q.Index[i])
		if err != nil {
			return err
		}
		if more, err := visit(segs); err != nil || !more {
			return err
		}
	}
	_, err := visit(q.Segments)
	return err
}

// indexWork is an index entry while compactQueue plans: segs is nil for
// an existing file not loaded (yet).
type indexWork struct {
	ref   indexRef
	segs  []segment
	fresh bool // to be written by this commit
}

// levelFor is the level of a first index file of n segments: 0 for a
// tail of fanout segments; higher for the long tail of a manifest written
// before the index, so the merge rule treats it as the merge it is worth.
func levelFor(n, fanout int) int {
	l, size := 0, fanout*fanout
	for l < queueMaxLevel && n >= size {
		l++
		size *= fanout
	}
	return l
}

// compactQueue runs under the commit lock on the manifest being
// committed: once partition p's tail holds fanout segments it becomes an
// index file of level 0, and while the newest fanout index files are of
// one level below queueMaxLevel they merge into one of the next level.
// Only the files that end up named are written (write: into data/, synced;
// the commit's directory sync and manifest follow). The segments keep their
// offsets and commit times; no data file changes.
func (s *Store) compactQueue(ctx context.Context, p int, q *queueEntry, prefix string, write func(name string, ix *indexFile) (int64, string, error)) error {
	fan := s.fanout()
	if len(q.Segments) < fan {
		return nil
	}
	work := make([]indexWork, 0, len(q.Index)+1)
	for _, r := range q.Index {
		work = append(work, indexWork{ref: r})
	}
	merge := func() {
		for {
			n := len(work)
			if n < fan {
				return
			}
			l := work[n-1].ref.Level
			if l >= queueMaxLevel {
				return
			}
			same := true
			for _, w := range work[n-fan:] {
				same = same && w.ref.Level == l
			}
			if !same {
				return
			}
			var segs []segment
			var bad error
			for _, w := range work[n-fan:] {
				if w.segs == nil {
					var err error
					if w.segs, err = s.loadIndex(ctx, p, w.ref); err != nil {
						bad = err
						break
					}
				}
				segs = append(segs, w.segs...)
			}
			if bad != nil {
				// A damaged input: no merge (the records commit all the same;
				// reads of its range fail, Verify reports it).
				s.opts.Logger.Warn("local store: queue index merge skipped: an input cannot be read", "partition", p, "err", bad)
				return
			}
			work = append(work[:n-fan], newIndexWork(l+1, segs))
		}
	}
	tail := append([]segment(nil), q.Segments...)
	if len(q.Index) == 0 && len(tail) >= fan*fan {
		// A format-1 store's long tail: one file of the level its length
		// is worth (nothing before it to strand).
		work = append(work, newIndexWork(levelFor(len(tail), fan), tail))
		tail = nil
		merge()
	} else {
		// A group commit adds a segment per enqueuing member: the tail is
		// cut into level-0 files of exactly fan segments (merging after
		// each), the rest (< fan) stays the tail.
		for len(tail) >= fan {
			work = append(work, newIndexWork(0, tail[:fan:fan]))
			tail = tail[fan:]
			merge()
		}
	}
	refs := make([]indexRef, len(work))
	k := 0
	for i, w := range work {
		if w.fresh {
			name := fmt.Sprintf("%sq%05d-i%d.qidx", prefix, p, k)
			k++
			size, crc, err := write(name, &indexFile{Format: 1, Partition: p, Level: w.ref.Level, Segments: w.segs})
			if err != nil {
				return fmt.Errorf("queue partition %d: index file %s: %w", p, name, err)
			}
			w.ref.File, w.ref.Bytes, w.ref.CRC32C = name, size, crc
			s.index.put(name, w.segs)
		}
		refs[i] = w.ref
	}
	q.Index, q.Segments = refs, tail
	return nil
}

func newIndexWork(level int, segs []segment) indexWork {
	var count int64
	for _, sg := range segs {
		count += sg.Count
	}
	return indexWork{ref: indexRef{Level: level, First: segs[0].First, Count: count, Segments: len(segs)}, segs: segs, fresh: true}
}

// writeIndexFile writes an index file into dir and syncs it; it returns
// its size and checksum.
func writeIndexFile(fs FS, path string, ix *indexFile) (int64, string, error) {
	b, err := json.Marshal(ix)
	if err != nil {
		return 0, "", err
	}
	raw, err := fs.Create(path)
	if err != nil {
		return 0, "", err
	}
	f := &crcFile{File: raw}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return 0, "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, "", err
	}
	if err := f.Close(); err != nil {
		return 0, "", err
	}
	return int64(len(b)), f.sum(), nil
}

// indexedFiles adds to keep the segment files that the index files of mans
// name (each index file read once). An index file it cannot read is an
// error: the caller must then remove no data file.
func (s *Store) indexedFiles(ctx context.Context, mans []*manifest, keep map[string]bool) error {
	seen := map[string]bool{}
	for _, m := range mans {
		for p, q := range m.Queue {
			for _, r := range q.Index {
				if seen[r.File] {
					continue
				}
				seen[r.File] = true
				segs, err := s.loadIndex(ctx, p, r)
				if err != nil {
					return fmt.Errorf("local store %s: queue partition %d: %w", s.dir, p, err)
				}
				for _, sg := range segs {
					keep[sg.File] = true
				}
			}
		}
	}
	return nil
}

// readIndexRaw reads an index file's segments without the checksum (Verify
// lists them; the index file's own check reports its damage).
func readIndexRaw(dir string, p int, r indexRef) []segment {
	b, err := os.ReadFile(filepath.Join(dir, "data", r.File))
	if err != nil {
		return nil
	}
	segs, _ := decodeIndex(b, p, r)
	return segs
}
