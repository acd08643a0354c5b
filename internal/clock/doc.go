// Package clock is the time source of components that wait or time out
// (STYLE.md point 10): the router's hedge timers, refresh tickers and request
// timeouts, a cobbled node's fault delays. Options take a Clock whose zero
// value means Real, the wall clock; tests pass a Fake (FAKE: a test clock
// that moves only when the test calls Advance), so timing rules are checked
// exactly instead of against the wall clock of a loaded machine, and timing
// tests can run in parallel.
//
// Invariants of Fake: Now never moves backwards; Advance fires every waiter
// whose instant it passes, in time order (ties in registration order), with
// Now reading that instant while it fires; a stopped timer never fires; a
// WithTimeout context's Err (and that of contexts derived from it) is
// context.DeadlineExceeded once the clock passes its deadline.
package clock
