package middleware

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/clientip"
)

// Option configures New.
type Option func(*config)

type namedSpec struct {
	name string
	spec *ratelimitv1alpha1.RateLimitPolicySpec
}

type config struct {
	namespace    string
	specs        []namedSpec
	yamlTexts    []string
	stores       []string // the store options given, to refuse more than one
	redisClient  redis.UniversalClient
	redisURL     string
	remote       *RemoteOptions
	storeTimeout time.Duration
	// memoryMaxKeys is WithMemoryMaxKeys's cap; nil: the default.
	memoryMaxKeys *int
	trusted       *clientip.TrustedProxies
	deny          DenyHandler
	logger        *slog.Logger
	registerer    prometheus.Registerer
	traces        trace.TracerProvider
}

// WithPolicy adds a policy named name (a DNS subdomain, as Kubernetes
// object names are). The name appears in the headers ("name/limit") and
// in the Redis keys. The spec is copied; later changes to it have no effect.
func WithPolicy(name string, spec ratelimitv1alpha1.RateLimitPolicySpec) Option {
	return func(c *config) { c.specs = append(c.specs, namedSpec{name: name, spec: spec.DeepCopy()}) }
}

// WithPolicyYAML adds the RateLimitPolicies of text: one or more YAML (or
// JSON) documents separated by "---", as kubectl applies them. Each needs
// apiVersion ratelimit.sluice.dev/v1alpha1, kind RateLimitPolicy,
// metadata.name and spec; fields are decoded strictly, so a misspelled field
// is an error. Documents of other kinds are skipped, and a
// metadata.namespace, when given, must be the limiter's namespace.
func WithPolicyYAML(text string) Option {
	return func(c *config) { c.yamlTexts = append(c.yamlTexts, text) }
}

// WithNamespace sets the namespace the policies belong to (default
// "default"). In the process it is part of every Redis key, so services
// that share a Redis count separately unless they use the same namespace
// and policy names. Remotely it selects the check endpoint's namespace
// (/check/{namespace}).
func WithNamespace(namespace string) Option {
	return func(c *config) { c.namespace = namespace }
}

// WithMemoryStore keeps the counters in the process (the default): exact
// for one process, lost on restart, and not shared between replicas;
// bounded by WithMemoryMaxKeys.
func WithMemoryStore() Option {
	return func(c *config) { c.stores = append(c.stores, "WithMemoryStore") }
}

// WithMemoryMaxKeys caps the buckets the in-memory store holds (default
// 1,000,000, as `manager local`'s --memory-max-keys; 0: no cap). A bucket
// is one policy's key value, about 250 bytes with one limit. When the
// store is full, a request that needs a bucket it does not hold evicts the
// least recently used one, which starts afresh when its key value comes
// back: set the cap above the number of key values active at once. It
// applies to the in-memory store only.
func WithMemoryMaxKeys(n int) Option {
	return func(c *config) { c.memoryMaxKeys = &n }
}

// WithRedis keeps the counters in Redis through client: a single server,
// Sentinel (redis.NewFailoverClient) or Cluster client; redis.Ring is not
// supported. Close does not close the client.
//
// The client must not retry commands: go-redis retries a command whose
// connection failed after it was written, and a rate-limit call that had
// already run in Redis would be applied twice (one request counted twice,
// or admitted on a replayed answer). It must also bound socket I/O by the
// call's context, so a frozen Redis costs a request no more than the store
// timeout. Build it with NewRedisClient, or set MaxRetries: -1 and
// ContextTimeoutEnabled: true yourself; New refuses a *redis.Client or
// *redis.ClusterClient configured otherwise.
func WithRedis(client redis.UniversalClient) Option {
	return func(c *config) {
		c.stores = append(c.stores, "WithRedis")
		c.redisClient = client
	}
}

// WithRedisURL keeps the counters in the Redis server at url
// (redis://[user:password@]host:port/db, or rediss:// for TLS; go-redis's
// URL options such as dial_timeout apply). The limiter creates the client
// with the options WithRedis asks for, and Close closes it.
func WithRedisURL(url string) Option {
	return func(c *config) {
		c.stores = append(c.stores, "WithRedisURL")
		c.redisURL = url
	}
}

