// Package checkstack assembles a checker and what it runs on: the store
// (Redis behind this process's leases, or the in-memory store), the
// metrics, the checker with its circuit breakers and cache of denials,
// and how refunds reach the other check processes. Local mode, the
// cluster's check process and the middleware each build one from
// Options, which say what differs between them; a new piece of the check
// path is wired here once.
package checkstack

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/internal/buildinfo"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/lease"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// Options say what differs between the stacks of local mode, the check
// process and the middleware.
type Options struct {
	// Source gives the policies in force: the folder (local mode), the
	// policy table (the check process), or the middleware's own.
	Source check.Source
	// Redis, when set, keeps the counters; the caller closes it after the
	// stack, whose leases give their units back through it. Nil: the
	// in-memory store, which the stack makes and closes.
	Redis *redisstore.Store
	// MemoryMaxKeys caps the in-memory store's buckets (0: no cap). The
	// middleware passes its default (memstore.DefaultMaxKeys) when
	// WithMemoryMaxKeys is not given; local mode passes its flag's value.
	MemoryMaxKeys int
	// Timeout bounds each store call (check.Options.Timeout).
	Timeout time.Duration
	// OwnRegistry: the process serves its own /metrics (local mode, the
	// check process) from a registry the stack makes (Stack.Registry),
	// with the Go runtime, process and build-info collectors beside the
	// checker's metrics. Otherwise the checker's metrics go to
	// Registerer, or nowhere when it is nil: the middleware's
	// WithMetrics gives the service's registry, which has such
	// collectors of its own.
	OwnRegistry bool
	Registerer  prometheus.Registerer
	// Refunds, in a cluster, carries refunds between the check processes
	// on the policy table's channel: the ones this process makes are
	// announced on it, and those it hears of make the checker forget its
	// denials of their keys. Nil in local mode and the middleware, which
	// follow no policy table; their denials last until their retry times.
	Refunds *policytable.Refunds
	// OwnTraces: the process traces its checks as the OTEL_* variables
	// say (tracing.FromEnv; off unless an OTLP endpoint is set), and
	// Close flushes them. Otherwise Traces, when set, traces them (the
	// middleware's WithTracerProvider); nil: tracing off.
	OwnTraces bool
	Traces    trace.TracerProvider
	Logger    *slog.Logger
}

// Stack is a checker and the store it runs on.
type Stack struct {
	Checker *check.Checker
	// Registry is the process's registry (Options.OwnRegistry), else nil.
	Registry *prometheus.Registry
	// Memory is the in-memory store; nil over Redis.
	Memory *memstore.Store
	// Tracer starts the span of each check at the intakes; nil when
	// tracing is off.
	Tracer *tracing.Tracer
	// store is what the checker calls: the leases over Redis, or Memory.
	store ratelimit.Store
	// traces is the process's own tracer provider (Options.OwnTraces).
	traces *sdktrace.TracerProvider
}

// New assembles a stack from o.
func New(o Options) *Stack {
	s := &Stack{}
	system := tracing.SystemMemory
	if o.Redis != nil {
		system = tracing.SystemRedis
		// Each process is one of the P of a leased policy's bound
		// (spec.lease); every other request goes to Redis exactly,
		// through the lease store. None over the memory store: it is the
		// process's own and answers from memory already, exactly.
		s.store = lease.New(o.Redis, lease.Options{})
	} else {
		s.Memory = memstore.New(memstore.WithMaxKeys(o.MemoryMaxKeys))
		s.store = s.Memory
	}

	reg := o.Registerer
	if o.OwnRegistry {
		s.Registry = prometheus.NewRegistry()
		s.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector())
		reg = s.Registry
	}
	var metrics *check.Metrics
	if reg != nil {
		metrics = check.NewMetrics(reg)
	}

	tp := o.Traces
	if o.OwnTraces {
		if s.traces = tracing.FromEnv(logger(o)); s.traces != nil {
			tp = s.traces
		}
	}
	s.Tracer = tracing.New(tp, system)

	opts := check.Options{Store: s.store, StoreCalls: s.Tracer.Store(s.store), Source: o.Source, Timeout: o.Timeout, Metrics: metrics, Logger: o.Logger}
	if o.Refunds != nil {
		opts.AnnounceRefunds = o.Refunds.Announce
		opts.AnnounceLifts = o.Refunds.AnnounceLifts
	}
	s.Checker = check.New(opts)
	if o.Refunds != nil {
		o.Refunds.ForgetWith(s.Checker)
	}
	return s
}

// Close gives back the units the leases hold, stops the memory store, and
// sends the process's last spans. Check no more through the stack after
// Close.
func (s *Stack) Close() error {
	err := s.store.Close()
	if s.traces != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, s.traces.Shutdown(ctx))
	}
	return err
}

func logger(o Options) *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}
