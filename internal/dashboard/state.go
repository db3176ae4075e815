package dashboard

import (
	"fmt"
	"sort"
	"strings"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// State is the answer of GET /api/dashboard/state.
type State struct {
	// Mode is "local" (policy files, editable), "cluster" (the policy
	// table, read-only) or "read-only" (neither source is known).
	Mode string `json:"mode"`
	// Editable is set when policies' numbers can be edited from the page.
	Editable bool `json:"editable"`
	// Admin is set when the page offers each policy's top key values,
	// bans and lift, overrides and reset (local mode, through the admin
	// API).
	Admin bool `json:"admin"`
	// Notice tells where policies come from and how to change them.
	Notice string `json:"notice"`
	// Revision identifies the policy set in force.
	Revision int64 `json:"revision"`
	// Problems are what keeps policies from being read at all (files that
	// do not parse, a policy table not yet loaded).
	Problems []string     `json:"problems"`
	Policies []PolicyView `json:"policies"`
	// Counts are the live decision counts of every limit that has decided
	// since the process started (dry runs are not counted).
	Counts []CountView `json:"counts"`
	Time   time.Time   `json:"time"`
}

// CountView is one limit's decisions since the process started.
type CountView struct {
	Namespace    string `json:"namespace"`
	Policy       string `json:"policy"`
	Limit        string `json:"limit"`
	Allowed      int64  `json:"allowed"`
	Denied       int64  `json:"denied"`
	ShadowDenied int64  `json:"shadowDenied"`
	// SoftOver counts the requests a soft limit let through over it.
	SoftOver int64 `json:"softOver"`
}

// PolicyView is one policy as the page shows it.
type PolicyView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// InForce is set when a version of the policy is enforced; the fields
	// below Message describe that version.
	InForce bool `json:"inForce"`
	// Ready is set when the latest version is the one in force.
	Ready bool `json:"ready"`
	// Message explains a policy that is not Ready.
	Message string `json:"message,omitempty"`
	File    string `json:"file,omitempty"`
	// Edited is set while an edit made from the page is in force instead
	// of the file's version (until the file changes).
	Edited   bool       `json:"edited,omitempty"`
	EditedAt *time.Time `json:"editedAt,omitempty"`
	// Editable is set when the numbers of this policy can be edited.
	Editable     bool   `json:"editable"`
	Mode         string `json:"mode,omitempty"`
	Key          string `json:"key,omitempty"`
	OnMissingKey string `json:"onMissingKey,omitempty"`
	Cost         int64  `json:"cost,omitempty"`
	// Charge is spec.charge: Admitted or Always.
	Charge      string `json:"charge,omitempty"`
	FailureMode string `json:"failureMode,omitempty"`
	// DenyStatus is spec.response.denyStatus; 0 when the check
	// endpoint's profile decides.
	DenyStatus int `json:"denyStatus,omitempty"`
	// Headers is spec.response.headers: which rate-limit headers answers
	// carry.
	Headers string `json:"headers,omitempty"`
	// Lease is spec.lease (units, ttl); none when every request is
	// decided exactly.
	Lease []ParamView `json:"lease,omitempty"`
	// Penalty is spec.penalty (denials, within, ban, maxBan), shown as a
	// limit's numbers are; none without a penalty box.
	Penalty []ParamView `json:"penalty,omitempty"`
	Summary string      `json:"summary,omitempty"`
	Limits  []LimitView `json:"limits"`
}

// LimitView is one limit: its algorithm by the API's field name and its
// parameters by theirs, so an edit names them the same way.
type LimitView struct {
	Name      string      `json:"name"`
	Algorithm string      `json:"algorithm"`
	Params    []ParamView `json:"params"`
	// Mode is the limit's mode in force (Enforce, Shadow or Soft): its
	// own, else its policy's.
	Mode string `json:"mode"`
	// Hidden is set for a limit whose state the client never sees.
	Hidden bool `json:"hidden,omitempty"`
}

