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
// ErrTxDone after the end of a transaction and ErrNotFound where documented.
//
// Nothing in the suite depends on timing: concurrent subtests check outcomes
// (every increment of a counter survives), never interleavings. Subtests run
// one after another (a remote backend pays a round trip per call, and the
// local one takes a file lock per commit).
package storetest
