package local

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// formatVersion is the format of STORE, and of a manifest whose queue
// names every segment itself.
const formatVersion = 1

// formatQueueIndex is the format of a manifest that names older queue
// segments through index files (queueEntry.Index). A binary that reads only
// formatVersion refuses it (pillar.ErrNewerFormat) rather than see a queue
// without its older records. The newest manifest format this code reads.
const formatQueueIndex = 2

// storeFile is the content of STORE.
type storeFile struct {
	Format     int       `json:"format"`
	Partitions int       `json:"partitions"`
	Created    time.Time `json:"created"`
}

type fileEntry struct {
	Name  string `json:"name"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
	// CRC32C is the file's checksum (8 hex digits, Castagnoli); "" for a
	// file written before checksums (the next commit adds it).
	CRC32C string `json:"crc32c,omitempty"`
	// Blocks names the file's block sums (checksum.go); nil for a file
	// written before them, which a read verifies whole.
	Blocks *blockSums `json:"blocks,omitempty"`
}

// blockSums names the sidecar in data/ that holds a table file's block
// checksums: the CRC32C of each consecutive Size bytes of the file (the
// last block shorter), 4 bytes big-endian each, nothing else. Its own
// CRC32C is recorded here, so the manifest vouches for it as it does for
// the data file.
type blockSums struct {
	File   string `json:"file"`
	Size   int64  `json:"size"` // bytes per block
	CRC32C string `json:"crc32c"`
}

type tableEntry struct {
	RowType  string      `json:"row_type"` // Go type name of the rows, for a clear error on mismatch
	Schema   string      `json:"schema"`
	SortedBy []string    `json:"sorted_by,omitempty"`
	Files    []fileEntry `json:"files"`
	Gen      int64       `json:"gen"` // generation that last changed the table
}

func (t *tableEntry) rows() (n int64) {
	for _, f := range t.Files {
		n += f.Rows
	}
	return n
}

func (t *tableEntry) bytes() (n int64) {
	for _, f := range t.Files {
		n += f.Bytes
	}
	return n
}

type attrEntry struct {
	Value json.RawMessage `json:"value"`
	Gen   int64           `json:"gen"`
}

// segment is a run of export-queue records of one partition in one file:
// offsets [First, First+Count).
//
// Offsets and commit times are not trusted from the file: a segment file is
// written before its commit takes the lock (so the slow part of a commit
// does not serialize writers), when neither is known yet. Readers set
// Offset = First + row and CommittedAt = CommittedAtMS.
type segment struct {
	File          string `json:"file"`
	First         int64  `json:"first"`
	Count         int64  `json:"count"`
	Bytes         int64  `json:"bytes"`
	CommittedAtMS int64  `json:"committed_at_ms,omitempty"`
	CRC32C        string `json:"crc32c,omitempty"` // as fileEntry.CRC32C
	// HeadsCRC32C is the CRC32C of the file's bytes outside its value
	// column chunks and FooterCRC32C that of its Parquet footer, which a
	// heads read checks instead of the whole file (queueheads.go); "" in
	// segments written before.
	HeadsCRC32C  string `json:"heads_crc32c,omitempty"`
	FooterCRC32C string `json:"footer_crc32c,omitempty"`
}

// queueEntry is a partition's export queue: the segments of Index (in
// offset order), then Segments (the tail, newest last). See "Queue index"
// in doc.go.
type queueEntry struct {
	Index    []indexRef `json:"index,omitempty"`
	Segments []segment  `json:"segments"`
}

// indexRef names an immutable index file in data/ that lists Segments
// consecutive segments, records [First, First+Count).
type indexRef struct {
	File     string `json:"file"`
	Level    int    `json:"level"`
	First    int64  `json:"first"`
	Count    int64  `json:"count"`
	Segments int    `json:"segments"`
	Bytes    int64  `json:"bytes"`  // the index file's size
	CRC32C   string `json:"crc32c"` // the index file's checksum
}

func (q *queueEntry) end() int64 {
	if q == nil {
		return 0
	}
	if len(q.Segments) > 0 {
		s := q.Segments[len(q.Segments)-1]
		return s.First + s.Count
	}
	if len(q.Index) > 0 {
		r := q.Index[len(q.Index)-1]
		return r.First + r.Count
	}
	return 0
}

type manifest struct {
	Format      int                    `json:"format"`
	Generation  int64                  `json:"generation"`
	Partitions  int                    `json:"partitions"`
	CommittedAt time.Time              `json:"committed_at"`
	Tables      map[string]*tableEntry `json:"tables"`
	Attrs       map[string]attrEntry   `json:"attrs"`
	Queue       map[int]*queueEntry    `json:"queue"`
	Consumed    map[string]int64       `json:"consumed"` // id → generation that marked it
}

func newManifest(partitions int) *manifest {
	return &manifest{
		Format:     formatVersion,
		Partitions: partitions,
		Tables:     map[string]*tableEntry{},
		Attrs:      map[string]attrEntry{},
		Queue:      map[int]*queueEntry{},
		Consumed:   map[string]int64{},
	}
}

// clone returns a deep copy that a commit may modify.
func (m *manifest) clone() *manifest {
	c := *m
	c.Tables = make(map[string]*tableEntry, len(m.Tables))
	for k, v := range m.Tables {
		t := *v
		t.Files = append([]fileEntry(nil), v.Files...)
		t.SortedBy = append([]string(nil), v.SortedBy...)
		c.Tables[k] = &t
	}
	c.Attrs = make(map[string]attrEntry, len(m.Attrs))
	for k, v := range m.Attrs {
		c.Attrs[k] = v
	}
	c.Queue = make(map[int]*queueEntry, len(m.Queue))
	for k, v := range m.Queue {
		q := &queueEntry{Index: append([]indexRef(nil), v.Index...), Segments: append([]segment(nil), v.Segments...)}
		c.Queue[k] = q
	}
	c.Consumed = make(map[string]int64, len(m.Consumed))
	for k, v := range m.Consumed {
		c.Consumed[k] = v
	}
	return &c
}

// files returns every data file the manifest names itself: table files,
// index files and tail segments (not the segments its index files name;
// Store.allFiles adds those).
func (m *manifest) files() []string {
	var out []string
	for _, t := range m.Tables {
		for _, f := range t.Files {
			out = append(out, f.Name)
			if f.Blocks != nil {
				out = append(out, f.Blocks.File)
			}
		}
	}
	for _, q := range m.Queue {
		for _, r := range q.Index {
			out = append(out, r.File)
		}
		for _, s := range q.Segments {
			out = append(out, s.File)
		}
	}
	sort.Strings(out)
	return out
}

// hasIndex reports whether a queue of m names segments through an index.
func (m *manifest) hasIndex() bool {
	for _, q := range m.Queue {
		if len(q.Index) > 0 {
			return true
		}
	}
	return false
}

func manifestName(gen int64) string { return fmt.Sprintf("m-%012d.json", gen) }

func decodeManifest(b []byte, name string) (*manifest, error) {
	m := newManifest(0)
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", name, err)
	}
	if m.Format > formatQueueIndex {
		return nil, fmt.Errorf("manifest %s: format %d: %w", name, m.Format, errNewer)
	}
	if m.Tables == nil {
		m.Tables = map[string]*tableEntry{}
	}
	if m.Attrs == nil {
		m.Attrs = map[string]attrEntry{}
	}
	if m.Queue == nil {
		m.Queue = map[int]*queueEntry{}
	}
	if m.Consumed == nil {
		m.Consumed = map[string]int64{}
	}
	return m, nil
}
