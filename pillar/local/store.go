package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pillarkit/pillar/pillar"
)

var errNewer = pillar.ErrNewerFormat

// Options configure a local store. The zero value is ready to use.
type Options struct {
	// Logger receives cleanup and commit logs. The default value discards.
	Logger *slog.Logger
	// FS is the file system written through. The default value is OSFS{}.
	FS FS
	// RetainManifests is how many of the newest manifests (and their files)
	// cleanup keeps besides the leased ones. The default value is 4.
	RetainManifests int
	// RetainFor keeps a manifest (and its files) for this long after a
	// commit replaced it, for readers that hold no lease (a binary from
	// before leases). Leased snapshots are kept however old. The default
	// value is 10 minutes.
	RetainFor time.Duration
	// LockTimeout bounds the wait for another process's commit to finish.
	// The default value is 60 seconds.
	LockTimeout time.Duration
	// Partitions is the partition count; Create requires it, Open checks it
	// when non-zero (ErrPartitions on mismatch). The default value (0) means
	// "whatever the store has" for Open.
	Partitions int
	// Now is the clock: commit times, RetainFor, the lock timeout. The
	// default value is time.Now.
	Now func() time.Time

	// crashAt, when set, is called at each named step of a commit (tests);
	// crashAtCleanup at each removal of a cleanup.
	crashAt, crashAtCleanup func(step string)
	// queueFanout replaces defaultQueueFanout when > 1 (tests).
	queueFanout int
	// spillBytes replaces spillBytes (spool.go) when > 0 (tests).
	spillBytes int64
	// spoolGroupBytes replaces spoolRowGroupBytes (spool.go) when > 0
	// (tests: many row groups of small records).
	spoolGroupBytes int64
	// segmentChunks replaces maxFileChunks as a queue segment's bound when
	// > 0 (tests: segments that roll after a few records, so the rolling
	// and crash tests need not write 56 row groups per segment).
	segmentChunks int
	// rereadSums makes staging compute a queue segment's heads and footer
	// sums by reading the staged file back whole, as before stream sums
	// (tests and benchmarks compare; segsums.go).
	rereadSums bool
	// groupMin, when > 1, makes a group's leader wait until that many
	// commits (itself included) are queued (tests).
	groupMin int
}

