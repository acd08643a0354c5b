package ytstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.ytsaurus.tech/yt/go/ypath"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/internal/writeset"
)

// formatVersion is the layout version written to @pillar_format.
const formatVersion = 1

// Root attributes and the names of the store's own nodes (see doc.go).
const (
	attrFormat     = "pillar_format"
	attrPartitions = "pillar_partitions"
	attrCreated    = "pillar_created"
	attrRowType    = "pillar_row_type"
	attrGeneration = "pillar_generation"

	internalDir = "_pillar"
)

// Options configure a YTsaurus store. The zero value is ready to use with
// Open; Create needs Partitions.
type Options struct {
	// Partitions is the partition count; Create requires it, Open checks it
	// when non-zero (ErrPartitions on mismatch). The default value (0) means
	// "whatever the store has" for Open.
	Partitions int
	// Logger receives commit and retry logs. The default value discards.
	Logger *slog.Logger
	// LockTimeout bounds the wait for the commit lock (another commit in
	// progress). The default value is 60 seconds.
	LockTimeout time.Duration
	// PollInterval is how often a pending lock and a running merge
	// operation are polled. The default value is 200 ms.
	PollInterval time.Duration
	// SnapshotAttempts is how many times Snapshot retries when a commit
	// lands while it pins the tables. The default value is 8.
	SnapshotAttempts int
	// TxTimeout is the timeout of the store's master transactions; the SDK
	// pings them while they are open. The default value (0) is the
	// cluster's default.
	TxTimeout time.Duration
	// Pool is the scheduler pool of the merge operations a commit may run
	// (several writers of one table, appends). The default value is "".
	Pool string
}

func (o *Options) ensureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = 60 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 200 * time.Millisecond
	}
	if o.SnapshotAttempts <= 0 {
		o.SnapshotAttempts = 8
	}
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.Partitions < 0 {
		return fmt.Errorf("ytstore: partitions %d must not be negative", o.Partitions)
	}
	if o.LockTimeout < 0 || o.PollInterval < 0 || o.TxTimeout < 0 || o.SnapshotAttempts < 0 {
		return fmt.Errorf("ytstore: durations and attempts must not be negative")
	}
	if o.PollInterval > 0 && o.LockTimeout > 0 && o.PollInterval > o.LockTimeout {
		return fmt.Errorf("ytstore: poll interval %s exceeds the lock timeout %s", o.PollInterval, o.LockTimeout)
	}
	return nil
}

// Stats counts what a Store did since Open.
type Stats struct {
	Snapshots       int64 // snapshots and transaction read views taken
	SnapshotRetries int64 // commits landed while pinning: started over
	Commits         int64 // transactions committed
	Conflicts       int64 // commits refused with ErrConflict
	Merges          int64 // merge operations run by commits
	LockWaits       int64 // commits that found the commit lock taken and waited
}

type counters struct {
	snapshots, snapshotRetries, commits, conflicts, merges, lockWaits atomic.Int64
}

// Store is a Pillar store in a Cypress directory.
type Store struct {
	yc    yt.Client
	root  ypath.Path
	opts  Options
	meta  rootAttrs
	stats counters
	// queueSchemaOK holds the partitions whose queue table has every
	// ExportRecord column (see ensureQueueSchema).
	queueSchemaOK sync.Map
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Snapshots: s.stats.snapshots.Load(), SnapshotRetries: s.stats.snapshotRetries.Load(),
		Commits: s.stats.commits.Load(), Conflicts: s.stats.conflicts.Load(),
		Merges: s.stats.merges.Load(), LockWaits: s.stats.lockWaits.Load(),
	}
}

var _ pillar.Store = (*Store)(nil)

type rootAttrs struct {
	Format     int    `yson:"pillar_format"`
	Partitions int    `yson:"pillar_partitions"`
	Created    string `yson:"pillar_created"`
}

