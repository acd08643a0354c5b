//go:build !linux

package pace

import "errors"

func lowerThread() {}

func threadPriority() (nice, ioprio int, err error) {
	return 0, 0, errors.New("pace: thread priorities are read on Linux only")
}
