package cobbled

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// DirInfo describes a node's data directory as found on disk.
type DirInfo struct {
	Dir        string        `json:"dir"`
	Partitions int           `json:"partitions"`
	Replicas   []ReplicaInfo `json:"replicas"`
}

// ReplicaInfo is one partition replica's recorded state.
type ReplicaInfo struct {
	Partition  int    `json:"partition"`
	AppliedSeq int64  `json:"applied_seq"`
	Batch      string `json:"batch"` // id of the last batch applied at or before AppliedSeq
	// Generation is the legacy "" publication's database directory ("" if
	// it has none); Publications lists every publication's.
	Generation   string            `json:"generation"`
	Bytes        int64             `json:"bytes"` // files of every publication's database
	Publications []PublicationInfo `json:"publications"`
	Retired      []string          `json:"retired,omitempty"`   // publications dropped here
	Leftovers    []string          `json:"leftovers,omitempty"` // removed on next open
}

// PublicationInfo is one publication's database on a replica.
type PublicationInfo struct {
	ID         string `json:"id"` // "" = the legacy unnamed publication
	Generation string `json:"generation"`
	Batch      string `json:"batch"` // last batch ingested into it
	Bytes      int64  `json:"bytes"`
	// RebuildUntil > 0: being rebuilt after corruption (not serving).
	RebuildUntil int64 `json:"rebuild_until,omitempty"`
}

// InspectDir reads a data directory's recorded state without opening any
// database, so it is safe while a node runs on it.
func InspectDir(dir string) (*DirInfo, error) {
	info := &DirInfo{Dir: dir}
	b, err := os.ReadFile(filepath.Join(dir, "node.json"))
	if err != nil {
		return nil, fmt.Errorf("cobbled: inspect %s: %w", dir, err)
	}
	var meta nodeMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("cobbled: inspect %s: node.json: %w", dir, err)
	}
	info.Partitions = meta.Partitions
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cobbled: inspect %s: %w", dir, err)
	}
	for _, e := range ents {
		id, ok := parsePartDir(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		pdir := filepath.Join(dir, e.Name())
		r := ReplicaInfo{Partition: id}
		st, err := readState(pdir)
		if err != nil {
			return nil, fmt.Errorf("cobbled: inspect partition %d: %w", id, err)
		}
		r.AppliedSeq, r.Batch, r.Retired = st.Seq, st.Batch, st.Retired
		keep := map[string]bool{stateFile: true}
		for pub, ps := range st.Pubs {
			keep[ps.DB] = true
			pi := PublicationInfo{ID: pub, Generation: ps.DB, Batch: ps.Batch, Bytes: dirBytes(filepath.Join(pdir, ps.DB)), RebuildUntil: ps.RebuildUntil}
			r.Bytes += pi.Bytes
			r.Publications = append(r.Publications, pi)
			if pub == "" {
				r.Generation = ps.DB
			}
		}
		sort.Slice(r.Publications, func(i, j int) bool { return r.Publications[i].ID < r.Publications[j].ID })
		subs, _ := os.ReadDir(pdir)
		for _, s := range subs {
			if !keep[s.Name()] {
				r.Leftovers = append(r.Leftovers, s.Name())
			}
		}
		info.Replicas = append(info.Replicas, r)
	}
	sort.Slice(info.Replicas, func(i, j int) bool { return info.Replicas[i].Partition < info.Replicas[j].Partition })
	return info, nil
}
