package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// RateLimitPolicySpec declares which requests a policy applies to, how they
// are grouped into buckets (the key) and the limits each bucket has.
//
// +kubebuilder:validation:XValidation:rule="!has(self.targetRefs) || !has(self.match) || !(has(self.match.hosts) || has(self.match.paths) || has(self.match.methods) || has(self.match.domain) || has(self.match.descriptor))",message="a policy with targetRefs takes its hosts, paths and methods from its targets, and answers HTTP checks only: match may narrow it with headers and when only",fieldPath=".match"
// +kubebuilder:validation:XValidation:rule="!has(self.key) || ((has(self.match) && (has(self.match.domain) || has(self.match.descriptor))) ? !self.key.matches('[{](client_ip|method|host|path|header:|query:)') : !self.key.contains('{descriptor'))",message="a descriptor policy (match.domain or match.descriptor set) builds its key from {descriptor} and {descriptor:name} only, and an HTTP policy never from them: the other kind of request has no such values",fieldPath=".key"
// +kubebuilder:validation:XValidation:rule="self.limits.all(l, (has(l.tokenBucket) ? l.tokenBucket.capacity : has(l.fixedWindow) ? l.fixedWindow.limit : has(l.slidingWindowLog) ? l.slidingWindowLog.limit : has(l.slidingWindowCounter) ? l.slidingWindowCounter.limit : has(l.leakyBucket) ? l.leakyBucket.capacity : has(l.gcra) ? l.gcra.burst : has(l.calendar) ? l.calendar.limit : has(l.concurrency) ? l.concurrency.limit : self.cost) >= self.cost)",message="cost must not exceed any limit's capacity (tokenBucket.capacity, leakyBucket.capacity, gcra.burst, concurrency.limit or a window's limit): such a request could never be allowed",fieldPath=".cost"
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || self.limits.all(l, (has(l.tokenBucket) ? l.tokenBucket.capacity : has(l.fixedWindow) ? l.fixedWindow.limit : has(l.slidingWindowLog) ? l.slidingWindowLog.limit : has(l.slidingWindowCounter) ? l.slidingWindowCounter.limit : has(l.leakyBucket) ? l.leakyBucket.capacity : has(l.gcra) ? l.gcra.burst : has(l.calendar) ? l.calendar.limit : self.lease.units) >= self.lease.units)",message="lease.units must not exceed any limit's capacity (tokenBucket.capacity, leakyBucket.capacity, gcra.burst or a window's limit): such a lease could never be taken",fieldPath=".lease.units"
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || !has(self.cost) || self.lease.units >= self.cost",message="lease.units must be at least cost: a lease serves whole requests",fieldPath=".lease.units"
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || !has(self.charge) || self.charge == 'Admitted'",message="a lease cannot serve charge Always or Reserve: a cost charged whatever the decision goes into debt, and a reservation is held by its request; only Redis can count them",fieldPath=".lease"
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || !has(self.mode) || self.mode != 'Shadow'",message="a lease cannot serve mode Shadow: a shadow policy reports what Redis decides exactly; remove the lease or enforce the policy",fieldPath=".lease"
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || self.limits.all(l, !has(l.mode) || l.mode == 'Enforce')",message="a lease cannot serve a limit in mode Shadow or Soft: such a limit is decided by Redis with every request; remove the lease or enforce the limit",fieldPath=".lease"
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || !has(self.penalty)",message="a lease cannot serve a penalty box: bans are decided by Redis with every request; remove the lease or the penalty",fieldPath=".penalty"
// +kubebuilder:validation:XValidation:rule="!has(self.lease) || !self.limits.exists(l, has(l.concurrency))",message="a concurrency limit takes no lease: units in flight are held by the request that was admitted, until it releases them",fieldPath=".lease"
// +kubebuilder:validation:XValidation:rule="!has(self.charge) || self.charge == 'Admitted' || !self.limits.exists(l, has(l.concurrency))",message="must be Admitted with a concurrency limit: units in flight are held by the request that was admitted, until it releases them; a request never admitted holds none",fieldPath=".charge"
// +kubebuilder:validation:XValidation:rule="!has(self.charge) || self.charge != 'Reserve' || has(self.reserve)",message="charge Reserve needs reserve: the holder (descriptor policies), ttl and max of a request's reservation",fieldPath=".charge"
// +kubebuilder:validation:XValidation:rule="!has(self.charge) || self.charge != 'Reserve' || self.limits.all(l, !has(l.mode) || l.mode == 'Enforce')",message="charge Reserve needs every limit to enforce: a Shadow or Soft limit lets a request go on over it holding no reservation, so its settlement could not be counted there; use spec.mode Shadow for a trial of the whole budget",fieldPath=".limits"
// +kubebuilder:validation:XValidation:rule="!has(self.reserve) || (has(self.charge) && self.charge == 'Reserve')",message="reserve is for charge Reserve only: set charge: Reserve, or remove reserve",fieldPath=".reserve"
// +kubebuilder:validation:XValidation:rule="!has(self.reserve) || ((has(self.match) && (has(self.match.domain) || has(self.match.descriptor))) ? (has(self.reserve.holder) && has(self.match.descriptor) && self.match.descriptor.exists(d, d.key == self.reserve.holder) && has(self.key) && !self.key.contains('{descriptor}') && !self.key.contains('{descriptor:' + self.reserve.holder + '}')) : !has(self.reserve.holder))",message="reserve.holder of a descriptor policy names an entry of match.descriptor (such as Envoy's x-request-id) that the key leaves out (set a key without {descriptor} or {descriptor:<holder>}, so the bucket is shared by the requests it counts); an HTTP policy sets no holder: the middleware and POST /v1/check hold per request",fieldPath=".reserve.holder"
// +kubebuilder:validation:XValidation:rule="(has(self.match) && (has(self.match.domain) || has(self.match.descriptor))) ? self.limits.all(l, !has(l.concurrency) || (has(l.concurrency.holder) && has(self.match.descriptor) && self.match.descriptor.exists(d, d.key == l.concurrency.holder) && has(self.key) && !self.key.contains('{descriptor}') && !self.key.contains('{descriptor:' + l.concurrency.holder + '}'))) : self.limits.all(l, !has(l.concurrency) || !has(l.concurrency.holder))",message="a concurrency limit of a descriptor policy names its holder, an entry of match.descriptor (such as Envoy's x-request-id) that the key leaves out (set a key without {descriptor} or {descriptor:<holder>}, so the bucket is shared by the requests it counts); an HTTP policy sets no holder: the middleware and POST /v1/check hold per request",fieldPath=".limits"
type RateLimitPolicySpec struct {
	// targetRefs attach the policy to Gateway API resources (direct policy
	// attachment, GEP-713): an HTTPRoute, or one of its rules by
	// sectionName (the rule's name), or a Gateway, or one of its listeners
	// by sectionName. The policy then applies to exactly the requests the
	// target receives: the route's hostnames (as its Gateways' listeners
	// narrow them), paths, methods, headers and query parameters, with
	// Gateway API's precedence among the routes of a Gateway, so the route
	// is never repeated here. match may narrow further with headers and
	// when, not with hosts, paths or methods.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +kubebuilder:validation:XValidation:rule="self.all(r, r.group == 'gateway.networking.k8s.io' && (r.kind == 'HTTPRoute' || r.kind == 'Gateway'))",message="targetRefs name HTTPRoutes or Gateways of group gateway.networking.k8s.io"
	TargetRefs []gatewayv1.LocalPolicyTargetReferenceWithSectionName `json:"targetRefs,omitempty"`

	// match selects the requests this policy applies to. Every field that is
	// set must match; an empty match selects every request checked against
	// the policy's namespace.
	// +optional
	Match RequestMatch `json:"match,omitempty"`

	// key is the template that names a request's bucket: literal text and
	// placeholders. {client_ip} is the client address, {client_ip/N} its
	// network of prefix length N (such as /24 for IPv4 or /64 for IPv6),
	// {header:Name} a request header, {query:name} a query parameter, and
	// {method}, {host}, {path} the request's own. A policy that answers
	// Envoy rate limit service requests (match.domain or match.descriptor
	// set) builds its key from the descriptor instead: {descriptor:name}
	// is the value of the descriptor's entry with that key, {descriptor}
	// the whole descriptor (every key and value, in order). A key without
	// placeholders ("global") is one bucket shared by every matching
	// request. Defaults to "{client_ip}", and to "{descriptor}" for a
	// descriptor policy (a bucket per distinct descriptor, as Envoy's
	// ratelimit service counts).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^([^{}]|[{](client_ip(/[0-9]{1,3})?|method|host|path|header:[A-Za-z0-9!#$%&*+.^_|~-]+|query:[^{}]+|descriptor(:[^{}]+)?)[}])*$')",message="key must be literal text and the placeholders {client_ip}, {client_ip/N}, {header:Name}, {query:name}, {method}, {host}, {path}, {descriptor} or {descriptor:name}; braces are not allowed elsewhere"
	Key string `json:"key,omitempty"`

	// onMissingKey says what happens when a placeholder of the key has no
	// value in a request (a header or query parameter that is absent):
	// Skip leaves the request to other policies, Deny denies it, and Shared
	// counts it in one bucket shared by every such request. Defaults to Skip.
	// +optional
	// +kubebuilder:default=Skip
	OnMissingKey OnMissingKey `json:"onMissingKey,omitempty"`

	// limits are the limits every bucket has, such as a burst limit and a
	// daily quota. A request is allowed only when every limit allows it, and
	// then it is counted against all of them; a denied request is counted
	// against none (unless charge is Always).
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Limits []Limit `json:"limits"`

	// cost is how many units one request takes from each limit.
	// Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	Cost Count `json:"cost,omitempty"`

	// charge says which requests are counted. Admitted counts a request
	// only when every limit of every policy it matches admits it (all or
	// nothing). Always counts every request this policy matches, admitted
	// or not, and a cost that does not fit takes the limit over it (into
	// debt, by at most one limit's worth), so it denies until time brings
	// it back under. Always is for costs known only after the fact, such as
	// the tokens an LLM call used, reported once the response is done
	// (Envoy's apply_on_stream_done with hits_addend): they were spent
	// whatever the limit says. Reserve takes an estimate at admission, all
	// or nothing as Admitted does, held by the request (reserve) until its
	// actual cost settles it: the difference is given back, or taken into
	// debt as Always takes it (token budgets). Defaults to Admitted.
	// +optional
	// +kubebuilder:default=Admitted
	Charge ChargeMode `json:"charge,omitempty"`

	// reserve is how charge Reserve holds a request's estimate (cost, or
	// the estimate the request carries) until its settlement: the holder
	// of a descriptor policy, how long a reservation waits, the most one
	// request reserves, and the pricing of reported usage. Set with
	// charge Reserve only.
	// +optional
	Reserve *Reserve `json:"reserve,omitempty"`

	// mode is Enforce (deny requests over a limit) or Shadow (evaluate and
	// count, report what would have been denied, never deny). Defaults to Enforce.
	// +optional
	// +kubebuilder:default=Enforce
	Mode Mode `json:"mode,omitempty"`

	// failureMode says what the check endpoint answers when Redis cannot
	// answer in time: Open allows the request, Closed denies it.
	// Defaults to Open.
	// +optional
	// +kubebuilder:default=Open
	FailureMode FailureMode `json:"failureMode,omitempty"`

	// response shapes the answer to a request this policy decides.
	// +optional
	// +kubebuilder:default={}
	Response Response `json:"response,omitempty"`

	// lease trades exactness for speed on hot keys: each check process
	// takes units of a bucket from Redis a lease at a time and answers
	// from memory until the lease is used up or expires. With P check
	// processes, a bucket then admits at most its limit plus P × units in
	// any window (units a process holds when a window ends are spent in
	// the next), and answers' remaining figures are what the process
	// knows. Unset: every request is decided by Redis exactly (the
	// default). Checks against the memory store (manager local without
	// Redis) are exact whatever this says.
	// +optional
	Lease *Lease `json:"lease,omitempty"`

	// penalty shuts out, for a while, a bucket that keeps hitting its
	// limits: a bucket denied by this policy's limits `denials` times
	// within `within` is banned for `ban`, and a bucket banned again
	// before `maxBan` has passed since its last ban ended is banned for
	// twice its last ban, at most `maxBan`. While banned, every request
	// of the bucket is denied, with Retry-After at the ban's end, and
	// counted nowhere (the denials of a ban count towards no new ban).
	// Bans are kept in Redis, shared by every check process. In mode
	// Shadow, bans are reported (metrics, decision details), never
	// enforced. Unset: no penalty box.
	// +optional
	Penalty *Penalty `json:"penalty,omitempty"`
}

