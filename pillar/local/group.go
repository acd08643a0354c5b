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
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/pillarkit/pillar/pillar"
)

// Group commit. A store commit costs two rounds of fsyncs under LOCK
// (tens of milliseconds on a loaded disk), whatever it carries, and Lorry's
// state changes, a crawl-update producer and a republish all commit through
// one Store. So concurrent Commit calls of one Store share a store commit:
//
//   - A Commit stages its queue segments (outside any lock), then joins the
//     Store's commit queue. When no group is running it leads one at once;
//     otherwise it waits, and the group in progress hands the lead to the
//     first one queued when it ends. A leader takes every request queued
//     (up to maxCommitGroup), itself first, in arrival order. No request
//     waits for a timer: a group is what queued while the previous one ran.
//   - The leader takes LOCK (the flock that serializes commits across
//     processes), given up only when every member's context has ended; a
//     member whose context ended meanwhile fails alone. Then, on a copy of
//     the current manifest, each member in turn: its conflict check against
//     the state so far (the current manifest plus the members before it, so
//     of two members changing one attribute from the same generation the
//     second gets ErrConflict, as it would one commit later), the renames of
//     its staged files into data/, and only after all of them its changes.
//     A member whose check or rename fails is left out (its renamed files
//     removed) and gets its error; the others go on.
//   - What the members share is done once: queue index files, one
//     manifest at one generation (every member's tables and attributes
//     carry it; queue offsets follow member order), one round of fsyncs,
//     the rename of CURRENT, the store directory's fsync, and the periodic
//     cleanup. A failure there fails every member of the group (they share
//     the manifest) and removes every file they moved: the store stays at
//     the generation before, as after a failed commit of one. A failure
//     after the rename (the store directory's fsync) is reported to every
//     member as committed but perhaps not durable.
//   - A crash (kill -9) at any step leaves the state before the group or
//     after it, every member whole: the group is one commit to the file
//     system (TestKillDuringGroupCommit).
//   - A queued request whose context ends before a leader takes it leaves
//     the queue and fails; once taken it waits for its group's result.

// maxCommitGroup bounds the transactions of one store commit.
const maxCommitGroup = 64

// commitReq is one transaction handed to the group committer.
type commitReq struct {
	t      *tx
	ctx    context.Context
	staged []stagedQueue
	sums   map[string]string
	listed []os.DirEntry // data/, listed for a sweep
	start  time.Time     // Commit called
	// staging: the queue staged, the request queued for a group.
	staging time.Time

	lead chan struct{} // closed: this request leads the next group
	done chan struct{} // closed: err is final (its group ran)
	err  error

	moved []string // files it moved into data/ (under LOCK)

	// grp is its group once taken into one; dropped: it left the group
	// before LOCK was held (its context ended). Under committer.mu.
	grp     *groupState
	dropped bool
}

// committer is a Store's commit queue.
type committer struct {
	mu    sync.Mutex
	busy  bool         // a leader is running a group
	queue []*commitReq // waiting for the next group, in arrival order
	// joined counts the requests that arrived (tests wait on it).
	joined int64
}

var errGroupAborted = errors.New("the group commit carrying it ended without a result")

// groupState is one group's: locked once its leader holds LOCK (from then
// on no member may leave it). Under committer.mu.
type groupState struct{ locked bool }

