package chaos

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the child killed when the suite's process dies, so a
// crashed or timed-out suite never leaves dispatchers running.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
