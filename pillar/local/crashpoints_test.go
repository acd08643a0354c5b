package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// The kill -9 tests run a child process (this test binary, one test, a
// child mode in PILLAR_LOCAL_CHILD) that kills itself at its n-th step,
// for n = 1, 2, … until a child finishes.

// crashChild returns, in a child of crashPoints, a hook (Options.crashAt or
// crashAtCleanup) that SIGKILLs the process at its PILLAR_LOCAL_STEP-th
// call.
func crashChild() func(string) {
	n, _ := strconv.Atoi(os.Getenv("PILLAR_LOCAL_STEP"))
	step := 0
	return func(string) {
		step++
		if step == n {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
}

// crashPoints runs test's child mode child once per crash point n = 1 … max,
// each on a fresh copy of the store tmpl, and calls check with the copy,
// whether the child was killed and its output. A child that is not killed
// must exit 0: that run is the last, and crashPoints returns n-1 (the steps
// the child has). It fails the test when no child finishes within max.
func crashPoints(t *testing.T, test, child, tmpl string, max int, check func(n int, dir string, killed bool, out []byte)) int {
	t.Helper()
	for n := 1; n <= max; n++ {
		dir := filepath.Join(t.TempDir(), "store")
		if out, err := exec.Command("cp", "-a", tmpl, dir).CombinedOutput(); err != nil {
			t.Fatalf("copy: %v %s", err, out)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
		cmd.Env = append(os.Environ(), "PILLAR_LOCAL_CHILD="+child, "PILLAR_LOCAL_DIR="+dir, "PILLAR_LOCAL_STEP="+strconv.Itoa(n))
		out, _ := cmd.CombinedOutput()
		killed := cmd.ProcessState.Sys().(syscall.WaitStatus).Signaled()
		if !killed && !cmd.ProcessState.Success() {
			t.Fatalf("step %d: child failed: %v\n%s", n, cmd.ProcessState, out)
		}
		check(n, dir, killed, out)
		if !killed {
			return n - 1
		}
	}
	t.Fatalf("%s: the child did not finish within %d crash points", test, max)
	return 0
}
