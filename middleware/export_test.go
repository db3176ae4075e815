package middleware

// MemoryMaxKeys returns the cap of l's in-memory store (0: no cap), or -1
// when l has none.
func MemoryMaxKeys(l *Limiter) int {
	if l.stack == nil || l.stack.Memory == nil {
		return -1
	}
	return l.stack.Memory.MaxKeys()
}
