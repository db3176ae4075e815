// Package faultproxy is a loopback TCP proxy that puts network faults
// between a client and a server, for tests on machines where the kernel
// cannot (no tc netem, no iptables, no root): a partition that drops
// everything (Blackhole), a peer or firewall that resets (Reset), a slow
// link (Delay) and a lossy one (Loss). It knows nothing of the protocol it
// carries, and it delivers every byte at most once and in order, as TCP
// does: a fault delays or cuts, it never duplicates or reorders.
package faultproxy

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// Fault is the state of the link; the zero Fault forwards at once.
type Fault struct {
	// Blackhole forwards nothing in either direction and answers nothing,
	// as a link that drops every packet: connections stay open, and new
	// ones are accepted (the proxy's kernel completes the handshake) but
	// get nothing through. What is held is delivered, in order, when the
	// blackhole ends, as TCP retransmits it after a partition heals; bytes
	// a client sent before it closed still reach the server then.
	Blackhole bool
	// Reset resets every connection (RST) and every new one as soon as it
	// is accepted, as a peer or a firewall that rejects.
	Reset bool
	// Delay is added to the round trip: bytes from the client reach the
	// server Delay later.
	Delay time.Duration
	// Loss is the share of segments lost (0..1). The proxy forwards
	// whatever one read returned as a segment; a lost one is delivered
	// after RTO (doubled for each further loss in a row, each with the
	// same chance), and the bytes behind it wait for it, as TCP delivers
	// in order. Both directions.
	Loss float64
	// RTO is the retransmission timeout of a lost segment (default 200ms,
	// Linux's minimum).
	RTO time.Duration
}

// Proxy forwards connections to one target through the current Fault.
type Proxy struct {
	ln   net.Listener
	done chan struct{}

	mu       sync.Mutex
	upstream string // where new connections go (target, or SetTarget's)
	fault    Fault
	changed  chan struct{} // closed and replaced by every Set
	conns    map[*conn]struct{}
	accepted int
	events   []Event
	closed   bool

	wg sync.WaitGroup
}

// Event is something a client did through the proxy.
type Event struct {
	At time.Time
	// Conn numbers the client connection (1 for the first accepted).
	Conn int
	// Kind is "connect" (a connection accepted) or "send" (bytes read
	// from the client).
	Kind string
	// Bytes is how many bytes were read ("send").
	Bytes int
}

type conn struct {
	id     int
	client net.Conn

	mu     sync.Mutex
	server net.Conn // nil until dialed
	closed bool
}

// Start listens on a free loopback port, forwarding to target until t
// ends, in the test's own process: its goroutines share the Go scheduler
// with the code under test, so a test that starves that scheduler (a
// heavy load in the same process) starves the link too. StartProcess runs
// it in a process of its own.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Listen(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Listen starts a proxy on a free loopback port; Close stops it.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	p := &Proxy{upstream: target, ln: ln, done: make(chan struct{}), changed: make(chan struct{}), conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port, to give the client instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set changes the fault from now on. Reset closes every open connection
// at once; ending a Blackhole delivers what it held. A Delay or Loss
// applies to the bytes read from then on.
func (p *Proxy) Set(f Fault) {
	if f.RTO <= 0 {
		f.RTO = 200 * time.Millisecond
	}
	p.mu.Lock()
	p.fault = f
	close(p.changed)
	p.changed = make(chan struct{})
	var reset []*conn
	if f.Reset {
		for c := range p.conns {
			reset = append(reset, c)
		}
	}
	p.mu.Unlock()
	for _, c := range reset {
		c.reset()
	}
}

// SetTarget sends the connections accepted from now on to target, as a
// DNS name or a Service repointed at a new primary: connections already
// open stay with the old target, as the kernel keeps them.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.upstream = target
	p.mu.Unlock()
}

// Heal ends every fault.
func (p *Proxy) Heal() { p.Set(Fault{}) }

// Open counts the client connections open now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted counts the client connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Events returns what clients did so far, in order.
func (p *Proxy) Events() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Event(nil), p.events...)
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	_ = p.ln.Close()
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) record(e Event) {
	p.mu.Lock()
	p.events = append(p.events, e)
	p.mu.Unlock()
}

func (p *Proxy) state() (Fault, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault, p.changed
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			return
		}
		p.accepted++
		c := &conn{id: p.accepted, client: client}
		p.events = append(p.events, Event{At: time.Now(), Conn: c.id, Kind: "connect"})
		reset := p.fault.Reset
		if !reset {
			p.conns[c] = struct{}{}
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if reset {
			c.reset()
			continue
		}
		go p.serve(c)
	}
}

// serve dials the target and runs both directions until both end.
func (p *Proxy) serve(c *conn) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	p.mu.Lock()
	target := p.upstream
	p.mu.Unlock()
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		c.reset() // as if the server refused
		return
	}
	c.mu.Lock()
	c.server = server
	closed := c.closed
	c.mu.Unlock()
	if closed { // reset or closed while dialing
		_ = server.Close()
		return
	}
	var dirs sync.WaitGroup
	dirs.Go(func() { p.pipe(c, c.client, server, true) })
	dirs.Go(func() { p.pipe(c, server, c.client, false) })
	dirs.Wait()
}

// pipe carries one direction, one segment at a time: it reads what the
// source sent, waits until it is due (its delay and losses) and not held,
// and writes it. While it waits it reads nothing more, so the bytes behind
// a late segment wait in the socket (TCP delivers in order), and so does
// the end of the stream. A request/reply protocol (one request in flight
// per connection, as a Redis client's) sees each fault once per request;
// segments sent back to back without waiting for a reply would see their
// delays add up.
func (p *Proxy) pipe(c *conn, src, dst net.Conn, upstream bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			now := time.Now()
			f, _ := p.state()
			due := now
			if upstream {
				due = due.Add(f.Delay)
				p.record(Event{At: now, Conn: c.id, Kind: "send", Bytes: n})
			}
			for rto := f.RTO; f.Loss > 0 && rand.Float64() < f.Loss; rto *= 2 {
				due = due.Add(rto)
			}
			if !p.wait(due) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				c.close()
				return
			}
		}
		if err != nil {
			break
		}
	}
	// The source ended (or its connection was closed): pass the end on,
	// unless a blackhole holds it.
	if !p.wait(time.Time{}) {
		return
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	if !upstream {
		c.close() // the server is gone: so is the connection
	}
}

// wait returns once a segment due at due may be delivered (not held by a
// blackhole), or false when the proxy closes.
func (p *Proxy) wait(due time.Time) bool {
	for {
		f, changed := p.state()
		if f.Blackhole {
			select {
			case <-changed:
				continue
			case <-p.done:
				return false
			}
		}
		d := time.Until(due)
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
			return true
		case <-changed: // a blackhole may have started
			t.Stop()
		case <-p.done:
			t.Stop()
			return false
		}
	}
}

// reset closes the client connection with an RST, and the server's.
func (c *conn) reset() {
	if tc, ok := c.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.close()
}

func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	_ = c.client.Close()
	if c.server != nil {
		_ = c.server.Close()
	}
}
