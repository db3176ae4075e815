package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/internal/adminapi"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/intake"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// maxExplainBody bounds an explain request's body: a URL and headers
// within the intake's bounds fit many times over.
const maxExplainBody = 1 << 20

// explainHolder holds the concurrency limits of an explained request: a
// dry run takes nothing.
const explainHolder = "sluice-explain"

func (h *Handler) explain(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("namespace")
	policies := h.checker.Policies().Namespace(ns)
	if len(policies) == 0 {
		notFound(w, "%s", noPolicies(ns))
		return
	}
	var body adminapi.ExplainRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxExplainBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		badRequest(w, "body: not an explain request (%v); want {\"url\": \"https://host/path\", \"method\": \"GET\", \"clientIP\": \"203.0.113.7\", \"headers\": {\"Name\": [\"value\"]}}", err)
		return
	}
	req, err := readExplained(&body)
	if err != nil {
		badRequest(w, "%s", err)
		return
	}
	if body.Transport == "" {
		body.Transport = adminapi.TransportHTTP
	}
	if !slices.Contains(adminapi.Transports, body.Transport) {
		badRequest(w, `body field "transport" %q: want one of %s (default %s: the check endpoint's auth hooks); the rate limit service's descriptors are not explained`,
			intake.Excerpt(body.Transport), strings.Join(adminapi.Transports, ", "), adminapi.TransportHTTP)
		return
	}
	out, decision, err := h.decide(r.Context(), ns, req, body.Transport)
	if err != nil {
		writeError(w, err)
		return
	}
	ex := adminapi.Explanation{Namespace: ns, Policies: []adminapi.PolicyExplanation{}, Decision: decision}
	var eval policy.Eval
	eval.Reset(req)
	for _, p := range policies {
		pe := adminapi.PolicyExplanation{Name: p.Name}
		var werr error
		pe.Matched, pe.Reason, werr = eval.Explain(p)
		if werr != nil {
			pe.WhenError = werr.Error()
		}
		if owner := ownerOf(out, p); owner >= 0 {
			h.describeMatch(r, &pe, out, owner)
		}
		ex.Policies = append(ex.Policies, pe)
	}
	writeJSON(w, http.StatusOK, ex)
}

// decide makes the dry run of req that the transport named would make,
// and returns its outcome and the decision that transport would answer:
// one that cannot release (the HTTP auth hooks, ext_authz over gRPC)
// refuses a concurrency limit (check.ErrNoRelease), which the outcome,
// decided as a transport that releases would, then shows the figures of.
func (h *Handler) decide(ctx context.Context, ns string, req *policy.Request, transport string) (*check.Outcome, adminapi.Decision, error) {
	in := check.Input{Namespace: ns, Request: req, Action: ratelimit.DryRun, Holder: explainHolder}
	if !adminapi.TransportReleases(transport) {
		in.Holder = ""
	}
	out, err := h.checker.Check(ctx, in)
	if refusal := err; errors.Is(refusal, check.ErrNoRelease) {
		in.Holder = explainHolder
		if out, err = h.checker.Check(ctx, in); err != nil {
			return nil, adminapi.Decision{}, err
		}
		// The problem the HTTP hooks answer; ext_authz's message says the same.
		detail := checkhttp.CheckFailedProblem(refusal).Detail
		return out, adminapi.Decision{Reason: reasonNoRelease, RetryAfter: seconds(0), Detail: detail}, nil
	}
	if err != nil {
		return nil, adminapi.Decision{}, err
	}
	return out, decisionOf(out), nil
}

// reasonNoRelease is the reason of a decision that refuses a concurrency
// limit a transport cannot release (adminapi.Decision).
const reasonNoRelease = "NoRelease"

// describeMatch fills in what the check did with the matching policy owner.
func (h *Handler) describeMatch(r *http.Request, pe *adminapi.PolicyExplanation, out *check.Outcome, owner int) {
	pr := &out.Policies[owner]
	key, missing := pr.KeyValue, pr.MissingKey
	pe.Key, pe.MissingKey = &key, &missing
	if missing {
		pe.OnMissing = string(pr.Policy.OnMissingKey)
		return
	}
	pe.Limits = limitStates(out, owner)
	pe.Ban = h.banOf(r.Context(), out, owner, key)
}

// ownerOf is the index of p in out's matching policies, -1 when it did not match.
func ownerOf(out *check.Outcome, p *policy.Policy) int {
	for i := range out.Policies {
		if out.Policies[i].Policy == p {
			return i
		}
	}
	return -1
}

func decisionOf(out *check.Outcome) adminapi.Decision {
	d := adminapi.Decision{Allowed: out.Allowed, Reason: string(out.Reason), RetryAfter: seconds(out.RetryAfter)}
	if out.Decider != nil {
		d.Policy = out.Decider.Name
	}
	d.Limit = out.NamedLimit()
	return d
}

// explainFields names each field the intake may refuse as the body spells it.
var explainFields = map[intake.Field]string{
	intake.FieldMethod: "method", intake.FieldHost: "url", intake.FieldTarget: "url",
	intake.FieldHeaders: "headers", intake.FieldClientAddress: "clientIP",
}

// readExplained reads the request to explain through the intake, the
// client address as given.
func readExplained(b *adminapi.ExplainRequest) (*policy.Request, error) {
	if b.URL == "" {
		return nil, errors.New(`body field "url" is required: the request's absolute URL, such as https://shop.example.com/api/cart`)
	}
	u, err := url.Parse(b.URL)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return nil, fmt.Errorf(`body field "url" %q is not an absolute URL such as https://shop.example.com/api/cart`, intake.Excerpt(b.URL))
	}
	o := intake.Original{Method: b.Method, Authority: u.Host, Target: u.RequestURI()}
	if o.Method == "" {
		o.Method = http.MethodGet
	}
	headers := intake.HeaderSection{}
	for name, values := range b.Headers {
		for _, v := range values {
			if err := headers.Add(name, v); err != nil {
				return nil, fieldError(err)
			}
		}
	}
	o.Header = headers.Header
	if b.ClientIP != "" {
		if o.Peer, err = intake.ReadAddress(b.ClientIP); err != nil {
			return nil, fieldError(err)
		}
	}
	req := &policy.Request{}
	if err := intake.Read(&o, nil, req); err != nil {
		return nil, fieldError(err)
	}
	return req, nil
}

func fieldError(err error) error {
	f, _ := intake.FieldOf(err)
	return fmt.Errorf("body field %q: %w", explainFields[f], err)
}
