package admin

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/adminapi"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/rlqs"
)

// seconds renders a duration rounded up to whole seconds ("4m10s"), as the
// rate-limit headers count them; "never" for ratelimit.Never.
func seconds(d time.Duration) string {
	if d == ratelimit.Never {
		return "never"
	}
	return (time.Duration(checkhttp.CeilSeconds(d)) * time.Second).String()
}

// target reads the policy and key value a keys or bans route names; it
// answers the error itself and returns nil when they are not usable.
func (h *Handler) target(w http.ResponseWriter, r *http.Request, needKey bool) (*policy.Policy, string) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	p := h.checker.Policies().Get(ns, name)
	if p == nil {
		notFound(w, "%s", unknownPolicy(h.checker.Policies(), ns, name))
		return nil, ""
	}
	keys := r.URL.Query()["key"]
	switch {
	case !needKey:
		return p, ""
	case len(keys) == 0 || keys[0] == "":
		badRequest(w, `query parameter "key" is required: the key value, as policy %s/%s's key renders it`, ns, name)
		return nil, ""
	case len(keys) > 1:
		badRequest(w, `query parameter "key" is given %d times; give it once`, len(keys))
		return nil, ""
	}
	return p, keys[0]
}

// unknownPolicy says that namespace/name is in force nowhere, and what is.
// The names are the caller's, quoted (a path segment may hold control
// bytes); those of the policies in force are names a policy can have.
func unknownPolicy(set *policy.Set, namespace, name string) string {
	var names []string
	for _, p := range set.Namespace(namespace) {
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return fmt.Sprintf("policy %q not found: %s", namespace+"/"+name, noPolicies(namespace))
	}
	return fmt.Sprintf("policy %q not found (policies in %s: %s)", namespace+"/"+name, namespace, strings.Join(names, ", "))
}

// noPolicies says that the caller's namespace has no policies in force.
func noPolicies(namespace string) string {
	return fmt.Sprintf("namespace %q has no policies in force", namespace)
}

// state inspects the key value of p.
func (h *Handler) state(ctx context.Context, p *policy.Policy, key string) (*adminapi.KeyState, error) {
	out, err := h.buckets.Inspect(ctx, p.Namespace, p.Name, key)
	if err != nil {
		return nil, err
	}
	ks := &adminapi.KeyState{Namespace: p.Namespace, Policy: p.Name, Key: key, Limits: limitStates(out, 0)}
	ks.Ban = h.banOf(ctx, out, 0, key)
	if h.quota != nil {
		ks.Quota = quotaShares(h.quota.Shares(p.Namespace, p.Name, key))
	}
	return ks, nil
}

func quotaShares(shares []rlqs.Share) []adminapi.QuotaShare {
	var out []adminapi.QuotaShare
	for _, s := range shares {
		out = append(out, adminapi.QuotaShare{Envoy: s.Envoy, Action: s.Action, MaxTokens: s.Burst, TokensPerFill: s.Tokens, Reserved: s.Reserved,
			Interval: s.Interval.String(), Want: s.Want, Reported: s.Reported.UTC().Format(time.RFC3339Nano), Allowed: s.Allowed, Denied: s.Denied})
	}
	return out
}

// limitStates are the figures of the limits of out's policy owner.
func limitStates(out *check.Outcome, owner int) []adminapi.LimitState {
	p := out.Policies[owner].Policy
	states := []adminapi.LimitState{}
	for _, lr := range out.Limits {
		if lr.Policy != p || lr.Part != out.Policies[owner].Part {
			continue
		}
		st := adminapi.LimitState{
			Name: lr.Limit.Name, Algorithm: lr.Limit.Limit.Algorithm.String(), Limit: lr.Limit.Limit.Capacity,
			Remaining: lr.Remaining, Reset: seconds(lr.Reset), Allowed: lr.Allowed, RetryAfter: seconds(lr.RetryAfter),
			Reserved: lr.Reserved,
			Mode:     string(lr.Limit.Mode), Hidden: lr.Limit.Hidden,
		}
		if lr.Override != nil && lr.Override.Overrides(lr.Limit.Name) {
			st.Override = &adminapi.Override{Source: string(lr.Override.Source), Limit: lr.Limit.Limit.Capacity, PolicyLimit: lr.PolicyQuota()}
		}
		states = append(states, st)
	}
	return states
}

