package ingressnginx

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/convert"
	"github.com/sluice-dev/sluice/internal/policy"
)

// DefaultAnnotationsPrefix is ingress-nginx's default --annotations-prefix.
const DefaultAnnotationsPrefix = "nginx.ingress.kubernetes.io"

// DefaultCheckURL is the check endpoint as config/ installs it.
const DefaultCheckURL = "http://sluice-check.sluice-system.svc.cluster.local:8080"

// defaultBurstMultiplier is ingress-nginx's limit-burst-multiplier default.
const defaultBurstMultiplier = 5

// Options shape the convert.
type Options struct {
	// Namespace is the namespace of the policies of Ingresses whose
	// manifests name none; "" leaves theirs unset too, so that `kubectl
	// apply -n` puts a policy where it puts its Ingress.
	Namespace string
	// IgnoreIngressNamespace puts every policy in Namespace, whatever
	// its Ingress's namespace; the auth-url then names that namespace.
	IgnoreIngressNamespace bool
	// AnnotationsPrefix is ingress-nginx's --annotations-prefix;
	// DefaultAnnotationsPrefix when empty.
	AnnotationsPrefix string
	// CheckURL is the check endpoint's base URL in the auth-url the
	// conversion proposes; DefaultCheckURL when empty.
	CheckURL string
	// FailureMode of every policy; unset (the API's default, Open) when
	// empty.
	FailureMode ratelimitv1alpha1.FailureMode
}

// Policy is one converted policy with what to do on its Ingress.
type Policy struct {
	Object *ratelimitv1alpha1.RateLimitPolicy
	// Ingress is the Ingress it comes from ("namespace/name").
	Ingress string
	// IngressNamespace and IngressName are the Ingress's (the namespace
	// "" when its manifest names none).
	IngressNamespace, IngressName string
	Source                        convert.Pos
	// Explain says, a line each, what nginx enforced and what the policy
	// does, for the YAML comment above the policy.
	Explain []string
	// AuthURL is the auth-url annotation that makes ingress-nginx ask
	// Sluice about the Ingress's requests; "" when the Ingress already
	// calls another auth service (nginx calls one per location).
	AuthURL string
	// AuthURLAnnotation is the auth-url annotation's full name.
	AuthURLAnnotation string
	// Remove are the annotations (full names) the policy now enforces,
	// to remove from the Ingress with the auth-url set.
	Remove []string
	// Hosts are the Ingress's hosts ("" for a rule without one), for the
	// note on targeting the HTTPRoute that replaces it.
	Hosts []string
}

// Result is a conversion's outcome.
type Result struct {
	Policies []Policy
	Reports  []Report
	// Ingresses counts the Ingresses read.
	Ingresses int
}

// Worst is the highest severity reported; Note when nothing was.
func (r *Result) Worst() convert.Severity { return convert.Worst(r.Reports) }

// Convert reads the Ingresses of every file and converts each one that
// ingress-nginx rate-limits into one policy.
func Convert(files []convert.File, opts Options) *Result {
	if opts.AnnotationsPrefix == "" {
		opts.AnnotationsPrefix = DefaultAnnotationsPrefix
	}
	if opts.CheckURL == "" {
		opts.CheckURL = DefaultCheckURL
	}
	opts.CheckURL = strings.TrimRight(opts.CheckURL, "/")
	c := &converter{opts: opts, seen: map[string]convert.Pos{}, names: map[string]string{}}
	order := map[string]int{}
	res := &Result{}
	for i, f := range files {
		order[f.Name] = i
		for _, ing := range parseFile(f, &c.rs) {
			res.Ingresses++
			c.convert(ing)
		}
	}
	res.Policies = c.policies
	res.Reports = convert.Sorted(c.rs, order)
	return res
}

type converter struct {
	opts     Options
	rs       reports
	policies []Policy
	// seen is where each Ingress (namespace/name) was read first.
	seen map[string]convert.Pos
	// names maps each policy (namespace/name) to its Ingress.
	names map[string]string
}

// ingressConversion is one Ingress under convert.
type ingressConversion struct {
	c   *converter
	ing *ingress
	// failed: ingress-nginx refuses the Ingress; no policy.
	failed bool
}

func (ic *ingressConversion) report(pos convert.Pos, ann string, s convert.Severity, format string, args ...any) {
	if s == convert.Error {
		ic.failed = true
	}
	ic.c.rs = append(ic.c.rs, Report{Report: convert.Reportf(pos, s, format, args...), Ingress: ic.ing.id(), Annotation: ann})
}

// globalAnnotations are ingress-nginx's former global rate limiting.
var globalAnnotations = []string{"global-rate-limit", "global-rate-limit-window", "global-rate-limit-key", "global-rate-limit-ignored-cidrs"}

