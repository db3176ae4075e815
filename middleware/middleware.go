package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/checkstack"
	"github.com/sluice-dev/sluice/internal/intake"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// DefaultNamespace is the namespace of the policies unless WithNamespace
// says otherwise.
const DefaultNamespace = "default"

// Limiter checks requests against rate-limit policies. Create it with New;
// it is safe for concurrent use. Close releases what New created.
type Limiter struct {
	namespace string
	trusted   *clientip.TrustedProxies
	deny      DenyHandler
	log       *slog.Logger
	lastLog   atomic.Int64 // Unix ns of the last failure-mode log line

	stack   *checkstack.Stack // in the process
	remote  *remote           // or remotely
	closers []func() error
}

// Reason says why a request was denied.
type Reason string

const (
	// ReasonRateLimited: a limit is exhausted, or its bucket is banned by
	// the policy's penalty box (then Limit is empty: the ban denies, not
	// one of the limits).
	ReasonRateLimited Reason = "RateLimited"
	// ReasonMissingKey: the request lacks its key's value and the policy's
	// onMissingKey is Deny.
	ReasonMissingKey Reason = "MissingKey"
	// ReasonUnavailable: Redis or the check endpoint could not answer and
	// the failure mode is Closed.
	ReasonUnavailable Reason = "Unavailable"
)

// Decision describes a denial to a DenyHandler.
type Decision struct {
	Reason Reason
	// Status is what the default answer uses: the policy's
	// response.denyStatus, else 429.
	Status int
	// Policy is the denying policy as "namespace/name" (empty when the
	// check endpoint could not be asked).
	Policy string
	// Limit is the exhausted limit's name (ReasonRateLimited; empty for
	// a ban).
	Limit string
	// RetryAfter is how long the client should wait; never earlier than
	// the moment the same request could pass. 0 when no wait will do (a
	// missing key, or a cost above the limit's capacity).
	RetryAfter time.Duration
	// Err is the store's or the check endpoint's error (ReasonUnavailable).
	Err error
}

// DenyHandler answers a denied request; see WithDenyHandler.
type DenyHandler func(w http.ResponseWriter, r *http.Request, d Decision)

// New builds a Limiter. A policy that does not compile, or options that
// contradict each other, are an error naming the policy and field.
func New(opts ...Option) (*Limiter, error) {
	c := &config{}
	for _, o := range opts {
		o(c)
	}
	if c.namespace == "" {
		c.namespace = DefaultNamespace
	}
	if msgs := validation.IsDNS1123Label(c.namespace); len(msgs) > 0 {
		return nil, fmt.Errorf("middleware: namespace %q: %s", c.namespace, strings.Join(msgs, "; "))
	}
	if len(c.stores) > 1 {
		return nil, fmt.Errorf("middleware: %s exclude each other; choose one", strings.Join(c.stores, " and "))
	}
	if c.trusted == nil {
		c.trusted = clientip.Default()
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	l := &Limiter{namespace: c.namespace, trusted: c.trusted, deny: c.deny, log: c.logger}

	if c.remote != nil {
		if len(c.specs) > 0 || len(c.yamlTexts) > 0 {
			return nil, errors.New("middleware: WithRemote uses the check endpoint's policies: WithPolicy and WithPolicyYAML cannot be combined with it")
		}
		rm, err := newRemote(c.remote, c.namespace)
		if err != nil {
			return nil, err
		}
		l.remote = rm
		l.closers = append(l.closers, rm.close)
		return l, nil
	}

	policies, err := compilePolicies(c)
	if err != nil {
		return nil, err
	}
	redisStore, maxKeys, closers, err := chooseStore(c)
	if err != nil {
		return nil, err
	}
	l.closers = closers
	// Each service replica is one of the P processes of a leased policy's
	// bound (spec.lease); the metrics go to the service's registry
	// (WithMetrics), or nowhere.
	l.stack = checkstack.New(checkstack.Options{
		Source:        check.NewStaticSource(policies...),
		Redis:         redisStore,
		MemoryMaxKeys: maxKeys,
		Timeout:       c.storeTimeout,
		Registerer:    c.registerer,
		Traces:        c.traces,
		Logger:        c.logger,
	})
	// Closed before the Redis store: the units the leases hold go back first.
	l.closers = append([]func() error{l.stack.Close}, l.closers...)
	return l, nil
}

// chooseStore reads the store options: a Redis store (and what closes
// it), or none for the in-memory store with its key cap.
func chooseStore(c *config) (*redisstore.Store, int, []func() error, error) {
	kind := "WithMemoryStore"
	if len(c.stores) == 1 {
		kind = c.stores[0]
	}
	maxKeys := memstore.DefaultMaxKeys
	if c.memoryMaxKeys != nil {
		maxKeys = *c.memoryMaxKeys
	}
	switch {
	case c.memoryMaxKeys != nil && kind != "WithMemoryStore":
		return nil, 0, nil, fmt.Errorf("middleware: WithMemoryMaxKeys caps the in-memory store, and %s keeps the counters elsewhere", kind)
	case c.memoryMaxKeys != nil && *c.memoryMaxKeys < 0:
		return nil, 0, nil, fmt.Errorf("middleware: WithMemoryMaxKeys: %d: want 0 (no cap) or more", *c.memoryMaxKeys)
	case kind == "WithRedis" && c.redisClient == nil:
		return nil, 0, nil, errors.New("middleware: WithRedis: the client is nil")
	case kind == "WithRedisURL" && c.redisURL == "":
		return nil, 0, nil, errors.New("middleware: WithRedisURL: the URL is empty")
	case kind == "WithRedis" || kind == "WithRedisURL":
		st, closers, err := newRedisStore(c)
		return st, maxKeys, closers, err
	}
	return nil, maxKeys, nil, nil
}

// Close gives back the units leases hold, stops the memory store's
// sweeper, the Redis store's pipelines and
// a Redis client that WithRedisURL created (not one given to WithRedis).
// Serve no more requests through the limiter's handlers after Close.
func (l *Limiter) Close() error {
	var errs []error
	for _, c := range l.closers {
		errs = append(errs, c())
	}
	l.closers = nil
	return errors.Join(errs...)
}

// Handler returns next guarded by the limiter. Its method value,
// l.Handler, is a func(http.Handler) http.Handler.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	if l.remote != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serveRemote(w, r, next) })
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serveLocal(w, r, next) })
}