// Penalty is an escalating penalty box: how many denials ban a bucket,
// and for how long.
//
// +kubebuilder:validation:XValidation:rule="!self.ban.matches('^([0-9]{1,5}(h|m|s|ms)){1,4}$') || !self.maxBan.matches('^([0-9]{1,5}(h|m|s|ms)){1,4}$') || duration(self.ban) <= duration(self.maxBan)",message="ban must not exceed maxBan: maxBan caps every ban, the first included",fieldPath=".ban"
type Penalty struct {
	// denials is how many requests denied by the policy's limits, within
	// `within`, ban a bucket. 1 bans at the first denial.
	// +required
	Denials Count `json:"denials"`

	// within is the span the denials are counted in, from the first of
	// them; a denial after it starts a new count.
	// +required
	Within Duration `json:"within"`

	// ban is the length of a bucket's first ban.
	// +required
	Ban Duration `json:"ban"`

	// maxBan caps the doubled bans, and is how long after a ban's end a
	// new ban still doubles it: a bucket quiet for maxBan after a ban
	// starts again from ban.
	// +required
	MaxBan Duration `json:"maxBan"`
}

// Lease is how much of a bucket a check process takes at once, and for
// how long it may keep it.
type Lease struct {
	// units is how many units a process takes from each limit of a bucket
	// per Redis call (fewer when fewer are left): the most one process can
	// admit beyond the limit in a window. At least cost, at most the
	// smallest limit's capacity.
	// +required
	Units Count `json:"units"`

	// ttl is how long a process keeps a lease's units. Units not used by
	// then are given back to the bucket (as are those a process holds when
	// it stops or the policy changes), so a short ttl returns units sooner
	// from a process that fell quiet. At most 1m. Defaults to "1s".
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]{1,5}(h|m|s|ms)){1,4}$') || duration(self) <= duration('1m')",message="a lease's ttl must be at most 1m"
	TTL Duration `json:"ttl,omitempty"`
}

