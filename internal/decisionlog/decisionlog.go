// Package decisionlog writes the decision log: one JSON line per denied
// check (the policy and limit that denied, a hash of the bucket's key, the
// client's address, the trace id), for log pipelines. It is off unless
// asked for, and rate limited: a flood of denials writes at most the
// configured lines per second, and the lines it drops are counted, in the
// next line written and in a metric, so a flood can neither fill a disk nor
// slow the checks (lines are written by a goroutine of their own; a check
// never waits for the writer).
package decisionlog

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// DefaultPerSecond is the default bound on the lines written per second.
const DefaultPerSecond = 100

// queued bounds the lines waiting for the writer; beyond it lines are
// dropped and counted, as the rate limit drops them.
const queued = 1024

// Config is where the log goes and how fast it may be written.
type Config struct {
	// Dest is "" (off), "stdout", "stderr", or a file's path (appended to).
	Dest string
	// PerSecond bounds the lines written per second (a burst of as many
	// is allowed); default DefaultPerSecond.
	PerSecond int
}

// BindFlags binds --decision-log and --decision-log-rate.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Dest, "decision-log", "", "write one JSON line per denied check (policy, limit, key hash, client address, trace id) to stdout, stderr or a file's path; off when empty")
	c.PerSecond = DefaultPerSecond
	fs.Func("decision-log-rate", fmt.Sprintf("most decision log lines written per second; the lines a flood goes beyond it with are counted, not written (default %d)", DefaultPerSecond),
		func(s string) error {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return fmt.Errorf("want a whole number of lines per second of at least 1, got %q", s)
			}
			c.PerSecond = n
			return nil
		})
}

// Log writes the decision log. A nil *Log writes nothing.
type Log struct {
	lines   chan line
	closer  io.Closer // the file, when Dest is one
	done    chan struct{}
	now     func() time.Time
	metrics *prometheus.CounterVec

	mu         sync.Mutex
	closed     bool
	tokens     float64
	last       time.Time
	perSecond  float64
	suppressed int64 // dropped since the last line queued
}

// line is one denial, taken from the outcome before the check returns
// (the outcome is reused afterwards).
type line struct {
	at         time.Time
	rule       checkhttp.Rule
	retryAfter time.Duration
	cached     bool
	client     netip.Addr
	trace      trace.SpanContext
	suppressed int64
}

// Open opens c's destination and starts the writer; nil, and no error,
// when c is off.
func Open(c Config) (*Log, error) {
	var w io.Writer
	var closer io.Closer
	switch c.Dest {
	case "":
		return nil, nil
	case "stdout":
		w = os.Stdout
	case "stderr":
		w = os.Stderr
	default:
		f, err := os.OpenFile(c.Dest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("--decision-log: %w", err)
		}
		w, closer = f, f
	}
	l := New(w, c.PerSecond, time.Now)
	l.closer = closer
	return l, nil
}

// Collector is the counter of the lines written and dropped.
func (l *Log) Collector() prometheus.Collector { return l.metrics }

// New returns a Log writing to w at most perSecond lines a second by the
// clock now (default DefaultPerSecond, time.Now).
func New(w io.Writer, perSecond int, now func() time.Time) *Log {
	if perSecond < 1 {
		perSecond = DefaultPerSecond
	}
	if now == nil {
		now = time.Now
	}
	l := &Log{
		lines: make(chan line, queued), done: make(chan struct{}), now: now,
		perSecond: float64(perSecond), tokens: float64(perSecond), last: now(),
		metrics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decision_log_lines_total",
			Help: "Decision log lines: written, or dropped (beyond --decision-log-rate, or while the writer was behind).",
		}, []string{"outcome"}),
	}
	l.metrics.WithLabelValues("written")
	l.metrics.WithLabelValues("dropped")
	go l.write(slog.NewJSONHandler(w, nil))
	return l
}

// Denied logs a denied check: in, decided out, whose span (if traced) is
// in ctx. Only a consuming check's denial is a decision; dry runs are
// diagnoses and refunds and releases deny nothing.
func (l *Log) Denied(ctx context.Context, in *check.Input, out *check.Outcome) {
	if l == nil || out.Allowed || in.Action != ratelimit.Consume {
		return
	}
	rule, ok := checkhttp.RuleOf(out)
	if !ok {
		return
	}
	at := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.tokens = min(l.tokens+at.Sub(l.last).Seconds()*l.perSecond, l.perSecond)
	l.last = at
	if l.tokens < 1 {
		l.suppressed++
		l.metrics.WithLabelValues("dropped").Inc()
		return
	}
	ln := line{at: at, rule: rule, retryAfter: out.RetryAfter, client: clientOf(in), trace: traceOf(ctx, in), suppressed: l.suppressed}
	if r := out.Reporting(); r != nil {
		ln.cached = r.Cached
	}
	select {
	case l.lines <- ln:
		l.tokens--
		l.suppressed = 0
	default: // the writer is behind: drop rather than slow the check
		l.suppressed++
		l.metrics.WithLabelValues("dropped").Inc()
	}
}

// traceOf is the trace the check belongs to: its span's when traced,
// else the caller's traceparent header (the HTTP intakes and ext_authz
// carry the request's headers), so the line joins the caller's trace
// with tracing off too.
func traceOf(ctx context.Context, in *check.Input) trace.SpanContext {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc
	}
	if in.Request == nil || in.Request.Header == nil {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(in.Request.Header)))
}

// clientOf is the client's address as the intake read it: the request's,
// or the first part's that has one (a rate limit service request's
// descriptors carry it only when the proxy sends remote_address).
func clientOf(in *check.Input) netip.Addr {
	if in.Request != nil {
		return in.Request.ClientIP
	}
	for _, p := range in.Parts {
		if p.Request != nil && p.Request.ClientIP.IsValid() {
			return p.Request.ClientIP
		}
	}
	return netip.Addr{}
}

// write writes the queued lines, each stamped with the time of its
// decision rather than of its writing.
func (l *Log) write(h slog.Handler) {
	defer close(l.done)
	for ln := range l.lines {
		attrs := []slog.Attr{
			slog.String("policy", ln.rule.Policy),
			slog.String("reason", string(ln.rule.Reason)),
		}
		if ln.rule.Limit != "" {
			attrs = append(attrs, slog.String("limit", ln.rule.Limit), slog.String("key_hash", ln.rule.KeyHash))
		}
		if ln.retryAfter != ratelimit.Never {
			attrs = append(attrs, slog.Int64("retry_after_ms", ln.retryAfter.Milliseconds()))
		}
		if ln.cached {
			attrs = append(attrs, slog.Bool("cached", true))
		}
		if ln.client.IsValid() {
			attrs = append(attrs, slog.String("client", ln.client.String()))
		}
		if ln.trace.IsValid() {
			attrs = append(attrs, slog.String("trace_id", ln.trace.TraceID().String()), slog.String("span_id", ln.trace.SpanID().String()))
		}
		if ln.suppressed > 0 {
			attrs = append(attrs, slog.Int64("dropped_before", ln.suppressed))
		}
		r := slog.NewRecord(ln.at, slog.LevelInfo, "denied", 0)
		r.AddAttrs(attrs...)
		if err := h.Handle(context.Background(), r); err != nil {
			l.metrics.WithLabelValues("dropped").Inc()
			continue
		}
		l.metrics.WithLabelValues("written").Inc()
	}
}

// Close writes the lines queued and closes the file.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.lines)
	}
	l.mu.Unlock()
	<-l.done
	if l.closer != nil {
		return l.closer.Close()
	}
	return nil
}
