//go:build !linux

package chaos

import "os/exec"

// dieWithParent is a no-op where the kernel cannot tie a child's life to
// its parent's; the suite still kills its children when it ends normally.
func dieWithParent(*exec.Cmd) {}
