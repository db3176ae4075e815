package httpserve

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// limitListener keeps a server serving when accept fails for lack of
// resources, and caps the connections open at once, per process and per
// peer address.
//
// fasthttp's Serve returns on any accept error but a timeout, and the
// process with it: out of file descriptors, one idle connection too many
// would stop the check endpoint. Here such errors are retried after a
// pause, as net/http's Server.Serve does (5 ms doubling to 1 s), and the
// caps keep the process below its open-file limit: a connection over a
// cap is closed at once, so the proxy sees the failure at once instead of
// waiting in the accept queue behind connections that hold every slot.
type limitListener struct {
	net.Listener
	maxConns int // 0: no cap
	perPeer  int // 0: no cap
	metrics  *connMetrics
	log      *slog.Logger

	done      chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex
	open  int
	peers map[netip.Addr]int

	acceptLog, rejectLog rareLog
}

// Rejection reasons, the label of sluice_http_rejected_connections_total.
const (
	rejectMaxConns = "max_connections"
	rejectPerPeer  = "max_connections_per_peer"
)

// Accept backoff, as net/http's.
const (
	acceptDelayFirst   = 5 * time.Millisecond
	acceptDelayLongest = time.Second
)

func newLimitListener(ln net.Listener, l limits, m *connMetrics, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, maxConns: l.maxConns, perPeer: l.perPeer, metrics: m, log: log,
		done: make(chan struct{}), peers: make(map[netip.Addr]int)}
}

// Accept returns the next connection within the caps. Errors that a
// pause may cure are retried; it returns only the listener's permanent
// errors (closed above all).
func (l *limitListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !retryableAccept(err) {
				return nil, err
			}
			delay = min(max(2*delay, acceptDelayFirst), acceptDelayLongest)
			l.metrics.acceptError()
			if n, ok := l.acceptLog.due(); ok {
				l.log.Warn("accept failed; retrying", "err", err, "retry_in", delay, "failures_since_last_log", n)
			}
			select {
			case <-time.After(delay):
				continue
			case <-l.done:
				return nil, net.ErrClosed // fasthttp's Serve ends quietly on it
			}
		}
		delay = 0
		peer := peerAddr(c)
		if reason := l.admit(peer); reason != "" {
			l.metrics.rejected(reason) // counted before the peer can see the close
			_ = c.Close()
			if n, ok := l.rejectLog.due(); ok {
				l.log.Warn("connection closed: over the cap", "reason", reason, "peer", peer.String(),
					"max_connections", l.maxConns, "max_connections_per_peer", l.perPeer, "closed_since_last_log", n)
			}
			continue
		}
		return &limitConn{Conn: c, l: l, peer: peer}, nil
	}
}

// admit counts a new connection of peer, or says which cap it is over.
func (l *limitListener) admit(peer netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.maxConns > 0 && l.open >= l.maxConns {
		return rejectMaxConns
	}
	if l.perPeer > 0 && peer.IsValid() {
		if l.peers[peer] >= l.perPeer {
			return rejectPerPeer
		}
		l.peers[peer]++
	}
	l.open++
	l.metrics.opened()
	return ""
}

func (l *limitListener) release(peer netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.perPeer > 0 && peer.IsValid() {
		if n := l.peers[peer]; n <= 1 {
			delete(l.peers, peer)
		} else {
			l.peers[peer] = n - 1
		}
	}
	l.metrics.closed()
}

// Close closes the listener and ends an Accept waiting to retry.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// retryableAccept reports whether an accept error may pass: out of file
// descriptors or memory, or a connection that failed before it was taken
// (net/http retries the same ones: its Temporary errors).
func retryableAccept(err error) bool {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
			syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN,
			syscall.ETIMEDOUT, syscall.EPROTO, syscall.EPERM:
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// peerAddr is the connection's remote address, invalid when it has none
// (a Unix socket): such connections count only toward the process cap.
func peerAddr(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// limitConn gives its slot back when closed.
type limitConn struct {
	net.Conn
	l    *limitListener
	peer netip.Addr
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.peer) })
	return err
}

// rareLog lets a repeated warning through at most once per rareLogEvery.
type rareLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

const rareLogEvery = 10 * time.Second

// due reports whether to log now, with how many were suppressed since the
// last one logged.
func (r *rareLog) due() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < rareLogEvery {
		r.suppressed++
		return 0, false
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	return n, true
}

// connMetrics are the listener's Prometheus metrics; a nil *connMetrics
// records nothing.
type connMetrics struct {
	open         prometheus.Gauge
	rejects      *prometheus.CounterVec
	acceptErrors prometheus.Counter
}

func newConnMetrics(reg prometheus.Registerer) *connMetrics {
	if reg == nil {
		return nil
	}
	m := &connMetrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_http_open_connections",
			Help: "Client connections of the check endpoint open now.",
		}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_rejected_connections_total",
			Help: "Connections closed as soon as accepted because a cap was reached (reason: max_connections, max_connections_per_peer).",
		}, []string{"reason"}),
		acceptErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_http_accept_errors_total",
			Help: "Accepts that failed and were retried after a pause (out of file descriptors, above all).",
		}),
	}
	for _, r := range []string{rejectMaxConns, rejectPerPeer} {
		m.rejects.WithLabelValues(r)
	}
	reg.MustRegister(m.open, m.rejects, m.acceptErrors)
	return m
}

func (m *connMetrics) opened() {
	if m != nil {
		m.open.Inc()
	}
}

func (m *connMetrics) closed() {
	if m != nil {
		m.open.Dec()
	}
}

func (m *connMetrics) rejected(reason string) {
	if m != nil {
		m.rejects.WithLabelValues(reason).Inc()
	}
}

func (m *connMetrics) acceptError() {
	if m != nil {
		m.acceptErrors.Inc()
	}
}
