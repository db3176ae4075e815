//go:build !unix

package connlimit

// OpenFileLimit is unknown here: the connection cap is not lowered.
func OpenFileLimit() uint64 { return 0 }
