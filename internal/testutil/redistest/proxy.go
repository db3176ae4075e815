package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy in front of a Redis server that reads the
// RESP traffic in both directions. Tests use it to count the commands that
// reached the server, and when (Commands), and to lose a reply on purpose
// (LoseReply): the command reaches the server and runs, its reply never
// reaches the client, and the connection is closed, as when the network
// fails between the write and the reply.
//
// Connections that receive RESP3 push messages (pub/sub) are forwarded
// faithfully, but their replies are not matched to commands.
type Proxy struct {
	t      testing.TB
	target string
	ln     net.Listener

	mu       sync.Mutex
	commands []Command
	conns    map[*proxyConn]struct{}
	accepted int
	lose     string        // armed by LoseReply: the command name
	loseSkip int           // matching commands still to let through
	lost     chan struct{} // closed once the armed reply was lost
	closed   bool

	wg sync.WaitGroup
}

// Command is one command a client sent through the proxy.
type Command struct {
	// At is when the proxy forwarded it to the server.
	At time.Time
	// Conn numbers the client connection (1 for the first accepted).
	Conn int
	// Name is the command name in upper case, e.g. "FCALL".
	Name string
	// Args counts the arguments, the name included.
	Args int
}

type proxyConn struct {
	id             int
	client, server net.Conn

	mu      sync.Mutex
	sent    int // commands forwarded
	replies int // replies read from the server
	doomed  int // index of the command whose reply is lost; -1 when none
	lost    chan struct{}
	once    sync.Once
}

// StartProxy listens on a free loopback port and forwards every
// connection to target; it stops when t ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{t: t, target: target, ln: ln, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port: give it to the client instead of the server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted counts the client connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Open counts the client connections open now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Commands returns the commands forwarded so far, in order.
func (p *Proxy) Commands() []Command {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Command(nil), p.commands...)
}

// LoseReply arms the proxy: after skip commands named name (any case)
// pass, the next one is forwarded to the server, but its reply is
// swallowed, and once the server has answered every command forwarded on
// that connection, both sides of the connection are closed. The returned
// channel is closed then.
func (p *Proxy) LoseReply(name string, skip int) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose, p.loseSkip = strings.ToUpper(name), skip
	p.lost = make(chan struct{})
	return p.lost
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
	_ = p.ln.Close()
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = client.Close() // as if the server refused
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.accepted++
		c := &proxyConn{id: p.accepted, client: client, server: server, doomed: -1}
		p.conns[c] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.requests(c)
		go p.replies(c)
	}
}

func (c *proxyConn) close() {
	_ = c.client.Close()
	_ = c.server.Close()
}

func (p *Proxy) forget(c *proxyConn) {
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// requests forwards the client's commands, recording each.
func (p *Proxy) requests(c *proxyConn) {
	defer p.wg.Done()
	defer p.forget(c)
	r := bufio.NewReaderSize(c.client, 64<<10)
	w := bufio.NewWriterSize(c.server, 64<<10)
	var raw []byte
	for {
		var name string
		var args int
		var err error
		raw, name, args, err = readCommand(r, raw[:0])
		if err != nil {
			return
		}
		p.mu.Lock()
		p.commands = append(p.commands, Command{At: time.Now(), Conn: c.id, Name: name, Args: args})
		var lost chan struct{}
		if p.lose != "" && p.lose == name {
			if p.loseSkip > 0 {
				p.loseSkip--
			} else {
				lost, p.lose = p.lost, ""
			}
		}
		p.mu.Unlock()
		c.mu.Lock()
		if lost != nil && c.doomed < 0 {
			c.doomed, c.lost = c.sent, lost
		}
		c.sent++
		c.mu.Unlock()
		if _, err := w.Write(raw); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// replies forwards the server's replies, swallowing those from the
// doomed command on, and closes the connection once it is answered.
func (p *Proxy) replies(c *proxyConn) {
	defer p.wg.Done()
	defer p.forget(c)
	r := bufio.NewReaderSize(c.server, 64<<10)
	w := bufio.NewWriterSize(c.client, 64<<10)
	var raw []byte
	for {
		var push bool
		var err error
		raw, push, err = readValue(r, raw[:0])
		if err != nil {
			return
		}
		c.mu.Lock()
		idx := c.replies
		if !push {
			c.replies++
		}
		swallow := c.doomed >= 0 && idx >= c.doomed
		done := swallow && c.replies > c.doomed && c.replies >= c.sent
		lost := c.lost
		c.mu.Unlock()
		if done {
			c.once.Do(func() {
				c.close()
				close(lost)
			})
			return
		}
		if swallow {
			continue
		}
		if _, err := w.Write(raw); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

var errProtocol = errors.New("redistest proxy: malformed RESP")

// readLine reads one CRLF-terminated line, appending it to raw; line is
// the line without CRLF.
func readLine(r *bufio.Reader, raw []byte) (out []byte, line string, err error) {
	b, err := r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return raw, "", errProtocol
	}
	if err != nil {
		return raw, "", err
	}
	raw = append(raw, b...)
	return raw, strings.TrimRight(string(b), "\r\n"), nil
}

// readN appends the next n bytes to raw.
func readN(r *bufio.Reader, raw []byte, n int) ([]byte, error) {
	start := len(raw)
	raw = append(raw, make([]byte, n)...)
	_, err := io.ReadFull(r, raw[start:])
	return raw, err
}

// readCommand reads a client command: an array of bulk strings, or an
// inline command line.
func readCommand(r *bufio.Reader, raw []byte) (out []byte, name string, args int, err error) {
	raw, line, err := readLine(r, raw)
	if err != nil {
		return raw, "", 0, err
	}
	if !strings.HasPrefix(line, "*") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			return raw, "", 0, nil
		}
		return raw, strings.ToUpper(fields[0]), len(fields), nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return raw, "", 0, errProtocol
	}
	for i := range n {
		var hdr string
		if raw, hdr, err = readLine(r, raw); err != nil {
			return raw, "", 0, err
		}
		size, err := strconv.Atoi(strings.TrimPrefix(hdr, "$"))
		if err != nil || !strings.HasPrefix(hdr, "$") || size < 0 {
			return raw, "", 0, errProtocol
		}
		start := len(raw)
		if raw, err = readN(r, raw, size+2); err != nil {
			return raw, "", 0, err
		}
		if i == 0 {
			name = strings.ToUpper(string(raw[start : start+size]))
		}
	}
	return raw, name, n, nil
}

// readValue reads one RESP2 or RESP3 value; push reports a RESP3 push
// message (out of band, not the reply to a command).
func readValue(r *bufio.Reader, raw []byte) (out []byte, push bool, err error) {
	raw, line, err := readLine(r, raw)
	if err != nil {
		return raw, false, err
	}
	if line == "" {
		return raw, false, errProtocol
	}
	kind, rest := line[0], line[1:]
	switch kind {
	case '+', '-', ':', '_', ',', '#', '(':
		return raw, false, nil
	case '$', '!', '=':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return raw, false, errProtocol
		}
		if n < 0 {
			return raw, false, nil
		}
		raw, err = readN(r, raw, n+2)
		return raw, false, err
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return raw, false, errProtocol
		}
		if kind == '%' || kind == '|' {
			n *= 2
		}
		for range max(n, 0) {
			if raw, _, err = readValue(r, raw); err != nil {
				return raw, false, err
			}
		}
		if kind == '|' { // an attribute precedes the value it describes
			return readValue(r, raw)
		}
		return raw, kind == '>', nil
	}
	return raw, false, fmt.Errorf("%w: type %q", errProtocol, kind)
}
