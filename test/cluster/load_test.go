package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// load is steady traffic from several clients, each sending a request,
// reading its answer and pausing a little, as a proxy's pooled connections
// do under moderate load. Each answer is allowed, denied, or a failure
// (anything else: a 5xx, a connection reset or closed mid-request).
type load struct {
	allowed, denied, failed atomic.Int64
	stop                    chan struct{}
	wg                      sync.WaitGroup
	start                   time.Time
	elapsed                 time.Duration

	mu       sync.Mutex
	failures []string // the first few, for the failure message
}

// pause is each client's time between an answer and its next request.
const pause = 5 * time.Millisecond

func startLoad(clients int, client func(l *load)) *load {
	l := &load{stop: make(chan struct{}), start: time.Now()}
	for range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			client(l)
		}()
	}
	return l
}

// next pauses before a client's next request, and reports false once the
// load is stopped.
func (l *load) next() bool {
	select {
	case <-l.stop:
		return false
	default:
		time.Sleep(pause)
		return true
	}
}

// Stop ends the load and waits for every client's last request.
func (l *load) Stop() {
	close(l.stop)
	l.wg.Wait()
	l.elapsed = time.Since(l.start)
}

func (l *load) fail(format string, args ...any) {
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < 10 {
		l.failures = append(l.failures, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

// count sorts a status: 200 allowed, deny denied, anything else a failure.
func (l *load) count(status, deny int, body string) {
	switch status {
	case http.StatusOK:
		l.allowed.Add(1)
	case deny:
		l.denied.Add(1)
	default:
		l.fail("status %d: %.200s", status, body)
	}
}

func (l *load) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	total := l.allowed.Load() + l.denied.Load() + l.failed.Load()
	s := fmt.Sprintf("%d requests in %s (%.0f/s): %d allowed, %d denied, %d failed",
		total, l.elapsed.Round(100*time.Millisecond), float64(total)/l.elapsed.Seconds(), l.allowed.Load(), l.denied.Load(), l.failed.Load())
	if len(l.failures) > 0 {
		s += "\n  " + strings.Join(l.failures, "\n  ")
	}
	return s
}

// throughProxy is a client of a proxy (nginx, Envoy) over one keep-alive
// connection; the proxy asks the check Service for each request. Denials
// are deny.
func throughProxy(url string, header http.Header, deny int) func(l *load) {
	return func(l *load) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		defer c.CloseIdleConnections()
		for l.next() {
			req, err := http.NewRequest(http.MethodGet, url, nil)
			if err != nil {
				l.fail("%v", err)
				continue
			}
			req.Header = header.Clone()
			req.Host = header.Get("Host")
			resp, err := c.Do(req)
			if err != nil {
				l.fail("%v", err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			l.count(resp.StatusCode, deny, string(body))
		}
	}
}

// direct is a client of the check endpoint itself over one keep-alive
// connection, as a proxy's connection pool is: raw HTTP/1.1 without the
// retries Go's transport would add, so a request lost to a closing
// connection counts as failed. It reconnects when an answer says
// "Connection: close" (or after a failure). Denials are 403 (the auth-url
// profile).
func direct(addr, path string, header http.Header) func(l *load) {
	var raw strings.Builder
	fmt.Fprintf(&raw, "GET %s HTTP/1.1\r\nHost: sluice-check.sluice-system\r\n", path)
	for name, values := range header {
		for _, v := range values {
			fmt.Fprintf(&raw, "%s: %s\r\n", name, v)
		}
	}
	raw.WriteString("\r\n")
	request := raw.String()
	return func(l *load) {
		var conn net.Conn
		var r *bufio.Reader
		defer func() {
			if conn != nil {
				conn.Close()
			}
		}()
		for l.next() {
			if conn == nil {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					l.fail("connect: %v", err)
					continue
				}
				conn, r = c, bufio.NewReader(c)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			resp, err := roundTrip(conn, r, request)
			if err != nil {
				l.fail("%v", err)
				conn.Close()
				conn = nil
				continue
			}
			l.count(resp.status, http.StatusForbidden, resp.body)
			if resp.close {
				conn.Close()
				conn = nil
			}
		}
	}
}

type rawResponse struct {
	status int
	body   string
	close  bool
}

func roundTrip(conn net.Conn, r *bufio.Reader, request string) (rawResponse, error) {
	if _, err := io.WriteString(conn, request); err != nil {
		return rawResponse{}, fmt.Errorf("write: %w", err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return rawResponse{}, fmt.Errorf("read: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return rawResponse{}, fmt.Errorf("read body: %w", err)
	}
	return rawResponse{status: resp.StatusCode, body: string(body), close: resp.Close}, nil
}
