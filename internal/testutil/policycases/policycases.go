// Package policycases is the one table of RateLimitPolicy and
// RateLimitOverrides specs the API server accepts or refuses, each refusal
// with the field it names and words of its message. test/cel runs it against
// a real kube-apiserver; the parity test of internal/policyfiles runs it
// through local mode's schema validation and the middleware's Go checks, so
// a file, the middleware and a cluster accept exactly the same objects.
package policycases

import (
	"fmt"
	"strings"
)

// Case is one spec and what the API server makes of it.
type Case struct {
	Name string
	// Spec is the object's spec, in YAML.
	Spec string
	// Field is the field a refusal names, such as
	// "spec.limits[0].fixedWindow.window"; empty for an accepted spec.
	Field string
	// Words are parts of the refusal's message, the API server's words.
	Words []string
	// ClusterOnly names the field of an accepted spec that only a cluster
	// can serve (targetRefs resolve against its Gateways): outside one,
	// the spec is refused naming it.
	ClusterOnly string
}

// AcceptedPolicies are RateLimitPolicy specs the API server accepts.
func AcceptedPolicies() []Case {
	return []Case{
		{Name: "a token bucket with defaults", Spec: tokenBucket10},
		{Name: "a penalty box whose ban doubles up to maxBan", Spec: "penalty: {denials: 5, within: 1m, ban: 1m, maxBan: 1h}\n" + tokenBucket10},
		{Name: "a penalty box of fixed bans (ban equal to maxBan), in shadow mode", Spec: "mode: Shadow\npenalty: {denials: 1, within: 500ms, ban: 10m, maxBan: 10m}\n" + tokenBucket10},
		{Name: "a concurrency limit of an HTTP policy, with defaults", Spec: withLimit("concurrency: {limit: 10}")},
		{Name: "limits of their own modes (Enforce, Shadow, Soft) and a hidden one, in a shadow policy", Spec: `
mode: Shadow
penalty: {denials: 3, within: 1m, ban: 1m, maxBan: 4m}
limits:
- {name: hard, mode: Enforce, visibility: Hidden, fixedWindow: {limit: 100, window: 1m}}
- {name: trial, mode: Shadow, tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}}
- {name: plan, mode: Soft, visibility: Visible, calendar: {limit: 1000, period: Month}}
`},
		{Name: "a concurrency limit of a descriptor policy, beside a rate limit", Spec: inFlightDescriptors("{descriptor:tenant}", "holder: request_id")},
		{Name: "a token budget of a descriptor policy, per minute and per month", Spec: tokenBudget("{descriptor:tenant}", "holder: request_id, ttl: 5m, max: 20000")},
		{Name: "a token budget of an HTTP policy, with defaults", Spec: "charge: Reserve\nreserve: {}\ncost: 100\n" + withLimit("fixedWindow: {limit: 100000, window: 1m}")},
		{Name: "a token budget priced by weights", Spec: "charge: Reserve\nreserve: {max: 5000, pricing: {inputTokens: '1', outputTokens: '4', cachedInputTokens: '0.1'}}\n" + withLimit("calendar: {limit: 5000000, period: Month, timeZone: Europe/Berlin}")},
		{Name: "a token budget whose limits enforce by their own mode, in a shadow policy", Spec: "mode: Shadow\ncharge: Reserve\nreserve: {}\n" + withLimit("mode: Enforce\n  fixedWindow: {limit: 100000, window: 1m}")},
		{Name: "a lease beside limits that enforce by their own mode", Spec: "lease: {units: 2}\nlimits:\n- {name: a, mode: Enforce, fixedWindow: {limit: 100, window: 1m}}\n- {name: b, mode: Enforce, tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}}\n"},
		{Name: "a token budget priced by an expression", Spec: "charge: Reserve\nreserve: {pricing: {expression: 'inputTokens + 4 * outputTokens'}}\n" + withLimit("tokenBucket: {capacity: 100000, refillRate: 1000, refillInterval: 1s}")},
		{Name: "a lease on every algorithm, as large as the smallest capacity", Spec: `
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
`},
		{Name: "every algorithm in one policy", Spec: `
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
`},
		{Name: "a full match", Spec: `
match:
  hosts: [api.example.com, "*.example.org"]
  paths: [/login, /api/*]
  methods: [GET, POST]
  headers:
  - name: X-Plan
    value: free
  - name: Authorization
  when: request.headers["x-plan"] == "free"
` + tokenBucket10},
		{Name: "a key with every placeholder", Spec: `
key: "{client_ip}|{client_ip/24}|{header:X-User-ID}|{query:api_key}|{method}|{host}|{path}"
onMissingKey: Shared
` + tokenBucket10},
		{Name: "a global key", Spec: "key: global\n" + tokenBucket10},
		{Name: "compound and extreme durations", Spec: `
limits:
- name: a
  fixedWindow: {limit: 1, window: 1h30m}
- name: b
  fixedWindow: {limit: 1, window: 1ms}
- name: c
  fixedWindow: {limit: 1000000000, window: 8784h}
`},
		{Name: "shadow, fail closed, a custom answer", Spec: `
mode: Shadow
failureMode: Closed
response: {denyStatus: 503, headers: IETF}
` + tokenBucket10},
		{Name: "a cost equal to the smallest capacity", Spec: `
cost: 5
limits:
- name: small
  gcra: {rate: 1, period: 1s, burst: 5}
- name: large
  slidingWindowCounter: {limit: 50, window: 1m}
`},
		{Name: "calendar quotas in named zones and in UTC", Spec: `
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
`},
		{Name: "eight limits", Spec: "limits:\n" + fixedWindowLimits(8)},
		{Name: "a policy targeting a route, exempting networks", Spec: `
targetRefs:
- {group: gateway.networking.k8s.io, kind: HTTPRoute, name: api, sectionName: orders}
- {group: gateway.networking.k8s.io, kind: Gateway, name: edge}
match:
  exemptClients: [10.0.0.0/8, "2001:db8::1"]
  headers: [{name: X-Plan, value: free}]
` + tokenBucket10, ClusterOnly: "spec.targetRefs"},
		{Name: "a descriptor policy", Spec: `
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
`},
	}
}