// RootFromURL turns a store location "yt://pillar/prod" (or
// "yt:////home/pillar/prod") into the Cypress path "//pillar/prod".
func RootFromURL(loc string) (ypath.Path, error) {
	rest, ok := strings.CutPrefix(loc, "yt://")
	if !ok {
		return "", fmt.Errorf("ytstore: location %q does not start with yt://", loc)
	}
	rest = strings.TrimLeft(rest, "/")
	rest = strings.TrimRight(rest, "/")
	if rest == "" {
		return "", fmt.Errorf("ytstore: location %q names no Cypress directory (want yt://<path>, e.g. yt://home/pillar/prod)", loc)
	}
	for _, seg := range strings.Split(rest, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("ytstore: location %q: empty, '.' or '..' path segment", loc)
		}
	}
	return ypath.Path("//" + rest), nil
}

// Create makes a new, empty store at root (created with its parents if
// missing; it must not hold a store already). opts.Partitions must be
// positive. Everything is created in one transaction.
func Create(ctx context.Context, yc yt.Client, root ypath.Path, opts *Options) (*Store, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.ensureDefaults()
	if o.Partitions <= 0 {
		return nil, fmt.Errorf("ytstore %s: partitions %d must be positive", root, o.Partitions)
	}
	if !strings.HasPrefix(string(root), "//") {
		return nil, fmt.Errorf("ytstore %s: root is not an absolute Cypress path", root)
	}
	fail := func(err error) (*Store, error) { return nil, fmt.Errorf("ytstore %s: create: %w", root, err) }
	var ra rootAttrs
	err := yc.GetNode(ctx, root.Attrs(), &ra, &yt.GetNodeOptions{Attributes: []string{attrFormat}})
	if err == nil && ra.Format != 0 {
		return fail(fmt.Errorf("a store already exists there (format %d)", ra.Format))
	}
	tx, err := yc.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Abort()
	if _, err := tx.CreateNode(ctx, root, yt.NodeMap, &yt.CreateNodeOptions{Recursive: true, IgnoreExisting: true}); err != nil {
		return fail(err)
	}
	in := root.Child(internalDir)
	steps := []struct {
		path ypath.Path
		typ  yt.NodeType
		attr map[string]any
	}{
		{in, yt.NodeMap, nil},
		{in.Child("generation"), yt.NodeDocument, map[string]any{"value": int64(0)}},
		{in.Child("attrs"), yt.NodeMap, nil},
		{in.Child("consumed"), yt.NodeMap, map[string]any{"opaque": true}},
		{in.Child("staging"), yt.NodeMap, map[string]any{"opaque": true}},
		{in.Child("queue"), yt.NodeMap, nil},
	}
	qs := queueSchema()
	for p := 0; p < o.Partitions; p++ {
		steps = append(steps, struct {
			path ypath.Path
			typ  yt.NodeType
			attr map[string]any
		}{queuePath(root, p), yt.NodeTable, map[string]any{"schema": qs}})
	}
	for _, s := range steps {
		if _, err := tx.CreateNode(ctx, s.path, s.typ, &yt.CreateNodeOptions{Attributes: s.attr}); err != nil {
			return fail(err)
		}
	}
	// The format attribute last: a root without it is not a store.
	if err := tx.SetNode(ctx, root.Attr(attrPartitions), o.Partitions, nil); err != nil {
		return fail(err)
	}
	if err := tx.SetNode(ctx, root.Attr(attrCreated), time.Now().UTC().Format(time.RFC3339), nil); err != nil {
		return fail(err)
	}
	if err := tx.SetNode(ctx, root.Attr(attrFormat), formatVersion, nil); err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return Open(ctx, yc, root, &o)
}

