// Package grpcserver is Sluice's gRPC endpoint: Envoy's ext_authz v3
// (envoy.service.auth.v3.Authorization) and Rate Limit Service v3
// (envoy.service.ratelimit.v3.RateLimitService) beside the gRPC health
// service and server reflection, on a port of its own. Like the webhook package, it
// only translates: a request's attributes become a check.Input, and the
// check package's Outcome becomes the protocol's answer, rendered by
// internal/checkhttp so it reads the same as an HTTP check's.
//
// Each protocol registers itself in its own file (authz.go, rls.go), on the
// same server and Checker; Envoy's rate limit quota service (package rlqs)
// is registered beside them.
package grpcserver

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/connlimit"
	"github.com/sluice-dev/sluice/internal/httpserve"
	"github.com/sluice-dev/sluice/internal/rlqs"
	"github.com/sluice-dev/sluice/internal/tlsfiles"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// Config is the gRPC endpoint's flags.
type Config struct {
	// Listen is the endpoint's address; empty: no gRPC endpoint.
	Listen string
	// TLSCertFile and TLSKeyFile, both set, serve TLS; neither: plaintext.
	TLSCertFile, TLSKeyFile string
	// DefaultNamespace answers ext_authz checks whose route sets no
	// "namespace" context extension; empty: such checks are refused.
	DefaultNamespace string
	// Domains binds rate limit service domains to the one namespace whose
	// descriptor policies answer them.
	Domains DomainBindings
	// MaxConns caps the endpoint's connections open at once; a connection
	// over the cap is closed as soon as it is accepted. 0:
	// DefaultMaxConns; negative: no cap. It is lowered to fit the
	// descriptor budget the endpoint shares with the HTTP one (Budget).
	MaxConns int
	// MaxConnsPerPeer caps the connections of one peer address, closed the
	// same way. 0: DefaultMaxConnsPerPeer; negative: no cap.
	MaxConnsPerPeer int
	// DescriptorLimits honors the limit a rate limit service descriptor
	// carries, as envoyproxy/ratelimit does (BindFlags: default on).
	DescriptorLimits bool
}

// Bounds of the endpoint's clients. The HTTP endpoint has the same kinds
// (internal/httpserve), and both listeners share one descriptor budget
// (connlimit.Budget).
const (
	// DefaultMaxConns bounds the endpoint's open connections. Envoy holds
	// few long-lived HTTP/2 connections to a gRPC service: one per worker
	// thread (--concurrency, by default the node's cores) and check
	// replica, and another only while MaxStreams calls are in flight on
	// each; 1,024 serve a hundred proxies of ten workers. An idle one
	// costs about 100 KiB (grpc-go's 32 KiB read and write buffers and
	// three goroutines), 100 MB for all.
	DefaultMaxConns = 1024
	// DefaultMaxConnsPerPeer bounds one peer address's connections: a
	// proxy pod of 64 workers may open two each.
	DefaultMaxConnsPerPeer = 128
	// MaxStreams bounds the calls in flight on one connection, advertised
	// as SETTINGS_MAX_CONCURRENT_STREAMS: Envoy and gRPC clients open
	// another connection past it, and the streams over it of a client
	// that ignores it are refused (REFUSED_STREAM). It bounds rapid resets
	// too: grpc-go stops reading a connection while MaxStreams of its
	// calls run, canceled or not. 100 is the least HTTP/2 recommends
	// (RFC 9113, 6.5.2); at 1 ms a check, one connection still carries
	// 100,000 checks a second.
	MaxStreams = 100
	// HandshakeTimeout is how long a new connection has to finish TLS and
	// send the HTTP/2 preface and SETTINGS (grpc-go's own is 120 s), as an
	// HTTP connection has 10 s to send its first request.
	HandshakeTimeout = 10 * time.Second
	// IdleTimeout closes a connection without a call this long, gracefully
	// (GOAWAY), so idle connections do not hold the caps; Envoy and gRPC
	// clients connect again at their next call.
	IdleTimeout = 5 * time.Minute
)

