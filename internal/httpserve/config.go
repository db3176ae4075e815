package httpserve

import (
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/connlimit"
)

// Defaults of Config.
const (
	// DefaultMaxConns bounds one process's open connections: a proxy pod
	// holds a pool of them, ten thousand serve tens of proxy pods, and an
	// idle one costs about 7 KiB (70 MB for all; a request being read
	// holds up to MaxHeaderBytes more). It is lowered to fit the
	// open-file limit (see Config.MaxConns).
	DefaultMaxConns = 10_000
	// DefaultMaxConnsPerPeer bounds one peer address's connections. It is
	// Envoy's default max_connections circuit breaker (per upstream
	// cluster, spread over the cluster's hosts), so a default Envoy never
	// reaches it; nginx (auth_request, ingress-nginx without auth-keepalive)
	// and Traefik hold one connection per check in flight, which is far
	// fewer. A peer is one address: in a cluster, one proxy pod.
	DefaultMaxConnsPerPeer = 1024
	// DefaultIdleTimeout closes a keep-alive connection that waited this
	// long for its next request. It is longer than the idle timeouts of
	// nginx's upstream pools (keepalive_timeout 60 s) and Traefik's (Go's
	// transport, 90 s), so those proxies close an idle connection first
	// and never send a request on one the server is closing; Envoy keeps
	// idle connections an hour by default, sees the close and reconnects.
	DefaultIdleTimeout = 2 * time.Minute
)

// Config bounds what the clients of one server may hold. The zero Config
// has the defaults.
type Config struct {
	// MaxConns caps the connections open at once; a connection over the
	// cap is closed as soon as it is accepted. 0: DefaultMaxConns;
	// negative: no cap. A cap is lowered to fit the process's descriptor
	// budget (connlimit.Budget: three quarters of the open-file limit,
	// shared with the gRPC listener), so that the process keeps
	// descriptors to accept and close what is over the cap, to reach
	// Redis and to read files.
	MaxConns int
	// MaxConnsPerPeer caps the connections of one peer address, closed
	// the same way. 0: DefaultMaxConnsPerPeer; negative: no cap.
	MaxConnsPerPeer int
	// IdleTimeout closes a keep-alive connection that waited this long for
	// its next request. 0 or less: DefaultIdleTimeout. A new connection
	// has the read timeout (10 s) to send its first request.
	IdleTimeout time.Duration
	// DrainTimeout bounds the drain between the end of Serve's context and
	// the shutdown, while every answer closes its connection. 0:
	// DefaultDrainTimeout; negative: no drain (idle connections are closed
	// at once).
	DrainTimeout time.Duration
	// Budget is the process's descriptor budget, which its other
	// listeners share (connlimit.NewBudget, with Caps() among the asks);
	// nil: this listener has the whole budget.
	Budget *connlimit.Budget
	// Registerer, when set, receives the connection metrics.
	Registerer prometheus.Registerer
	// Logger logs what the caps and accept errors do (default
	// slog.Default()).
	Logger *slog.Logger
}

// BindFlags binds the flags of the processes that serve HTTP:
// --max-connections, --max-connections-per-peer, --idle-timeout and
// --drain-timeout.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.Func("max-connections", fmt.Sprintf("most client connections open at once; one more is closed at once (default %d, lowered to fit 3/4 of the open-file limit, shared with --grpc-max-connections; 0: no cap)", DefaultMaxConns),
		connlimit.CapFlag(&c.MaxConns))
	fs.Func("max-connections-per-peer", fmt.Sprintf("most connections of one client address (one proxy pod); one more is closed at once (default %d; 0: no cap)", DefaultMaxConnsPerPeer),
		connlimit.CapFlag(&c.MaxConnsPerPeer))
	c.IdleTimeout = DefaultIdleTimeout
	fs.Func("idle-timeout", fmt.Sprintf("close a keep-alive connection idle this long (default %s; above the proxies' pool timeouts: nginx 60s, Traefik 90s)", DefaultIdleTimeout),
		durationFlag(func(d time.Duration) error {
			if d <= 0 {
				return fmt.Errorf("must be positive, got %s", d)
			}
			c.IdleTimeout = d
			return nil
		}))
	c.DrainTimeout = DefaultDrainTimeout
	fs.Func("drain-timeout", fmt.Sprintf("on SIGTERM, answer with Connection: close for up to this long (less once the clients have moved on) before closing idle connections, so keep-alive clients move to another replica between requests (default %s; 0: close at once)", DefaultDrainTimeout),
		durationFlag(func(d time.Duration) error {
			switch {
			case d < 0:
				return fmt.Errorf("must not be negative, got %s", d)
			case d == 0:
				c.DrainTimeout = -1 // Config's "no drain"
			default:
				c.DrainTimeout = d
			}
			return nil
		}))
}

// durationFlag parses a flag's duration and hands it to set.
func durationFlag(set func(time.Duration) error) func(string) error {
	return func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		return set(d)
	}
}

// limits are a Config's bounds in force.
type limits struct {
	caps  connlimit.Caps
	idle  time.Duration
	drain time.Duration // 0: none
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// Caps are the caps asked: the flags, with the defaults.
func (c Config) Caps() connlimit.Caps {
	return connlimit.Resolve(connlimit.HTTP, c.MaxConns, c.MaxConnsPerPeer, DefaultMaxConns, DefaultMaxConnsPerPeer)
}

// resolve applies the defaults and the descriptor budget: c.Budget's
// share, or, without one, the whole budget of the open-file limit nofile
// (0 when unknown).
func (c Config) resolve(nofile uint64) limits {
	l := limits{idle: c.IdleTimeout, drain: c.DrainTimeout}
	ok := false
	if c.Budget != nil {
		l.caps, ok = c.Budget.Caps(connlimit.HTTP)
	}
	if !ok {
		l.caps, _ = connlimit.NewBudget(nofile, c.logger(), c.Caps()).Caps(connlimit.HTTP)
	}
	if l.idle <= 0 {
		l.idle = DefaultIdleTimeout
	}
	switch {
	case l.drain == 0:
		l.drain = DefaultDrainTimeout
	case l.drain < 0:
		l.drain = 0
	}
	return l
}