// banOf is the ban of the bucket of out's policy owner, nil when none.
func (h *Handler) banOf(ctx context.Context, out *check.Outcome, owner int, key string) *adminapi.Ban {
	p := out.Policies[owner].Policy
	for _, lr := range out.Limits {
		if lr.Policy != p || !lr.Banned {
			continue
		}
		b := &adminapi.Ban{Remaining: seconds(lr.BanLeft)}
		if bans, err := h.buckets.Bans(ctx, p.Namespace, p.Name); err == nil {
			for _, x := range bans {
				if x.KeyValue == key {
					b.Length = x.Length.String()
				}
			}
		}
		return b
	}
	return nil
}

// keyState reads the policy and key value a route names and inspects
// them; it answers the error itself and returns nil when it cannot.
// check, when set, refuses what it returns an error for before anything
// is read from the store.
func (h *Handler) keyState(w http.ResponseWriter, r *http.Request, check func(*policy.Policy) error) (*policy.Policy, *adminapi.KeyState) {
	p, key := h.target(w, r, true)
	if p == nil {
		return nil, nil
	}
	if check != nil {
		if err := check(p); err != nil {
			writeError(w, err)
			return nil, nil
		}
	}
	ks, err := h.state(r.Context(), p, key)
	if err != nil {
		writeError(w, err)
		return nil, nil
	}
	return p, ks
}

func (h *Handler) inspect(w http.ResponseWriter, r *http.Request) {
	if _, ks := h.keyState(w, r, nil); ks != nil {
		writeJSON(w, http.StatusOK, ks)
	}
}

func (h *Handler) reset(w http.ResponseWriter, r *http.Request) {
	limits := r.URL.Query()["limit"]
	p, ks := h.keyState(w, r, func(p *policy.Policy) error {
		if slices.Contains(limits, "") {
			return fmt.Errorf("%w: query parameter \"limit\" is empty: name a limit of policy %s/%s, or leave it out to reset them all", errBadRequest, p.Namespace, p.Name)
		}
		return check.KnownLimits(p, limits)
	})
	if ks == nil {
		return
	}
	if untouched(ks.Limits, limits) {
		notFound(w, "key %q of policy %s/%s has no state: nothing to reset", ks.Key, p.Namespace, p.Name)
		return
	}
	names, err := h.buckets.Reset(r.Context(), p.Namespace, p.Name, ks.Key, limits)
	if err != nil {
		writeError(w, err)
		return
	}
	h.log.Info("admin: reset", "caller", CallerFrom(r.Context()), "policy", p.Namespace+"/"+p.Name, "key", ks.Key, "limits", names)
	writeJSON(w, http.StatusOK, adminapi.ResetAnswer{Namespace: p.Namespace, Policy: p.Name, Key: ks.Key, Limits: names})
}

func (h *Handler) bans(w http.ResponseWriter, r *http.Request) {
	p, _ := h.target(w, r, false)
	if p == nil {
		return
	}
	bans, err := h.buckets.Bans(r.Context(), p.Namespace, p.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	list := adminapi.BanList{Namespace: p.Namespace, Policy: p.Name, Bans: []adminapi.KeyedBan{}}
	now := h.now()
	for _, b := range bans {
		list.Bans = append(list.Bans, adminapi.KeyedBan{Key: b.KeyValue, Remaining: seconds(b.Until.Sub(now)), Length: b.Length.String()})
	}
	writeJSON(w, http.StatusOK, list)
}

func (h *Handler) lift(w http.ResponseWriter, r *http.Request) {
	p, ks := h.keyState(w, r, nil)
	if ks == nil {
		return
	}
	if ks.Ban == nil {
		notFound(w, "key %q of policy %s/%s has no ban in force: nothing to lift", ks.Key, p.Namespace, p.Name)
		return
	}
	if err := h.buckets.Lift(r.Context(), p.Namespace, p.Name, ks.Key); err != nil {
		writeError(w, err)
		return
	}
	h.log.Info("admin: ban lifted", "caller", CallerFrom(r.Context()), "policy", p.Namespace+"/"+p.Name, "key", ks.Key)
	writeJSON(w, http.StatusOK, adminapi.LiftAnswer{Namespace: p.Namespace, Policy: p.Name, Key: ks.Key})
}

// untouched reports whether every limit named (every limit when none is)
// is as if never used.
func untouched(states []adminapi.LimitState, names []string) bool {
	for _, s := range states {
		if (len(names) == 0 || slices.Contains(names, s.Name)) && s.Reset != "0s" {
			return false
		}
	}
	return true
}