func (o *Options) ensureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.RetainManifests == 0 {
		o.RetainManifests = 4
	}
	if o.RetainFor == 0 {
		o.RetainFor = 10 * time.Minute
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = 60 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Store is an embedded Pillar store in one directory.
type Store struct {
	dir  string
	opts Options
	meta storeFile

	mu          sync.Mutex
	cached      *manifest // last manifest read, by generation
	closed      bool
	commits     int       // commits by this Store since the last cleanup
	lastCleanup time.Time // when this Store last ran cleanup
	lastSweep   time.Time // when this Store last swept data/

	// retained: the manifests the last cleanup kept and those this Store
	// committed since, by name, decoded. A manifest at or below CURRENT
	// never changes, so cleanup decodes each one once (it reads every retained manifest, every few commits: that
	// was 40% of a commit's CPU with a few thousand queue segments).
	retained map[string]*manifest

	index indexCache // decoded queue index files (queueindex.go)

	group committer // the group commit queue (group.go)

	statsMu sync.Mutex
	stats   CommitStats

	verified  sync.Map // data file name → struct{}: size and checksum checked (checksum.go)
	verifying sync.Map // data file name → *sync.Mutex: one check at a time per file
	// headsVerified: queue segment name → struct{}: size and heads
	// checksum checked (queueheads.go)
	headsVerified sync.Map
	// blockVerified: table file name → []atomic.Uint64, a bit per block
	// whose sum a read has checked (checksum.go blockFile)
	blockVerified sync.Map
	noSidecar     sync.Map // table file name → struct{}: its missing sidecar was logged

	leaseMu sync.Mutex
	leases  map[int64]*lease // generation → this process's lease (lease.go)
	roWarn  sync.Once
}

var _ pillar.Store = (*Store)(nil)

// Create makes a new, empty store in dir (created if missing, must be empty
// of any store). opts.Partitions must be positive.
func Create(dir string, opts *Options) (*Store, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.ensureDefaults()
	if o.Partitions <= 0 {
		return nil, fmt.Errorf("local store %s: partitions %d must be positive", dir, o.Partitions)
	}
	if _, err := os.Stat(filepath.Join(dir, "STORE")); err == nil {
		return nil, fmt.Errorf("local store %s: a store already exists there", dir)
	}
	for _, d := range []string{dir, filepath.Join(dir, "manifests"), filepath.Join(dir, "data"), filepath.Join(dir, "tx"), filepath.Join(dir, "leases")} {
		if err := o.FS.MkdirAll(d); err != nil {
			return nil, fmt.Errorf("local store %s: %w", dir, err)
		}
	}
	m := newManifest(o.Partitions)
	m.CommittedAt = o.Now().UTC()
	if err := writeManifestAtomic(o.FS, filepath.Join(dir, "manifests", manifestName(0)), m); err != nil {
		return nil, fmt.Errorf("local store %s: %w", dir, err)
	}
	if err := writeFileAtomic(o.FS, filepath.Join(dir, "CURRENT"), []byte(manifestName(0)+"\n")); err != nil {
		return nil, fmt.Errorf("local store %s: %w", dir, err)
	}
	// STORE last: a directory without it is not a store (a crash during
	// Create leaves something Open refuses and Create can redo).
	sf := storeFile{Format: formatVersion, Partitions: o.Partitions, Created: o.Now().UTC()}
	if err := writeJSONAtomic(o.FS, filepath.Join(dir, "STORE"), sf); err != nil {
		return nil, fmt.Errorf("local store %s: %w", dir, err)
	}
	return Open(dir, &o)
}

// Open opens an existing store. Errors wrap pillar.ErrNotFound (no such
// directory), pillar.ErrNotStore, pillar.ErrNewerFormat or
// pillar.ErrPartitions.
func Open(dir string, opts *Options) (*Store, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.ensureDefaults()
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("local store %s: %w (create it with `pillar ingest` or local.Create)", dir, pillar.ErrNotFound)
		}
		return nil, fmt.Errorf("local store %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("local store %s: not a directory: %w", dir, pillar.ErrNotStore)
	}
	b, err := os.ReadFile(filepath.Join(dir, "STORE"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("local store %s: no STORE file: %w", dir, pillar.ErrNotStore)
		}
		return nil, fmt.Errorf("local store %s: %w", dir, err)
	}
	var sf storeFile
	if err := json.Unmarshal(b, &sf); err != nil || sf.Format == 0 || sf.Partitions <= 0 {
		return nil, fmt.Errorf("local store %s: STORE file is not valid: %w", dir, pillar.ErrNotStore)
	}
	if sf.Format > formatVersion {
		return nil, fmt.Errorf("local store %s: format %d > %d: %w", dir, sf.Format, formatVersion, pillar.ErrNewerFormat)
	}
	if o.Partitions != 0 && o.Partitions != sf.Partitions {
		return nil, fmt.Errorf("local store %s: has %d partitions, caller wants %d: %w", dir, sf.Partitions, o.Partitions, pillar.ErrPartitions)
	}
	s := &Store{dir: dir, opts: o, meta: sf, leases: map[int64]*lease{}}
	if _, err := s.current(); err != nil {
		return nil, err
	}
	if _, err := s.Cleanup(context.Background()); err != nil && !readOnly(err) {
		o.Logger.Warn("local store: cleanup", "dir", dir, "err", err)
	}
	s.lastCleanup, s.lastSweep = o.Now(), o.Now()
	return s, nil
}

// Dir returns the store directory.
func (s *Store) Dir() string { return s.dir }

// Info describes the store at its current generation.
func (s *Store) Info() pillar.Info {
	info := pillar.Info{Backend: "local", Root: s.dir, Partitions: s.meta.Partitions, Format: s.meta.Format}
	if m, err := s.current(); err == nil {
		info.Generation = m.Generation
	}
	return info
}

// ErrClosed: Begin or Snapshot on a Store after its Close.
var ErrClosed = errors.New("store closed")

