package httpserve

import (
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	// negative: no cap. A cap is lowered to three quarters of the
	// open-file limit, so that the process keeps descriptors to accept
	// and close what is over the cap, to reach Redis and to read files.
	MaxConns int
	// MaxConnsPerPeer caps the connections of one peer address, closed
	// the same way. 0: DefaultMaxConnsPerPeer; negative: no cap.
	MaxConnsPerPeer int
	// IdleTimeout closes a keep-alive connection that waited this long for
	// its next request. 0 or less: DefaultIdleTimeout. A new connection
	// has the read timeout (10 s) to send its first request.
	IdleTimeout time.Duration
	// Registerer, when set, receives the connection metrics.
	Registerer prometheus.Registerer
	// Logger logs what the caps and accept errors do (default
	// slog.Default()).
	Logger *slog.Logger
}

// BindFlags binds the flags of the processes that serve HTTP:
// --max-connections, --max-connections-per-peer and --idle-timeout.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.Func("max-connections", fmt.Sprintf("most client connections open at once; one more is closed at once (default %d, lowered to 3/4 of the open-file limit; 0: no cap)", DefaultMaxConns),
		capFlag(&c.MaxConns))
	fs.Func("max-connections-per-peer", fmt.Sprintf("most connections of one client address (one proxy pod); one more is closed at once (default %d; 0: no cap)", DefaultMaxConnsPerPeer),
		capFlag(&c.MaxConnsPerPeer))
	c.IdleTimeout = DefaultIdleTimeout
	fs.Func("idle-timeout", fmt.Sprintf("close a keep-alive connection idle this long (default %s; above the proxies' pool timeouts: nginx 60s, Traefik 90s)", DefaultIdleTimeout),
		func(s string) error {
			d, err := time.ParseDuration(s)
			if err != nil {
				return err
			}
			if d <= 0 {
				return fmt.Errorf("must be positive, got %s", s)
			}
			c.IdleTimeout = d
			return nil
		})
}

// capFlag parses a cap where 0 means none (a Config's negative).
func capFlag(p *int) func(string) error {
	return func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		if n < 0 {
			return fmt.Errorf("must be 0 (no cap) or more, got %d", n)
		}
		if n == 0 {
			n = -1
		}
		*p = n
		return nil
	}
}

// limits are a Config's caps in force: 0 is no cap.
type limits struct {
	maxConns, perPeer int
	idle              time.Duration
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// resolve applies the defaults and the open-file limit (nofile, 0 when
// unknown).
func (c Config) resolve(nofile uint64) limits {
	l := limits{maxConns: c.MaxConns, perPeer: c.MaxConnsPerPeer, idle: c.IdleTimeout}
	switch {
	case l.maxConns == 0:
		l.maxConns = DefaultMaxConns
	case l.maxConns < 0:
		l.maxConns = 0
	}
	if fit := nofile / 4 * 3; l.maxConns > 0 && nofile > 0 && uint64(l.maxConns) > fit {
		c.logger().Info("connection cap lowered to fit the open-file limit", "max_connections", fit, "asked", l.maxConns, "open_file_limit", nofile)
		l.maxConns = int(max(fit, 1)) //nolint:gosec // fit is below maxConns, an int
	}
	switch {
	case l.perPeer == 0:
		l.perPeer = DefaultMaxConnsPerPeer
	case l.perPeer < 0:
		l.perPeer = 0
	}
	if l.idle <= 0 {
		l.idle = DefaultIdleTimeout
	}
	return l
}