// RequestMatch selects requests. Lists are alternatives (a request matches
// hosts when its host matches any of them); fields combine with AND.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.domain) || has(self.descriptor)) || !(has(self.hosts) || has(self.paths) || has(self.methods) || has(self.headers) || has(self.exemptClients))",message="hosts, paths, methods, headers and exemptClients select HTTP checks; a descriptor policy (domain or descriptor set) answers Envoy rate limit service requests, which carry none of them"
type RequestMatch struct {
	// hosts match the request's Host, exactly or as "*.suffix" for any
	// subdomain. Empty matches every host.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	Hosts []HostMatch `json:"hosts,omitempty"`

	// paths match the request's path (without the query): exactly, or by
	// prefix when the entry ends in '*'. Empty matches every path.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	Paths []PathMatch `json:"paths,omitempty"`

	// methods match the request's method. Empty matches every method.
	// +optional
	// +kubebuilder:validation:MaxItems=9
	// +listType=set
	Methods []HTTPMethod `json:"methods,omitempty"`

	// headers must all be present in the request, with the given value when
	// one is set.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Headers []HeaderMatch `json:"headers,omitempty"`

	// when is a CEL expression over the request that must be true, for
	// example `request.headers["x-plan"] == "free"`. Variables:
	// request.method, request.host, request.path (strings), request.query
	// and request.headers (maps of lower-case names to first values) and
	// request.client_ip (string); for Envoy rate limit service requests
	// request.domain (string) and request.descriptor (a map of each entry's
	// key to its value), the HTTP variables being empty there. Checked when
	// the policy is compiled.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	When string `json:"when,omitempty"`

	// exemptClients are client addresses the policy never applies to:
	// networks in CIDR notation ("10.0.0.0/8", "2001:db8::/32") or single
	// addresses, as ingress-nginx's limit-whitelist exempts them. The
	// client address is the one {client_ip} reads (forwarded headers
	// believed only from trusted proxies).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c) || isIP(c))",message="each entry must be a network in CIDR notation such as 10.0.0.0/8, or an IP address"
	ExemptClients []string `json:"exemptClients,omitempty"`

	// domain makes this a descriptor policy that answers Envoy rate limit
	// service (RLS v3) requests of this domain. Which namespaces may answer
	// a domain is the operator's choice (the check process's --rls-domain
	// DOMAIN=NAMESPACE), never a policy's: a policy here only narrows the
	// domains bound to its own namespace. Unset with descriptor set: any
	// domain bound to the namespace.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Domain string `json:"domain,omitempty"`

	// descriptor makes this a descriptor policy: it matches one descriptor
	// of an Envoy rate limit service request when the descriptor has
	// exactly these entries, in this order, as Envoy's ratelimit service
	// matches its configuration's nested descriptors. A request's
	// descriptors are decided together: all of them are counted, or, when
	// any is over its limit, none is.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Descriptor []DescriptorEntryMatch `json:"descriptor,omitempty"`
}

