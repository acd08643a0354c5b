package pillar

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Version kinds.
const (
	KindChunks     = "chunks"
	KindEmbeddings = "embeddings"
)

// Version states. A version moves building → complete → published →
// (complete again when another pair is published) and may be retired.
const (
	StateBuilding  = "building"
	StateComplete  = "complete"
	StatePublished = "published"
	StateRetired   = "retired"
)

// AttrVersionPrefix prefixes the registry attributes: one attribute per
// version ("versions/<id>"), so backfills of different versions never
// conflict with each other.
const AttrVersionPrefix = "versions/"

// Version is one entry of the version registry.
type Version struct {
	// ID is the chunker version id (kind chunks) or "<cv>/<model id>" (kind
	// embeddings).
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Spec  string `json:"spec"`  // the spec it was built from, e.g. "recursive:size=512,overlap=64"
	Table string `json:"table"` // chunks/<cv> or embeddings/<cv>/<model>
	// ChunkVersion and Model are set for embedding versions.
	ChunkVersion string `json:"chunk_version,omitempty"`
	Model        string `json:"model,omitempty"`
	Dims         int    `json:"dims,omitempty"`
	State        string `json:"state"`
	Pages        int64  `json:"pages"`       // pages with rows in this version
	Rows         int64  `json:"rows"`        // chunks or vectors
	EmptyPages   int64  `json:"empty_pages"` // pages with zero chunks
	// SourceGeneration is the store generation whose docs (or chunks) the
	// version was last brought up to date with.
	SourceGeneration int64     `json:"source_generation"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
	CompletedAt      time.Time `json:"completed_at,omitzero"`
	PublishedAt      time.Time `json:"published_at,omitzero"`
}

// EmbedVersionID is the registry id of an embedding version.
func EmbedVersionID(cv, model string) string { return cv + "/" + model }

// LoadVersion reads one registry entry; ErrNotFound if absent.
func LoadVersion(ctx context.Context, sn Snapshot, id string) (*Version, error) {
	var v Version
	if err := sn.Attr(ctx, AttrVersionPrefix+id, &v); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("version %q: %w", id, ErrNotFound)
		}
		return nil, err
	}
	return &v, nil
}

// SaveVersion writes one registry entry inside tx.
func SaveVersion(ctx context.Context, tx Tx, v *Version) error {
	v.UpdatedAt = time.Now().UTC()
	return tx.SetAttr(ctx, AttrVersionPrefix+v.ID, v)
}

// Versions lists the registry, chunk versions first, then by creation.
func Versions(ctx context.Context, sn Snapshot) ([]*Version, error) {
	attrs, err := sn.Attrs(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Version
	for name := range attrs {
		if !strings.HasPrefix(name, AttrVersionPrefix) {
			continue
		}
		v, err := LoadVersion(ctx, sn, strings.TrimPrefix(name, AttrVersionPrefix))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind == KindChunks
		}
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// LoadPublished returns the published pair; ErrNotFound if none.
func LoadPublished(ctx context.Context, sn Snapshot) (*Published, error) {
	var p Published
	if err := sn.Attr(ctx, AttrPublished, &p); err != nil {
		return nil, err
	}
	return &p, nil
}
