// Package connlimit bounds what the clients of one process's listeners may
// hold: connections open at once, per listener and per peer address,
// within one budget of file descriptors that the listeners share
// (Budget); and an accept loop that pauses, instead of failing, when
// descriptors run out. The HTTP endpoint (internal/httpserve) and the gRPC
// endpoint (internal/grpcserver) both serve through a Listener.
package connlimit

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

// Listener keeps a server serving when accept fails for lack of
// resources, and caps the connections open at once, per listener and per
// peer address.
//
// fasthttp's Serve returns on any accept error but a timeout, and the
// process with it: out of file descriptors, one idle connection too many
// would stop the check endpoint. Here such errors are retried after a
// pause, as net/http's Server.Serve does (5 ms doubling to 1 s), and the
// caps keep the process below its open-file limit: a connection over a
// cap is closed at once, so the client sees the failure at once instead of
// waiting in the accept queue behind connections that hold every slot.
type Listener struct {
	net.Listener
	caps    Caps
	metrics *Metrics
	log     *slog.Logger

	done      chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex
	open  int
	peers map[netip.Addr]int

	acceptLog, rejectLog rareLog
}

// Rejection reasons, the label of sluice_<listener>_rejected_connections_total.
const (
	rejectMaxConns = "max_connections"
	rejectPerPeer  = "max_connections_per_peer"
)

// Accept backoff, as net/http's.
const (
	acceptDelayFirst   = 5 * time.Millisecond
	acceptDelayLongest = time.Second
)

// NewListener serves ln within caps, counting in m (nil: nothing).
func NewListener(ln net.Listener, caps Caps, m *Metrics, log *slog.Logger) *Listener {
	return &Listener{Listener: ln, caps: caps, metrics: m, log: log,
		done: make(chan struct{}), peers: make(map[netip.Addr]int)}
}

// Accept returns the next connection within the caps. Errors that a
// pause may cure are retried; it returns only the listener's permanent
// errors (closed above all).
func (l *Listener) Accept() (net.Conn, error) {
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
				l.log.Warn("accept failed; retrying", "listener", l.caps.Listener, "err", err, "retry_in", delay, "failures_since_last_log", n)
			}
			select {
			case <-time.After(delay):
				continue
			case <-l.done:
				return nil, net.ErrClosed // fasthttp's and grpc-go's Serve end quietly on it
			}
		}
		delay = 0
		peer := peerAddr(c)
		if reason := l.admit(peer); reason != "" {
			l.metrics.rejected(reason) // counted before the peer can see the close
			_ = c.Close()
			if n, ok := l.rejectLog.due(); ok {
				l.log.Warn("connection closed: over the cap", "listener", l.caps.Listener, "reason", reason, "peer", peer.String(),
					"max_connections", l.caps.MaxConns, "max_connections_per_peer", l.caps.PerPeer, "closed_since_last_log", n)
			}
			continue
		}
		return &limitConn{Conn: c, l: l, peer: peer}, nil
	}
}

// admit counts a new connection of peer, or says which cap it is over.
func (l *Listener) admit(peer netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.caps.MaxConns > 0 && l.open >= l.caps.MaxConns {
		return rejectMaxConns
	}
	if l.caps.PerPeer > 0 && peer.IsValid() {
		if l.peers[peer] >= l.caps.PerPeer {
			return rejectPerPeer
		}
		l.peers[peer]++
	}
	l.open++
	l.metrics.opened()
	return ""
}

func (l *Listener) release(peer netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.caps.PerPeer > 0 && peer.IsValid() {
		if n := l.peers[peer]; n <= 1 {
			delete(l.peers, peer)
		} else {
			l.peers[peer] = n - 1
		}
	}
	l.metrics.closed()
}

// Close closes the listener and ends an Accept waiting to retry.
func (l *Listener) Close() error {
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
	l    *Listener
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

// Metrics are a listener's Prometheus metrics, named after it
// (sluice_http_..., sluice_grpc_...); a nil *Metrics records nothing.
type Metrics struct {
	open         prometheus.Gauge
	rejects      *prometheus.CounterVec
	acceptErrors prometheus.Counter
}

// NewMetrics registers the metrics of listener (HTTP or GRPC) with reg;
// nil when reg is nil.
func NewMetrics(reg prometheus.Registerer, listener string) *Metrics {
	if reg == nil {
		return nil
	}
	what := endpoints[listener]
	m := &Metrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_" + listener + "_open_connections",
			Help: "Client connections of " + what + " open now.",
		}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_" + listener + "_rejected_connections_total",
			Help: "Connections of " + what + " closed as soon as accepted because a cap was reached (reason: max_connections, max_connections_per_peer).",
		}, []string{"reason"}),
		acceptErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_" + listener + "_accept_errors_total",
			Help: "Accepts of " + what + " that failed and were retried after a pause (out of file descriptors, above all).",
		}),
	}
	for _, r := range []string{rejectMaxConns, rejectPerPeer} {
		m.rejects.WithLabelValues(r)
	}
	reg.MustRegister(m.open, m.rejects, m.acceptErrors)
	return m
}

func (m *Metrics) opened() {
	if m != nil {
		m.open.Inc()
	}
}

func (m *Metrics) closed() {
	if m != nil {
		m.open.Dec()
	}
}

func (m *Metrics) rejected(reason string) {
	if m != nil {
		m.rejects.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) acceptError() {
	if m != nil {
		m.acceptErrors.Inc()
	}
}