// Open opens an existing store. Errors wrap pillar.ErrNotFound (no node at
// root), pillar.ErrNotStore, pillar.ErrNewerFormat or pillar.ErrPartitions.
func Open(ctx context.Context, yc yt.Client, root ypath.Path, opts *Options) (*Store, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.ensureDefaults()
	if !strings.HasPrefix(string(root), "//") {
		return nil, fmt.Errorf("ytstore %s: root is not an absolute Cypress path", root)
	}
	var ra rootAttrs
	err := yc.GetNode(ctx, root.Attrs(), &ra, &yt.GetNodeOptions{Attributes: []string{attrFormat, attrPartitions, attrCreated}})
	if yterrors.ContainsResolveError(err) {
		return nil, fmt.Errorf("ytstore %s: %w (create it with `pillar ingest --store yt://…` or ytstore.Create)", root, pillar.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("ytstore %s: %w", root, err)
	}
	if ra.Format == 0 || ra.Partitions <= 0 {
		return nil, fmt.Errorf("ytstore %s: no @%s/@%s attributes: %w", root, attrFormat, attrPartitions, pillar.ErrNotStore)
	}
	if ra.Format > formatVersion {
		return nil, fmt.Errorf("ytstore %s: format %d > %d: %w", root, ra.Format, formatVersion, pillar.ErrNewerFormat)
	}
	if o.Partitions != 0 && o.Partitions != ra.Partitions {
		return nil, fmt.Errorf("ytstore %s: has %d partitions, caller wants %d: %w", root, ra.Partitions, o.Partitions, pillar.ErrPartitions)
	}
	return &Store{yc: yc, root: root, opts: o, meta: ra}, nil
}

// Client returns the client the store uses.
func (s *Store) Client() yt.Client { return s.yc }

// Root returns the store's Cypress directory.
func (s *Store) Root() ypath.Path { return s.root }

// Info describes the store at its latest generation.
func (s *Store) Info() pillar.Info {
	info := pillar.Info{Backend: "yt", Root: string(s.root), Partitions: s.meta.Partitions, Format: s.meta.Format}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var g int64
	if err := s.yc.GetNode(ctx, s.genPath(), &g, nil); err == nil {
		info.Generation = g
	}
	return info
}

// Close releases nothing: the client belongs to the caller.
func (s *Store) Close() error { return nil }

func (s *Store) genPath() ypath.Path      { return s.root.Child(internalDir).Child("generation") }
func (s *Store) attrsPath() ypath.Path    { return s.root.Child(internalDir).Child("attrs") }
func (s *Store) consumedPath() ypath.Path { return s.root.Child(internalDir).Child("consumed") }
func (s *Store) stagingPath() ypath.Path  { return s.root.Child(internalDir).Child("staging") }

func queuePath(root ypath.Path, p int) ypath.Path {
	return root.Child(internalDir).Child("queue").Child(fmt.Sprintf("p%05d", p))
}

// tablePath is the Cypress path of a store table (jobs.YTOptions.TablePath
// builds the same for names without special characters).
func (s *Store) tablePath(name string) ypath.Path {
	p := s.root
	for _, seg := range strings.Split(name, "/") {
		p = p.Child(escapeSegment(seg))
	}
	return p
}

// escapeSegment backslash-escapes the characters YPath gives a meaning.
func escapeSegment(seg string) string {
	var b strings.Builder
	for _, r := range seg {
		switch r {
		case '\\', '/', '@', '&', '*', '[', '{':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// encodeName turns an attribute name or consumed id into a node name:
// bytes outside [A-Za-z0-9_.-] become %XX (so "lorry/partition/p00001"
// is "lorry%2Fpartition%2Fp00001").
func encodeName(name string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' && i > 0 || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

func decodeName(enc string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(enc); i++ {
		if enc[i] != '%' {
			b.WriteByte(enc[i])
			continue
		}
		if i+2 >= len(enc) {
			return "", fmt.Errorf("node name %q: truncated escape", enc)
		}
		var v byte
		for _, c := range []byte{enc[i+1], enc[i+2]} {
			v <<= 4
			switch {
			case '0' <= c && c <= '9':
				v |= c - '0'
			case 'A' <= c && c <= 'F':
				v |= c - 'A' + 10
			default:
				return "", fmt.Errorf("node name %q: bad escape", enc)
			}
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}

func validTableName(name string) error {
	if err := writeset.ValidTableName(name); err != nil {
		return err
	}
	if name == internalDir || strings.HasPrefix(name, internalDir+"/") {
		return fmt.Errorf("table name %q: %s/ is reserved for the store's own nodes", name, internalDir)
	}
	return nil
}

// conflictErr maps a YTsaurus lock conflict to pillar.ErrConflict naming
// what was being changed; other errors are wrapped as they are.
func conflictErr(root ypath.Path, what string, err error) error {
	if yterrors.ContainsErrorCode(err, yterrors.CodeConcurrentTransactionLockConflict) {
		return fmt.Errorf("ytstore %s: %s is locked by another transaction (%w): %w", root, what, err, pillar.ErrConflict)
	}
	return fmt.Errorf("ytstore %s: %s: %w", root, what, err)
}

var errRetrySnapshot = errors.New("a commit landed while pinning the snapshot")