// DescriptorEntryMatch matches one entry (key and value) of an Envoy rate
// limit descriptor.
type DescriptorEntryMatch struct {
	// key is the entry's key, such as remote_address, generic_key,
	// header_match or a request_headers descriptor_key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Key string `json:"key"`

	// value is the entry's value: exact, or a prefix when it ends in '*'
	// ("api-*" matches "api-v1"). Unset: any value.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Value *string `json:"value,omitempty"`
}

// HeaderMatch requires a request header, with an exact value when value is set.
type HeaderMatch struct {
	// name is the header's name, matched case-insensitively.
	// +required
	Name HeaderName `json:"name"`

	// value is the header's exact value. When unset, any value matches as
	// long as the header is present.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Value *string `json:"value,omitempty"`
}

// Limit is one named limit with exactly one algorithm.
//
// +kubebuilder:validation:XValidation:rule="[has(self.tokenBucket), has(self.fixedWindow), has(self.slidingWindowLog), has(self.slidingWindowCounter), has(self.leakyBucket), has(self.gcra), has(self.calendar), has(self.concurrency)].filter(x, x).size() == 1",message="exactly one algorithm must be set: tokenBucket, fixedWindow, slidingWindowLog, slidingWindowCounter, leakyBucket, gcra, calendar or concurrency"
// +kubebuilder:validation:XValidation:rule="!(has(self.slidingWindowLog) && has(self.slidingWindowLog.alignment)) && !(has(self.slidingWindowCounter) && has(self.slidingWindowCounter.alignment))",message="alignment is fixedWindow's only: a sliding window ends now, and slidingWindowCounter's windows are always aligned to the clock"
type Limit struct {
	// name identifies the limit within its policy: in Redis keys, metrics
	// and the RateLimit-Policy header. A DNS label, unique in the policy.
	// +required
	Name LimitName `json:"name"`

	// mode is this limit's own mode: Enforce (a request over it is
	// denied), Shadow (evaluated and counted, never denies, reported only
	// to operators: metrics, the decision log, traces, explain, the
	// dashboard) or Soft (never denies; a request over it goes on, and the
	// upstream is told by the X-Sluice-Over-Limit header while the client
	// sees the limit's state with nothing remaining). Unset: the policy's
	// spec.mode. The limit's own mode wins for this limit; the policy's
	// mode still decides failureMode, onMissingKey, the refusal of a
	// concurrency limit without a release and the penalty box.
	// +optional
	Mode LimitMode `json:"mode,omitempty"`

	// visibility says whether this limit's state reaches the client:
	// Visible (the default) lets it be the limit the answer's rate-limit
	// headers (spec.response.headers) and a denial's problem report;
	// Hidden keeps it out of both, so a threshold (against floods, say)
	// is not advertised beside a plan's quota. A denial by a hidden limit
	// still carries Retry-After, and operators see it everywhere.
	// Unset: Visible.
	// +optional
	Visibility Visibility `json:"visibility,omitempty"`

	// tokenBucket starts full with capacity tokens and adds refillRate
	// tokens every refillInterval, never above capacity. Allows bursts up
	// to capacity and refillRate per refillInterval on average.
	// +optional
	TokenBucket *TokenBucket `json:"tokenBucket,omitempty"`

	// fixedWindow allows limit requests per window; a window starts with
	// the first request after the previous window ended. A client can send
	// up to twice the limit across a boundary.
	// +optional
	FixedWindow *WindowLimit `json:"fixedWindow,omitempty"`

	// slidingWindowLog allows limit requests in any window ending now, by
	// remembering each request's time. Exact; memory grows with limit.
	// +optional
	SlidingWindowLog *WindowLimit `json:"slidingWindowLog,omitempty"`

	// slidingWindowCounter approximates a sliding window by weighting the
	// previous window's count by how much of it still overlaps the sliding
	// window (windows aligned to the clock). Near-exact with constant memory.
	// +optional
	SlidingWindowCounter *WindowLimit `json:"slidingWindowCounter,omitempty"`

	// leakyBucket (policing) fills with each request and drains leakRate
	// per leakInterval continuously; a request that would overflow capacity
	// is denied. No bursts beyond capacity.
	// +optional
	LeakyBucket *LeakyBucket `json:"leakyBucket,omitempty"`

	// gcra (generic cell rate algorithm) is a continuous token bucket:
	// rate requests per period on average, and up to burst at once.
	// +optional
	GCRA *GCRA `json:"gcra,omitempty"`

	// calendar allows limit requests per calendar period in a time zone: a
	// day from local midnight, an ISO week from Monday 00:00, a month from
	// the 1st, a year from 1 January, the same for every bucket. Days of 23
	// or 25 hours (daylight saving time changes) and months of 28 to 31
	// days count as the calendar has them; the reset is the time to the
	// next local boundary.
	// +optional
	Calendar *CalendarLimit `json:"calendar,omitempty"`

	// concurrency limits what is in flight rather than what arrived: a
	// request holds its cost from admission until it ends (it is
	// released), and is admitted while what is held plus its cost is at
	// most limit. At most limit units are held at once, except by
	// requests that outlive leaseTimeout.
	// +optional
	Concurrency *Concurrency `json:"concurrency,omitempty"`
}