// Close releases the store: Begin and Snapshot then fail with ErrClosed.
// Snapshots and transactions begun before stay usable until they end.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// current reads CURRENT and the manifest it names.
func (s *Store) current() (*manifest, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "CURRENT"))
	if err != nil {
		return nil, fmt.Errorf("local store %s: CURRENT: %w", s.dir, err)
	}
	name := strings.TrimSpace(string(b))
	s.mu.Lock()
	if s.cached != nil && manifestName(s.cached.Generation) == name {
		m := s.cached
		s.mu.Unlock()
		return m, nil
	}
	s.mu.Unlock()
	mb, err := os.ReadFile(filepath.Join(s.dir, "manifests", name))
	if err != nil {
		return nil, fmt.Errorf("local store %s: manifest %s: %w", s.dir, name, err)
	}
	m, err := decodeManifest(mb, name)
	if err != nil {
		return nil, fmt.Errorf("local store %s: %w", s.dir, err)
	}
	s.mu.Lock()
	if s.cached == nil || m.Generation > s.cached.Generation {
		s.cached = m
	}
	s.mu.Unlock()
	return m, nil
}

// Snapshot returns a consistent view of the current generation. It holds
// a lease on the generation until Release: no cleanup or compaction, in
// any process, removes a file it reads (see doc.go).
func (s *Store) Snapshot(ctx context.Context) (pillar.Snapshot, error) {
	m, l, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &snapshot{s: s, m: m, lease: l}, nil
}

// lock takes the commit lock (exclusive flock on LOCK), waiting up to
// LockTimeout.
func (s *Store) lock(ctx context.Context) (func(), error) { return s.lockMode(ctx, syscall.LOCK_EX) }

// lockMode takes LOCK exclusive (commits, cleanup) or shared (taking a
// snapshot lease), waiting up to LockTimeout.
func (s *Store) lockMode(ctx context.Context, how int) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil && how == syscall.LOCK_SH && readOnly(err) {
		f, err = os.Open(filepath.Join(s.dir, "LOCK")) // a reader of a read-only store
	}
	if err != nil {
		if how == syscall.LOCK_SH && readOnly(err) {
			return func() {}, nil // nothing can commit through this mount either
		}
		return nil, fmt.Errorf("local store %s: lock: %w", s.dir, err)
	}
	deadline := s.opts.Now().Add(s.opts.LockTimeout)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("local store %s: lock: %w", s.dir, err)
		}
		if s.opts.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("local store %s: another process holds the commit lock for over %s", s.dir, s.opts.LockTimeout)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("local store %s: waiting for the commit lock: %w", s.dir, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// CommitStats sums the time this Store's commits spent in each part
// (Store.CommitStats): where a slow commit waits.
type CommitStats struct {
	// Commits: transactions that reached the group committer; Groups: the
	// store commits (manifests, lock holds) that carried them (group.go).
	Commits, Groups int64
	// Staging: writing and syncing the queue segments (before the lock),
	// per transaction; Queued: waiting for the group in progress to end,
	// per transaction.
	Staging, Queued time.Duration
	// The rest is per group. LockWait: waiting for the commit lock (other
	// processes' commits and cleanups).
	LockWait time.Duration
	// Locked: holding it, in total; of which Sync (the data directory's
	// fsync), Manifest (writing and syncing the manifest), Current
	// (replacing CURRENT and syncing the store directory), Index (writing
	// queue index files) and Cleanup (the cleanup every few commits).
	Locked, Sync, Manifest, Current, Index, Cleanup time.Duration
}

// CommitStats returns the sums since the Store was opened.
func (s *Store) CommitStats() CommitStats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return s.stats
}

func (s *Store) addStats(f func(*CommitStats)) {
	s.statsMu.Lock()
	f(&s.stats)
	s.statsMu.Unlock()
}

// CleanupStats says what a cleanup removed and kept.
type CleanupStats struct {
	Manifests  int   // manifests removed
	Files      int   // data files removed
	Bytes      int64 // bytes of the data files removed
	Staging    int   // staging directories of dead transactions removed
	DeadLeases int   // lease files of processes that are gone, removed
	Leased     int   // generations kept because a live snapshot holds a lease
}

