package ytfake

import (
	"fmt"

	"go.ytsaurus.tech/yt/go/guid"
	"go.ytsaurus.tech/yt/go/yt"
	"go.ytsaurus.tech/yt/go/yterrors"
)

// lock is a Cypress lock. Implicit locks (taken by writes) and explicit
// ones (LockNode) are the same objects, as on a master.
type lock struct {
	id     guid.GUID
	nodeID yt.NodeID
	path   string
	tx     *Tx
	mode   yt.LockMode
	child  string // shared locks: the child_key
	attr   string // shared locks: the attribute_key
	state  string // "acquired" or "pending"
}

// conflict says whether lock l, held by another transaction, keeps the
// requester from taking mode (with child/attribute key) on the same node.
//
// The compatibility rules are docs: storage/transactions.md, "Lock
// compatibility": a snapshot lock can always be taken and never blocks; a
// shared or exclusive lock cannot be taken while another transaction that
// is not an ancestor holds an exclusive one; an exclusive one cannot be
// taken while another holds a shared one; shared locks conflict only on
// the same child_key or attribute_key.
func conflict(l *lock, mode yt.LockMode, child, attr string) bool {
	if mode == yt.LockSnapshot || l.mode == yt.LockSnapshot {
		return false
	}
	if l.mode == yt.LockExclusive || mode == yt.LockExclusive {
		return true
	}
	return child != "" && l.child == child || attr != "" && l.attr == attr
}

// isAncestor reports whether a is t or one of t's ancestors.
func isAncestor(a, t *Tx) bool {
	for ; t != nil; t = t.parent {
		if t == a {
			return true
		}
	}
	return false
}

// takeLock takes (or, outside a transaction, only checks: the master runs
// such a command in a system transaction of its own) a lock on the node at
// p in v's transaction. c.mu is held.
func (v view) takeLock(p string, n *node, mode yt.LockMode, child, attr string) error {
	c := v.c
	for _, l := range c.locks {
		if l.nodeID != n.id || l.state != "acquired" {
			continue
		}
		if v.tx != nil && isAncestor(l.tx, v.tx) {
			// "A shared or exclusive lock cannot be taken if the
			// transaction or any of its ancestors has already taken a
			// snapshot lock."
			if l.mode == yt.LockSnapshot && mode != yt.LockSnapshot {
				return yterrors.Err(yterrors.CodeSameTransactionLockConflict,
					fmt.Sprintf("Cannot take %q lock for node /%s since %q lock is already taken by the same transaction", mode, p, l.mode),
					yterrors.Attr("path", "/"+p))
			}
			continue
		}
		if !conflict(l, mode, child, attr) {
			continue
		}
		code := yterrors.CodeConcurrentTransactionLockConflict
		if v.tx != nil && isAncestor(v.tx, l.tx) {
			code = yterrors.CodeDescendantTransactionLockConflict
		}
		what := fmt.Sprintf("%q lock", l.mode)
		if l.child != "" {
			what += fmt.Sprintf(" for child %q", l.child)
		}
		if l.attr != "" {
			what += fmt.Sprintf(" for attribute %q", l.attr)
		}
		return yterrors.Err(code,
			fmt.Sprintf("Cannot take %q lock for node /%s since %s is taken by concurrent transaction %s", mode, p, what, l.tx.id),
			yterrors.Attr("path", "/"+p), yterrors.Attr("winner_transaction", l.tx.id.String()))
	}
	if v.tx == nil {
		return nil
	}
	for _, l := range c.locks {
		if l.tx == v.tx && l.nodeID == n.id && l.mode == mode && l.child == child && l.attr == attr && l.state == "acquired" {
			return nil
		}
	}
	c.locks = append(c.locks, &lock{id: guid.New(), nodeID: n.id, path: p, tx: v.tx, mode: mode, child: child, attr: attr, state: "acquired"})
	return nil
}

// lockChild takes the shared lock with child_key that creating or removing
// the child named by p takes on its parent map node ("Creating a new entry
// in the folder, as well as changing or deleting an existing entry is
// accompanied by taking a shared lock with the corresponding child_key",
// docs: storage/transactions.md, "Implicit locks").
func (v view) lockChild(p string) error {
	parent, name := split(p)
	if parent == "" {
		return nil
	}
	pn := v.get(parent)
	if pn == nil {
		return nil
	}
	return v.takeLock(parent, pn, yt.LockShared, name, "")
}

// lockSubtree takes an exclusive lock on p and checks that no other
// transaction holds a lock below it (a remove or a replace changes them
// all).
func (v view) lockSubtree(p string) error {
	for _, q := range v.paths() {
		if q == p || len(q) > len(p) && q[:len(p)+1] == p+"/" {
			if n := v.get(q); n != nil {
				if err := v.takeLock(q, n, yt.LockExclusive, "", ""); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// release drops t's locks (or hands its shared and exclusive ones to its
// parent, when it committed into one), then grants pending locks that no
// longer conflict. c.mu is held.
func (c *Cluster) release(t *Tx, toParent bool) {
	var keep []*lock
	for _, l := range c.locks {
		if l.tx != t {
			keep = append(keep, l)
			continue
		}
		if toParent && t.parent != nil && l.mode != yt.LockSnapshot && l.state == "acquired" {
			l.tx = t.parent
			keep = append(keep, l)
		}
	}
	c.locks = keep
	for _, l := range c.locks {
		if l.state != "pending" {
			continue
		}
		ok := true
		for _, o := range c.locks {
			if o != l && o.nodeID == l.nodeID && o.state == "acquired" && !isAncestor(o.tx, l.tx) && conflict(o, l.mode, l.child, l.attr) {
				ok = false
				break
			}
		}
		if ok {
			l.state = "acquired"
		}
	}
}
