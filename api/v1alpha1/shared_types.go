package v1alpha1

// Small named types carry their validation, so each rule is written once.

// Duration is a span of time written as one to four number-and-unit pairs,
// such as "500ms", "1s", "1m30s" or "24h". Units: h, m, s, ms.
// It must be at least 1ms and at most 8784h (366 days).
//
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(h|m|s|ms)){1,4}$')",message="must be a duration such as 500ms, 1s, 1m30s or 24h (units h, m, s, ms)"
// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]{1,5}(h|m|s|ms)){1,4}$') || (duration(self) >= duration('1ms') && duration(self) <= duration('8784h'))",message="must be between 1ms and 8784h (366 days)"
type Duration string

// Count is a number of requests or tokens: at least 1, at most one billion.
//
// +kubebuilder:validation:Minimum=1
// +kubebuilder:validation:Maximum=1000000000
type Count int64

// LimitName names one limit of a policy. It is a DNS label (lower case
// letters, digits and '-'), so it can appear in Redis keys, metrics labels
// and the RateLimit-Policy header unchanged.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit"
type LimitName string

// HostMatch is a host name matched exactly ("api.example.com") or a
// wildcard that matches any subdomain of a suffix ("*.example.com" matches
// "a.example.com" and "a.b.example.com", not "example.com"). Case-insensitive.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:XValidation:rule="self.matches('^([*][.])?[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*$')",message="must be a host name such as api.example.com, or *.example.com for any subdomain"
type HostMatch string

// PathMatch is a request path matched exactly ("/login"), or by prefix when
// it ends in '*' ("/api/*" matches "/api/" and everything below it; "/api*"
// also matches "/apis"). It must start with '/' and may hold '*' only at the end.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=1024
// +kubebuilder:validation:XValidation:rule="self.matches('^/[^*?#[:space:]]*[*]?$')",message="must start with '/', hold no '?', '#' or spaces, and hold '*' only as its last character (a prefix match)"
type PathMatch string

// HTTPMethod is an HTTP request method in upper case.
//
// +kubebuilder:validation:Enum=GET;HEAD;POST;PUT;PATCH;DELETE;OPTIONS;CONNECT;TRACE
type HTTPMethod string

// HeaderName is an HTTP header field name (RFC 9110 token), matched
// case-insensitively.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=256
// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9!#$%&*+.^_|~-]+$')",message="must be an HTTP header name: letters, digits and !#$%&*+.^_|~-"
type HeaderName string

// TimeZone is an IANA time zone name such as Europe/Berlin, America/New_York
// or UTC. The schema checks its shape and refuses the names a host has
// beside the IANA ones; whether the zone exists is checked when the policy
// compiles, in the zone database compiled into Sluice.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$')",message="must be an IANA time zone name such as Europe/Berlin, America/New_York or UTC"
// +kubebuilder:validation:XValidation:rule="!(self in ['Local', 'localtime']) && !self.startsWith('posix/') && !self.startsWith('right/')",message="must be an IANA time zone name, not the host's own zone (Local, localtime) or a host's copy of the database (posix/..., right/...)"
type TimeZone string

// LimitMode says what one limit does to a request over it.
// +kubebuilder:validation:Enum=Enforce;Shadow;Soft
type LimitMode string

const (
	// LimitModeEnforce denies a request over the limit.
	LimitModeEnforce LimitMode = "Enforce"
	// LimitModeShadow evaluates and counts, never denies, and reports
	// only to operators.
	LimitModeShadow LimitMode = "Shadow"
	// LimitModeSoft never denies; a request over the limit goes on,
	// flagged to the upstream (X-Sluice-Over-Limit) and to the client.
	LimitModeSoft LimitMode = "Soft"
)

// Visibility says whether a limit's state reaches the client.
// +kubebuilder:validation:Enum=Visible;Hidden
type Visibility string

const (
	// VisibilityVisible lets the limit report in the answer's headers and
	// a denial's problem.
	VisibilityVisible Visibility = "Visible"
	// VisibilityHidden keeps the limit's state from the client.
	VisibilityHidden Visibility = "Hidden"
)
