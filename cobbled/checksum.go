package cobbled

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/linxGnu/grocksdb"

	"github.com/pillarkit/pillar/internal/batch"
)

// Checksum is the digest of one replica's whole key range in one
// publication: every key and value of the partition's database, in key
// order, read from one RocksDB snapshot. Two replicas that applied the same
// batches have equal checksums; a replica that skipped, repeated or half
// applied a batch does not. The batch meta key (batch.MetaKey) is left out:
// it names the last batch applied, which AppliedSeq already says.
type Checksum struct {
	Partition   int    `json:"partition"`
	Publication string `json:"publication"` // resolved: "" is the legacy one
	AppliedSeq  int64  `json:"applied_seq"` // how far the replica was in its batch log
	Keys        int64  `json:"keys"`
	// SHA256 is over, per key in order, the key's and the value's lengths
	// (uvarint) and bytes.
	SHA256 string `json:"sha256"`
	// First and Last are the smallest and largest keys, hex ("" when empty).
	First string `json:"first,omitempty"`
	Last  string `json:"last,omitempty"`
}

// Checksum digests partition's database of publication version ("" = the
// live one as the node last saw routing). The applied seq is read under the
// same lock as the snapshot, so the pair is consistent. It reads the whole
// partition (it is for convergence checks and operators, not the read
// path), bypassing the block cache, and holds off a snapshot swap of the
// partition until it is done.
func (n *Node) Checksum(partition int, version string) (Checksum, error) {
	p := n.part(partition)
	if p == nil {
		return Checksum{}, fmt.Errorf("cobbled: partition %d: %w", partition, ErrNotServed)
	}
	version = n.resolve(version)
	p.mu.RLock()
	db, _ := p.db(version)
	if db == nil {
		p.mu.RUnlock()
		return Checksum{}, fmt.Errorf("cobbled: partition %d: publication %q: %w", partition, version, ErrNotServed)
	}
	// The read lock is held for the whole scan: a snapshot swap closes the
	// database it replaces, and waits for this scan to end.
	defer p.mu.RUnlock()
	snap := db.NewSnapshot()
	seq := p.applied.Load()
	defer db.ReleaseSnapshot(snap)

	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	ro.SetSnapshot(snap)
	ro.SetFillCache(false)
	it := db.NewIterator(ro)
	defer it.Close()
	h := sha256.New()
	cs := Checksum{Partition: partition, Publication: version, AppliedSeq: seq}
	var lenbuf [2 * binary.MaxVarintLen64]byte
	var last []byte
	for it.SeekToFirst(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		kb, vb := k.Data(), v.Data()
		if !bytes.Equal(kb, batch.MetaKey) {
			n := binary.PutUvarint(lenbuf[:], uint64(len(kb)))
			n += binary.PutUvarint(lenbuf[n:], uint64(len(vb)))
			h.Write(lenbuf[:n])
			h.Write(kb)
			h.Write(vb)
			if cs.Keys == 0 {
				cs.First = hex.EncodeToString(kb)
			}
			cs.Keys++
			last = append(last[:0], kb...)
		}
		k.Free()
		v.Free()
	}
	if err := it.Err(); err != nil {
		return Checksum{}, fmt.Errorf("cobbled: partition %d: publication %q: checksum: %w", partition, version, err)
	}
	if cs.Keys > 0 {
		cs.Last = hex.EncodeToString(last)
	}
	cs.SHA256 = hex.EncodeToString(h.Sum(nil))
	return cs, nil
}

// ChecksumHandler serves GET /checksum?partition=P[&version=V]: the
// Checksum of that replica as JSON; without partition, of every partition
// the node holds (a JSON array). A partition or publication the node does
// not hold is 404 naming it.
func (n *Node) ChecksumHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		version := r.URL.Query().Get("version")
		var parts []int
		if s := r.URL.Query().Get("partition"); s != "" {
			p, err := strconv.Atoi(s)
			if err != nil || p < 0 || p >= n.p {
				http.Error(w, fmt.Sprintf("partition %q: want 0..%d", s, n.p-1), http.StatusBadRequest)
				return
			}
			parts = []int{p}
		} else {
			parts = n.Held()
		}
		var out []Checksum
		for _, p := range parts {
			cs, err := n.Checksum(p, version)
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			out = append(out, cs)
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if r.URL.Query().Get("partition") != "" {
			_ = enc.Encode(out[0])
			return
		}
		_ = enc.Encode(out)
	})
}