// Cleanup removes what no one can read any more: staging directories of
// dead transactions, lease files of dead processes, manifests past
// retention, and data files that no retained manifest names. A manifest is
// retained when it is the current one, one of the newest RetainManifests,
// replaced less than RetainFor ago, or leased by a live snapshot of any
// process. Cleanup is the only code that removes data files; it runs under
// the commit lock at Open and every few commits, and compaction's garbage
// collection is a call to it after the compacting commit.
func (s *Store) Cleanup(ctx context.Context) (CleanupStats, error) {
	// data/ is listed before the lock: with a long queue it holds tens of
	// thousands of segment files, and listing them under the lock would
	// stall every commit. A file listed is garbage if no retained manifest
	// names it once the lock is held (no commit moves files in then, and
	// only cleanup makes a file unnamed).
	listed, err := os.ReadDir(filepath.Join(s.dir, "data"))
	if err != nil {
		return CleanupStats{}, fmt.Errorf("local store %s: cleanup: %w", s.dir, err)
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return CleanupStats{}, err
	}
	defer unlock()
	return s.cleanupLocked(ctx, listed)
}

// CollectGarbage is the cleanup pillar.Compact runs after its commit: the
// files of the layers it folded go once no retained manifest names them
// (a live snapshot's lease keeps its manifest, see Cleanup).
func (s *Store) CollectGarbage(ctx context.Context) error {
	_, err := s.Cleanup(ctx)
	return err
}

