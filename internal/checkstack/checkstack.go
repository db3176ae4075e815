// Package checkstack assembles a checker and what it runs on: the store
// (Redis behind this process's leases, or the in-memory store) as one
// ratelimit.Backend that says what it can do, the metrics, the checker
// with its circuit breakers and cache of denials, and the observers of
// its decisions (counts, the decision log, top keys, the index of bans,
// the refunds and lifts announced to the other check processes). Local
// mode, the cluster's check process and the middleware each build one
// from Options, which say what differs between them; a new piece of the
// check path is wired here once.
package checkstack

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/internal/buildinfo"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/decisionlog"
	"github.com/sluice-dev/sluice/internal/fleet"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/lease"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/topkeys"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// Options say what differs between the stacks of local mode, the check
// process and the middleware.
type Options struct {
	// Source gives the policies in force: the folder (local mode), the
	// policy table (the check process), or the middleware's own.
	Source check.Source
	// Overrides give the key values' overrides (check.Options.Overrides);
	// nil: none.
	Overrides check.Overrides
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
	// Announcer, in a cluster, carries refunds and lifts between the check
	// processes on the policy table's channel: the ones this process makes
	// are announced on it, and those it hears of (its fleet.Follower hands
	// them over) make the checker forget its denials of their keys. Nil in
	// local mode and the middleware, which follow no policy table; their
	// denials last until their retry times.
	Announcer *fleet.Announcer
	// OwnTraces: the process traces its checks as the OTEL_* variables
	// say (tracing.FromEnv; off unless an OTLP endpoint is set), and
	// Close flushes them. Otherwise Traces, when set, traces them (the
	// middleware's WithTracerProvider); nil: tracing off.
	OwnTraces bool
	Traces    trace.TracerProvider
	// DecisionLog, when set, is told of every denial (decisionlog.Open);
	// its metrics join the stack's, and Close flushes and closes it.
	DecisionLog *decisionlog.Log
	// TopKeys: the checker records the key values each policy denies and
	// admits most (Stack.Top). Over Redis, the stack publishes them every
	// topkeys.PublishInterval, and Stack.Top merges every process's.
	TopKeys bool
	Logger  *slog.Logger
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
	// Tally counts the checker's decisions: per limit for the dashboard,
	// and in the metrics when there are any.
	Tally *check.Tally
	// store is what the checker calls: the leases over Redis, or Memory.
	store ratelimit.Store
	// Top answers which key values each policy denied and admitted most
	// (Options.TopKeys): over Redis every process's that publishes there,
	// else this one's; nil when off.
	Top topkeys.Source
	// traces is the process's own tracer provider (Options.OwnTraces).
	traces *sdktrace.TracerProvider
	// decisions is the decision log; nil when off.
	decisions *decisionlog.Log
	// stopTop ends the recorder's and publisher's loops (topLoops; the
	// publisher's after a last publish).
	stopTop  context.CancelFunc
	topLoops sync.WaitGroup
}

// New assembles a stack from o.
func New(o Options) *Stack {
	s := &Stack{}
	backend, system := s.backend(o)
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

	s.Tally = check.NewTally(metrics)
	if o.DecisionLog != nil {
		s.decisions = o.DecisionLog
		if reg != nil {
			reg.MustRegister(o.DecisionLog.Collector())
		}
	}
	s.Checker = check.New(check.Options{Backend: s.Tracer.Backend(backend), Source: o.Source, Overrides: o.Overrides, Timeout: o.Timeout,
		Metrics: metrics, Observer: s.observers(o, backend), Logger: o.Logger})
	if o.Announcer != nil {
		o.Announcer.ForgetWith(s.Checker)
	}
	return s
}

// backend makes the store the checker runs on, and names it for traces.
func (s *Stack) backend(o Options) (ratelimit.Backend, string) {
	if o.Redis == nil {
		s.Memory = memstore.New(memstore.WithMaxKeys(o.MemoryMaxKeys))
		s.store = s.Memory
		return s.Memory.Backend(), tracing.SystemMemory
	}
	// Each process is one of the P of a leased policy's bound
	// (spec.lease); every other request goes to Redis exactly, through
	// the lease store. None over the memory store: it is the process's
	// own and answers from memory already, exactly.
	leases := lease.New(o.Redis.Backend(), lease.Options{})
	s.store = leases
	return leases.Backend(), tracing.SystemRedis
}

// observers are who the checker tells of what it decides: the tally
// always; the index of bans when the store keeps one; the decision log,
// the top keys and the other check processes when o asks for them.
func (s *Stack) observers(o Options, b ratelimit.Backend) check.Observers {
	obs := check.Observers{s.Tally}
	if b.BanIndex != nil {
		obs = append(obs, check.RecordBans(b.BanIndex, o.Logger))
	}
	if o.DecisionLog != nil {
		obs = append(obs, check.LogDenials(o.DecisionLog))
	}
	if o.TopKeys {
		obs = append(obs, check.RecordKeys(s.startTopKeys(o)))
	}
	if o.Announcer != nil {
		obs = append(obs, check.Announce(o.Announcer.AnnounceRefunds, o.Announcer.AnnounceLifts))
	}
	return obs
}

// startTopKeys makes the recorder of top key values, and runs its loop
// and, over Redis, its publisher until Close.
func (s *Stack) startTopKeys(o Options) *topkeys.Recorder {
	rec := topkeys.NewRecorder(nil)
	s.Top = rec
	ctx, stop := context.WithCancel(context.Background())
	s.stopTop = stop
	s.topLoops.Go(func() { rec.Run(ctx) })
	if o.Redis != nil {
		s.Top = topkeys.NewReader(o.Redis.Client(), nil)
		publisher := topkeys.NewPublisher(rec, o.Redis.Client(), logger(o))
		s.topLoops.Go(func() { publisher.Run(ctx) })
	}
	return rec
}

// Close gives back the units the leases hold, publishes the last top key
// values, stops the memory store, and sends the process's last spans.
// Check no more through the stack after Close.
func (s *Stack) Close() error {
	if s.stopTop != nil {
		s.stopTop()
		s.topLoops.Wait()
	}
	err := errors.Join(s.store.Close(), s.decisions.Close())
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