// BindFlags binds --grpc-listen, --grpc-tls-cert-file, --grpc-tls-key-file,
// --grpc-default-namespace, --rls-descriptor-limits, --rls-domain,
// --grpc-max-connections and --grpc-max-connections-per-peer.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "grpc-listen", "", "address of the gRPC endpoint (Envoy ext_authz v3, health, reflection); empty: off")
	fs.StringVar(&c.TLSCertFile, "grpc-tls-cert-file", "", "PEM certificate (chain) of the gRPC endpoint; with --grpc-tls-key-file it serves TLS, without plaintext")
	fs.StringVar(&c.TLSKeyFile, "grpc-tls-key-file", "", "PEM private key of --grpc-tls-cert-file")
	fs.StringVar(&c.DefaultNamespace, "grpc-default-namespace", "", "namespace of ext_authz checks whose route sets no 'namespace' context extension; empty: such checks are denied with 400")
	if c.Domains == nil {
		c.Domains = DomainBindings{}
	}
	fs.Func("grpc-max-connections", fmt.Sprintf("most gRPC connections open at once; one more is closed at once (default %d, lowered to fit 3/4 of the open-file limit, shared with --max-connections; 0: no cap)", DefaultMaxConns),
		connlimit.CapFlag(&c.MaxConns))
	fs.Func("grpc-max-connections-per-peer", fmt.Sprintf("most gRPC connections of one client address (one proxy pod); one more is closed at once (default %d; 0: no cap)", DefaultMaxConnsPerPeer),
		connlimit.CapFlag(&c.MaxConnsPerPeer))
	fs.BoolVar(&c.DescriptorLimits, "rls-descriptor-limits", true, "honor the limit a rate limit service descriptor carries (RateLimitDescriptor.limit, from the route or dynamic metadata) in a bound domain, as envoyproxy/ratelimit does: it replaces the namespace's policies for that descriptor; false: ignore it")
	fs.Var(c.Domains, "rls-domain", "DOMAIN=NAMESPACE: the namespace whose descriptor policies answer rate limit service requests of DOMAIN (repeatable, or comma-separated); requests of an unbound domain are answered OK")
}

// DomainBindings maps each rate limit service domain to one namespace. The
// operator sets it, like the {namespace} of an HTTP check's URL: a request
// carries no namespace, and a tenant's policy must never answer another
// tenant's domain.
type DomainBindings map[string]string

// String implements flag.Value.
func (d DomainBindings) String() string {
	pairs := make([]string, 0, len(d))
	for _, domain := range slices.Sorted(maps.Keys(d)) {
		pairs = append(pairs, domain+"="+d[domain])
	}
	return strings.Join(pairs, ",")
}

// Set implements flag.Value: DOMAIN=NAMESPACE, or several separated by commas.
func (d DomainBindings) Set(v string) error {
	for _, pair := range strings.Split(v, ",") {
		domain, ns, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || domain == "" {
			return fmt.Errorf("%q: want DOMAIN=NAMESPACE", pair)
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("%q: namespace %q: %s", pair, ns, errs[0])
		}
		if prev, dup := d[domain]; dup && prev != ns {
			return fmt.Errorf("domain %q is bound to %q already: a domain is answered by one namespace", domain, prev)
		}
		d[domain] = ns
	}
	return nil
}

// Enabled reports whether the gRPC endpoint is to be served.
func (c *Config) Enabled() bool { return c.Listen != "" }

// Caps are the connection caps asked: the flags, with the defaults.
func (c *Config) Caps() connlimit.Caps {
	return connlimit.Resolve(connlimit.GRPC, c.MaxConns, c.MaxConnsPerPeer, DefaultMaxConns, DefaultMaxConnsPerPeer)
}

// Budget is the descriptor budget of a process that serves HTTP within
// httpCfg and, when c is enabled, gRPC within c: one budget for both
// listeners, so that neither's flood takes the descriptors of the other,
// of Redis or of the policy files. Give it to both (httpserve.Config's
// and Options' Budget).
func (c *Config) Budget(httpCfg httpserve.Config, log *slog.Logger) *connlimit.Budget {
	asked := []connlimit.Caps{httpCfg.Caps()}
	if c.Enabled() {
		asked = append(asked, c.Caps())
	}
	return connlimit.NewBudget(connlimit.OpenFileLimit(), log, asked...)
}

