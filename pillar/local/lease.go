package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Snapshot leases (see doc.go, "Snapshot lifetime").
//
// In a process, the snapshots (and transactions) of one generation share
// one lease with a reference count. Across processes, a lease is a file
// leases/<gen>-<pid>-<rand>.lease that its process keeps open with an
// exclusive flock(2) for as long as the count is above zero. Cleanup, under
// the commit lock, keeps every generation with a lease whose flock is held;
// a lease file whose flock it can take belongs to a process that is gone,
// and it removes it. The kernel drops a dead process's flocks, so a lease
// needs no expiry time and no renewal, and a reader that takes an hour (or
// is paused) keeps its files.
//
// A lease is taken under a shared flock on LOCK (commits and cleanup take it
// exclusive): while the shared lock is held CURRENT cannot move and cleanup
// cannot run, so the generation read is still complete when its lease is in
// place.

// lease pins one generation for this process.
type lease struct {
	gen  int64
	refs int
	path string   // "" when the store could not be written (read-only)
	f    *os.File // holds the flock
}

// LeaseInfo describes a live lease (Store.Leases).
type LeaseInfo struct {
	Generation int64     `json:"generation"`
	PID        int       `json:"pid"`
	Host       string    `json:"host,omitempty"`
	Taken      time.Time `json:"taken"`
	File       string    `json:"file"`
}

func (s *Store) leaseDir() string { return filepath.Join(s.dir, "leases") }

// acquire returns the current manifest with a lease on its generation.
// A closed Store refuses (ErrClosed): Begin and Snapshot both start here.
func (s *Store) acquire(ctx context.Context) (*manifest, *lease, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, nil, fmt.Errorf("local store %s: %w", s.dir, ErrClosed)
	}
	m, err := s.current()
	if err != nil {
		return nil, nil, err
	}
	s.leaseMu.Lock()
	if l := s.leases[m.Generation]; l != nil {
		// This process already pins the generation: its files stay.
		l.refs++
		s.leaseMu.Unlock()
		return m, l, nil
	}
	s.leaseMu.Unlock()

	unlock, err := s.lockMode(ctx, syscall.LOCK_SH)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	if m, err = s.current(); err != nil { // CURRENT cannot move now
		return nil, nil, err
	}
	if testHookLeaseWindow != nil {
		testHookLeaseWindow(s)
	}
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if l := s.leases[m.Generation]; l != nil {
		l.refs++
		return m, l, nil
	}
	l, err := s.newLease(m.Generation)
	if err != nil {
		if !readOnly(err) && !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
			return nil, nil, fmt.Errorf("local store %s: snapshot lease: %w", s.dir, err)
		}
		// A store this process cannot write (read-only, or a full disk):
		// reads go on without a lease; RetainFor is their protection.
		s.roWarn.Do(func() {
			s.opts.Logger.Warn("local store: cannot write a lease file; snapshots are not leased (cleanup keeps them for RetainFor only)", "dir", s.dir, "err", err)
		})
		l = &lease{gen: m.Generation}
	}
	l.refs = 1
	s.leases[m.Generation] = l
	return m, l, nil
}

// testHookLeaseWindow, set only by tests, runs in acquire between reading
// CURRENT and taking the lease: the window the shared LOCK closes.
var testHookLeaseWindow func(*Store)

func readOnly(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}

func (s *Store) newLease(gen int64) (*lease, error) {
	if err := os.MkdirAll(s.leaseDir(), 0o755); err != nil {
		return nil, err
	}
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	name := fmt.Sprintf("%012d-%d-%s.lease", gen, os.Getpid(), hex.EncodeToString(rb[:]))
	path := filepath.Join(s.leaseDir(), name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	host, _ := os.Hostname()
	b, _ := json.Marshal(LeaseInfo{Generation: gen, PID: os.Getpid(), Host: host, Taken: s.opts.Now().UTC()})
	_, _ = f.Write(b) // informational (Store.Leases); the flock is the lease
	return &lease{gen: gen, path: path, f: f}, nil
}

// release drops one reference; the last one removes the lease.
func (s *Store) release(l *lease) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	l.refs--
	if l.refs > 0 {
		return
	}
	delete(s.leases, l.gen)
	if l.f != nil {
		_ = os.Remove(l.path)
		_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
		l.f.Close()
	}
}

// liveLeases runs under the exclusive commit lock: it returns the
// generations some process holds a lease on, and removes the lease files
// of processes that are gone.
func (s *Store) liveLeases() (live map[int64]bool, dead int) {
	live = map[int64]bool{}
	ents, _ := os.ReadDir(s.leaseDir())
	for _, e := range ents {
		gen, ok := leaseGen(e.Name())
		if !ok {
			continue
		}
		p := filepath.Join(s.leaseDir(), e.Name())
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				live[gen] = true // cannot tell: keep its files
			}
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			s.opts.Logger.Info("local store: removing the lease of a process that is gone", "lease", e.Name())
			_ = s.opts.FS.Remove(p)
			dead++
		} else {
			live[gen] = true
		}
		f.Close()
	}
	return live, dead
}

func leaseGen(name string) (int64, bool) {
	if !strings.HasSuffix(name, ".lease") {
		return 0, false
	}
	g, _, ok := strings.Cut(name, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(g, 10, 64)
	return n, err == nil
}

// Leases lists the live leases on the store (every process's), oldest
// generation first: the snapshots that keep old files from cleanup.
func (s *Store) Leases() ([]LeaseInfo, error) {
	ents, err := os.ReadDir(s.leaseDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("local store %s: leases: %w", s.dir, err)
	}
	var out []LeaseInfo
	for _, e := range ents {
		gen, ok := leaseGen(e.Name())
		if !ok {
			continue
		}
		p := filepath.Join(s.leaseDir(), e.Name())
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) == nil {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			f.Close()
			continue // nobody holds it: a dead process's, cleanup removes it
		}
		var li LeaseInfo
		b, _ := os.ReadFile(p)
		_ = json.Unmarshal(b, &li)
		f.Close()
		li.Generation, li.File = gen, e.Name()
		out = append(out, li)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Generation < out[j].Generation })
	return out, nil
}
