package check

// ResultLabel says how one limit decided one request: the result label of
// sluice_decisions_total, and the column of the counts the dashboard shows.
type ResultLabel string

const (
	// ResultAllowed: the limit admitted the request.
	ResultAllowed ResultLabel = "allowed"
	// ResultDenied: the limit denied the request (the store said so).
	ResultDenied ResultLabel = "denied"
	// ResultShadowDenied: a shadow limit would have denied the request.
	ResultShadowDenied ResultLabel = "shadow_denied"
	// ResultSoftOver: a soft limit was over, and the request went on,
	// flagged (the upstream's X-Sluice-Over-Limit).
	ResultSoftOver ResultLabel = "soft_over"
	// ResultCachedDenied: the cache of denials denied the request without
	// asking the store.
	ResultCachedDenied ResultLabel = "cached_denied"
)
