package handover

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingProxy is a loopback TCP proxy in front of Redis that counts what
// one process sends through it: connections, bytes each way, and when the
// first byte to Redis came.
type countingProxy struct {
	ln     net.Listener
	target string

	conns   atomic.Int64
	up      atomic.Int64 // bytes to Redis
	down    atomic.Int64 // bytes from Redis
	firstUp atomic.Int64 // Unix nanoseconds of the first byte to Redis; 0 before

	mu    sync.Mutex
	open  map[net.Conn]struct{}
	close bool
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{ln: ln, target: target, open: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.stop)
	return p
}

// Addr is where the process connects instead of Redis.
func (p *countingProxy) Addr() string { return p.ln.Addr().String() }

// sent reports the connections and the bytes sent to Redis so far.
func (p *countingProxy) sent() (conns, bytes int64) { return p.conns.Load(), p.up.Load() }

// firstSent is when the first byte went to Redis (zero before).
func (p *countingProxy) firstSent() time.Time {
	if n := p.firstUp.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

func (p *countingProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.conns.Add(1)
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *countingProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.close {
		return false
	}
	p.open[c] = struct{}{}
	return true
}

func (p *countingProxy) handle(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	if !p.track(client) || !p.track(server) {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(server, &countingReader{r: client, n: &p.up, first: &p.firstUp})
		_ = server.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(client, &countingReader{r: server, n: &p.down})
	_ = client.(*net.TCPConn).CloseWrite()
	<-done
	p.mu.Lock()
	delete(p.open, client)
	delete(p.open, server)
	p.mu.Unlock()
}

func (p *countingProxy) stop() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.close = true
	for c := range p.open {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

type countingReader struct {
	r     io.Reader
	n     *atomic.Int64
	first *atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if n > 0 {
		if c.first != nil {
			c.first.CompareAndSwap(0, time.Now().UnixNano())
		}
		c.n.Add(int64(n))
	}
	if errors.Is(err, net.ErrClosed) {
		err = io.EOF
	}
	return n, err
}
