package httpserve

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/listentest"
)

// keepAliveClient sends a request every pause on one connection, as a
// proxy's pooled connection does under light load, until an answer says
// "Connection: close" (the client then moves to another replica) or a
// request fails. It reports the failure, nil when the server closed the
// connection between requests the polite way.
func keepAliveClient(addr string, pause time.Duration, started *sync.WaitGroup) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		started.Done()
		return err
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for i := 0; ; i++ {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if i == 0 {
			started.Done()
		}
		if resp.Close {
			return nil
		}
		time.Sleep(pause)
	}
}

// TestShutdownMovesKeepAliveClients: keep-alive clients that pause between
// requests lose none when the server stops. Closing their idle
// connections at once would lose the request each sends next; draining
// answers it with "Connection: close" instead.
func TestShutdownMovesKeepAliveClients(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drain time.Duration
		lost  bool
	}{
		{"drained", time.Minute, false},
		{"closed at once", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := listentest.Loopback(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			served := make(chan error, 1)
			go func() { served <- Config{DrainTimeout: tc.drain}.Serve(ctx, ln, http.NotFoundHandler()) }()
			const clients = 4
			var started sync.WaitGroup
			started.Add(clients)
			failures := make(chan error, clients)
			for range clients {
				go func() { failures <- keepAliveClient(ln.Addr().String(), 100*time.Millisecond, &started) }()
			}
			started.Wait()
			cancel()
			lost := 0
			for range clients {
				if err := <-failures; err != nil {
					lost++
					if !tc.lost {
						t.Errorf("a request was lost: %v", err)
					}
				}
			}
			if tc.lost && lost == 0 {
				t.Error("no request was lost without a drain: the test does not exercise the race it is for")
			}
			if err := <-served; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDrainEndsWhenQuiet: a drain does not wait its whole timeout for a
// connection that sends nothing; it ends after a quiet second and the idle
// connection is closed.
func TestDrainEndsWhenQuiet(t *testing.T) {
	ln := listentest.Loopback(t)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Config{DrainTimeout: time.Hour}.Serve(ctx, ln, http.NotFoundHandler()) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve still drains a minute after its context ended, with one idle connection")
	}
}