// limitAnnotations are the annotations of ingress-nginx's rate-limit
// group, and the global ones.
var limitAnnotations = append([]string{
	"limit-rps", "limit-rpm", "limit-connections", "limit-burst-multiplier",
	"limit-whitelist", "limit-allowlist", "limit-rate", "limit-rate-after",
}, globalAnnotations...)

func (c *converter) convert(ing *ingress) {
	ic := &ingressConversion{c: c, ing: ing}
	var present []string
	for _, name := range limitAnnotations {
		if a, ok := ic.ann(name); ok {
			present = append(present, name)
			if a.notString {
				ic.report(a.pos, name, convert.Note, "%s is written as a YAML %s: Kubernetes keeps annotations as strings and refuses this manifest; quote it (read here as %q)", a.value, yamlKind(a.value), a.value)
			}
		}
	}
	if len(present) == 0 {
		return
	}
	if first, ok := c.seen[ing.id()]; ok {
		ic.report(ing.pos, "", convert.Error, "this Ingress is also at %s: only that one is converted (the API server keeps one object of a name)", first)
		return
	}
	c.seen[ing.id()] = ing.pos
	if a, ok := ic.ann("canary"); ok {
		if on, err := strconv.ParseBool(a.value); err == nil && on {
			ic.report(a.pos, "canary", convert.Note, "a canary Ingress: ingress-nginx sends its share of the traffic through the main Ingress's locations, whose limits apply, and never applies this Ingress's own %s; no policy", strings.Join(present, ", "))
			return
		}
	}

	rps, rpm, conn := ic.readInt("limit-rps"), ic.readInt("limit-rpm"), ic.readInt("limit-connections")
	for _, v := range []intAnn{rps, rpm, conn} {
		if v.bad {
			ic.report(v.a.pos, v.name, convert.Error, "%q is not an integer: ingress-nginx refuses the whole Ingress (annotation validation; with it turned off, it ignores the annotation), so nothing of it was enforced; fix the value and convert again", v.a.value)
		}
	}
	mult := ic.readInt("limit-burst-multiplier")
	multiplier := defaultBurstMultiplier
	switch {
	case mult.bad:
		ic.report(mult.a.pos, mult.name, convert.Note, "%q is not an integer: ingress-nginx uses the default %d, and so does the policy", mult.a.value, defaultBurstMultiplier)
	case mult.set:
		multiplier = mult.n
	}
	limited := rps.n > 0 || rpm.n > 0
	if multiplier < 0 && limited {
		ic.report(mult.a.pos, mult.name, convert.Error, "%d makes a negative burst, which nginx refuses (\"invalid burst value\"): ingress-nginx cannot load a configuration with this Ingress", multiplier)
	}
	for _, v := range []intAnn{rps, rpm} {
		if v.set && !v.bad && v.n <= 0 {
			ic.report(v.a.pos, v.name, convert.Note, "%d is not positive: ingress-nginx sets no such limit, nor does the policy", v.n)
		}
	}
	if conn.n > 0 {
		ic.report(conn.a.pos, conn.name, convert.Inexact, "not convertible: at most %d open connections per client address (nginx limit_conn) is a limit on concurrency, and Sluice counts requests; keep the annotation while ingress-nginx serves this Ingress", conn.n)
	}
	ic.bandwidth("limit-rate", "limit_rate, KB/s for each response")
	ic.bandwidth("limit-rate-after", "limit_rate_after, KB sent before limit-rate applies")
	for _, name := range globalAnnotations {
		if a, ok := ic.ann(name); ok {
			ic.report(a.pos, name, convert.Inexact, "not converted: ingress-nginx's global rate limiting (Lua, counted in memcached) was removed in ingress-nginx v1.12; where it still runs, a slidingWindowCounter limit of global-rate-limit per global-rate-limit-window is its nearest Sluice equivalent")
		}
	}
	exempt, exemptAnn, exemptOK := ic.allowlist()
	if !exemptOK {
		ic.failed = true
	}
	if exemptAnn != "" && !limited && conn.n <= 0 {
		a, _ := ic.ann(exemptAnn)
		ic.report(a.pos, exemptAnn, convert.Note, "no limit-rps or limit-rpm to exempt these clients from: nothing to convert")
	}
	if ic.failed || !limited {
		if !ic.failed && mult.set && !mult.bad {
			ic.report(mult.a.pos, mult.name, convert.Note, "no limit-rps or limit-rpm to multiply: nothing to convert")
		}
		return
	}
	ic.policy(rps, rpm, multiplier, mult, exempt, exemptAnn, conn.n > 0)
}