// RefusedPolicies are RateLimitPolicy specs the API server refuses.
func RefusedPolicies() []Case {
	return []Case{
		{Name: "no algorithm", Spec: "limits:\n- name: l\n",
			Field: "spec.limits[0]", Words: []string{"exactly one algorithm must be set: tokenBucket, fixedWindow, slidingWindowLog, slidingWindowCounter, leakyBucket, gcra, calendar or concurrency"}},
		{Name: "two algorithms", Spec: `
limits:
- name: l
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
  fixedWindow: {limit: 10, window: 1m}
`,
			Field: "spec.limits[0]", Words: []string{"exactly one algorithm must be set"}},
		{Name: "duplicate limit names", Spec: `
limits:
- name: same
  fixedWindow: {limit: 10, window: 1m}
- name: same
  fixedWindow: {limit: 100, window: 1h}
`,
			Field: "spec.limits[1]", Words: []string{"Duplicate value"}},
		{Name: "zero capacity", Spec: withLimit("tokenBucket: {capacity: 0, refillRate: 1, refillInterval: 1s}"),
			Field: "spec.limits[0].tokenBucket.capacity", Words: []string{"should be greater than or equal to 1"}},
		{Name: "a negative limit", Spec: withLimit("fixedWindow: {limit: -5, window: 1m}"),
			Field: "spec.limits[0].fixedWindow.limit", Words: []string{"should be greater than or equal to 1"}},
		{Name: "a count above one billion", Spec: withLimit("slidingWindowLog: {limit: 1000000001, window: 1m}"),
			Field: "spec.limits[0].slidingWindowLog.limit", Words: []string{"should be less than or equal to 1000000000"}},
		{Name: "a duration without a unit", Spec: withLimit("fixedWindow: {limit: 10, window: '60'}"),
			Field: "spec.limits[0].fixedWindow.window", Words: []string{"must be a duration such as 500ms, 1s, 1m30s or 24h"}},
		{Name: "a duration in words", Spec: withLimit("tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 10 seconds}"),
			Field: "spec.limits[0].tokenBucket.refillInterval", Words: []string{"must be a duration such as"}},
		{Name: "a zero duration", Spec: withLimit("slidingWindowCounter: {limit: 10, window: 0s}"),
			Field: "spec.limits[0].slidingWindowCounter.window", Words: []string{"must be between 1ms and 8784h (366 days)"}},
		{Name: "a duration over a year", Spec: withLimit("gcra: {rate: 10, period: 9000h, burst: 1}"),
			Field: "spec.limits[0].gcra.period", Words: []string{"must be between 1ms and 8784h"}},
		{Name: "a missing required parameter", Spec: withLimit("gcra: {rate: 10, period: 1s}"),
			Field: "spec.limits[0].gcra.burst", Words: []string{"Required value"}},
		{Name: "a calendar with an unknown period", Spec: withLimit("calendar: {limit: 10, period: Fortnight}"),
			Field: "spec.limits[0].calendar.period", Words: []string{`Unsupported value: "Fortnight"`, `"Day"`, `"Week"`, `"Month"`, `"Year"`}},
		{Name: "a calendar without a period", Spec: withLimit("calendar: {limit: 10}"),
			Field: "spec.limits[0].calendar.period", Words: []string{"Required value"}},
		{Name: "a calendar time zone that is no zone name", Spec: withLimit("calendar: {limit: 10, period: Day, timeZone: 'Berlin, Germany'}"),
			Field: "spec.limits[0].calendar.timeZone", Words: []string{"must be an IANA time zone name such as Europe/Berlin"}},
		{Name: "a calendar time zone as an offset", Spec: withLimit("calendar: {limit: 10, period: Day, timeZone: '+02:00'}"),
			Field: "spec.limits[0].calendar.timeZone", Words: []string{"must be an IANA time zone name"}},
		{Name: "a calendar time zone that is the host's", Spec: withLimit("calendar: {limit: 10, period: Day, timeZone: localtime}"),
			Field: "spec.limits[0].calendar.timeZone", Words: []string{"not the host's own zone"}},
		{Name: "a calendar time zone Local", Spec: withLimit("calendar: {limit: 10, period: Day, timeZone: Local}"),
			Field: "spec.limits[0].calendar.timeZone", Words: []string{"not the host's own zone"}},
		{Name: "a calendar time zone from a host's posix copy", Spec: withLimit("calendar: {limit: 10, period: Day, timeZone: posix/Europe/Berlin}"),
			Field: "spec.limits[0].calendar.timeZone", Words: []string{"a host's copy of the database"}},
		{Name: "a calendar time zone from a host's right copy", Spec: withLimit("calendar: {limit: 10, period: Day, timeZone: right/UTC}"),
			Field: "spec.limits[0].calendar.timeZone", Words: []string{"a host's copy of the database"}},
		{Name: "a calendar time zone too long", Spec: withLimit("calendar: {limit: 10, period: Day, timeZone: Europe/" + strings.Repeat("x", 60) + "}"),
			Field: "spec.limits[0].calendar.timeZone", Words: []string{"Too long"}},
		{Name: "a cost above a calendar's limit", Spec: "cost: 20\n" + withLimit("calendar: {limit: 10, period: Month}"),
			Field: "spec.cost", Words: []string{"cost must not exceed any limit's capacity"}},
		{Name: "an unknown mode", Spec: "mode: Audit\n" + tokenBucket10,
			Field: "spec.mode", Words: []string{`Unsupported value: "Audit"`, `"Enforce"`, `"Shadow"`}},
		{Name: "an unknown limit mode", Spec: withLimit("fixedWindow: {limit: 1, window: 1s}\n  mode: Warn"),
			Field: "spec.limits[0].mode", Words: []string{`Unsupported value: "Warn"`, `"Enforce"`, `"Shadow"`, `"Soft"`}},
		{Name: "an unknown limit visibility", Spec: withLimit("fixedWindow: {limit: 1, window: 1s}\n  visibility: Secret"),
			Field: "spec.limits[0].visibility", Words: []string{`Unsupported value: "Secret"`, `"Visible"`, `"Hidden"`}},
		{Name: "an unknown failure mode", Spec: "failureMode: Maybe\n" + tokenBucket10,
			Field: "spec.failureMode", Words: []string{`Unsupported value: "Maybe"`}},
		{Name: "an unknown onMissingKey", Spec: "onMissingKey: Ignore\n" + tokenBucket10,
			Field: "spec.onMissingKey", Words: []string{`Unsupported value: "Ignore"`}},
		{Name: "an unknown header style", Spec: "response: {headers: Draft}\n" + tokenBucket10,
			Field: "spec.response.headers", Words: []string{`Unsupported value: "Draft"`}},
		{Name: "no limits", Spec: "limits: []\n",
			Field: "spec.limits", Words: []string{"should have at least 1 items"}},
		{Name: "limits missing", Spec: "key: global\n",
			Field: "spec.limits", Words: []string{"Required value"}},
		{Name: "nine limits", Spec: "limits:\n" + fixedWindowLimits(9),
			Field: "spec.limits", Words: []string{"must have at most 8 items"}},
		{Name: "a cost above a capacity", Spec: `
cost: 11
limits:
- name: burst
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
- name: day
  fixedWindow: {limit: 1000, window: 24h}
`,
			Field: "spec.cost", Words: []string{"cost must not exceed any limit's capacity"}},
		{Name: "a cost above a gcra burst", Spec: `
cost: 3
limits:
- name: smooth
  gcra: {rate: 100, period: 1s, burst: 2}
`,
			Field: "spec.cost", Words: []string{"cost must not exceed any limit's capacity"}},
		{Name: "an unknown key placeholder", Spec: "key: 'user:{user}'\n" + tokenBucket10,
			Field: "spec.key", Words: []string{"key must be literal text and the placeholders {client_ip}, {client_ip/N}, {header:Name}"}},
		{Name: "an unclosed key placeholder", Spec: "key: '{header:X-User'\n" + tokenBucket10,
			Field: "spec.key", Words: []string{"key must be literal text and the placeholders"}},
		{Name: "a limit name in capitals", Spec: `
limits:
- name: Burst
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
`,
			Field: "spec.limits[0].name", Words: []string{"must be a DNS label"}},
		{Name: "a host starting with a hyphen", Spec: "match: {hosts: ['-a.com']}\n" + tokenBucket10,
			Field: "spec.match.hosts[0]", Words: []string{"must be a host name such as api.example.com, or *.example.com"}},
		{Name: "a fractional duration", Spec: withLimit("fixedWindow: {limit: 10, window: 1.5s}"),
			Field: "spec.limits[0].fixedWindow.window", Words: []string{"must be a duration such as 500ms, 1s, 1m30s or 24h"}},
		{Name: "a host with an underscore", Spec: "match: {hosts: ['a_b.example.com']}\n" + tokenBucket10,
			Field: "spec.match.hosts[0]", Words: []string{"must be a host name such as"}},
		{Name: "a host with an empty label", Spec: "match: {hosts: ['a..example.com']}\n" + tokenBucket10,
			Field: "spec.match.hosts[0]", Words: []string{"must be a host name such as"}},
		{Name: "a duration of six digits", Spec: withLimit("fixedWindow: {limit: 10, window: 100000ms}"),
			Field: "spec.limits[0].fixedWindow.window", Words: []string{"must be a duration such as"}},
		{Name: "a duration of five parts", Spec: withLimit("fixedWindow: {limit: 10, window: 1h1m1s1ms1ms}"),
			Field: "spec.limits[0].fixedWindow.window", Words: []string{"must be a duration such as"}},
		{Name: "a method twice", Spec: "match: {methods: [GET, GET]}\n" + tokenBucket10,
			Field: "spec.match.methods[1]", Words: []string{"Duplicate value"}},
		{Name: "a host twice", Spec: "match: {hosts: [a.example.com, a.example.com]}\n" + tokenBucket10,
			Field: "spec.match.hosts[1]", Words: []string{"Duplicate value"}},
		{Name: "seventeen hosts", Spec: "match: {hosts: [" + strings.TrimSuffix(strings.Repeat("a.example.com, ", 17), ", ") + "]}\n" + tokenBucket10,
			Field: "spec.match.hosts", Words: []string{"must have at most 16 items"}},
		{Name: "a key too long", Spec: "key: '" + strings.Repeat("k", 513) + "'\n" + tokenBucket10,
			Field: "spec.key", Words: []string{"Too long"}},
		{Name: "a carriage return in a path", Spec: "match: {paths: [\"/a\\rb\"]}\n" + tokenBucket10,
			Field: "spec.match.paths[0]", Words: []string{"must start with '/'"}},
		{Name: "a header value too long", Spec: "match: {headers: [{name: X-A, value: '" + strings.Repeat("v", 4097) + "'}]}\n" + tokenBucket10,
			Field: "spec.match.headers[0].value", Words: []string{"Too long"}},
		{Name: "a misspelled field", Spec: withLimit("fixedWindow: {limit: 10, windw: 1m}"),
			Field: "spec.limits[0].fixedWindow.windw", Words: []string{`unknown field "spec.limits[0].fixedWindow.windw"`}},
		{Name: "a wildcard in the middle of a host", Spec: "match: {hosts: ['api.*.example.com']}\n" + tokenBucket10,
			Field: "spec.match.hosts[0]", Words: []string{"must be a host name such as api.example.com, or *.example.com"}},
		{Name: "a relative path", Spec: "match: {paths: ['api/*']}\n" + tokenBucket10,
			Field: "spec.match.paths[0]", Words: []string{"must start with '/'"}},
		{Name: "a wildcard inside a path", Spec: "match: {paths: ['/api/*/users']}\n" + tokenBucket10,
			Field: "spec.match.paths[0]", Words: []string{"hold '*' only as its last character"}},
		{Name: "a lower-case method", Spec: "match: {methods: [get]}\n" + tokenBucket10,
			Field: "spec.match.methods[0]", Words: []string{`Unsupported value: "get"`}},
		{Name: "a header name with a space", Spec: "match: {headers: [{name: 'X Plan', value: free}]}\n" + tokenBucket10,
			Field: "spec.match.headers[0].name", Words: []string{"must be an HTTP header name"}},
		{Name: "a deny status below 400", Spec: "response: {denyStatus: 200}\n" + tokenBucket10,
			Field: "spec.response.denyStatus", Words: []string{"should be greater than or equal to 400"}},
		{Name: "a descriptor policy with HTTP match fields", Spec: `
match:
  domain: edge
  hosts: [api.example.com]
` + tokenBucket10,
			Field: "spec.match", Words: []string{"a descriptor policy (domain or descriptor set) answers Envoy rate limit service requests"}},
		{Name: "a descriptor policy keyed by the client address", Spec: `
match:
  descriptor: [{key: remote_address}]
key: "{client_ip}"
` + tokenBucket10,
			Field: "spec.key", Words: []string{"a descriptor policy (match.domain or match.descriptor set) builds its key from {descriptor}"}},
		{Name: "an HTTP policy keyed by a descriptor", Spec: `key: "{descriptor:remote_address}"
` + tokenBucket10,
			Field: "spec.key", Words: []string{"an HTTP policy never from them"}},
		{Name: "an unknown alignment", Spec: withLimit("fixedWindow: {limit: 1, window: 1h, alignment: Hourly}"),
			Field: "spec.limits[0].fixedWindow.alignment", Words: []string{"Unsupported value"}},
		{Name: "alignment on a sliding window", Spec: withLimit("slidingWindowLog: {limit: 1, window: 1h, alignment: Clock}"),
			Field: "spec.limits[0]", Words: []string{"alignment is fixedWindow's only"}},
		{Name: "an exempt client that is no network", Spec: `
match:
  exemptClients: [10.0.0.0/8, not-an-ip]
` + tokenBucket10,
			Field: "spec.match.exemptClients", Words: []string{"must be a network in CIDR notation"}},
		{Name: "exempt clients in a descriptor policy", Spec: `
match:
  domain: edge
  exemptClients: [10.0.0.0/8]
` + tokenBucket10,
			Field: "spec.match", Words: []string{"exemptClients select HTTP checks"}},
		{Name: "targetRefs with paths", Spec: `
targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]
match:
  paths: [/x]
` + tokenBucket10,
			Field: "spec.match", Words: []string{"takes its hosts, paths and methods from its targets"}},
		{Name: "a targetRef to a Service", Spec: `
targetRefs: [{group: "", kind: Service, name: r}]
` + tokenBucket10,
			Field: "spec.targetRefs", Words: []string{"targetRefs name HTTPRoutes or Gateways"}},
		{Name: "a descriptor entry without a key", Spec: `
match:
  descriptor: [{value: x}]
` + tokenBucket10,
			Field: "spec.match.descriptor[0].key", Words: []string{"Required value"}},
		{Name: "a deny status above 599", Spec: "response: {denyStatus: 600}\n" + tokenBucket10,
			Field: "spec.response.denyStatus", Words: []string{"should be less than or equal to 599"}},
		{Name: "a lease larger than a limit", Spec: `
lease: {units: 11}
limits:
- name: burst
  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
- name: day
  fixedWindow: {limit: 1000, window: 24h}
`,
			Field: "spec.lease.units", Words: []string{"lease.units must not exceed any limit's capacity"}},
		{Name: "a lease larger than a gcra burst", Spec: `
lease: {units: 3}
limits:
- name: smooth
  gcra: {rate: 100, period: 1s, burst: 2}
`,
			Field: "spec.lease.units", Words: []string{"lease.units must not exceed any limit's capacity"}},
		{Name: "a lease smaller than the cost", Spec: "cost: 3\nlease: {units: 2}\n" + tokenBucket10,
			Field: "spec.lease.units", Words: []string{"lease.units must be at least cost"}},
		{Name: "a lease of no units", Spec: "lease: {units: 0}\n" + tokenBucket10,
			Field: "spec.lease.units", Words: []string{"should be greater than or equal to 1"}},
		{Name: "a lease without units", Spec: "lease: {ttl: 1s}\n" + tokenBucket10,
			Field: "spec.lease.units", Words: []string{"Required value"}},
		{Name: "a lease kept over a minute", Spec: "lease: {units: 2, ttl: 90s}\n" + tokenBucket10,
			Field: "spec.lease.ttl", Words: []string{"a lease's ttl must be at most 1m"}},
		{Name: "a lease ttl without a unit", Spec: "lease: {units: 2, ttl: '5'}\n" + tokenBucket10,
			Field: "spec.lease.ttl", Words: []string{"must be a duration such as"}},
		{Name: "a lease charged always", Spec: "charge: Always\nlease: {units: 2}\n" + tokenBucket10,
			Field: "spec.lease", Words: []string{"a lease cannot serve charge Always"}},
		{Name: "a lease in shadow mode", Spec: "mode: Shadow\nlease: {units: 2}\n" + tokenBucket10,
			Field: "spec.lease", Words: []string{"a lease cannot serve mode Shadow"}},
		{Name: "a lease with a limit in mode Shadow", Spec: "lease: {units: 2}\n" + withLimit("mode: Shadow\n  tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}"),
			Field: "spec.lease", Words: []string{"a lease cannot serve a limit in mode Shadow or Soft"}},
		{Name: "a lease with a limit in mode Soft beside an enforced one", Spec: "lease: {units: 2}\nlimits:\n- {name: hard, fixedWindow: {limit: 100, window: 1m}}\n- {name: plan, mode: Soft, fixedWindow: {limit: 50, window: 1m}}\n",
			Field: "spec.lease", Words: []string{"a lease cannot serve a limit in mode Shadow or Soft"}},
		{Name: "a penalty ban longer than maxBan", Spec: "penalty: {denials: 5, within: 1m, ban: 2h, maxBan: 1h}\n" + tokenBucket10,
			Field: "spec.penalty.ban", Words: []string{"ban must not exceed maxBan"}},
		{Name: "a penalty of no denials", Spec: "penalty: {denials: 0, within: 1m, ban: 1m, maxBan: 1h}\n" + tokenBucket10,
			Field: "spec.penalty.denials", Words: []string{"should be greater than or equal to 1"}},
		{Name: "a penalty without maxBan", Spec: "penalty: {denials: 5, within: 1m, ban: 1m}\n" + tokenBucket10,
			Field: "spec.penalty.maxBan", Words: []string{"Required value"}},
		{Name: "a penalty within a span without a unit", Spec: "penalty: {denials: 5, within: '60', ban: 1m, maxBan: 1h}\n" + tokenBucket10,
			Field: "spec.penalty.within", Words: []string{"must be a duration such as"}},
		{Name: "a penalty maxBan over 366 days", Spec: "penalty: {denials: 5, within: 1m, ban: 1m, maxBan: 9000h}\n" + tokenBucket10,
			Field: "spec.penalty.maxBan", Words: []string{"must be between 1ms and 8784h"}},
		{Name: "a penalty with a lease", Spec: "lease: {units: 2}\npenalty: {denials: 5, within: 1m, ban: 1m, maxBan: 1h}\n" + tokenBucket10,
			Field: "spec.penalty", Words: []string{"a lease cannot serve a penalty box"}},
		{Name: "a concurrency limit without a holder in a descriptor policy", Spec: inFlightDescriptors("{descriptor:tenant}", ""),
			Field: "spec.limits", Words: []string{"a concurrency limit of a descriptor policy names its holder"}},
		{Name: "a concurrency holder that match.descriptor does not list", Spec: inFlightDescriptors("{descriptor:tenant}", "holder: trace_id"),
			Field: "spec.limits", Words: []string{"an entry of match.descriptor"}},
		{Name: "a concurrency holder in the key", Spec: inFlightDescriptors("{descriptor:tenant}/{descriptor:request_id}", "holder: request_id"),
			Field: "spec.limits", Words: []string{"that the key leaves out"}},
		{Name: "a concurrency limit keyed by the whole descriptor", Spec: inFlightDescriptors("{descriptor}", "holder: request_id"),
			Field: "spec.limits", Words: []string{"that the key leaves out"}},
		{Name: "a concurrency limit of a descriptor policy without a key", Spec: `
match: {descriptor: [{key: tenant}, {key: request_id}]}
limits: [{name: l, concurrency: {limit: 2, holder: request_id}}]
`,
			Field: "spec.limits", Words: []string{"that the key leaves out"}},
		{Name: "a concurrency holder in an HTTP policy", Spec: withLimit("concurrency: {limit: 2, holder: request_id}"),
			Field: "spec.limits", Words: []string{"an HTTP policy sets no holder"}},
		{Name: "a concurrency limit with a lease", Spec: "lease: {units: 1}\n" + withLimit("concurrency: {limit: 2}"),
			Field: "spec.lease", Words: []string{"a concurrency limit takes no lease"}},
		{Name: "a concurrency limit charged always", Spec: "charge: Always\n" + withLimit("concurrency: {limit: 2}"),
			Field: "spec.charge", Words: []string{"must be Admitted with a concurrency limit"}},
		{Name: "a cost above a concurrency limit", Spec: "cost: 3\n" + withLimit("concurrency: {limit: 2}"),
			Field: "spec.cost", Words: []string{"cost must not exceed any limit's capacity"}},
		{Name: "a concurrency leaseTimeout without a unit", Spec: withLimit("concurrency: {limit: 2, leaseTimeout: '30'}"),
			Field: "spec.limits[0].concurrency.leaseTimeout", Words: []string{"must be a duration such as"}},
		{Name: "charge Reserve without reserve", Spec: "charge: Reserve\n" + tokenBucket10,
			Field: "spec.charge", Words: []string{"charge Reserve needs reserve"}},
		{Name: "a token budget with a limit in mode Soft", Spec: "charge: Reserve\nreserve: {}\n" + withLimit("mode: Soft\n  fixedWindow: {limit: 100000, window: 1m}"),
			Field: "spec.limits", Words: []string{"charge Reserve needs every limit to enforce"}},
		{Name: "a token budget with a limit in mode Shadow beside an enforced one", Spec: "charge: Reserve\nreserve: {}\nlimits:\n- {name: minute, fixedWindow: {limit: 100000, window: 1m}}\n- {name: trial, mode: Shadow, fixedWindow: {limit: 5000, window: 1m}}\n",
			Field: "spec.limits", Words: []string{"charge Reserve needs every limit to enforce"}},
		{Name: "reserve without charge Reserve", Spec: "reserve: {ttl: 1m}\n" + tokenBucket10,
			Field: "spec.reserve", Words: []string{"reserve is for charge Reserve only"}},
		{Name: "reserve with charge Always", Spec: "charge: Always\nreserve: {ttl: 1m}\n" + tokenBucket10,
			Field: "spec.reserve", Words: []string{"reserve is for charge Reserve only"}},
		{Name: "a token budget with a lease", Spec: "charge: Reserve\nreserve: {}\nlease: {units: 2}\n" + tokenBucket10,
			Field: "spec.lease", Words: []string{"a lease cannot serve charge Always or Reserve"}},
		{Name: "a token budget with a concurrency limit", Spec: "charge: Reserve\nreserve: {}\n" + withLimit("concurrency: {limit: 2}"),
			Field: "spec.charge", Words: []string{"must be Admitted with a concurrency limit"}},
		{Name: "a token budget of a descriptor policy without a holder", Spec: tokenBudget("{descriptor:tenant}", "ttl: 5m"),
			Field: "spec.reserve.holder", Words: []string{"reserve.holder of a descriptor policy names an entry of match.descriptor"}},
		{Name: "a token budget holder that match.descriptor does not list", Spec: tokenBudget("{descriptor:tenant}", "holder: trace_id"),
			Field: "spec.reserve.holder", Words: []string{"an entry of match.descriptor"}},
		{Name: "a token budget holder in the key", Spec: tokenBudget("{descriptor:tenant}/{descriptor:request_id}", "holder: request_id"),
			Field: "spec.reserve.holder", Words: []string{"that the key leaves out"}},
		{Name: "a token budget keyed by the whole descriptor", Spec: tokenBudget("{descriptor}", "holder: request_id"),
			Field: "spec.reserve.holder", Words: []string{"that the key leaves out"}},
		{Name: "a token budget holder in an HTTP policy", Spec: "charge: Reserve\nreserve: {holder: request_id}\n" + tokenBucket10,
			Field: "spec.reserve.holder", Words: []string{"an HTTP policy sets no holder"}},
		{Name: "a token budget ttl without a unit", Spec: "charge: Reserve\nreserve: {ttl: '300'}\n" + tokenBucket10,
			Field: "spec.reserve.ttl", Words: []string{"must be a duration such as"}},
		{Name: "a token budget max of 0", Spec: "charge: Reserve\nreserve: {max: 0}\n" + tokenBucket10,
			Field: "spec.reserve.max", Words: []string{"should be greater than or equal to 1"}},
		{Name: "a token price that is no decimal", Spec: "charge: Reserve\nreserve: {pricing: {outputTokens: '4x'}}\n" + tokenBucket10,
			Field: "spec.reserve.pricing.outputTokens", Words: []string{"should match"}},
		{Name: "a token pricing by weights and an expression", Spec: "charge: Reserve\nreserve: {pricing: {outputTokens: '4', expression: 'outputTokens'}}\n" + tokenBucket10,
			Field: "spec.reserve.pricing", Words: []string{"pricing is weights or an expression, not both"}},
	}
}