// WithStoreTimeout bounds each store call in the process (default 50ms,
// like the check endpoint's --redis-timeout); when it passes, the
// policies' failure modes answer. After 5 failed calls in a row a circuit
// breaker answers at once and lets one probe through per second.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) { c.storeTimeout = d }
}

// RemoteOptions configure WithRemote.
type RemoteOptions struct {
	// URL is the check endpoint's base URL, such as
	// http://sluice-check.sluice-system:8080. Required.
	URL string
	// Policy, when set, checks only that policy of the namespace
	// (/check/{namespace}/{policy}); by default every policy of the
	// namespace that matches the request applies (/check/{namespace}).
	Policy string
	// Timeout bounds each check, connecting included (default 250ms).
	Timeout time.Duration
	// FailureMode answers when the endpoint cannot: it is unreachable,
	// too slow, or answers anything but an allow or a denial (default
	// Open: allow). Closed denies with 429, Retry-After: 1 and a
	// limiter-unavailable problem. After 5 failures in a row a circuit
	// breaker answers at once and lets one probe through per second.
	FailureMode ratelimitv1alpha1.FailureMode
	// Client sends the checks. Default: a client with its own connection
	// pool. Its Timeout is not used; Timeout is.
	Client *http.Client
	// Headers, when not nil, are the only request headers forwarded, so
	// policies can match and key on those alone. By default every header
	// is forwarded, as Traefik and Caddy do, except hop-by-hop headers and
	// those that describe the request to the endpoint (X-Forwarded-*,
	// Forwarded, X-Real-IP, X-Original-URL, X-Original-Method), which the
	// middleware sets itself or drops, so a client cannot forge them.
	Headers []string
}

// WithRemote makes a Sluice check endpoint decide: each request is
// described to /check/{namespace} with ForwardAuth headers
// (X-Forwarded-Method, -Proto, -Host, -Uri, and -For carrying the client
// address found by the trusted proxies), and the endpoint's rate-limit
// headers, status and problem body are relayed. The endpoint must run
// with --profile auto or forwardauth, and this service's address must be
// among its --trusted-proxies (in-cluster addresses are by default), or
// it keys every request by this service's address. The policies are the
// endpoint's: WithPolicy, WithPolicyYAML and the store options cannot be
// combined with it.
func WithRemote(o RemoteOptions) Option {
	return func(c *config) {
		c.stores = append(c.stores, "WithRemote")
		c.remote = &o
	}
}

// WithTrustedProxies sets the peers whose X-Forwarded-For and X-Real-IP
// are believed (default clientip.DefaultTrustedProxies: loopback and
// private ranges). Narrow it when clients can reach the service from a
// private network directly; an empty set (clientip.ParseTrustedProxies(nil))
// believes no forwarded header at all.
func WithTrustedProxies(t *clientip.TrustedProxies) Option {
	return func(c *config) { c.trusted = t }
}

// WithDenyHandler replaces the default denial answer (the problem+json
// body). The rate-limit headers and Retry-After are already set on w
// when h is called; h writes the status and body. The next handler is
// never called for a denied request.
func WithDenyHandler(h DenyHandler) Option {
	return func(c *config) { c.deny = h }
}

// WithLogger sets the logger for failures of the store or the check
// endpoint (default slog.Default()). Failure-mode answers are logged at
// most once a second; a full store (Redis out of memory) once when it
// begins and once when it ends.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithMetrics registers the check endpoint's Prometheus metrics
// (sluice_decisions_total, sluice_check_duration_seconds,
// sluice_redis_errors_total, ...) with reg for the in-process decisions.
// Like prometheus.MustRegister it panics when reg already holds them, so
// use it for one limiter per registry. Remote decisions are counted by
// the check endpoint.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(c *config) { c.registerer = reg }
}

// WithTracerProvider traces each check in tp (by default none is): a span
// named sluice.check, a child of the request's span (or of its
// traceparent header), with the decision and the policies and limits that
// made it, and a child span per store call.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.traces = tp }
}
