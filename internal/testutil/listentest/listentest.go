// Package listentest has listeners for tests of accept loops: one on a
// free loopback port, and one whose accepts fail as the kernel's would.
package listentest

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
)

// Failing fails its first Failures accepts with Err (all of them when
// Failures is negative), then accepts from the listener it wraps.
type Failing struct {
	net.Listener
	Err      error
	Failures int64
	calls    atomic.Int64
}

// Accept implements net.Listener.
func (l *Failing) Accept() (net.Conn, error) {
	if n := l.calls.Add(1); l.Failures < 0 || n <= l.Failures {
		return nil, l.Err
	}
	return l.Listener.Accept()
}

// Calls is how many times Accept was called.
func (l *Failing) Calls() int64 { return l.calls.Load() }

// AcceptErr is the error Go's net package returns when accept(2) fails
// with errno.
func AcceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// Loopback listens on a free port of 127.0.0.1 until the test ends.
func Loopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}
