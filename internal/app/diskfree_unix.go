//go:build unix

package app

import (
	"fmt"
	"syscall"
)

// freeBytes is the space the file system holding dir gives an unprivileged
// writer. (The conversions are for the systems whose fields are not
// 64-bit unsigned.)
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("free space of %s: %w", dir, err)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
