package cel

import (
	"fmt"
	"strings"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

var policyCounter atomic.Int64

// policyFromSpec builds an unstructured RateLimitPolicy from a YAML spec, so
// the table can hold what Go types cannot express (two algorithms, bad enums).
func policyFromSpec(namespace, specYAML string) *unstructured.Unstructured {
	return objectFromSpec("RateLimitPolicy", namespace, specYAML)
}

// objectFromSpec builds an unstructured object of the API's kind from a
// YAML spec, with a name of its own.
func objectFromSpec(kind, namespace, specYAML string) *unstructured.Unstructured {
	var spec map[string]any
	Expect(yaml.Unmarshal([]byte(specYAML), &spec)).To(Succeed())
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(ratelimitv1alpha1.GroupVersion.String())
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(fmt.Sprintf("%s-%d", strings.ToLower(kind), policyCounter.Add(1)))
	return u
}

func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cel-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() { _ = k8sClient.Delete(ctx, ns) })
	return ns.Name
}

const tokenBucket10 = `
limits:
- name: burst
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
`

// inFlightDescriptors is a descriptor policy of [tenant, request_id] with
// the given key and a concurrency limit with the given holder field.
func inFlightDescriptors(key, holder string) string {
	return fmt.Sprintf(`
match: {descriptor: [{key: tenant}, {key: request_id}]}
key: %q
limits:
- {name: in-flight, concurrency: {limit: 2, leaseTimeout: 30s, %s}}
- {name: minute, fixedWindow: {limit: 100, window: 1m}}
`, key, holder)
}

// withLimit gives a spec with one limit of the given body, so each case
// states only what it is about.
func withLimit(limit string) string {
	return "limits:\n- name: l\n  " + limit + "\n"
}

