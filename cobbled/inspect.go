package cobbled

import (
	"encoding/json"
	"fmt"
	"io/fs"
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
	Partition  int      `json:"partition"`
	AppliedSeq int64    `json:"applied_seq"`
	Batch      string   `json:"batch"`               // id of the batch at AppliedSeq
	Generation string   `json:"generation"`          // live database directory
	Bytes      int64    `json:"bytes"`               // files of the live generation
	Leftovers  []string `json:"leftovers,omitempty"` // removed on next open
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
		var st partState
		b, err := os.ReadFile(filepath.Join(pdir, stateFile))
		if err != nil {
			return nil, fmt.Errorf("cobbled: inspect partition %d: %w", id, err)
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, fmt.Errorf("cobbled: inspect partition %d: %s: %w", id, stateFile, err)
		}
		r.AppliedSeq, r.Batch, r.Generation = st.Seq, st.Batch, st.DB
		subs, _ := os.ReadDir(pdir)
		for _, s := range subs {
			if s.Name() != stateFile && s.Name() != st.DB {
				r.Leftovers = append(r.Leftovers, s.Name())
			}
		}
		filepath.WalkDir(filepath.Join(pdir, st.DB), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if fi, err := d.Info(); err == nil {
					r.Bytes += fi.Size()
				}
			}
			return nil
		})
		info.Replicas = append(info.Replicas, r)
	}
	sort.Slice(info.Replicas, func(i, j int) bool { return info.Replicas[i].Partition < info.Replicas[j].Partition })
	return info, nil
}
