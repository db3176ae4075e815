// Package syncbuf is a bytes.Buffer that several goroutines may write and
// read at once: the sink of a logger or a child process's output streams
// that a test reads while they run.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is safe for concurrent use. The zero value is empty and ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count is how many times s occurs in what was written so far.
func (b *Buffer) Count(s string) int { return strings.Count(b.String(), s) }