// AcceptedOverrides are RateLimitOverrides specs the API server accepts.
func AcceptedOverrides() []Case {
	return []Case{
		{Name: "one key, one limit", Spec: "policyName: api\noverrides: [{key: acme, limits: [{name: minute, limit: 1000}]}]\n"},
		{Name: "several keys and limits, an expiry", Spec: `
policyName: api
overrides:
- {key: "203.0.113.0/24", limits: [{name: minute, limit: 1}, {name: day, limit: 1000000000}]}
- {key: "key:acme", limits: [{name: minute, limit: 5}], expires: "2030-01-01T00:00:00Z"}
`},
	}
}

// RefusedOverrides are RateLimitOverrides specs the API server refuses.
func RefusedOverrides() []Case {
	return []Case{
		{Name: "no policy", Spec: "overrides: [{key: a, limits: [{name: l, limit: 1}]}]\n",
			Field: "spec.policyName", Words: []string{"Required value"}},
		{Name: "no entries", Spec: "policyName: api\noverrides: []\n",
			Field: "spec.overrides", Words: []string{}},
		{Name: "a key twice", Spec: "policyName: api\noverrides: [{key: a, limits: [{name: l, limit: 1}]}, {key: a, limits: [{name: l, limit: 2}]}]\n",
			Field: "spec.overrides[1]", Words: []string{"Duplicate value"}},
		{Name: "a limit twice", Spec: "policyName: api\noverrides: [{key: a, limits: [{name: l, limit: 1}, {name: l, limit: 2}]}]\n",
			Field: "spec.overrides[0].limits[1]", Words: []string{"Duplicate value"}},
		{Name: "a limit name that is no DNS label", Spec: "policyName: api\noverrides: [{key: a, limits: [{name: Per_Minute, limit: 1}]}]\n",
			Field: "spec.overrides[0].limits[0].name", Words: []string{}},
		{Name: "a number of 0", Spec: "policyName: api\noverrides: [{key: a, limits: [{name: l, limit: 0}]}]\n",
			Field: "spec.overrides[0].limits[0].limit", Words: []string{"should be greater than or equal to 1"}},
		{Name: "an empty key", Spec: "policyName: api\noverrides: [{key: '', limits: [{name: l, limit: 1}]}]\n",
			Field: "spec.overrides[0].key", Words: []string{}},
		{Name: "a key too long", Spec: "policyName: api\noverrides: [{key: " + strings.Repeat("k", 1025) + ", limits: [{name: l, limit: 1}]}]\n",
			Field: "spec.overrides[0].key", Words: []string{"Too long"}},
	}
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

// tokenBudget is a descriptor policy of [tenant, request_id] with the
// given key, charge Reserve with the given reserve fields, and a minute's
// and a month's token budget.
func tokenBudget(key, reserve string) string {
	return fmt.Sprintf(`
match: {domain: llm, descriptor: [{key: tenant}, {key: request_id}]}
key: %q
charge: Reserve
reserve: {%s}
cost: 1000
limits:
- {name: minute, fixedWindow: {limit: 100000, window: 1m}}
- {name: month, calendar: {limit: 5000000, period: Month, timeZone: Europe/Berlin}}
`, key, reserve)
}

// withLimit gives a spec with one limit of the given body, so each case
// states only what it is about.
func withLimit(limit string) string {
	return "limits:\n- name: l\n  " + limit + "\n"
}

// fixedWindowLimits returns n fixed-window limits named l1..ln.
func fixedWindowLimits(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "- name: l%d\n  fixedWindow: {limit: 10, window: 1m}\n", i)
	}
	return b.String()
}
