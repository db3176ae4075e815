package sluicectl

// The admin API's answers, as the plugin reads them to draw tables. Fields
// the tables do not show are kept by -o json and -o yaml, which print the
// server's answer itself.

// LimitState is one limit's state for one key value.
type LimitState struct {
	Name       string    `json:"name"`
	Algorithm  string    `json:"algorithm"`
	Limit      int64     `json:"limit"`
	Remaining  int64     `json:"remaining"`
	Reset      string    `json:"reset"`
	Allowed    bool      `json:"allowed"`
	RetryAfter string    `json:"retryAfter"`
	Override   *Override `json:"override"`
}

// Override is the other number a limit has for one key value.
type Override struct {
	Source      string `json:"source"`
	Limit       int64  `json:"limit"`
	PolicyLimit int64  `json:"policyLimit"`
}

// Ban is a key value's time in the penalty box.
type Ban struct {
	Remaining string `json:"remaining"`
	Length    string `json:"length"`
}

// ExplainAnswer is what explain answers: every policy considered, in order.
type ExplainAnswer struct {
	Namespace string            `json:"namespace"`
	Policies  []ExplainedPolicy `json:"policies"`
	Decision  Decision          `json:"decision"`
}

// ExplainedPolicy is one policy explain considered: the key value's state
// when it matched, why not when it did not.
type ExplainedPolicy struct {
	Name       string `json:"name"`
	Matched    bool   `json:"matched"`
	Reason     string `json:"reason"`
	MissingKey bool   `json:"missingKey"`
	KeyState
}

// KeyState is one key value's state under one policy: its limits and ban.
type KeyState struct {
	Key    string       `json:"key"`
	Limits []LimitState `json:"limits"`
	Ban    *Ban         `json:"ban"`
}

// Decision is what a check of the explained request would decide.
type Decision struct {
	Allowed    bool   `json:"allowed"`
	Reason     string `json:"reason"`
	Policy     string `json:"policy"`
	Limit      string `json:"limit"`
	RetryAfter string `json:"retryAfter"`
}

// InspectAnswer is one key value's state under one policy.
type InspectAnswer struct {
	Namespace string `json:"namespace"`
	Policy    string `json:"policy"`
	KeyState
}

// ResetAnswer names the limits a reset cleared.
type ResetAnswer struct {
	Namespace string   `json:"namespace"`
	Policy    string   `json:"policy"`
	Key       string   `json:"key"`
	Limits    []string `json:"limits"`
}

// TopAnswer is a policy's most denied and most admitted key values.
type TopAnswer struct {
	Namespace  string   `json:"namespace"`
	Policy     string   `json:"policy"`
	Window     string   `json:"window"`
	Denied     []TopKey `json:"denied"`
	Admitted   []TopKey `json:"admitted"`
	ErrorBound string   `json:"errorBound"`
}

// TopKey is one key value's count, which may exceed the truth by at most
// Overestimate.
type TopKey struct {
	Key          string `json:"key"`
	Count        int64  `json:"count"`
	Overestimate int64  `json:"overestimate"`
}

// BansAnswer lists the bans in force under a policy.
type BansAnswer struct {
	Namespace string     `json:"namespace"`
	Policy    string     `json:"policy"`
	Bans      []KeyedBan `json:"bans"`
}

// KeyedBan is one key value's ban.
type KeyedBan struct {
	Key       string `json:"key"`
	Remaining string `json:"remaining"`
	Length    string `json:"length"`
}

// OverridesAnswer lists a policy's overrides, run time and declared.
type OverridesAnswer struct {
	Namespace string          `json:"namespace"`
	Policy    string          `json:"policy"`
	Overrides []KeyedOverride `json:"overrides"`
}

// KeyedOverride is one key value's override: other numbers for some limits.
type KeyedOverride struct {
	Key     string           `json:"key"`
	Limits  map[string]int64 `json:"limits"`
	Source  string           `json:"source"`
	Expires *string          `json:"expires"`
	SetBy   *string          `json:"setBy"`
	Object  string           `json:"object"`
}

// explainRequest is explain's body.
type explainRequest struct {
	URL      string              `json:"url"`
	Method   string              `json:"method,omitempty"`
	ClientIP string              `json:"clientIP,omitempty"`
	Headers  map[string][]string `json:"headers,omitempty"`
}

// overrideRequest is override set's body: an expiry as a duration from now
// or as a time, or neither.
type overrideRequest struct {
	Limits    map[string]int64 `json:"limits"`
	ExpiresIn string           `json:"expiresIn,omitempty"`
	Expires   string           `json:"expires,omitempty"`
}