// groupCommit commits r alone or with the commits queued beside it.
func (s *Store) groupCommit(r *commitReq) error {
	g := &s.group
	g.mu.Lock()
	g.joined++
	if g.busy {
		g.queue = append(g.queue, r)
		g.mu.Unlock()
		select {
		case <-r.lead:
		case <-r.done:
			return r.err
		case <-r.ctx.Done():
			g.mu.Lock()
			if i := slices.Index(g.queue, r); i >= 0 {
				g.queue = slices.Delete(g.queue, i, i+1)
				g.mu.Unlock()
				return r.t.errf("commit: waiting for the commit in progress: %w", r.ctx.Err())
			}
			if r.grp != nil && !r.grp.locked { // taken into a group still waiting for LOCK: leave it
				r.dropped = true
				g.mu.Unlock()
				return r.t.errf("commit: waiting for the commit lock: %w", r.ctx.Err())
			}
			g.mu.Unlock()
			select { // taken: into a group, or to lead one
			case <-r.lead:
			case <-r.done:
				return r.err
			}
		}
	} else {
		g.busy = true
		g.mu.Unlock()
	}
	// r leads: itself and whatever queued meanwhile.
	if want := s.opts.groupMin; want > 1 { // tests: a group of exactly this many
		for {
			g.mu.Lock()
			n := len(g.queue)
			g.mu.Unlock()
			if n+1 >= want {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	g.mu.Lock()
	n := min(len(g.queue), maxCommitGroup-1)
	group := append([]*commitReq{r}, g.queue[:n]...)
	g.queue = append([]*commitReq(nil), g.queue[n:]...)
	gs := &groupState{}
	for _, m := range group {
		m.grp = gs
		m.err = m.t.errf("commit: %w", errGroupAborted) // replaced by the group, unless a panic ends it
	}
	g.mu.Unlock()
	// The group runs on a goroutine of its own, so that any member, the
	// leader included, can leave it while it waits for LOCK.
	go s.runGroup(group, gs)
	select {
	case <-r.done:
		return r.err
	case <-r.ctx.Done():
		g.mu.Lock()
		if !gs.locked {
			r.dropped = true
			g.mu.Unlock()
			return r.t.errf("commit: waiting for the commit lock: %w", r.ctx.Err())
		}
		g.mu.Unlock()
		<-r.done
		return r.err
	}
}

// runGroup commits the group, tells its members (those that did not leave
// it) and hands the lead to the first commit queued meanwhile.
func (s *Store) runGroup(group []*commitReq, gs *groupState) {
	g := &s.group
	defer func() {
		g.mu.Lock()
		gs.locked = true
		for _, m := range group {
			if !m.dropped {
				close(m.done)
			}
		}
		if len(g.queue) > 0 {
			next := g.queue[0]
			g.queue = g.queue[1:]
			close(next.lead)
		} else {
			g.busy = false
		}
		g.mu.Unlock()
	}()
	s.commitGroup(group, gs)
}

// commitGroup commits the group's transactions in one store commit (see
// above) and sets each member's err.
func (s *Store) commitGroup(group []*commitReq, gs *groupState) {
	grouped := time.Now()
	// LOCK is waited for while any member still wants it.
	lctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var alive atomic.Int64
	alive.Store(int64(len(group)))
	for _, r := range group {
		stop := context.AfterFunc(r.ctx, func() {
			if alive.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	var listed []os.DirEntry
	for _, r := range group {
		if r.listed != nil {
			listed = r.listed
			break
		}
	}
	ctxFail := func(r *commitReq, what string) bool {
		if err := r.ctx.Err(); err != nil {
			r.err = r.t.errf("commit: %s: %w", what, err)
			return true
		}
		return false
	}
	unlock, err := s.lock(lctx)
	// From here no member leaves: those that left are dropped.
	s.group.mu.Lock()
	gs.locked = true
	live := make([]*commitReq, 0, len(group))
	for _, r := range group {
		if !r.dropped {
			live = append(live, r)
		}
	}
	s.group.mu.Unlock()
	group = live
	if err != nil {
		for _, r := range group {
			if !ctxFail(r, "waiting for the commit lock") {
				r.err = r.t.errf("commit: %w", err)
			}
		}
		return
	}
	locked := time.Now()
	var st CommitStats
	defer func() {
		unlock()
		end := time.Now()
		s.addStats(func(c *CommitStats) {
			c.Groups++
			for _, r := range group {
				c.Commits++
				c.Staging += r.staging.Sub(r.start)
				c.Queued += grouped.Sub(r.staging)
			}
			c.LockWait += locked.Sub(grouped)
			c.Locked += end.Sub(locked)
			c.Sync += st.Sync
			c.Manifest += st.Manifest
			c.Current += st.Current
			c.Index += st.Index
			c.Cleanup += st.Cleanup
		})
		for _, r := range group {
			if r.t.intent != nil {
				r.t.intent.Close()
			}
		}
	}()
	s.hook("locked")

	cur, err := s.current()
	if err != nil {
		for _, r := range group {
			r.err = err
		}
		return
	}
	nm := cur.clone()
	nm.Generation = cur.Generation + 1
	nm.CommittedAt = s.opts.Now().UTC()
	gen := nm.Generation
	dataDir := filepath.Join(s.dir, "data")
	removeMoved := func(names []string) {
		for _, f := range names {
			_ = s.opts.FS.Remove(filepath.Join(dataDir, f))
		}
	}
	// One random draw per group; each member's files carry its index in
	// the group, so two members' files never share a name (their staged
	// files have the same base names).
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	prefix := fmt.Sprintf("%012d-%s-", gen, hex.EncodeToString(rb[:]))
	var ok []*commitReq
	for i, r := range group {
		if ctxFail(r, "waiting for the commit lock") {
			continue
		}
		if err := r.conflict(nm); err != nil {
			r.err = err
			continue
		}
		if err := r.apply(nm, fmt.Sprintf("%sm%02d-", prefix, i)); err != nil {
			removeMoved(r.moved)
			r.err = err
			continue
		}
		addSums(nm, r.sums)
		ok = append(ok, r)
	}
	if len(ok) == 0 {
		return
	}
	var shared []string // index files
	committed := false  // CURRENT names the new manifest: nothing may be removed
	failAll := func(err error) {
		if committed {
			return
		}
		for _, r := range ok {
			removeMoved(r.moved)
			r.err = r.t.errf("commit: %w", err)
		}
		removeMoved(shared)
	}
	first := ok[0].t

	// Long tails go into index files, so that the manifest (written by
	// every commit) stays small however long the queue grows.
	parts := make([]int, 0, len(nm.Queue))
	for p := range nm.Queue {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	indexStart := time.Now()
	for _, p := range parts {
		err := s.compactQueue(lctx, p, nm.Queue[p], prefix, func(name string, ix *indexFile) (int64, string, error) {
			if err := first.intend(name); err != nil {
				return 0, "", err
			}
			size, crc, err := writeIndexFile(s.opts.FS, filepath.Join(dataDir, name), ix)
			if err != nil {
				_ = s.opts.FS.Remove(filepath.Join(dataDir, name))
				return 0, "", err
			}
			shared = append(shared, name)
			s.hook("index-written")
			return size, crc, nil
		})
		if err != nil {
			failAll(err)
			return
		}
	}
	st.Index = time.Since(indexStart)
	if nm.hasIndex() {
		nm.Format = formatQueueIndex
	}
	// The manifest and CURRENT.tmp are written, then every fsync the
	// commit point needs runs at once (the data directory, the manifest,
	// its directory, CURRENT.tmp): the file system's journal serves
	// concurrent fsyncs in one commit, where five in a row cost five.
	// Nothing names the new manifest until CURRENT is renamed, after they
	// all returned.
	t0 := time.Now()
	manPath := filepath.Join(s.dir, "manifests", manifestName(gen))
	curTmp := filepath.Join(s.dir, "CURRENT.tmp")
	var mf, cf File
	closeAll := func() {
		for _, f := range []File{mf, cf} {
			if f != nil {
				f.Close()
			}
		}
	}
	fail := func(what string, err error) {
		closeAll()
		_ = s.opts.FS.Remove(manPath)
		_ = s.opts.FS.Remove(curTmp)
		failAll(fmt.Errorf("%s: %w", what, err))
	}
	b, err := json.Marshal(nm)
	if err != nil {
		fail("manifest", err)
		return
	}
	_ = s.opts.FS.Remove(manPath) // left by a commit that crashed at this generation
	if mf, err = s.opts.FS.Create(manPath); err != nil {
		fail("manifest", err)
		return
	}
	if _, err := mf.Write(append(b, '\n')); err != nil {
		fail("manifest", err)
		return
	}
	_ = s.opts.FS.Remove(curTmp)
	if cf, err = s.opts.FS.Create(curTmp); err != nil {
		fail("CURRENT", err)
		return
	}
	if _, err := cf.Write([]byte(manifestName(gen) + "\n")); err != nil {
		fail("CURRENT", err)
		return
	}
	t1 := time.Now()
	if err := syncAll(
		func() error { return wrapErr("sync data", s.opts.FS.SyncDir(dataDir)) },
		func() error { return wrapErr("manifest", mf.Sync()) },
		func() error { return wrapErr("manifest", s.opts.FS.SyncDir(filepath.Dir(manPath))) },
		func() error { return wrapErr("CURRENT", cf.Sync()) },
	); err != nil {
		closeAll()
		_ = s.opts.FS.Remove(manPath)
		_ = s.opts.FS.Remove(curTmp)
		failAll(err)
		return
	}
	s.hook("data-synced")
	for _, f := range []File{mf, cf} {
		if err := f.Close(); err != nil {
			mf, cf = nil, nil
			fail("close", err)
			return
		}
	}
	mf, cf = nil, nil
	s.hook("manifest-written")
	s.hook("current-tmp-written")
	t2 := time.Now()
	if err := s.opts.FS.Rename(curTmp, filepath.Join(s.dir, "CURRENT")); err != nil {
		fail("CURRENT", err)
		return
	}
	s.hook("current-renamed")
	// From here the group is decided: CURRENT names it (for every reader
	// from now on), so nothing it wrote is removed whatever fails next. A
	// failed sync of the store directory is reported: the commit may not
	// survive a power loss.
	committed = true
	syncErr := s.opts.FS.SyncDir(s.dir)
	for _, r := range ok {
		r.err = nil
		if syncErr != nil {
			r.err = r.t.errf("commit: generation %d is committed (CURRENT names it), but the store directory's fsync failed, so it may not survive a power loss: %w", gen, syncErr)
		}
	}
	s.hook("committed")
	t3 := time.Now()
	st.Manifest, st.Sync, st.Current = t1.Sub(t0), t2.Sub(t1), t3.Sub(t2)
	s.mu.Lock()
	s.cached = nm
	if s.retained == nil {
		s.retained = map[string]*manifest{}
	}
	s.retained[manifestName(gen)] = nm // cleanup need not decode it again
	// Cleanup reads every retained manifest: run it every few commits, not
	// after each one (unreferenced files wait a little longer, that's all).
	s.commits++
	due := s.commits >= cleanupEvery || s.opts.Now().Sub(s.lastCleanup) > cleanupAfter || listed != nil
	if due {
		s.commits, s.lastCleanup = 0, s.opts.Now()
	}
	s.mu.Unlock()
	if due {
		c0 := time.Now()
		if _, cerr := s.cleanupLocked(lctx, listed); cerr != nil {
			s.opts.Logger.Warn("local store: cleanup after commit", "err", cerr)
		}
		st.Cleanup = time.Since(c0)
	}
	s.opts.Logger.Debug("local store: committed", "generation", gen, "transactions", len(ok), "of", len(group))
}

// conflict checks r's transaction against nm, the state its group has
// reached: the current manifest and the members before it.
func (r *commitReq) conflict(nm *manifest) error {
	t, base := r.t, r.t.m
	for _, tc := range t.ws.Tables() {
		if tableGen(nm, tc.Name) != tableGen(base, tc.Name) {
			return fmt.Errorf("local store %s: table %q changed by generation %d since this transaction began at %d: %w",
				t.s.dir, tc.Name, tableGen(nm, tc.Name), base.Generation, pillar.ErrConflict)
		}
	}
	for _, a := range t.ws.Attrs() {
		if nm.Attrs[a.Name].Gen != base.Attrs[a.Name].Gen {
			return fmt.Errorf("local store %s: attribute %q changed by generation %d since this transaction began at %d: %w",
				t.s.dir, a.Name, nm.Attrs[a.Name].Gen, base.Generation, pillar.ErrConflict)
		}
	}
	return nil
}

// apply moves r's staged files into data/ under names starting with prefix
// (unique to the member in its group; listing each in its intent first), then, once all of them are there, applies its changes to nm. On
// error nm is as it was; r.moved names what is in data/ already.
func (r *commitReq) apply(nm *manifest, prefix string) error {
	t := r.t
	s := t.s
	dataDir := filepath.Join(s.dir, "data")
	tables := t.ws.Tables()
	files := make([][]fileEntry, len(tables))
	for i, ch := range tables {
		if ch.Drop {
			continue
		}
		for _, sf := range stagedFiles(ch.Parts) {
			dst := prefix + sf.name
			fe := fileEntry{Name: dst, Rows: sf.rows, Bytes: sf.bytes, CRC32C: sf.crc}
			if sf.blocksCRC != "" {
				// The sidecar goes first: a manifest naming the file
				// names it too, and the intent covers both.
				fe.Blocks = &blockSums{File: blocksName(dst), Size: tableBlockSize, CRC32C: sf.blocksCRC}
				if err := t.intend(fe.Blocks.File); err != nil {
					return t.errf("commit: %w", err)
				}
				if err := s.opts.FS.Rename(filepath.Join(t.staging, blocksName(sf.name)), filepath.Join(dataDir, fe.Blocks.File)); err != nil {
					return t.errf("commit: table %q: %w", ch.Name, err)
				}
				r.moved = append(r.moved, fe.Blocks.File)
				s.hook("moved-blocks")
			}
			if err := t.intend(dst); err != nil {
				return t.errf("commit: %w", err)
			}
			if err := s.opts.FS.Rename(filepath.Join(t.staging, sf.name), filepath.Join(dataDir, dst)); err != nil {
				return t.errf("commit: table %q: %w", ch.Name, err)
			}
			r.moved = append(r.moved, dst)
			s.hook("moved-data")
			files[i] = append(files[i], fe)
		}
	}
	segs := make([]string, len(r.staged))
	for i, qf := range r.staged {
		name := prefix + qf.name
		if err := t.intend(name); err != nil {
			return t.errf("commit: %w", err)
		}
		if err := s.opts.FS.Rename(filepath.Join(t.staging, qf.name), filepath.Join(dataDir, name)); err != nil {
			return t.errf("commit: export queue partition %d: %w", qf.partition, err)
		}
		r.moved = append(r.moved, name)
		s.hook("queue-written")
		segs[i] = name
	}

	// Every file is in place: the changes, which cannot fail.
	gen := nm.Generation
	for i, ch := range tables {
		name := ch.Name
		if ch.Drop {
			delete(nm.Tables, name)
			continue
		}
		schema := schemaString(parquet.SchemaOf(reflect.New(ch.RowType).Interface()))
		te := &tableEntry{RowType: ch.RowType.String(), Schema: schema, SortedBy: ch.SortedBy, Files: files[i], Gen: gen}
		if old, ok := nm.Tables[name]; ok && ch.Mode == pillar.Append {
			te.Files = append(append([]fileEntry(nil), old.Files...), files[i]...)
			if !equalStrings(old.SortedBy, ch.SortedBy) {
				te.SortedBy = nil // an append breaks any claimed order
			}
		}
		nm.Tables[name] = te
	}
	for _, a := range t.ws.Attrs() {
		switch {
		case a.Expect:
		case a.Delete:
			delete(nm.Attrs, a.Name)
		default:
			nm.Attrs[a.Name] = attrEntry{Value: a.Value, Gen: gen}
		}
	}
	// The export queue: offsets are assigned now, after everything
	// committed before and the group's members before this one.
	nowMS := nm.CommittedAt.UnixMilli()
	for i, qf := range r.staged {
		q := nm.Queue[qf.partition]
		if q == nil {
			q = &queueEntry{}
			nm.Queue[qf.partition] = q
		}
		q.Segments = append(q.Segments, segment{File: segs[i], First: q.end(), Count: qf.count, Bytes: qf.bytes, CommittedAtMS: nowMS, CRC32C: qf.crc, HeadsCRC32C: qf.headsCRC, FooterCRC32C: qf.footerCRC})
	}
	for _, id := range t.ws.Consumed() {
		nm.Consumed[id] = gen
	}
	return nil
}