// policy builds the Ingress's policy.
func (ic *ingressConversion) policy(rps, rpm intAnn, multiplier int, mult intAnn, exempt []string, exemptAnn string, keepsConn bool) {
	ing := ic.ing
	p := Policy{Ingress: ing.id(), IngressNamespace: ing.namespace, IngressName: ing.name, Source: ing.pos}
	limits, reqKept := ic.limitReqs(&p, rps, rpm, multiplier)
	if len(limits) == 0 {
		return
	}
	if mult.set && !reqKept {
		p.Remove = append(p.Remove, ic.full("limit-burst-multiplier"))
	}
	if exemptAnn != "" {
		ic.exemption(&p, exemptAnn, reqKept || keepsConn)
	}
	match := ratelimitv1alpha1.RequestMatch{ExemptClients: exempt}
	match.Hosts, p.Hosts = ic.matchHosts()
	for _, pm := range ic.paths() {
		match.Paths = append(match.Paths, ratelimitv1alpha1.PathMatch(pm))
	}

	obj := &ratelimitv1alpha1.RateLimitPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: ratelimitv1alpha1.GroupVersion.String(), Kind: "RateLimitPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      ic.c.policyName(ing.name),
			Namespace: ic.namespace(),
		},
		Spec: ratelimitv1alpha1.RateLimitPolicySpec{
			Match:       match,
			Key:         "{client_ip}",
			Limits:      limits,
			FailureMode: ic.c.opts.FailureMode,
		},
	}
	id := obj.Namespace + "/" + obj.Name
	if other, ok := ic.c.names[id]; ok {
		ic.report(ing.pos, "", convert.Error, "its policy would be named %s, as the policy of Ingress %s is: rename one of them (a converter limitation)", id, other)
		return
	}
	if _, err := policy.ValidateAndCompile(obj.Namespace, obj.Name, &obj.Spec); err != nil {
		ic.report(ing.pos, "", convert.Inexact, "not converted: the policy does not compile: %v", err)
		return
	}
	ic.c.names[id] = ing.id()
	p.Object = obj
	p.AuthURL = ic.authURL(obj.Namespace, obj.Name)
	p.AuthURLAnnotation = ic.full("auth-url")
	ic.c.policies = append(ic.c.policies, p)
}

// exemption explains in p the clients exemptAnn exempts, and lists it to
// remove unless limits kept by ingress-nginx still need it.
func (ic *ingressConversion) exemption(p *Policy, exemptAnn string, limitsKept bool) {
	p.Explain = append(p.Explain, fmt.Sprintf("%s: nginx keys these clients' requests on \"\", which limit_req never counts; exemptClients", exemptAnn))
	if limitsKept {
		// The same list exempts clients from the limits that stay
		// with ingress-nginx.
		p.Explain = append(p.Explain, fmt.Sprintf("keep %s on the Ingress: it also exempts these clients from the limits ingress-nginx goes on enforcing", exemptAnn))
		return
	}
	p.Remove = append(p.Remove, ic.full(exemptAnn))
	if exemptAnn == "limit-allowlist" {
		if _, ok := ic.ann("limit-whitelist"); ok {
			p.Remove = append(p.Remove, ic.full("limit-whitelist"))
		}
	}
}

// namespace is the policy's namespace.
func (ic *ingressConversion) namespace() string {
	if ic.ing.namespace == "" || ic.c.opts.IgnoreIngressNamespace {
		return ic.c.opts.Namespace
	}
	return ic.ing.namespace
}

// authURL is the auth-url that checks the policy alone, or "" when the
// Ingress already has an auth-url of another service. It names the
// policy so that a request is checked against the policy of the Ingress
// whose location nginx chose, as limit_req counted it in that Ingress's
// zone, whatever other policies of the namespace match it.
func (ic *ingressConversion) authURL(namespace, name string) string {
	ns := "$namespace"
	if ic.c.opts.IgnoreIngressNamespace && namespace != ic.ing.namespace {
		ns = namespace
	}
	want := fmt.Sprintf("%s/check/%s/%s?host=$host", ic.c.opts.CheckURL, ns, name)
	if a, ok := ic.ann("auth-url"); ok && a.value != "" {
		if strings.Contains(a.value, "/check/") {
			ic.report(a.pos, "auth-url", convert.Note, "already asks a Sluice check endpoint (%s); %s checks this Ingress's policy alone, as limit_req counted this Ingress's zone alone", a.value, want)
			return want
		}
		ic.report(a.pos, "auth-url", convert.Inexact, "the Ingress already asks an auth service (%s), and nginx asks one per location, so no auth-url can add Sluice: the policy applies once the Ingress's successor HTTPRoute is targeted (see the comment above it), or when that service asks Sluice (POST /v1/check)", a.value)
		return ""
	}
	return want
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// policyName is the Ingress's name when it is a DNS label (as policy names
// are, for Redis keys, metrics and headers), else a label made of it with
// a hash of the name.
func (c *converter) policyName(ingName string) string {
	if dnsLabel.MatchString(ingName) {
		return ingName
	}
	name := convert.DNSLabel(ingName)
	if name == "" {
		name = "ingress"
	}
	return convert.WithHash(name, ingName, 8)
}
