package router

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// timerfd is a waker on a Linux timerfd, read through the Go netpoller (a
// non-blocking file), so the waiting goroutine holds no thread.
type timerfd struct {
	fd  int
	f   *os.File
	buf [8]byte
}

func newWaker() (waker, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &timerfd{fd: fd, f: os.NewFile(uintptr(fd), "router-hedge-timerfd")}, nil
}

func (t *timerfd) arm(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	return unix.TimerfdSettime(t.fd, 0, &spec, nil)
}

// wait reads the expiration count (blocking in the netpoller until the
// timer fires).
func (t *timerfd) wait() error {
	_, err := t.f.Read(t.buf[:])
	return err
}

func (t *timerfd) close() error { return t.f.Close() }
