package redisstore_test

import (
	"os/exec"
	"syscall"
)

// dieWithTests makes the kernel kill a test's redis-server when the test
// binary dies, even by a crash that skips every cleanup.
func dieWithTests(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
