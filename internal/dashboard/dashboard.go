// Package dashboard serves Sluice's web page: the policies in force with
// their limits and Ready state, live decision counts, a form that tries a
// request in dry run, a burst that shows a limit draining and refilling,
// and, in local mode, editing a policy's numbers and operating on its key
// values (top key values, bans and lift, overrides, reset) through the
// admin API (internal/admin). The page is plain HTML,
// CSS and one small script embedded in the binary; it asks the check
// endpoint's own POST /v1/check for decisions and this package's JSON
// routes for the rest.
package dashboard

import (
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/admin"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/policyfiles"
	"github.com/sluice-dev/sluice/internal/policytable"
)

//go:embed static
var static embed.FS

// maxEditBody bounds an edit request's body.
const maxEditBody = 64 << 10

// Options configure the dashboard. Set Files in local mode (policies can
// be edited) or Table in the cluster check process (read-only).
type Options struct {
	Checker *check.Checker
	// Tally is the checker's counts of decisions, which the page shows;
	// nil: none.
	Tally *check.Tally
	// Files is local mode's policy folder: statuses, file errors and edits.
	Files *policyfiles.Folder
	// Table is the check process's view of the policy table in Redis.
	Table *policytable.Reader
	// Admin is local mode's admin API (an *admin.Handler), which the
	// page's operations on key values go through; it needs Files. In a
	// cluster the admin API is reached through the API server, which
	// authorizes each call against the policy (kubectl sluice), so the
	// dashboard there offers none of it.
	Admin http.Handler
	// Listen is the address the page is served on (--listen); its host,
	// when one is named, is a name the dashboard answers to.
	Listen string
	// Hosts are more names it answers to (--dashboard-host). Localhost
	// and IP addresses always are; any other Host gets 421.
	Hosts []string
	Now   func() time.Time
}

// Dashboard is the page and its JSON routes.
type Dashboard struct {
	opts   Options
	assets http.Handler
	hosts  hostGuard
}

