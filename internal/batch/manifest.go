package batch

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// FormatVersion is the manifest format this code writes and reads.
const FormatVersion = 1

// Kinds of batch.
const (
	// KindSnapshot replaces the partition's whole contents.
	KindSnapshot = "snapshot"
	// KindDelta applies puts and deletes on top of what the replica has.
	KindDelta = "delta"
)

// MetaKey is the reserved key every batch's SST holds; its value is the batch
// id. It sorts before every 16-byte page key (page keys are exactly 16 bytes,
// this is 1 byte), so a replica can read the last applied batch from its own
// database, ingested atomically with the data.
var MetaKey = []byte{0x00}

// File is one SST file of a batch.
type File struct {
	Name   string `json:"name"`   // base name, e.g. "000001.sst"
	Size   int64  `json:"size"`   // bytes
	SHA256 string `json:"sha256"` // 64 lower-case hex characters
	Keys   int64  `json:"keys"`
}

// Manifest describes one batch.
type Manifest struct {
	Format      int    `json:"format"`
	ID          string `json:"id"`
	Partition   int    `json:"partition"`
	Partitions  int    `json:"partitions"`
	Kind        string `json:"kind"`
	Files       []File `json:"files"`
	Keys        int64  `json:"keys"`    // puts + deletes, excluding MetaKey
	Deletes     int64  `json:"deletes"` // tombstones among Keys
	Smallest    string `json:"smallest"`
	Largest     string `json:"largest"`
	Source      string `json:"source"` // free text for people, e.g. "pillar export <root>"; programs read the typed fields below
	CreatedAtMS int64  `json:"created_at_ms"`

	// QueueFirst and QueueEnd are, for a delta that delivers every record
	// of a range of the partition's export queue (Lorry's ordinary batches),
	// the half-open range [QueueFirst, QueueEnd). Both zero: not from the
	// queue, or only some records of a range (Lorry's fresh and replay
	// lanes, described in Source).
	QueueFirst int64 `json:"queue_first,omitempty"`
	QueueEnd   int64 `json:"queue_end,omitempty"`
	// Supersedes is, for a snapshot from a bulk export, the partition's
	// export-queue end when the export was taken: the snapshot already
	// holds the effect of every queue record before it. The control plane
	// registers the snapshot only after deltas covering the queue up to
	// Supersedes are registered (see cobbled/control). Zero: nothing.
	Supersedes int64 `json:"supersedes,omitempty"`
	// Publication is the serving publication the batch belongs to
	// (pillar.EmbedVersionID(chunk version, model), e.g.
	// "recursive-s512-o64-54906c2d/hash-d384-ea4b8133"): a replica applies
	// the batch to that publication's database only. "" is the legacy
	// unnamed publication (batches written before publications existed),
	// which behaves as one ordinary publication named "".
	Publication string `json:"publication,omitempty"`

	// Seq and Parent are assigned by the control plane at registration:
	// the batch's position in its partition's log and the id of the batch
	// before it ("" for the first). Producers leave them zero; the control
	// plane ignores them on registration, fills them in ListBatches, and
	// writes them into the stored manifest.json, so that the log can be
	// rebuilt from the object store (`pillar control rebuild`).
	Seq    int64  `json:"seq,omitempty"`
	Parent string `json:"parent,omitempty"`
}

// Canonical returns a copy of m without the fields the control plane
// assigns (Seq, Parent): what a producer wrote, the identity of a batch for
// idempotent registration.
func (m *Manifest) Canonical() *Manifest {
	c := *m
	c.Seq, c.Parent = 0, ""
	return &c
}

var idRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// ValidID reports whether id may name a batch: lower-case letters, digits,
// '.', '_' and '-', at most 128 characters, not starting with punctuation.
func ValidID(id string) bool { return idRE.MatchString(id) }

// ValidPublication checks a publication id: "" (the legacy publication) or
// at most 256 printable ASCII characters without spaces or backslashes.
func ValidPublication(p string) error {
	if len(p) > 256 {
		return fmt.Errorf("publication %.40q…: longer than 256 characters", p)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c > '~' || c == '\\' {
			return fmt.Errorf("publication %q: character %q at %d is not allowed", p, c, i)
		}
	}
	return nil
}

