// Package storetest is the conformance suite of the pillar.Store interface.
// Every backend runs it:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) pillar.Store { return newEmptyStore(t) })
//	}
//
// The factory returns a new, empty store with at least 2 partitions for each
// subtest; the suite closes it. The subtests check the semantics documented
// in pillar/store.go, not a backend's layout: table contents and row ranges,
// writer order, snapshots that keep reading their generation while commits
// happen, attributes and the ExpectAttr compare-and-swap, first-committer-wins
// conflicts (ErrConflict, with the losing transaction's changes invisible),
// queue offsets dense per partition and assigned at commit, consumed marks,
// ErrTxDone after the end of a transaction and ErrNotFound where documented,
// a table dropped and re-written in one Tx, a commit whose context is
// canceled failing with an error that wraps context.Canceled, and a
// snapshot and a Tx held across 20 commits that replace, append to and drop
// what they read (run a backend with its time-based retention as short as
// it goes, so that only the snapshot's hold protects it).
//
// RunFaults runs the fault cases; the backend's FaultFactory hands out a
// store and a switch that makes its commit path's writes fail. A failed
// commit's error must wrap the I/O error (errors.Is finds ErrInjected and
// syscall.EIO), nothing of it may be visible, and the store stays writable.
//
// Nothing in the suite depends on timing: concurrent subtests check outcomes
// (every increment of a counter survives), never interleavings. Subtests run
// one after another (a remote backend pays a round trip per call, and the
// local one takes a file lock per commit).
package storetest