// New builds the dashboard.
func New(o Options) (*Dashboard, error) {
	if o.Checker == nil {
		return nil, errors.New("dashboard: a Checker is required")
	}
	if o.Files != nil && o.Table != nil {
		return nil, errors.New("dashboard: set Files (local mode) or Table (cluster), not both")
	}
	if o.Admin != nil && o.Files == nil {
		return nil, errors.New("dashboard: the admin API is offered in local mode only (set Files)")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	return &Dashboard{opts: o, assets: http.StripPrefix("/dashboard/", http.FileServerFS(sub)), hosts: newHostGuard(o.Listen, o.Hosts)}, nil
}

// Mux is where the routes go: a *webhook.CheckEndpoint or an
// *http.ServeMux.
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// Register adds the dashboard's routes:
//
//	GET /                                                  the page
//	GET /dashboard/{file}                                  its script and style sheet
//	GET /api/dashboard/state                               policies, statuses and live counts
//	POST /api/dashboard/policies/{namespace}/{name}/limits  edit limit numbers (local mode)
//	DELETE /api/dashboard/policies/{namespace}/{name}/edit  revert to the file (local mode)
//	ANY /api/dashboard/admin/{path...}                      the admin API at admin.Base/{path} (local mode)
//
// Each answers only to the names the dashboard is served as (hostGuard);
// the check routes beside them answer to any name. Every change, an
// admin API call included, passes mayChange.
func (d *Dashboard) Register(m Mux) {
	m.Handle("GET /{$}", d.hosts.guard(d.page))
	m.Handle("GET /dashboard/{file}", d.hosts.guard(d.asset))
	m.Handle("GET /api/dashboard/state", d.hosts.guard(d.state))
	m.Handle("POST /api/dashboard/policies/{namespace}/{name}/limits", d.hosts.guard(d.edit))
	m.Handle("DELETE /api/dashboard/policies/{namespace}/{name}/edit", d.hosts.guard(d.revert))
	m.Handle("/api/dashboard/admin/{path...}", d.hosts.guard(d.admin))
}

// securityHeaders keep the page's script the only script that runs (the
// page shows user data: policy names, keys, header values), and the page
// out of other sites' frames.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

func (d *Dashboard) page(w http.ResponseWriter, _ *http.Request) {
	b, err := static.ReadFile("static/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

func (d *Dashboard) asset(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	d.assets.ServeHTTP(w, r)
}

func (d *Dashboard) state(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, d.snapshot())
}

// EditRequest is the body of POST /api/dashboard/policies/{ns}/{name}/limits:
// new values for some parameters of some limits, by the API's field names
// ("capacity", "refillInterval", ...), as the page's inputs hold them.
type EditRequest struct {
	Limits []LimitEdit `json:"limits"`
}

// LimitEdit is new values for one limit's parameters.
type LimitEdit struct {
	Name   string            `json:"name"`
	Params map[string]string `json:"params"`
}

func (d *Dashboard) edit(w http.ResponseWriter, r *http.Request) {
	if !d.mayChange(w, r) {
		return
	}
	var req EditRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxEditBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		problemJSON(w, http.StatusBadRequest, "Edit rejected", "body: "+err.Error())
		return
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	err := d.opts.Files.Edit(ns, name, func(spec *ratelimitv1alpha1.RateLimitPolicySpec) error {
		return applyEdits(spec, req.Limits)
	})
	if err != nil {
		d.editError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d.snapshot())
}

func (d *Dashboard) revert(w http.ResponseWriter, r *http.Request) {
	if !d.mayChange(w, r) {
		return
	}
	if err := d.opts.Files.Revert(r.PathValue("namespace"), r.PathValue("name")); err != nil {
		d.editError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d.snapshot())
}

// mayChange answers the requests that may not change policies: in the
// cluster the RateLimitPolicy objects are the truth, and no other site's
// page may edit them through a browser (Sec-Fetch-Site, and a JSON
// Content-Type, which a cross-site request gets only after a preflight
// this server never grants).
func (d *Dashboard) mayChange(w http.ResponseWriter, r *http.Request) bool {
	if d.opts.Files == nil {
		problemJSON(w, http.StatusForbidden, "Read-only",
			"policies come from RateLimitPolicy objects here: edit them with kubectl (kubectl edit rlp NAME -n NAMESPACE)")
		return false
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return checkhttp.RequireJSON(w, r)
	}
	problemJSON(w, http.StatusForbidden, "Change rejected", "cross-site requests may not change policies, key values, bans or overrides")
	return false
}

// pageCaller is who the admin API logs as making the page's calls.
const pageCaller = admin.LocalCaller + " (dashboard)"

// admin serves the admin API's route at admin.Base/{path} to the page,
// as pageCaller; anything but a GET only when mayChange allows it.
func (d *Dashboard) admin(w http.ResponseWriter, r *http.Request) {
	if d.opts.Admin == nil {
		problemJSON(w, http.StatusForbidden, "Not offered here",
			"top key values, bans, overrides, reset and lift are on this page in local mode only; in a cluster use kubectl sluice "+
				"(kubectl sluice top NAMESPACE/POLICY, bans, lift, reset, override), which the API server authorizes against the policy")
		return
	}
	if r.Method != http.MethodGet && !d.mayChange(w, r) {
		return
	}
	call := r.Clone(admin.WithCaller(r.Context(), pageCaller))
	call.URL.Path, call.URL.RawPath = admin.Base+"/"+r.PathValue("path"), ""
	d.opts.Admin.ServeHTTP(w, call)
}

func (d *Dashboard) editError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, policyfiles.ErrUnknownPolicy):
		problemJSON(w, http.StatusNotFound, "No such policy", err.Error())
	case errors.Is(err, policyfiles.ErrInvalidEdit):
		problemJSON(w, http.StatusUnprocessableEntity, "Edit rejected; the policy in force is unchanged", err.Error())
	default:
		problemJSON(w, http.StatusInternalServerError, "Edit failed", err.Error())
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// problemJSON answers with a problem of no type beyond its status.
func problemJSON(w http.ResponseWriter, status int, title, detail string) {
	checkhttp.WriteProblem(w, checkhttp.Problem{Type: checkhttp.ProblemAboutBlank, Title: title, Status: status, Detail: detail})
}

// relFile names a policy file relative to the policies folder.
func relFile(dir, file string) string {
	if rel, err := filepath.Rel(dir, file); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return file
}