// Options configure a Server.
type Options struct {
	Checker *check.Checker
	// Tracer traces each check (checkstack.Stack.Tracer); nil: off.
	Tracer *tracing.Tracer
	// TrustedProxies are the peers whose forwarded headers are believed
	// (default clientip.DefaultTrustedProxies), as on the HTTP endpoint.
	TrustedProxies *clientip.TrustedProxies
	// DefaultNamespace and Domains: see Config.
	DefaultNamespace string
	Domains          DomainBindings
	// ReportPolicy adds dynamic metadata naming the rule that decided to
	// every ext_authz and rate limit service answer a policy decided
	// (RuleMetadata), for Envoy's access log.
	ReportPolicy bool
	// IgnoreDescriptorLimits answers descriptors as if they carried no
	// limit of their own (Config.DescriptorLimits off).
	IgnoreDescriptorLimits bool
	// TLS, when set, serves TLS.
	TLS *tls.Config
	// Budget holds the endpoint's connection caps (Config.Budget); nil: no
	// caps.
	Budget *connlimit.Budget
	// HandshakeTimeout and IdleTimeout override the constants of those
	// names when positive.
	HandshakeTimeout, IdleTimeout time.Duration
	// Registerer, when set, receives the gRPC request and connection
	// metrics.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time
}

// Server is the gRPC endpoint.
type Server struct {
	opts        Options
	grpc        *grpc.Server
	health      *health.Server
	metrics     *metrics
	conns       connlimit.Caps
	connMetrics *connlimit.Metrics
	quota       *rlqs.Service
}

// streamWorkers is how many calls grpc-go serves on long-lived goroutines:
// about the calls in flight of a busy check process (each waits for its
// Redis round trip), at a few KiB of stack each while idle.
const streamWorkers = 64

// TransportOptions are the server options that shape how grpc-go carries
// each call (streams, headers, the goroutines serving calls), apart from
// the connections' lifetimes: what a server measured beside this one
// takes to be compared on the same terms.
func TransportOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(MaxStreams),
		// A call's HTTP/2 headers are small (Envoy's ext_authz and rate
		// limit calls carry the request in the message); grpc-go would
		// take 16 MiB per stream. The HTTP endpoint's header limit.
		grpc.MaxHeaderListSize(httpserve.MaxHeaderBytes),
		// Every call is a stream: without workers grpc-go starts a goroutine
		// per call, whose stack then grows through the handler (morestack
		// was the largest item of the profile). Workers keep grown stacks;
		// calls beyond them still get a goroutine of their own.
		grpc.NumStreamWorkers(streamWorkers),
	}
}

// New builds the server and registers its services.
func New(o Options) (*Server, error) {
	if o.Checker == nil {
		return nil, errors.New("grpcserver: a Checker is required")
	}
	if o.DefaultNamespace != "" {
		if errs := validation.IsDNS1123Label(o.DefaultNamespace); len(errs) > 0 {
			return nil, fmt.Errorf("default namespace %q: %s", o.DefaultNamespace, errs[0])
		}
	}
	if o.TrustedProxies == nil {
		o.TrustedProxies = clientip.Default()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	conns := connlimit.Caps{Listener: connlimit.GRPC}
	if o.Budget != nil {
		var ok bool
		if conns, ok = o.Budget.Caps(connlimit.GRPC); !ok {
			return nil, errors.New("grpcserver: the descriptor budget has no share for the gRPC listener")
		}
	}
	handshake, idle := HandshakeTimeout, IdleTimeout
	if o.HandshakeTimeout > 0 {
		handshake = o.HandshakeTimeout
	}
	if o.IdleTimeout > 0 {
		idle = o.IdleTimeout
	}
	serverOpts := append([]grpc.ServerOption{
		// Envoy's gRPC clients may ping idle connections (connection_keepalive);
		// the default policy (one ping per 5 min) would answer them with GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idle}),
		grpc.ConnectionTimeout(handshake),
		grpc.ForceServerCodecV2(newServerCodec()),
	}, TransportOptions()...)
	if o.TLS != nil {
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(o.TLS)))
	}
	var err error
	s := &Server{opts: o, grpc: grpc.NewServer(serverOpts...), health: health.NewServer(), metrics: newMetrics(o.Registerer),
		conns: conns, connMetrics: connlimit.NewMetrics(o.Registerer, connlimit.GRPC)}
	// NOT_SERVING until Serve runs, and again once shutdown begins, so
	// health-checking clients move away before the server stops.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	registerAuthz(s)
	registerRLS(s)
	// The rate limit quota service answers the domains RLS answers, from
	// the same policies; its streams share the connections' bounds.
	if s.quota, err = rlqs.New(rlqs.Options{Checker: o.Checker, Domains: o.Domains, Tracer: o.Tracer, Registerer: o.Registerer, Logger: o.Logger, Now: o.Now}); err != nil {
		return nil, err
	}
	s.quota.Register(s.grpc)
	return s, nil
}