// Concurrency is a limit on units in flight (requests being served).
type Concurrency struct {
	// limit is how many units may be held at once: with cost 1, how many
	// requests may be in flight per bucket.
	// +required
	Limit Count `json:"limit"`

	// leaseTimeout is how long an admitted request holds its units at
	// most: units whose release never comes (a proxy killed, a release
	// lost, a process crash) come back this long after their admission.
	// Longer than the slowest request the limit counts; a request that
	// outlives it no longer counts. Defaults to "1m".
	// +optional
	// +kubebuilder:default="1m"
	LeaseTimeout Duration `json:"leaseTimeout,omitempty"`

	// holder names, for a descriptor policy (Envoy's rate limit service),
	// the descriptor entry that tells requests apart: its value is the
	// holder a release names (Envoy's x-request-id, sent by a
	// request_headers action both on the request and on stream done). It
	// must be one of match.descriptor's keys and left out of the key, so
	// the bucket is shared by the requests it counts. HTTP policies leave
	// it unset: the middleware holds per request by itself, and POST
	// /v1/check answers a release handle.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Holder string `json:"holder,omitempty"`
}

// TokenBucket is the classic token bucket with discrete refills.
type TokenBucket struct {
	// capacity is the most tokens the bucket holds, the largest burst.
	// +required
	Capacity Count `json:"capacity"`

	// refillRate is how many tokens are added every refillInterval.
	// +required
	RefillRate Count `json:"refillRate"`

	// refillInterval is how often refillRate tokens are added, such as "1s".
	// +required
	RefillInterval Duration `json:"refillInterval"`
}

