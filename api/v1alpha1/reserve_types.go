package v1alpha1

// Reserve is how a policy with charge Reserve holds a request's estimate
// from its admission until its actual cost settles it (token budgets).
type Reserve struct {
	// holder names, for a descriptor policy (Envoy's rate limit service),
	// the descriptor entry that tells requests apart: its value is the
	// holder the settlement (the stream-done call, is_negative_hits with
	// hits_addend the actual cost) names again, such as Envoy's
	// x-request-id. It must be one of match.descriptor's keys and left out
	// of the key. HTTP policies leave it unset: the middleware holds per
	// request by itself, and POST /v1/check answers a release handle.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Holder string `json:"holder,omitempty"`

	// ttl is how long a reservation waits for its settlement. One whose
	// settlement never comes (a proxy killed mid-stream) stays charged in
	// full: a response that streamed was likely spent. Defaults to "5m".
	// +optional
	// +kubebuilder:default="5m"
	TTL Duration `json:"ttl,omitempty"`

	// max is the most one request reserves: a larger estimate is clamped
	// to it (and counted), never refused, so one huge estimate cannot
	// lock a bucket out. Unset: no cap but the limits' own.
	// +optional
	Max *Count `json:"max,omitempty"`

	// pricing turns the usage a response reports (input, output and
	// cached input tokens), given by the middleware or POST /v1/release,
	// into the settled cost. Unset: inputTokens + outputTokens (cached
	// input counted as input).
	// +optional
	Pricing *UsagePricing `json:"pricing,omitempty"`
}

// UsagePricing prices a response's usage: weights, or a CEL expression.
// Input tokens include the cached ones (as OpenAI's prompt_tokens does):
// weights price (inputTokens - cachedInputTokens) at inputTokens,
// cachedInputTokens at cachedInputTokens, outputTokens at outputTokens.
// The settled cost is rounded up to a whole unit.
//
// +kubebuilder:validation:XValidation:rule="!has(self.expression) || !(has(self.inputTokens) || has(self.outputTokens) || has(self.cachedInputTokens))",message="pricing is weights or an expression, not both"
type UsagePricing struct {
	// inputTokens is the price of one input token not read from cache,
	// a decimal such as "1" or "0.5". Defaults to "1".
	// +optional
	InputTokens *Weight `json:"inputTokens,omitempty"`

	// outputTokens is the price of one output token. Defaults to "1".
	// +optional
	OutputTokens *Weight `json:"outputTokens,omitempty"`

	// cachedInputTokens is the price of one input token read from cache.
	// Defaults to inputTokens' price.
	// +optional
	CachedInputTokens *Weight `json:"cachedInputTokens,omitempty"`

	// expression is a CEL expression over the integers inputTokens,
	// outputTokens and cachedInputTokens that gives the cost (an int or a
	// double, rounded up), such as
	// `inputTokens + 4 * outputTokens - cachedInputTokens * 9 / 10`. Its
	// cost is bounded when the policy compiles; a negative result settles
	// 0, one above the largest count settles that count.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Expression string `json:"expression,omitempty"`
}

// Weight is a price per token: a decimal of at most six digits before and
// after the point, such as "4" or "0.1".
//
// +kubebuilder:validation:MaxLength=13
// +kubebuilder:validation:Pattern=`^[0-9]{1,6}([.][0-9]{1,6})?$`
type Weight string
