//go:build linux

package shm

import (
	"fmt"
	"io/fs"
	"syscall"
)

// checkDirOwner refuses a directory that another user owns: its owner could replace the socket.
func checkDirOwner(fi fs.FileInfo, uid int) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("cannot read its owner")
	}
	if int(st.Uid) != uid {
		return fmt.Errorf("owned by uid %d, not this process's uid %d: set Config.Dir or %s to a directory of this user", st.Uid, uid, DirEnv)
	}
	return nil
}