// policyRequest reads r as the check endpoint reads the request a proxy
// asks about (intake.Read), so a spelling cannot skip a policy. The header
// section is bounded as the check endpoint bounds it, which `when` costs
// are estimated for; the service's own server may allow more.
func (l *Limiter) policyRequest(r *http.Request) (*policy.Request, error) {
	o := intake.Original{Method: r.Method, Authority: r.Host, Target: requestTarget(r), Header: r.Header, Peer: clientip.Peer(r.RemoteAddr)}
	if o.Authority == "" {
		o.Authority = r.URL.Host
	}
	req := &policy.Request{}
	err := intake.CheckHeaderSection(r.Header)
	if err == nil {
		err = intake.Read(&o, l.trusted, req)
	}
	if err != nil {
		f, _ := intake.FieldOf(err)
		return nil, fmt.Errorf("%s: %w", requestFields[f], err)
	}
	return req, nil
}

// requestFields names each field intake.Read may refuse in a problem's
// detail.
var requestFields = map[intake.Field]string{
	intake.FieldMethod: "method", intake.FieldHost: "header Host", intake.FieldTarget: "request target",
	intake.FieldHeaders: "header section",
}

// badRequest answers a request the policies cannot read, as the check
// endpoint answers a proxy's: 400 (431 for the header section) with a
// problem naming what is wrong; the handler is not called.
func badRequest(w http.ResponseWriter, err error) {
	status := http.StatusBadRequest
	if errors.Is(err, intake.ErrHeadersTooLarge) {
		status = http.StatusRequestHeaderFieldsTooLarge
	}
	checkhttp.WriteProblem(w, checkhttp.Problem{
		Type: checkhttp.ProblemBadRequest, Title: "Bad request", Status: status, Detail: err.Error(),
	})
}

// requestTarget is the target as the client sent it, read as the check
// endpoint reads a proxy's; an absolute-form one (or a request a program
// built) from its URL.
func requestTarget(r *http.Request) string {
	if strings.HasPrefix(r.RequestURI, "/") {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}

func (l *Limiter) serveLocal(w http.ResponseWriter, r *http.Request, next http.Handler) {
	req, err := l.policyRequest(r)
	if err != nil {
		badRequest(w, err)
		return
	}
	holder := nextHolder()
	ctx, span := l.stack.Tracer.StartHTTP(r.Context(), tracing.IntakeMiddleware, l.namespace, r.Header)
	out, err := l.stack.Checker.Check(ctx, check.Input{Namespace: l.namespace, Request: req, Holder: holder})
	span.End(out, err)
	if err != nil {
		// Not Redis being away (the failure mode covers that): more
		// limits than one check evaluates (400), or a bug.
		p := checkhttp.CheckFailedProblem(err)
		if p.Status == http.StatusInternalServerError {
			l.log.Error("rate-limit check failed", "err", err)
		}
		checkhttp.WriteProblem(w, p)
		return
	}
	if out.Degraded && !errors.Is(out.StoreErr, ratelimit.ErrCapacity) {
		// A full store is logged by the checker, once when it begins
		// and once when it ends.
		l.logFailure("rate-limit store unavailable; the failure mode answered", out.Allowed, out.StoreErr)
	}
	checkhttp.SetHeaders(w.Header(), out, time.Now())
	if out.Allowed {
		if out.Holds() {
			// also when next panics, which then goes on
			defer l.release(context.WithoutCancel(r.Context()), admitted(req), holder)
		}
		if out.Reserves() {
			slot := &usageSlot{}
			r = r.WithContext(context.WithValue(r.Context(), usageKey{}, slot))
			// runs before the release: the deferred calls run last first
			defer l.settle(context.WithoutCancel(r.Context()), admitted(req), holder, slot)
		}
		next.ServeHTTP(w, passOn(r, checkhttp.OverLimit(out)))
		return
	}
	status := checkhttp.DenyStatus(out, http.StatusTooManyRequests)
	if l.deny != nil {
		l.deny(w, r, localDecision(out, status))
		return
	}
	checkhttp.WriteDenial(w, out, status)
}

func localDecision(out *check.Outcome, status int) Decision {
	d := Decision{Reason: ReasonRateLimited, Status: status, RetryAfter: out.RetryAfter, Err: out.StoreErr}
	if d.RetryAfter == ratelimit.Never {
		d.RetryAfter = 0
	}
	if out.Decider != nil {
		d.Policy = out.Decider.String()
	}
	switch out.Reason {
	case check.ReasonMissingKey:
		d.Reason = ReasonMissingKey
	case check.ReasonStoreUnavailable:
		d.Reason = ReasonUnavailable
	default:
		d.Limit = out.NamedLimit()
	}
	return d
}

// logFailure logs a failure-mode answer, at most once a second: while
// Redis or the endpoint is down every request would log otherwise.
func (l *Limiter) logFailure(msg string, allowed bool, err error) {
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(time.Second) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn(msg, "allowed", allowed, "err", err)
}
