//go:build !unix

package httpserve

// openFileLimit is unknown here: the connection cap is not lowered.
func openFileLimit() uint64 { return 0 }