// Prefix returns the object-store prefix of a batch, ending in "/".
func Prefix(partition int, id string) string {
	return fmt.Sprintf("batches/p%05d/%s/", partition, id)
}

// ManifestKey returns the object key of a batch's manifest.
func ManifestKey(partition int, id string) string { return Prefix(partition, id) + "manifest.json" }

// validFileName checks a batch file's name: a plain base name under the
// batch's prefix, as the node stages it in a directory of its own. "." and
// "..", path separators, NUL and other control characters, and the
// manifest's own name are refused; the error quotes the name.
func validFileName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty file name")
	case name == "." || name == "..":
		return fmt.Errorf("file name %q is a directory reference", name)
	case strings.ContainsAny(name, "/\\"):
		return fmt.Errorf("file name %q has a path separator", name)
	case name == "manifest.json":
		return fmt.Errorf("file name %q is the manifest's own", name)
	case len(name) > 255:
		return fmt.Errorf("file name %.40q… is longer than 255 bytes", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < ' ' || c == 0x7f {
			return fmt.Errorf("file name %q has control character %q at %d", name, c, i)
		}
	}
	return nil
}

// Validate checks the manifest on its own. Errors name the batch and field.
func (m *Manifest) Validate() error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("batch %q: %s", m.ID, fmt.Sprintf(format, a...))
	}
	if m.Format != FormatVersion {
		return fail("format %d, this binary reads %d", m.Format, FormatVersion)
	}
	if !ValidID(m.ID) {
		return fail("invalid id")
	}
	if m.Partitions <= 0 {
		return fail("partitions %d must be positive", m.Partitions)
	}
	if m.Partition < 0 || m.Partition >= m.Partitions {
		return fail("partition %d out of range [0,%d)", m.Partition, m.Partitions)
	}
	if m.Kind != KindSnapshot && m.Kind != KindDelta {
		return fail("kind %q is neither %q nor %q", m.Kind, KindSnapshot, KindDelta)
	}
	if len(m.Files) == 0 {
		return fail("no files")
	}
	seen := map[string]bool{}
	var keys int64
	for i, f := range m.Files {
		if err := validFileName(f.Name); err != nil {
			return fail("file %d: %v", i, err)
		}
		if seen[f.Name] {
			return fail("file %q listed twice", f.Name)
		}
		seen[f.Name] = true
		if f.Size <= 0 {
			return fail("file %q: size %d", f.Name, f.Size)
		}
		if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != 32 {
			return fail("file %q: sha256 %q is not 64 hex characters", f.Name, f.SHA256)
		}
		keys += f.Keys
	}
	if m.Keys < 0 || m.Deletes < 0 || m.Deletes > m.Keys {
		return fail("keys %d / deletes %d inconsistent", m.Keys, m.Deletes)
	}
	if m.QueueFirst < 0 || m.QueueEnd < m.QueueFirst {
		return fail("queue range [%d,%d) is not a range", m.QueueFirst, m.QueueEnd)
	}
	if m.Kind == KindSnapshot && (m.QueueFirst != 0 || m.QueueEnd != 0) {
		return fail("a snapshot carries no queue range (queue_first/queue_end); it supersedes one")
	}
	if m.Supersedes < 0 {
		return fail("supersedes %d is negative", m.Supersedes)
	}
	if m.Kind == KindDelta && m.Supersedes != 0 {
		return fail("a delta does not supersede queue records; use queue_first/queue_end")
	}
	if m.Seq < 0 || (m.Seq == 0 && m.Parent != "") || (m.Parent != "" && !ValidID(m.Parent)) {
		return fail("seq %d / parent %q inconsistent", m.Seq, m.Parent)
	}
	if err := ValidPublication(m.Publication); err != nil {
		return fail("%v", err)
	}
	if m.Smallest > m.Largest {
		return fail("smallest key %s > largest %s", m.Smallest, m.Largest)
	}
	return nil
}

// Encode returns the manifest as indented JSON.
func (m *Manifest) Encode() ([]byte, error) { return json.MarshalIndent(m, "", "  ") }

// Decode parses and validates a manifest.
func Decode(b []byte) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("batch manifest: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}