// ParamView is one parameter of a limit.
type ParamView struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Duration is set for durations ("10s"), else the value is a count.
	Duration bool `json:"duration,omitempty"`
}

func (d *Dashboard) snapshot() State {
	set := d.opts.Checker.Policies()
	st := State{Mode: "read-only", Revision: set.Revision, Problems: []string{}, Policies: []PolicyView{},
		Counts: []CountView{}, Time: d.opts.Now().UTC()}
	if d.opts.Tally != nil {
		for _, c := range d.opts.Tally.Counts() {
			st.Counts = append(st.Counts, CountView(c))
		}
	}
	views := map[string]*PolicyView{}
	for _, p := range set.All() {
		v := inForce(p)
		v.Ready = true
		views[p.String()] = &v
	}
	switch {
	case d.opts.Files != nil:
		st.Mode, st.Editable, st.Admin = "local", true, d.opts.Admin != nil
		dir := d.opts.Files.Dir()
		st.Notice = fmt.Sprintf("Local mode: policies from the files in %s. Numbers edited here apply at once, "+
			"in memory only; when a policy's file changes, the file's version applies again.", dir)
		for _, fe := range d.opts.Files.FileErrors() {
			st.Problems = append(st.Problems, fmt.Sprintf("%s: %v", relFile(dir, fe.File), fe.Err))
		}
		for _, s := range d.opts.Files.Statuses() {
			id := s.Namespace + "/" + s.Name
			v := views[id]
			if v == nil {
				v = &PolicyView{Namespace: s.Namespace, Name: s.Name, Limits: []LimitView{}}
				views[id] = v
			}
			if s.Duplicate {
				continue // not applied; the file's error says so
			}
			v.File = relFile(dir, s.File)
			v.Ready, v.Message = s.Ready, s.Message
			v.Editable = s.Spec != nil
			if s.Edited {
				v.Edited = true
				at := s.EditedAt.UTC()
				v.EditedAt = &at
			}
		}
	case d.opts.Table != nil:
		st.Mode = "cluster"
		st.Notice = "Read-only: policies come from RateLimitPolicy objects through the policy table in Redis. " +
			"To change one, edit it with kubectl (kubectl edit rlp NAME -n NAMESPACE). Top key values, bans, overrides, " +
			"reset and lift are not offered here: use kubectl sluice, which the API server authorizes against the policy."
		if !d.opts.Table.Loaded() {
			st.Problems = append(st.Problems, "the policy table has not been read from Redis yet")
		}
		for id, msg := range d.opts.Table.Problems() {
			v := views[id]
			if v == nil {
				ns, name, _ := strings.Cut(id, "/")
				v = &PolicyView{Namespace: ns, Name: name, Limits: []LimitView{}}
				views[id] = v
			} else {
				msg += " (the version this process enforced before stays in force)"
			}
			v.Ready, v.Message = false, msg
		}
	default:
		st.Notice = "Read-only: the policies in force."
	}
	for _, v := range views {
		st.Policies = append(st.Policies, *v)
	}
	sort.Slice(st.Policies, func(i, j int) bool {
		a, b := st.Policies[i], st.Policies[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return st
}

// inForce describes a compiled policy: every setting that decides a
// request, named as the API names it.
func inForce(p *policy.Policy) PolicyView {
	v := PolicyView{Namespace: p.Namespace, Name: p.Name, InForce: true, Mode: string(ratelimitv1alpha1.ModeEnforce),
		Key: p.KeyTemplate(), OnMissingKey: string(p.OnMissingKey), Cost: p.Cost,
		Charge: string(ratelimitv1alpha1.ChargeAdmitted), FailureMode: string(ratelimitv1alpha1.FailureModeOpen),
		DenyStatus: p.DenyStatus, Headers: string(p.HeaderStyle),
		Summary: p.Summary, Limits: make([]LimitView, 0, len(p.Limits))}
	if p.Shadow {
		v.Mode = string(ratelimitv1alpha1.ModeShadow)
	}
	if p.ChargeAlways {
		v.Charge = string(ratelimitv1alpha1.ChargeAlways)
	}
	if p.Reserves() {
		v.Charge = string(ratelimitv1alpha1.ChargeReserve)
	}
	if p.FailClosed {
		v.FailureMode = string(ratelimitv1alpha1.FailureModeClosed)
	}
	if p.Lease.Enabled() {
		v.Lease = []ParamView{count("units", p.Lease.Units), dur("ttl", p.Lease.TTL)}
	}
	if b := p.Penalty; b.Enabled() {
		v.Penalty = []ParamView{count("denials", b.Denials), dur("within", b.Within), dur("ban", b.Ban), dur("maxBan", b.MaxBan)}
	}
	for _, l := range p.Limits {
		v.Limits = append(v.Limits, limitView(l))
	}
	return v
}

// count and dur are a number and a duration as the page shows them.
func count(name string, n int64) ParamView { return ParamView{Name: name, Value: fmt.Sprint(n)} }

func dur(name string, d time.Duration) ParamView {
	return ParamView{Name: name, Value: formatDuration(d), Duration: true}
}

// limitView names a compiled limit's numbers as the API does (see
// ratelimit.Limit for the mapping).
func limitView(l policy.Limit) LimitView {
	lim := l.Limit
	v := LimitView{Name: l.Name, Mode: string(l.Mode), Hidden: l.Hidden}
	switch lim.Algorithm {
	case ratelimit.TokenBucket:
		v.Algorithm = "tokenBucket"
		v.Params = []ParamView{count("capacity", lim.Capacity), count("refillRate", lim.Rate), dur("refillInterval", lim.Interval)}
	case ratelimit.FixedWindow, ratelimit.FixedWindowClock, ratelimit.SlidingWindowLog, ratelimit.SlidingWindowCounter:
		// The alignment goes with the name, not the parameters: the page
		// posts every parameter back as an edit of limit and window.
		v.Algorithm = map[ratelimit.Algorithm]string{ratelimit.FixedWindow: "fixedWindow",
			ratelimit.FixedWindowClock: "fixedWindow (alignment: Clock)",
			ratelimit.SlidingWindowLog: "slidingWindowLog", ratelimit.SlidingWindowCounter: "slidingWindowCounter"}[lim.Algorithm]
		v.Params = []ParamView{count("limit", lim.Capacity), dur("window", lim.Interval)}
	case ratelimit.LeakyBucket:
		v.Algorithm = "leakyBucket"
		v.Params = []ParamView{count("capacity", lim.Capacity), count("leakRate", lim.Rate), dur("leakInterval", lim.Interval)}
	case ratelimit.GCRA:
		v.Algorithm = "gcra"
		v.Params = []ParamView{count("rate", lim.Rate), dur("period", lim.Interval), count("burst", lim.Capacity)}
	case ratelimit.Calendar:
		// The period and zone go with the name: only the limit is edited.
		v.Algorithm = fmt.Sprintf("calendar (%s, %s)", lim.Period, lim.Zone)
		v.Params = []ParamView{count("limit", lim.Capacity)}
	case ratelimit.Concurrency:
		// The holder, a descriptor entry's name, goes with the name too.
		v.Algorithm = ratelimitv1alpha1.AlgorithmConcurrency
		if l.Holder != "" {
			v.Algorithm += " (holder: " + l.Holder + ")"
		}
		v.Params = []ParamView{count("limit", lim.Capacity), dur("leaseTimeout", lim.Interval)}
	default:
		v.Algorithm = lim.Algorithm.String()
		v.Params = []ParamView{}
	}
	return v
}

// formatDuration writes d the way the API's Duration is written: whole
// numbers of h, m, s and ms ("1m30s", "24h", "1s500ms").
func formatDuration(d time.Duration) string {
	if d <= 0 || d%time.Millisecond != 0 {
		return d.String()
	}
	var b strings.Builder
	for _, u := range []struct {
		d    time.Duration
		unit string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if n := d / u.d; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.unit)
			d -= n * u.d
		}
	}
	return b.String()
}
