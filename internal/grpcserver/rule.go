package grpcserver

import (
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
)

// ruleMetadata is the dynamic metadata of an answer, with
// Options.ReportPolicy: the rule that decided out (checkhttp.RuleOf).
// Envoy keeps it under the filter's name, for its access log to print:
// %DYNAMIC_METADATA(envoy.filters.http.ext_authz:policy)% after ext_authz,
// %DYNAMIC_METADATA(envoy.filters.http.ratelimit:policy)% after the rate
// limit filter; likewise decision, reason, limit, key_hash and remaining.
// nil when the option is off or no policy matched.
func (s *Server) ruleMetadata(out *check.Outcome) *structpb.Struct {
	if !s.opts.ReportPolicy {
		return nil
	}
	r, ok := checkhttp.RuleOf(out)
	if !ok {
		return nil
	}
	fields := map[string]*structpb.Value{
		"policy":   structpb.NewStringValue(r.Policy),
		"decision": structpb.NewStringValue(r.Decision),
		"reason":   structpb.NewStringValue(string(r.Reason)),
	}
	if r.Limit != "" {
		fields["limit"] = structpb.NewStringValue(r.Limit)
		fields["key_hash"] = structpb.NewStringValue(r.KeyHash)
		fields["remaining"] = structpb.NewNumberValue(float64(r.Remaining))
	}
	return &structpb.Struct{Fields: fields}
}
