// Package checkserver serves a process's check endpoints over one
// checkstack.Stack: HTTP (the proxy profiles, /v1/check, /metrics and the
// dashboard) and, when configured, gRPC beside it. Local mode and the
// cluster's check process both start from it; they differ in the
// dashboard's policies (Options.Files or Options.Table) and in what they
// run beside serving (the folder's watch; the fleet's follower: the table,
// the overrides, the refunds).
package checkserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/checkstack"
	"github.com/sluice-dev/sluice/internal/dashboard"
	"github.com/sluice-dev/sluice/internal/grpcserver"
	"github.com/sluice-dev/sluice/internal/httpserve"
	"github.com/sluice-dev/sluice/internal/policyfiles"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/webhook"
)

// Options configure a Server.
type Options struct {
	// Config is the process's settings; the endpoints take theirs from
	// it (DecisionLog, Timeout and PollInterval are the stack's and the
	// follower's, which the caller builds).
	Config
	// Stack decides; its Registry (checkstack.Options.OwnRegistry, which
	// is required) is served on /metrics and takes the listeners' metrics.
	Stack *checkstack.Stack
	// Files makes the dashboard local mode's, which edits the folder's
	// policies; Table the check process's, read-only (the
	// RateLimitPolicy objects are the truth). Set one.
	Files *policyfiles.Folder
	Table *policytable.Reader
	// Admin is local mode's admin API, which the dashboard's operations
	// on key values go through (dashboard.Options.Admin; with Files only).
	Admin http.Handler
}

// Server is the HTTP endpoint and the gRPC one beside it.
type Server struct {
	// Handler is the HTTP endpoint with the dashboard's routes.
	Handler *webhook.CheckEndpoint
	// GRPC is the gRPC endpoint; nil when Options.GRPC is off.
	GRPC       *grpcserver.Server
	listen     string
	grpcListen string
	http       httpserve.Config
}

// New builds the endpoints of o. An unreadable gRPC certificate or a
// malformed trusted proxy fails here, at start.
func New(o Options) (*Server, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	var trusted *clientip.TrustedProxies
	if o.TrustedProxies != nil {
		var err error
		if trusted, err = clientip.ParseTrustedProxies(o.TrustedProxies); err != nil {
			return nil, fmt.Errorf("--trusted-proxies: %w", err)
		}
	}
	checker, reg := o.Stack.Checker, o.Stack.Registry
	if reg == nil {
		return nil, errors.New("checkserver: the stack has no registry to serve on /metrics (checkstack.Options.OwnRegistry)")
	}
	handler, err := webhook.New(webhook.Options{Checker: checker, Tracer: o.Stack.Tracer, Profile: o.Profile, TrustedProxies: trusted, ReportPolicy: o.ReportPolicy, Gatherer: reg, Logger: log})
	if err != nil {
		return nil, err
	}
	dash, err := dashboard.New(dashboard.Options{Checker: checker, Tally: o.Stack.Tally, Files: o.Files, Table: o.Table, Admin: o.Admin, Listen: o.Listen, Hosts: o.DashboardHosts})
	if err != nil {
		return nil, err
	}
	dash.Register(handler)
	s := &Server{Handler: handler, listen: o.Listen, grpcListen: o.GRPC.Listen, http: o.HTTP}
	s.http.Registerer, s.http.Logger = reg, log
	// One descriptor budget for both listeners.
	s.http.Budget = o.GRPC.Budget(o.HTTP, log)
	if o.GRPC.Enabled() {
		s.GRPC, err = grpcserver.FromConfig(&o.GRPC, grpcserver.Options{Checker: checker, Tracer: o.Stack.Tracer, TrustedProxies: trusted, ReportPolicy: o.ReportPolicy, Budget: s.http.Budget, Registerer: reg, Logger: log})
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Listen opens the HTTP listener and, when the gRPC endpoint is on, the
// gRPC one (grpcLn nil otherwise).
func (s *Server) Listen() (ln, grpcLn net.Listener, err error) {
	ln, err = net.Listen("tcp", s.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--listen: %w", err)
	}
	if s.GRPC != nil {
		if grpcLn, err = net.Listen("tcp", s.grpcListen); err != nil {
			_ = ln.Close()
			return nil, nil, fmt.Errorf("--grpc-listen: %w", err)
		}
	}
	return ln, grpcLn, nil
}

// Serve serves HTTP on ln and gRPC on grpcLn (nil: HTTP only) until ctx
// ends or either stops, then drains both.
func (s *Server) Serve(ctx context.Context, ln, grpcLn net.Listener) error {
	grpcSrv := s.GRPC
	if grpcLn == nil {
		grpcSrv = nil
	}
	return grpcSrv.ServeBeside(ctx, grpcLn, func(ctx context.Context) error { return s.http.Serve(ctx, ln, s.Handler) })
}