// Quota is the rate limit quota service the server serves (what each
// Envoy holds of a bucket, for the admin API's inspect).
func (s *Server) Quota() *rlqs.Service { return s.quota }

// setServing sets the health status of the server and of every service.
func (s *Server) setServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	for name := range s.grpc.GetServiceInfo() {
		s.health.SetServingStatus(name, st)
	}
}

// shutdownGrace bounds how long a stopping server waits for calls in flight.
const shutdownGrace = 5 * time.Second

// Serve serves ln until ctx ends, then stops gracefully: health turns
// NOT_SERVING, calls in flight finish (at most shutdownGrace), and new
// ones are refused. Health is SERVING while it serves, the same as the
// HTTP endpoint's /readyz: never tied to Redis, whose outage each
// policy's failureMode answers.
//
// Connections are bounded as the HTTP endpoint's are (connlimit.Listener):
// over a cap closed at once, accept errors retried after a pause.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ln = connlimit.NewListener(ln, s.conns, s.connMetrics, s.opts.Logger)
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(ln) }()
	s.setServing(true)
	s.opts.Logger.Info("gRPC endpoint serving", "addr", ln.Addr().String(), "tls", s.opts.TLS != nil)
	select {
	case err := <-errc:
		return fmt.Errorf("gRPC endpoint: %w", err)
	case <-ctx.Done():
	}
	s.setServing(false)
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(shutdownGrace):
		s.grpc.Stop()
		<-stopped
	}
	// Serve returns nil once stopped; anything else failed before the stop.
	return <-errc
}

// LoadTLS reads the certificate and key files of cfg, and serves them as
// they change (tlsfiles); nil when neither is set.
func LoadTLS(cfg *Config) (*tls.Config, error) {
	if cfg.TLSCertFile == "" && cfg.TLSKeyFile == "" {
		return nil, nil
	}
	if cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" {
		return nil, errors.New("--grpc-tls-cert-file and --grpc-tls-key-file go together")
	}
	pair, err := tlsfiles.Load(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("gRPC TLS: %w", err)
	}
	return pair.Config(), nil
}

// FromConfig builds the server cfg describes (TLS, default namespace,
// connection caps) with o's Checker and the rest; it reads the
// certificate now, so that a process with an unreadable one fails at
// start. Without o.Budget, the endpoint has a descriptor budget of its own.
func FromConfig(cfg *Config, o Options) (*Server, error) {
	tlsCfg, err := LoadTLS(cfg)
	if err != nil {
		return nil, err
	}
	if o.Budget == nil {
		log := o.Logger
		if log == nil {
			log = slog.Default()
		}
		o.Budget = connlimit.NewBudget(connlimit.OpenFileLimit(), log, cfg.Caps())
	}
	o.TLS, o.DefaultNamespace, o.Domains = tlsCfg, cfg.DefaultNamespace, cfg.Domains
	o.IgnoreDescriptorLimits = !cfg.DescriptorLimits
	return New(o)
}

// ServeBeside serves ln while serve (the HTTP endpoint) runs: when either
// ends, the other is stopped, and the first error is returned. A nil
// Server (no gRPC endpoint configured) only runs serve.
func (s *Server) ServeBeside(ctx context.Context, ln net.Listener, serve func(context.Context) error) error {
	if s == nil {
		return serve(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- s.Serve(ctx, ln) }()
	go func() { errc <- serve(ctx) }()
	err := <-errc
	cancel() // one ended: stop the other and wait for it
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}