// WindowLimit allows limit requests per window.
type WindowLimit struct {
	// limit is how many requests a window allows.
	// +required
	Limit Count `json:"limit"`

	// window is the window's length, such as "1m" or "24h".
	// +required
	Window Duration `json:"window"`

	// alignment says when a fixed window starts: FirstRequest (a bucket's
	// window starts with its first request after the previous one ended)
	// or Clock (windows are whole multiples of the window since the Unix
	// epoch: a 1h window starts on the hour, 24h at 00:00 UTC, the same
	// for every bucket, as Envoy's ratelimit service counts). Only
	// fixedWindow takes it; defaults to FirstRequest.
	// +optional
	Alignment WindowAlignment `json:"alignment,omitempty"`
}

// WindowAlignment says when a fixed window starts.
// +kubebuilder:validation:Enum=FirstRequest;Clock
type WindowAlignment string

const (
	// WindowAlignmentFirstRequest starts a bucket's window with its first request.
	WindowAlignmentFirstRequest WindowAlignment = "FirstRequest"
	// WindowAlignmentClock starts windows at multiples of the window since the Unix epoch.
	WindowAlignmentClock WindowAlignment = "Clock"
)

// LeakyBucket is a policing leaky bucket.
type LeakyBucket struct {
	// capacity is how many requests the bucket holds before it overflows.
	// +required
	Capacity Count `json:"capacity"`

	// leakRate is how many requests drain every leakInterval.
	// +required
	LeakRate Count `json:"leakRate"`

	// leakInterval is the interval leakRate is measured over. Defaults to "1s".
	// +optional
	// +kubebuilder:default="1s"
	LeakInterval Duration `json:"leakInterval,omitempty"`
}