// cleanupLocked runs under the commit lock. With listed (data/, listed by
// Cleanup) it removes every listed file no retained manifest names, the
// segments of their index files included: the sweep at Open and on
// request, which also finds the files of a commit whose process died.
// Without (the cleanup every few commits) it removes the files that the
// manifests it removes named and no retained manifest does: table files
// and index files. Queue segments are never among them: the queue only
// grows, and the current manifest names every committed segment (in its
// tail or through its index files). So its cost does not grow with the
// queue.
func (s *Store) cleanupLocked(ctx context.Context, listed []os.DirEntry) (CleanupStats, error) {
	var cs CleanupStats
	fs := s.opts.FS
	now := s.opts.Now()
	var intended []string // files a dead commit moved into data/
	// Dead transactions: their .lock is not held by anyone.
	txs, _ := os.ReadDir(filepath.Join(s.dir, "tx"))
	for _, e := range txs {
		p := filepath.Join(s.dir, "tx", e.Name())
		if strings.HasSuffix(e.Name(), pendingSuffix) {
			// Being made by a Begin (its lock may not be taken yet), or
			// left by a crash in Begin: removed once a minute old.
			if fi, serr := os.Stat(p); serr == nil && now.Sub(fi.ModTime()) > time.Minute {
				_ = fs.RemoveAll(p)
				cs.Staging++
			}
			continue
		}
		f, err := os.OpenFile(filepath.Join(p, ".lock"), os.O_RDWR, 0)
		if err != nil {
			// No lock file: a crash between mkdir and lock creation.
			if fi, serr := os.Stat(p); serr == nil && now.Sub(fi.ModTime()) > time.Minute {
				_ = fs.RemoveAll(p)
				cs.Staging++
			}
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			s.opts.Logger.Info("local store: removing staging of a dead transaction", "tx", e.Name())
			// A commit that died after moving files into data/ listed them
			// first: they go below unless a retained manifest names them
			// (the commit may have got past CURRENT).
			if b, err := os.ReadFile(filepath.Join(p, intentFile)); err == nil {
				for _, n := range strings.Split(string(b), "\n") {
					if n != "" && !strings.ContainsAny(n, "/\\") {
						intended = append(intended, n)
					}
				}
			}
			_ = fs.RemoveAll(p)
			cs.Staging++
		}
		f.Close()
	}
	leased, dead := s.liveLeases()
	cs.DeadLeases = dead
	// Retained manifests.
	cur, err := s.current()
	if err != nil {
		return cs, err
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "manifests"))
	if err != nil {
		return cs, err
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "m-") && strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		} else if strings.HasSuffix(e.Name(), ".tmp") {
			_ = fs.Remove(filepath.Join(s.dir, "manifests", e.Name()))
		}
	}
	sort.Strings(names)
	curName := manifestName(cur.Generation)
	var live []string
	for _, n := range names {
		if n > curName { // written by a commit that crashed before CURRENT moved
			_ = fs.Remove(filepath.Join(s.dir, "manifests", n))
			continue
		}
		live = append(live, n)
	}
	mans := make([]*manifest, len(live))
	s.mu.Lock()
	known := s.retained
	s.mu.Unlock()
	for i, n := range live {
		if m := known[n]; m != nil {
			mans[i] = m
			continue
		}
		if n == curName {
			mans[i] = cur
			continue
		}
		if b, err := os.ReadFile(filepath.Join(s.dir, "manifests", n)); err == nil {
			mans[i], _ = decodeManifest(b, n)
		}
	}
	next := map[string]*manifest{}
	defer func() {
		s.mu.Lock()
		s.retained = next
		s.mu.Unlock()
	}()
	keep := map[string]bool{}
	var kept, removed []*manifest
	for i, n := range live {
		m := mans[i]
		retain := n == curName || i >= len(live)-s.opts.RetainManifests
		if m == nil {
			retain = true // unreadable: remove nothing it may name
		} else if leased[m.Generation] {
			retain = true
			cs.Leased++
		}
		// Replaced when the next manifest was committed.
		if !retain && i+1 < len(live) && (mans[i+1] == nil || now.Sub(mans[i+1].CommittedAt) < s.opts.RetainFor) {
			retain = true
		}
		if !retain {
			_ = fs.Remove(filepath.Join(s.dir, "manifests", n))
			s.cleanupHook("manifest-removed")
			cs.Manifests++
			removed = append(removed, m)
			continue
		}
		if m == nil {
			// Keep every data file: we cannot tell which it names.
			return cs, fmt.Errorf("local store %s: manifest %s unreadable; no data file removed", s.dir, n)
		}
		next[n] = m
		kept = append(kept, m)
		for _, f := range m.files() {
			keep[f] = true
		}
	}
	remove := func(name string) {
		var size int64
		if fi, err := os.Stat(filepath.Join(s.dir, "data", name)); err == nil {
			size = fi.Size()
		}
		if err := fs.Remove(filepath.Join(s.dir, "data", name)); err == nil {
			s.cleanupHook("file-removed")
			cs.Files++
			cs.Bytes += size
			s.verified.Delete(name)
			s.verifying.Delete(name)
			s.headsVerified.Delete(name)
			s.blockVerified.Delete(name)
			s.noSidecar.Delete(name)
			s.index.drop(name)
		}
	}
	if listed != nil || len(intended) > 0 {
		if err := s.indexedFiles(ctx, kept, keep); err != nil {
			return cs, err // an unreadable index file: remove no data file
		}
		for _, e := range listed {
			if !keep[e.Name()] {
				remove(e.Name())
			}
		}
		for _, n := range intended {
			if !keep[n] {
				remove(n)
			}
		}
	}
	if listed == nil {
		done := map[string]bool{}
		for _, m := range removed {
			for _, t := range m.Tables {
				for _, f := range t.Files {
					if !keep[f.Name] && !done[f.Name] {
						done[f.Name] = true
						remove(f.Name)
					}
					if f.Blocks != nil && !keep[f.Blocks.File] && !done[f.Blocks.File] {
						done[f.Blocks.File] = true
						remove(f.Blocks.File) // no manifest names either: a kill before this leaves an orphan the next Open sweeps
					}
				}
			}
			for _, q := range m.Queue {
				for _, r := range q.Index {
					if !keep[r.File] && !done[r.File] {
						done[r.File] = true
						remove(r.File)
					}
				}
			}
		}
	}
	if cs.Files > 0 || cs.Manifests > 0 {
		s.opts.Logger.Info("local store: cleanup", "manifests", cs.Manifests, "files", cs.Files, "bytes", cs.Bytes, "leased", cs.Leased)
	}
	return cs, nil
}

func writeFileAtomic(fs FS, path string, b []byte) error {
	tmp := path + ".tmp"
	_ = fs.Remove(tmp)
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		_ = fs.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		_ = fs.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	if err := fs.Rename(tmp, path); err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	return fs.SyncDir(filepath.Dir(path))
}

func writeJSONAtomic(fs FS, path string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return writeFileAtomic(fs, path, append(b, '\n'))
}

// writeManifestAtomic writes a manifest as compact JSON: it names every
// queue segment and data file, so it is written under the commit lock at
// every commit, and indenting it cost 3.5× its encoding (the CPU profile
// of commits over a queue of 4000 segments).
func writeManifestAtomic(fs FS, path string, m *manifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return writeFileAtomic(fs, path, append(b, '\n'))
}