var _ = Describe("RateLimitPolicy validation", func() {
	var namespace string
	BeforeEach(func() { namespace = newNamespace() })

	DescribeTable("valid policies are accepted",
		func(spec string) {
			Expect(k8sClient.Create(ctx, policyFromSpec(namespace, spec))).To(Succeed())
		},
		Entry("a token bucket with defaults", tokenBucket10),
		Entry("a penalty box whose ban doubles up to maxBan", "penalty: {denials: 5, within: 1m, ban: 1m, maxBan: 1h}\n"+tokenBucket10),
		Entry("a penalty box of fixed bans (ban equal to maxBan), in shadow mode", "mode: Shadow\npenalty: {denials: 1, within: 500ms, ban: 10m, maxBan: 10m}\n"+tokenBucket10),
		Entry("a concurrency limit of an HTTP policy, with defaults", withLimit("concurrency: {limit: 10}")),
		Entry("a concurrency limit of a descriptor policy, beside a rate limit", inFlightDescriptors("{descriptor:tenant}", "holder: request_id")),
		Entry("a lease on every algorithm, as large as the smallest capacity", `
cost: 2
lease: {units: 5, ttl: 1m}
limits:
- name: tb
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
- name: fw
  fixedWindow: {limit: 100, window: 1m, alignment: Clock}
- name: swl
  slidingWindowLog: {limit: 5, window: 10s}
- name: swc
  slidingWindowCounter: {limit: 1000, window: 1h}
- name: lb
  leakyBucket: {capacity: 5, leakRate: 1, leakInterval: 500ms}
- name: gcra
  gcra: {rate: 10, period: 1s, burst: 20}
`),
		Entry("every algorithm in one policy", `
limits:
- name: tb
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
- name: fw
  fixedWindow: {limit: 100, window: 1m}
- name: swl
  slidingWindowLog: {limit: 5, window: 10s}
- name: swc
  slidingWindowCounter: {limit: 1000, window: 1h}
- name: lb
  leakyBucket: {capacity: 5, leakRate: 1, leakInterval: 500ms}
- name: gcra
  gcra: {rate: 10, period: 1s, burst: 20}
`),
		Entry("a full match", `
match:
  hosts: [api.example.com, "*.example.org"]
  paths: [/login, /api/*]
  methods: [GET, POST]
  headers:
  - name: X-Plan
    value: free
  - name: Authorization
  when: request.headers["x-plan"] == "free"
`+tokenBucket10),
		Entry("a key with every placeholder", `
key: "{client_ip}|{client_ip/24}|{header:X-User-ID}|{query:api_key}|{method}|{host}|{path}"
onMissingKey: Shared
`+tokenBucket10),
		Entry("a global key", "key: global\n"+tokenBucket10),
		Entry("compound and extreme durations", `
limits:
- name: a
  fixedWindow: {limit: 1, window: 1h30m}
- name: b
  fixedWindow: {limit: 1, window: 1ms}
- name: c
  fixedWindow: {limit: 1000000000, window: 8784h}
`),
		Entry("shadow, fail closed, a custom answer", `
mode: Shadow
failureMode: Closed
response: {denyStatus: 503, headers: IETF}
`+tokenBucket10),
		Entry("a cost equal to the smallest capacity", `
cost: 5
limits:
- name: small
  gcra: {rate: 1, period: 1s, burst: 5}
- name: large
  slidingWindowCounter: {limit: 50, window: 1m}
`),
		Entry("calendar quotas in named zones and in UTC", `
cost: 2
limits:
- name: day
  calendar: {limit: 100, period: Day, timeZone: America/New_York}
- name: week
  calendar: {limit: 500, period: Week, timeZone: Asia/Kathmandu}
- name: month
  calendar: {limit: 10000, period: Month, timeZone: America/Argentina/Buenos_Aires}
- name: year
  calendar: {limit: 100000, period: Year, timeZone: Etc/GMT+5}
- name: utc
  calendar: {limit: 2, period: Month}
`),
		Entry("eight limits", "limits:\n"+fixedWindowLimits(8)),
		Entry("a policy targeting a route, exempting networks", `
targetRefs:
- {group: gateway.networking.k8s.io, kind: HTTPRoute, name: api, sectionName: orders}
- {group: gateway.networking.k8s.io, kind: Gateway, name: edge}
match:
  exemptClients: [10.0.0.0/8, "2001:db8::1"]
  headers: [{name: X-Plan, value: free}]
`+tokenBucket10),
		Entry("a descriptor policy", `
match:
  domain: edge
  descriptor:
  - key: generic_key
    value: api
  - key: remote_address
  - key: plan
    value: "free-*"
  when: request.descriptor["plan"] != "free-trial"
key: "{descriptor:remote_address}|{descriptor}"
limits:
- name: hour
  fixedWindow: {limit: 100, window: 1h, alignment: Clock}
`),
	)

	DescribeTable("invalid policies are rejected with a message a person can act on",
		func(spec string, wantMessages ...string) {
			err := k8sClient.Create(ctx, policyFromSpec(namespace, spec))
			Expect(err).To(HaveOccurred(), "the API server accepted an invalid policy")
			for _, want := range wantMessages {
				Expect(err.Error()).To(ContainSubstring(want))
			}
		},
		Entry("no algorithm", "limits:\n- name: l\n",
			"spec.limits[0]", "exactly one algorithm must be set: tokenBucket, fixedWindow, slidingWindowLog, slidingWindowCounter, leakyBucket, gcra, calendar or concurrency"),
		Entry("two algorithms", `
limits:
- name: l
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
  fixedWindow: {limit: 10, window: 1m}
`, "spec.limits[0]", "exactly one algorithm must be set"),
		Entry("duplicate limit names", `
limits:
- name: same
  fixedWindow: {limit: 10, window: 1m}
- name: same
  fixedWindow: {limit: 100, window: 1h}
`, "spec.limits[1]", "Duplicate value"),
		Entry("zero capacity", withLimit("tokenBucket: {capacity: 0, refillRate: 1, refillInterval: 1s}"),
			"spec.limits[0].tokenBucket.capacity", "should be greater than or equal to 1"),
		Entry("a negative limit", withLimit("fixedWindow: {limit: -5, window: 1m}"),
			"spec.limits[0].fixedWindow.limit", "should be greater than or equal to 1"),
		Entry("a count above one billion", withLimit("slidingWindowLog: {limit: 1000000001, window: 1m}"),
			"spec.limits[0].slidingWindowLog.limit", "should be less than or equal to 1000000000"),
		Entry("a duration without a unit", withLimit("fixedWindow: {limit: 10, window: '60'}"),
			"spec.limits[0].fixedWindow.window", "must be a duration such as 500ms, 1s, 1m30s or 24h"),
		Entry("a duration in words", withLimit("tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 10 seconds}"),
			"spec.limits[0].tokenBucket.refillInterval", "must be a duration such as"),
		Entry("a zero duration", withLimit("slidingWindowCounter: {limit: 10, window: 0s}"),
			"spec.limits[0].slidingWindowCounter.window", "must be between 1ms and 8784h (366 days)"),
		Entry("a duration over a year", withLimit("gcra: {rate: 10, period: 9000h, burst: 1}"),
			"spec.limits[0].gcra.period", "must be between 1ms and 8784h"),
		Entry("a missing required parameter", withLimit("gcra: {rate: 10, period: 1s}"),
			"spec.limits[0].gcra.burst", "Required value"),
		Entry("a calendar with an unknown period", withLimit("calendar: {limit: 10, period: Fortnight}"),
			"spec.limits[0].calendar.period", `Unsupported value: "Fortnight"`, `"Day"`, `"Week"`, `"Month"`, `"Year"`),
		Entry("a calendar without a period", withLimit("calendar: {limit: 10}"),
			"spec.limits[0].calendar.period", "Required value"),
		Entry("a calendar time zone that is no zone name", withLimit("calendar: {limit: 10, period: Day, timeZone: 'Berlin, Germany'}"),
			"spec.limits[0].calendar.timeZone", "must be an IANA time zone name such as Europe/Berlin"),
		Entry("a calendar time zone as an offset", withLimit("calendar: {limit: 10, period: Day, timeZone: '+02:00'}"),
			"spec.limits[0].calendar.timeZone", "must be an IANA time zone name"),
		Entry("a calendar time zone that is the host's", withLimit("calendar: {limit: 10, period: Day, timeZone: localtime}"),
			"spec.limits[0].calendar.timeZone", "not the host's own zone"),
		Entry("a calendar time zone Local", withLimit("calendar: {limit: 10, period: Day, timeZone: Local}"),
			"spec.limits[0].calendar.timeZone", "not the host's own zone"),
		Entry("a calendar time zone from a host's posix copy", withLimit("calendar: {limit: 10, period: Day, timeZone: posix/Europe/Berlin}"),
			"spec.limits[0].calendar.timeZone", "a host's copy of the database"),
		Entry("a calendar time zone from a host's right copy", withLimit("calendar: {limit: 10, period: Day, timeZone: right/UTC}"),
			"spec.limits[0].calendar.timeZone", "a host's copy of the database"),
		Entry("a calendar time zone too long", withLimit("calendar: {limit: 10, period: Day, timeZone: Europe/"+strings.Repeat("x", 60)+"}"),
			"spec.limits[0].calendar.timeZone", "Too long"),
		Entry("a cost above a calendar's limit", "cost: 20\n"+withLimit("calendar: {limit: 10, period: Month}"),
			"spec.cost", "cost must not exceed any limit's capacity"),
		Entry("an unknown mode", "mode: Audit\n"+tokenBucket10,
			"spec.mode", `Unsupported value: "Audit"`, `"Enforce"`, `"Shadow"`),
		Entry("an unknown failure mode", "failureMode: Maybe\n"+tokenBucket10,
			"spec.failureMode", `Unsupported value: "Maybe"`),
		Entry("an unknown onMissingKey", "onMissingKey: Ignore\n"+tokenBucket10,
			"spec.onMissingKey", `Unsupported value: "Ignore"`),
		Entry("an unknown header style", "response: {headers: Draft}\n"+tokenBucket10,
			"spec.response.headers", `Unsupported value: "Draft"`),
		Entry("no limits", "limits: []\n",
			"spec.limits", "should have at least 1 items"),
		Entry("limits missing", "key: global\n",
			"spec.limits", "Required value"),
		Entry("nine limits", "limits:\n"+fixedWindowLimits(9),
			"spec.limits", "must have at most 8 items"),
		Entry("a cost above a capacity", `
cost: 11
limits:
- name: burst
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
- name: day
  fixedWindow: {limit: 1000, window: 24h}
`, "spec.cost", "cost must not exceed any limit's capacity"),
		Entry("a cost above a gcra burst", `
cost: 3
limits:
- name: smooth
  gcra: {rate: 100, period: 1s, burst: 2}
`, "spec.cost", "cost must not exceed any limit's capacity"),
		Entry("an unknown key placeholder", "key: 'user:{user}'\n"+tokenBucket10,
			"spec.key", "key must be literal text and the placeholders {client_ip}, {client_ip/N}, {header:Name}"),
		Entry("an unclosed key placeholder", "key: '{header:X-User'\n"+tokenBucket10,
			"spec.key", "key must be literal text and the placeholders"),
		Entry("a limit name in capitals", `
limits:
- name: Burst
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
`, "spec.limits[0].name", "must be a DNS label"),
		Entry("a wildcard in the middle of a host", "match: {hosts: ['api.*.example.com']}\n"+tokenBucket10,
			"spec.match.hosts[0]", "must be a host name such as api.example.com, or *.example.com"),
		Entry("a relative path", "match: {paths: ['api/*']}\n"+tokenBucket10,
			"spec.match.paths[0]", "must start with '/'"),
		Entry("a wildcard inside a path", "match: {paths: ['/api/*/users']}\n"+tokenBucket10,
			"spec.match.paths[0]", "hold '*' only as its last character"),
		Entry("a lower-case method", "match: {methods: [get]}\n"+tokenBucket10,
			"spec.match.methods[0]", `Unsupported value: "get"`),
		Entry("a header name with a space", "match: {headers: [{name: 'X Plan', value: free}]}\n"+tokenBucket10,
			"spec.match.headers[0].name", "must be an HTTP header name"),
		Entry("a deny status below 400", "response: {denyStatus: 200}\n"+tokenBucket10,
			"spec.response.denyStatus", "should be greater than or equal to 400"),
		Entry("a descriptor policy with HTTP match fields", `
match:
  domain: edge
  hosts: [api.example.com]
`+tokenBucket10, "spec.match", "a descriptor policy (domain or descriptor set) answers Envoy rate limit service requests"),
		Entry("a descriptor policy keyed by the client address", `
match:
  descriptor: [{key: remote_address}]
key: "{client_ip}"
`+tokenBucket10, "spec.key", "a descriptor policy (match.domain or match.descriptor set) builds its key from {descriptor}"),
		Entry("an HTTP policy keyed by a descriptor", `key: "{descriptor:remote_address}"
`+tokenBucket10, "spec.key", "an HTTP policy never from them"),
		Entry("an unknown alignment", withLimit("fixedWindow: {limit: 1, window: 1h, alignment: Hourly}"),
			"spec.limits[0].fixedWindow.alignment", "Unsupported value"),
		Entry("alignment on a sliding window", withLimit("slidingWindowLog: {limit: 1, window: 1h, alignment: Clock}"),
			"spec.limits[0]", "alignment is fixedWindow's only"),
		Entry("an exempt client that is no network", `
match:
  exemptClients: [10.0.0.0/8, not-an-ip]
`+tokenBucket10, "spec.match.exemptClients", "must be a network in CIDR notation"),
		Entry("exempt clients in a descriptor policy", `
match:
  domain: edge
  exemptClients: [10.0.0.0/8]
`+tokenBucket10, "spec.match", "exemptClients select HTTP checks"),
		Entry("targetRefs with paths", `
targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]
match:
  paths: [/x]
`+tokenBucket10, "spec.match", "takes its hosts, paths and methods from its targets"),
		Entry("a targetRef to a Service", `
targetRefs: [{group: "", kind: Service, name: r}]
`+tokenBucket10, "spec.targetRefs", "targetRefs name HTTPRoutes or Gateways"),
		Entry("a descriptor entry without a key", `
match:
  descriptor: [{value: x}]
`+tokenBucket10, "spec.match.descriptor[0].key", "Required value"),
		Entry("a deny status above 599", "response: {denyStatus: 600}\n"+tokenBucket10,
			"spec.response.denyStatus", "should be less than or equal to 599"),
		Entry("a lease larger than a limit", `
lease: {units: 11}
limits:
- name: burst
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
- name: day
  fixedWindow: {limit: 1000, window: 24h}
`, "spec.lease.units", "lease.units must not exceed any limit's capacity"),
		Entry("a lease larger than a gcra burst", `
lease: {units: 3}
limits:
- name: smooth
  gcra: {rate: 100, period: 1s, burst: 2}
`, "spec.lease.units", "lease.units must not exceed any limit's capacity"),
		Entry("a lease smaller than the cost", "cost: 3\nlease: {units: 2}\n"+tokenBucket10,
			"spec.lease.units", "lease.units must be at least cost"),
		Entry("a lease of no units", "lease: {units: 0}\n"+tokenBucket10,
			"spec.lease.units", "should be greater than or equal to 1"),
		Entry("a lease without units", "lease: {ttl: 1s}\n"+tokenBucket10,
			"spec.lease.units", "Required value"),
		Entry("a lease kept over a minute", "lease: {units: 2, ttl: 90s}\n"+tokenBucket10,
			"spec.lease.ttl", "a lease's ttl must be at most 1m"),
		Entry("a lease ttl without a unit", "lease: {units: 2, ttl: '5'}\n"+tokenBucket10,
			"spec.lease.ttl", "must be a duration such as"),
		Entry("a lease charged always", "charge: Always\nlease: {units: 2}\n"+tokenBucket10,
			"spec.lease", "a lease cannot serve charge Always"),
		Entry("a lease in shadow mode", "mode: Shadow\nlease: {units: 2}\n"+tokenBucket10,
			"spec.lease", "a lease cannot serve mode Shadow"),
		Entry("a penalty ban longer than maxBan", "penalty: {denials: 5, within: 1m, ban: 2h, maxBan: 1h}\n"+tokenBucket10,
			"spec.penalty.ban", "ban must not exceed maxBan"),
		Entry("a penalty of no denials", "penalty: {denials: 0, within: 1m, ban: 1m, maxBan: 1h}\n"+tokenBucket10,
			"spec.penalty.denials", "should be greater than or equal to 1"),
		Entry("a penalty without maxBan", "penalty: {denials: 5, within: 1m, ban: 1m}\n"+tokenBucket10,
			"spec.penalty.maxBan", "Required value"),
		Entry("a penalty within a span without a unit", "penalty: {denials: 5, within: '60', ban: 1m, maxBan: 1h}\n"+tokenBucket10,
			"spec.penalty.within", "must be a duration such as"),
		Entry("a penalty maxBan over 366 days", "penalty: {denials: 5, within: 1m, ban: 1m, maxBan: 9000h}\n"+tokenBucket10,
			"spec.penalty.maxBan", "must be between 1ms and 8784h"),
		Entry("a penalty with a lease", "lease: {units: 2}\npenalty: {denials: 5, within: 1m, ban: 1m, maxBan: 1h}\n"+tokenBucket10,
			"spec.penalty", "a lease cannot serve a penalty box"),
		Entry("a concurrency limit without a holder in a descriptor policy", inFlightDescriptors("{descriptor:tenant}", ""),
			"spec.limits", "a concurrency limit of a descriptor policy names its holder"),
		Entry("a concurrency holder that match.descriptor does not list", inFlightDescriptors("{descriptor:tenant}", "holder: trace_id"),
			"spec.limits", "an entry of match.descriptor"),
		Entry("a concurrency holder in the key", inFlightDescriptors("{descriptor:tenant}/{descriptor:request_id}", "holder: request_id"),
			"spec.limits", "that the key leaves out"),
		Entry("a concurrency limit keyed by the whole descriptor", inFlightDescriptors("{descriptor}", "holder: request_id"),
			"spec.limits", "that the key leaves out"),
		Entry("a concurrency limit of a descriptor policy without a key", `
match: {descriptor: [{key: tenant}, {key: request_id}]}
limits: [{name: l, concurrency: {limit: 2, holder: request_id}}]
`, "spec.limits", "that the key leaves out"),
		Entry("a concurrency holder in an HTTP policy", withLimit("concurrency: {limit: 2, holder: request_id}"),
			"spec.limits", "an HTTP policy sets no holder"),
		Entry("a concurrency limit with a lease", "lease: {units: 1}\n"+withLimit("concurrency: {limit: 2}"),
			"spec.lease", "a concurrency limit takes no lease"),
		Entry("a concurrency limit charged always", "charge: Always\n"+withLimit("concurrency: {limit: 2}"),
			"spec.charge", "must be Admitted with a concurrency limit"),
		Entry("a cost above a concurrency limit", "cost: 3\n"+withLimit("concurrency: {limit: 2}"),
			"spec.cost", "cost must not exceed any limit's capacity"),
		Entry("a concurrency leaseTimeout without a unit", withLimit("concurrency: {limit: 2, leaseTimeout: '30'}"),
			"spec.limits[0].concurrency.leaseTimeout", "must be a duration such as"),
	)

	It("fills in the documented defaults", func() {
		u := policyFromSpec(namespace, `
limits:
- name: leak
  leakyBucket: {capacity: 5, leakRate: 1}
`)
		Expect(k8sClient.Create(ctx, u)).To(Succeed())
		var got ratelimitv1alpha1.RateLimitPolicy
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(u), &got)).To(Succeed())
		// The key has no schema default: its default depends on the kind
		// of policy ({client_ip}, or {descriptor} for a descriptor policy),
		// so the compiler fills it in.
		Expect(got.Spec.Key).To(BeEmpty())
		Expect(got.Spec.OnMissingKey).To(Equal(ratelimitv1alpha1.OnMissingKeySkip))
		Expect(got.Spec.Cost).To(Equal(ratelimitv1alpha1.Count(1)))
		Expect(got.Spec.Mode).To(Equal(ratelimitv1alpha1.ModeEnforce))
		Expect(got.Spec.FailureMode).To(Equal(ratelimitv1alpha1.FailureModeOpen))
		Expect(got.Spec.Response.Headers).To(Equal(ratelimitv1alpha1.HeaderStyleBoth))
		Expect(got.Spec.Limits[0].LeakyBucket.LeakInterval).To(Equal(ratelimitv1alpha1.Duration("1s")))
		Expect(got.Status.ObservedGeneration).To(Equal(int64(-1)), "a policy no controller has seen reports observedGeneration -1")
	})

	It("defaults a lease's ttl to 1s", func() {
		u := policyFromSpec(namespace, "lease: {units: 3}\n"+tokenBucket10)
		Expect(k8sClient.Create(ctx, u)).To(Succeed())
		var got ratelimitv1alpha1.RateLimitPolicy
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(u), &got)).To(Succeed())
		Expect(got.Spec.Lease).To(Equal(&ratelimitv1alpha1.Lease{Units: 3, TTL: "1s"}))
	})

	It("rejects an invalid update and keeps the stored version", func() {
		u := policyFromSpec(namespace, tokenBucket10)
		Expect(k8sClient.Create(ctx, u)).To(Succeed())
		var p ratelimitv1alpha1.RateLimitPolicy
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(u), &p)).To(Succeed())
		p.Spec.Limits[0].TokenBucket.RefillInterval = "soon"
		err := k8sClient.Update(ctx, &p)
		Expect(err).To(MatchError(ContainSubstring("must be a duration such as")))
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(u), &p)).To(Succeed())
		Expect(p.Spec.Limits[0].TokenBucket.RefillInterval).To(Equal(ratelimitv1alpha1.Duration("1s")))
	})

	It("reports every mistake of a policy at once", func() {
		err := k8sClient.Create(ctx, policyFromSpec(namespace, `
mode: Audit
limits:
- name: burst
  tokenBucket: {capacity: 0, refillRate: 1, refillInterval: 1s}
`))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(And(ContainSubstring("spec.mode"), ContainSubstring("spec.limits[0].tokenBucket.capacity")))
	})
})

// fixedWindowLimits returns n fixed-window limits named l1..ln.
func fixedWindowLimits(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "- name: l%d\n  fixedWindow: {limit: 10, window: 1m}\n", i)
	}
	return b.String()
}
