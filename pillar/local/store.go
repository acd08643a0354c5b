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
	// cleanup keeps for readers of older snapshots. The default value is 4.
	RetainManifests int
	// RetainFor keeps any manifest younger than this. The default value is
	// 10 minutes.
	RetainFor time.Duration
	// LockTimeout bounds the wait for another process's commit to finish.
	// The default value is 60 seconds.
	LockTimeout time.Duration
	// Partitions is the partition count; Create requires it, Open checks it
	// when non-zero (ErrPartitions on mismatch). The default value (0) means
	// "whatever the store has" for Open.
	Partitions int

	// crashAt, when set, is called at each named step of a commit (tests).
	crashAt func(step string)
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

	verified sync.Map // data file name → struct{}: size and checksum checked (checksum.go)
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
	for _, d := range []string{dir, filepath.Join(dir, "manifests"), filepath.Join(dir, "data"), filepath.Join(dir, "tx")} {
		if err := o.FS.MkdirAll(d); err != nil {
			return nil, fmt.Errorf("local store %s: %w", dir, err)
		}
	}
	m := newManifest(o.Partitions)
	m.CommittedAt = time.Now().UTC()
	if err := writeJSONAtomic(o.FS, filepath.Join(dir, "manifests", manifestName(0)), m); err != nil {
		return nil, fmt.Errorf("local store %s: %w", dir, err)
	}
	if err := writeFileAtomic(o.FS, filepath.Join(dir, "CURRENT"), []byte(manifestName(0)+"\n")); err != nil {
		return nil, fmt.Errorf("local store %s: %w", dir, err)
	}
	// STORE last: a directory without it is not a store (a crash during
	// Create leaves something Open refuses and Create can redo).
	sf := storeFile{Format: formatVersion, Partitions: o.Partitions, Created: time.Now().UTC()}
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
	s := &Store{dir: dir, opts: o, meta: sf}
	if _, err := s.current(); err != nil {
		return nil, err
	}
	if err := s.cleanup(); err != nil {
		o.Logger.Warn("local store: cleanup", "dir", dir, "err", err)
	}
	s.lastCleanup = time.Now()
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

// Close releases the store. Snapshots taken before stay readable.
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

// Snapshot returns a consistent view of the current generation.
func (s *Store) Snapshot(ctx context.Context) (pillar.Snapshot, error) {
	m, err := s.current()
	if err != nil {
		return nil, err
	}
	return &snapshot{s: s, m: m}, nil
}

// lock takes the commit lock (flock on LOCK), waiting up to LockTimeout.
func (s *Store) lock(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("local store %s: lock: %w", s.dir, err)
	}
	deadline := time.Now().Add(s.opts.LockTimeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
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
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("local store %s: another process holds the commit lock for over %s", s.dir, s.opts.LockTimeout)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// cleanup removes staging directories of dead transactions, data files no
// retained manifest names, and manifests past retention. It takes the
// commit lock, so no commit is moving files meanwhile.
func (s *Store) cleanup() error {
	unlock, err := s.lock(context.Background())
	if err != nil {
		return err
	}
	defer unlock()
	return s.cleanupLocked()
}

func (s *Store) cleanupLocked() error {
	fs := s.opts.FS
	// Dead transactions: their .lock is not held by anyone.
	txs, _ := os.ReadDir(filepath.Join(s.dir, "tx"))
	for _, e := range txs {
		p := filepath.Join(s.dir, "tx", e.Name())
		f, err := os.OpenFile(filepath.Join(p, ".lock"), os.O_RDWR, 0)
		if err != nil {
			// No lock file: a crash between mkdir and lock creation.
			if fi, serr := os.Stat(p); serr == nil && time.Since(fi.ModTime()) > time.Minute {
				_ = fs.RemoveAll(p)
			}
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			s.opts.Logger.Info("local store: removing staging of a dead transaction", "tx", e.Name())
			_ = fs.RemoveAll(p)
		}
		f.Close()
	}
	// Retained manifests.
	cur, err := s.current()
	if err != nil {
		return err
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "manifests"))
	if err != nil {
		return err
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
	keep := map[string]bool{}
	curName := manifestName(cur.Generation)
	for i, n := range names {
		if n > curName { // written by a commit that crashed before CURRENT moved
			_ = fs.Remove(filepath.Join(s.dir, "manifests", n))
			continue
		}
		recent := i >= len(names)-s.opts.RetainManifests
		if !recent {
			if fi, err := os.Stat(filepath.Join(s.dir, "manifests", n)); err == nil && time.Since(fi.ModTime()) < s.opts.RetainFor {
				recent = true
			}
		}
		if n == curName || recent {
			b, err := os.ReadFile(filepath.Join(s.dir, "manifests", n))
			if err != nil {
				continue
			}
			m, err := decodeManifest(b, n)
			if err != nil {
				continue
			}
			for _, f := range m.files() {
				keep[f] = true
			}
			continue
		}
		_ = fs.Remove(filepath.Join(s.dir, "manifests", n))
	}
	data, err := os.ReadDir(filepath.Join(s.dir, "data"))
	if err != nil {
		return err
	}
	removed := 0
	for _, e := range data {
		if !keep[e.Name()] {
			if err := fs.Remove(filepath.Join(s.dir, "data", e.Name())); err == nil {
				removed++
			}
		}
	}
	if removed > 0 {
		s.opts.Logger.Info("local store: removed unreferenced files", "count", removed)
	}
	return nil
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
