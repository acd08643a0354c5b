//go:build !linux

package router

import "errors"

// newWaker: precise timers are Linux-only (timerfd); elsewhere the router
// uses the runtime's timers.
func newWaker() (waker, error) { return nil, errors.New("router: no timerfd on this system") }
