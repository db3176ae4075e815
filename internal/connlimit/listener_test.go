package connlimit

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/testutil/listentest"
)

// TestAcceptErrors: which errors are retried, which returned, and that a
// listener closed while waiting to retry ends Accept.
func TestAcceptErrors(t *testing.T) {
	for _, tc := range []struct {
		err   error
		retry bool
	}{
		{listentest.AcceptErr(syscall.EMFILE), true},
		{listentest.AcceptErr(syscall.ENFILE), true},
		{listentest.AcceptErr(syscall.ENOBUFS), true},
		{listentest.AcceptErr(syscall.ENOMEM), true},
		{listentest.AcceptErr(syscall.ECONNABORTED), true},
		{listentest.AcceptErr(syscall.EINTR), true},
		{fmt.Errorf("wrapped: %w", syscall.EMFILE), true},
		{&net.OpError{Op: "accept", Net: "tcp", Err: net.ErrClosed}, false},
		{listentest.AcceptErr(syscall.EBADF), false},
		{listentest.AcceptErr(syscall.EINVAL), false},
		{io.EOF, false},
	} {
		if got := retryableAccept(tc.err); got != tc.retry {
			t.Errorf("retryableAccept(%v) = %v, want %v", tc.err, got, tc.retry)
		}
	}

	boom := errors.New("boom")
	ll := NewListener(&listentest.Failing{Listener: listentest.Loopback(t), Err: boom, Failures: -1}, Caps{}, nil, slog.Default())
	if _, err := ll.Accept(); err != boom {
		t.Fatalf("permanent error: got %v, want %v", err, boom)
	}

	inner := &listentest.Failing{Listener: listentest.Loopback(t), Err: listentest.AcceptErr(syscall.EMFILE), Failures: -1}
	ll = NewListener(inner, Caps{}, nil, slog.Default())
	done := make(chan error, 1)
	go func() {
		_, err := ll.Accept()
		done <- err
	}()
	for inner.Calls() < 3 { // retried at least twice
		select {
		case err := <-done:
			t.Fatalf("Accept returned on a temporary error: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	_ = ll.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waiting to retry after Close")
	}
}

// capTest accepts from a limitListener and reports, for each connection
// dialed, whether it was admitted or closed at once.
type capTest struct {
	t        *testing.T
	ll       *Listener
	accepted chan net.Conn
	server   map[string]net.Conn // admitted, by client address
}

func newCapTest(t *testing.T, caps Caps, reg prometheus.Registerer) *capTest {
	ct := &capTest{t: t, ll: NewListener(listentest.Loopback(t), caps, NewMetrics(reg, HTTP), slog.Default()),
		accepted: make(chan net.Conn, 16), server: map[string]net.Conn{}}
	go func() {
		for {
			c, err := ct.ll.Accept()
			if err != nil {
				close(ct.accepted)
				return
			}
			ct.accepted <- c
		}
	}()
	t.Cleanup(func() {
		_ = ct.ll.Close()
		for c := range ct.accepted {
			c.Close()
		}
		for _, c := range ct.server {
			c.Close()
		}
	})
	return ct
}

// dial connects from the loopback address from and reports whether the
// listener admitted the connection (Accept returned it) or closed it.
func (ct *capTest) dial(from string) (net.Conn, bool) {
	ct.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", ct.ll.Addr().String())
	if err != nil {
		ct.t.Fatal(err)
	}
	ct.t.Cleanup(func() { c.Close() })
	closed := make(chan struct{})
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			close(closed)
		}
	}()
	select {
	case sc := <-ct.accepted:
		if sc.RemoteAddr().String() != c.LocalAddr().String() {
			ct.t.Fatalf("accepted %s, dialed from %s", sc.RemoteAddr(), c.LocalAddr())
		}
		ct.server[c.LocalAddr().String()] = sc
		return c, true
	case <-closed:
		return c, false
	case <-time.After(10 * time.Second):
		ct.t.Fatalf("connection from %s neither accepted nor closed", from)
		return nil, false
	}
}

// serverClose closes the server side of an admitted connection.
func (ct *capTest) serverClose(c net.Conn) {
	sc := ct.server[c.LocalAddr().String()]
	delete(ct.server, c.LocalAddr().String())
	if err := sc.Close(); err != nil {
		ct.t.Fatal(err)
	}
	_ = sc.Close() // a second Close gives nothing back twice
}

// TestConnectionCaps: a connection over the process cap or its peer's cap
// is closed at once; closing an admitted one makes room.
func TestConnectionCaps(t *testing.T) {
	reg := prometheus.NewRegistry()
	ct := newCapTest(t, Caps{Listener: HTTP, MaxConns: 3, PerPeer: 2}, reg)
	metric := func(name, reason string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() != name || (reason != "" && m.GetLabel()[0].GetValue() != reason) {
					continue
				}
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no metric %s %s", name, reason)
		return 0
	}
	want := func(from string, admitted bool) net.Conn {
		t.Helper()
		c, ok := ct.dial(from)
		if ok != admitted {
			t.Fatalf("connection from %s: admitted %v, want %v", from, ok, admitted)
		}
		return c
	}
	a1 := want("127.0.0.2", true)
	want("127.0.0.2", true)
	want("127.0.0.2", false) // peer cap
	b1 := want("127.0.0.3", true)
	want("127.0.0.4", false) // process cap
	want("127.0.0.3", false) // process cap first
	if got := metric("sluice_http_open_connections", ""); got != 3 {
		t.Errorf("open connections %v, want 3", got)
	}
	if p, c := metric("sluice_http_rejected_connections_total", rejectPerPeer), metric("sluice_http_rejected_connections_total", rejectMaxConns); p != 1 || c != 2 {
		t.Errorf("rejected: per peer %v, process %v; want 1 and 2", p, c)
	}

	ct.serverClose(b1)
	want("127.0.0.4", true)
	want("127.0.0.2", false) // its peer is still full
	ct.serverClose(a1)
	want("127.0.0.2", true)
	if got := metric("sluice_http_open_connections", ""); got != 3 {
		t.Errorf("open connections %v, want 3", got)
	}
}

// TestConnectionCapsOff: with no caps, every connection is admitted.
func TestConnectionCapsOff(t *testing.T) {
	ct := newCapTest(t, Caps{}, nil)
	for range 20 {
		if _, ok := ct.dial("127.0.0.2"); !ok {
			t.Fatal("connection closed with no cap")
		}
	}
}