// GCRA is the generic cell rate algorithm.
type GCRA struct {
	// rate is how many requests are allowed per period on average.
	// +required
	Rate Count `json:"rate"`

	// period is the span rate is measured over, such as "1s" or "1h".
	// +required
	Period Duration `json:"period"`

	// burst is how many requests may arrive at once after a quiet spell
	// (the bucket's size). 1 spaces requests evenly, period/rate apart.
	// +required
	Burst Count `json:"burst"`
}

// CalendarLimit allows limit requests per calendar period.
type CalendarLimit struct {
	// limit is how many requests a period allows.
	// +required
	Limit Count `json:"limit"`

	// period is the calendar unit: Day, Week (ISO weeks, from Monday),
	// Month or Year.
	// +required
	Period CalendarPeriod `json:"period"`

	// timeZone is the IANA time zone whose calendar the periods follow,
	// such as Europe/Berlin or America/New_York. A name the zone database
	// compiled into Sluice does not know stalls the policy (Ready=False,
	// the message naming this field) and its last good version keeps
	// serving. Defaults to UTC.
	// +optional
	// +kubebuilder:default=UTC
	TimeZone TimeZone `json:"timeZone,omitempty"`
}

// CalendarPeriod is a calendar quota's unit.
// +kubebuilder:validation:Enum=Day;Week;Month;Year
type CalendarPeriod string

const (
	// CalendarPeriodDay starts at local midnight.
	CalendarPeriodDay CalendarPeriod = "Day"
	// CalendarPeriodWeek starts on Monday at 00:00 (ISO weeks).
	CalendarPeriodWeek CalendarPeriod = "Week"
	// CalendarPeriodMonth starts on the 1st at 00:00.
	CalendarPeriodMonth CalendarPeriod = "Month"
	// CalendarPeriodYear starts on 1 January at 00:00.
	CalendarPeriodYear CalendarPeriod = "Year"
)

// Response shapes the answer to a request.
type Response struct {
	// denyStatus is the HTTP status of a denial. When unset: 429, except
	// 403 for the ingress-nginx auth-url profile (nginx turns any other
	// status into 500).
	// +optional
	// +kubebuilder:validation:Minimum=400
	// +kubebuilder:validation:Maximum=599
	DenyStatus *int32 `json:"denyStatus,omitempty"`

	// headers is which rate-limit headers answers carry: IETF
	// (RateLimit-Policy and RateLimit, draft-ietf-httpapi-ratelimit-headers),
	// Legacy (X-RateLimit-Limit, -Remaining, -Reset), Both or None.
	// Retry-After is always sent on a denial. Defaults to Both.
	// +optional
	// +kubebuilder:default=Both
	Headers HeaderStyle `json:"headers,omitempty"`
}

// OnMissingKey says what to do with a request that lacks a key placeholder's value.
// +kubebuilder:validation:Enum=Skip;Deny;Shared
type OnMissingKey string

const (
	// OnMissingKeySkip leaves the request to other policies.
	OnMissingKeySkip OnMissingKey = "Skip"
	// OnMissingKeyDeny denies the request.
	OnMissingKeyDeny OnMissingKey = "Deny"
	// OnMissingKeyShared counts the request in one bucket shared by all such requests.
	OnMissingKeyShared OnMissingKey = "Shared"
)

