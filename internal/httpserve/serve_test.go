package httpserve

import (
	"bufio"
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/connlimit"
	"github.com/sluice-dev/sluice/internal/testutil/listentest"
)

// TestServeRetriesAcceptErrors: out of file descriptors, Serve pauses and
// accepts again instead of returning (and ending the process).
func TestServeRetriesAcceptErrors(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED} {
		t.Run(errno.Error(), func(t *testing.T) {
			ln := &listentest.Failing{Listener: listentest.Loopback(t), Err: listentest.AcceptErr(errno), Failures: 4}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- Serve(ctx, ln, http.NotFoundHandler()) }()
			resp, _, err := tryRoundTrip(ln.Addr().String(), "GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
			select {
			case err := <-done:
				t.Fatalf("Serve returned after %d accepts, %d of them failing: %v", ln.Calls(), ln.Failures, err)
			default:
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if n := ln.Calls(); n <= ln.Failures {
				t.Fatalf("%d accepts, want more than the %d failures", n, ln.Failures)
			}
		})
	}
}

func lim(maxConns, perPeer int, idle time.Duration) limits {
	return limits{caps: connlimit.Caps{Listener: connlimit.HTTP, MaxConns: maxConns, PerPeer: perPeer}, idle: idle, drain: DefaultDrainTimeout}
}

// TestConfigResolve: defaults, "no cap", the process cap lowered to fit
// the open-file limit, and the share of a budget with the gRPC listener.
func TestConfigResolve(t *testing.T) {
	shared := connlimit.NewBudget(256, slog.Default(), Config{}.Caps(), connlimit.Caps{Listener: connlimit.GRPC, MaxConns: 1024, PerPeer: 128})
	for _, tc := range []struct {
		c      Config
		nofile uint64
		want   limits
	}{
		{Config{}, 0, lim(DefaultMaxConns, DefaultMaxConnsPerPeer, DefaultIdleTimeout)},
		{Config{}, 1 << 20, lim(DefaultMaxConns, DefaultMaxConnsPerPeer, DefaultIdleTimeout)},
		{Config{}, 256, lim(192, DefaultMaxConnsPerPeer, DefaultIdleTimeout)},
		{Config{MaxConns: 100, MaxConnsPerPeer: 10, IdleTimeout: time.Second}, 256, lim(100, 10, time.Second)},
		{Config{MaxConns: 1000}, 1024, lim(768, DefaultMaxConnsPerPeer, DefaultIdleTimeout)},
		{Config{MaxConns: -1, MaxConnsPerPeer: -1, IdleTimeout: -time.Second}, 256, lim(0, 0, DefaultIdleTimeout)},
		{Config{Budget: shared}, 1 << 20, lim(96, DefaultMaxConnsPerPeer, DefaultIdleTimeout)},
		// A budget without this listener: the whole budget.
		{Config{Budget: connlimit.NewBudget(256, slog.Default())}, 256, lim(192, DefaultMaxConnsPerPeer, DefaultIdleTimeout)},
	} {
		if got := tc.c.resolve(tc.nofile); got != tc.want {
			t.Errorf("%+v with open-file limit %d: %+v, want %+v", tc.c, tc.nofile, got, tc.want)
		}
	}
}

// TestIdleTimeout: an idle keep-alive connection is closed after the idle
// timeout.
func TestIdleTimeout(t *testing.T) {
	ln := listentest.Loopback(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = Config{IdleTimeout: 200 * time.Millisecond}.Serve(ctx, ln, http.NotFoundHandler()) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatal("the server closed after one request; want keep-alive")
	}
	// Nothing more is sent: the server must close the connection (EOF)
	// well before this read's own deadline.
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection: read %d bytes, %v; want EOF", n, err)
	}
}

// TestBindFlags: the defaults, --drain-timeout=0 turning the drain off,
// and refused durations naming what is wrong.
func TestBindFlags(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		idle, drain time.Duration
		err         string
	}{
		{nil, DefaultIdleTimeout, DefaultDrainTimeout, ""},
		{[]string{"--idle-timeout=3m", "--drain-timeout=4s"}, 3 * time.Minute, 4 * time.Second, ""},
		{[]string{"--drain-timeout=0"}, DefaultIdleTimeout, -1, ""},
		{[]string{"--drain-timeout=-1s"}, 0, 0, "must not be negative"},
		{[]string{"--idle-timeout=0s"}, 0, 0, "must be positive"},
		{[]string{"--drain-timeout=soon"}, 0, 0, "invalid duration"},
	} {
		var c Config
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.BindFlags(fs)
		err := fs.Parse(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || c.IdleTimeout != tc.idle || c.DrainTimeout != tc.drain {
			t.Errorf("%v: idle %s, drain %s, %v; want %s, %s", tc.args, c.IdleTimeout, c.DrainTimeout, err, tc.idle, tc.drain)
		}
		if got := c.resolve(0).drain; tc.drain < 0 && got != 0 {
			t.Errorf("%v: drain in force %s, want none", tc.args, got)
		}
	}
}
