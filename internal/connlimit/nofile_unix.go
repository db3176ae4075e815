//go:build unix

package connlimit

import "syscall"

// OpenFileLimit is the soft RLIMIT_NOFILE (Go raises it to the hard limit
// at start), 0 when unknown.
func OpenFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return r.Cur
}