// Mode says whether a policy denies requests or only reports.
// +kubebuilder:validation:Enum=Enforce;Shadow
type Mode string

const (
	// ModeEnforce denies requests over a limit.
	ModeEnforce Mode = "Enforce"
	// ModeShadow evaluates and counts but never denies.
	ModeShadow Mode = "Shadow"
)

// ChargeMode says which requests a policy counts.
// +kubebuilder:validation:Enum=Admitted;Always;Reserve
type ChargeMode string

const (
	// ChargeAdmitted counts only admitted requests, all or nothing.
	ChargeAdmitted ChargeMode = "Admitted"
	// ChargeAlways counts every matching request, over the limit if need be.
	ChargeAlways ChargeMode = "Always"
	// ChargeReserve takes an estimate at admission and settles it with
	// the actual cost when the request is done.
	ChargeReserve ChargeMode = "Reserve"
)

// FailureMode says what to answer when Redis cannot.
// +kubebuilder:validation:Enum=Open;Closed
type FailureMode string

const (
	// FailureModeOpen allows requests while Redis cannot answer.
	FailureModeOpen FailureMode = "Open"
	// FailureModeClosed denies requests while Redis cannot answer.
	FailureModeClosed FailureMode = "Closed"
)

// HeaderStyle selects the rate-limit headers of an answer.
// +kubebuilder:validation:Enum=IETF;Legacy;Both;None
type HeaderStyle string

const (
	// HeaderStyleIETF sends RateLimit-Policy and RateLimit.
	HeaderStyleIETF HeaderStyle = "IETF"
	// HeaderStyleLegacy sends X-RateLimit-Limit, -Remaining and -Reset.
	HeaderStyleLegacy HeaderStyle = "Legacy"
	// HeaderStyleBoth sends both sets.
	HeaderStyleBoth HeaderStyle = "Both"
	// HeaderStyleNone sends no rate-limit headers (Retry-After still goes with a denial).
	HeaderStyleNone HeaderStyle = "None"
)

// RateLimitPolicyStatus is what the controller observed and applied.
type RateLimitPolicyStatus struct {
	// observedGeneration is the spec generation the conditions describe;
	// -1 until the controller has decided one.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`

	// conditions: Ready, Reconciling and Stalled, following kstatus.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// limits summarizes the limits in force, such as
	// "burst=tokenBucket(10/1s) day=fixedWindow(1000/24h)".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Limits string `json:"limits,omitempty"`

	// libraryVersion is the Redis Lua library version the policy was applied with.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	LibraryVersion string `json:"libraryVersion,omitempty"`

	// tableRevision is the policy table revision that holds this generation.
	// +optional
	TableRevision int64 `json:"tableRevision,omitempty"`

	// ancestors is the policy's status per Gateway its targets attach to
	// (GEP-713): the Gateway, this controller's name, and an Accepted
	// condition (reasons Accepted, TargetNotFound, Invalid).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Ancestors []gatewayv1.PolicyAncestorStatus `json:"ancestors,omitempty"`
}

// RateLimitPolicy limits the rate of the requests it matches, per key.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rlp,categories=sluice
// +kubebuilder:metadata:labels="gateway.networking.k8s.io/policy=Direct"
// +kubebuilder:printcolumn:name="Targets",type=string,JSONPath=`.spec.targetRefs[*].name`
// +kubebuilder:printcolumn:name="Limits",type=string,JSONPath=`.status.limits`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`,priority=1
// +kubebuilder:printcolumn:name="Key",type=string,JSONPath=`.spec.key`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RateLimitPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired policy.
	// +required
	Spec RateLimitPolicySpec `json:"spec"`

	// status is what the controller applied.
	// +optional
	// +kubebuilder:default={observedGeneration:-1}
	Status RateLimitPolicyStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (p *RateLimitPolicy) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions replaces the status conditions.
func (p *RateLimitPolicy) SetConditions(c []metav1.Condition) { p.Status.Conditions = c }

// RateLimitPolicyList is a list of RateLimitPolicy.
//
// +kubebuilder:object:root=true
type RateLimitPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RateLimitPolicy `json:"items"`
}
