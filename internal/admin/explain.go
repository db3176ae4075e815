package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/sluice-dev/sluice/internal/adminapi"
	"github.com/sluice-dev/sluice/internal/check"
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
	out, err := h.checker.Check(r.Context(), check.Input{Namespace: ns, Request: req, Action: ratelimit.DryRun, Holder: explainHolder})
	if err != nil {
		writeError(w, err)
		return
	}
	ex := adminapi.Explanation{Namespace: ns, Policies: []adminapi.PolicyExplanation{}, Decision: decisionOf(out)}
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
