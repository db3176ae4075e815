package ingressnginx

import (
	"fmt"
	"net"
	"regexp"
	"slices"
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

// ann is the annotation of that name (without prefix), if present.
func (ic *ingressConversion) ann(name string) (annotation, bool) {
	a, ok := ic.ing.annotations[ic.c.opts.AnnotationsPrefix+"/"+name]
	return a, ok
}

func (ic *ingressConversion) full(name string) string {
	return ic.c.opts.AnnotationsPrefix + "/" + name
}

// intAnn is an integer annotation as ingress-nginx reads it (strconv.Atoi).
type intAnn struct {
	name string
	a    annotation
	set  bool // present and not empty
	bad  bool // not an integer
	n    int
}

func (ic *ingressConversion) readInt(name string) intAnn {
	a, ok := ic.ann(name)
	v := intAnn{name: name, a: a}
	if !ok || a.value == "" {
		// ingress-nginx validates no empty value and reads it as 0.
		return v
	}
	v.set = true
	n, err := strconv.Atoi(a.value)
	if err != nil {
		v.bad = true
		return v
	}
	v.n = n
	return v
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

func yamlKind(v string) string {
	if _, err := strconv.ParseBool(v); err == nil {
		return "boolean"
	}
	return "number"
}

// bandwidth reports limit-rate and limit-rate-after, which nginx applies
// to the bytes of each response.
func (ic *ingressConversion) bandwidth(name, what string) {
	v := ic.readInt(name)
	switch {
	case v.bad:
		ic.report(v.a.pos, name, convert.Note, "%q is not an integer: ingress-nginx ignores it (the ConfigMap's value applies)", v.a.value)
	case v.n > 0:
		ic.report(v.a.pos, name, convert.Inexact, "not convertible: %d (nginx %s) limits bandwidth, and Sluice counts requests; keep the annotation while ingress-nginx serves this Ingress", v.n, what)
	}
}

// maxExempt is the API's bound on match.exemptClients.
const maxExempt = 64

// allowlist reads limit-allowlist, or its older name limit-whitelist when
// the first is empty, as ingress-nginx does: comma-separated CIDRs or
// addresses, each trimmed (net.ParseCIDR, then net.ParseIP). It returns
// the networks, canonical, sorted and without repeats, and the annotation
// read ("" for none); ok is false when ingress-nginx refuses the value.
func (ic *ingressConversion) allowlist() (nets []string, name string, ok bool) {
	allow, allowOK := ic.ann("limit-allowlist")
	white, whiteOK := ic.ann("limit-whitelist")
	var a annotation
	switch {
	case allowOK && allow.value != "":
		a, name = allow, "limit-allowlist"
		if whiteOK && white.value != "" {
			ic.report(white.pos, "limit-whitelist", convert.Note, "ignored, as ingress-nginx ignores it: limit-allowlist is set and takes precedence")
		}
	case whiteOK && white.value != "":
		a, name = white, "limit-whitelist"
	default:
		return nil, "", true
	}
	seen := map[string]bool{}
	for _, spec := range strings.Split(a.value, ",") {
		spec = strings.TrimSpace(spec)
		var canon string
		if _, ipnet, err := net.ParseCIDR(spec); err == nil {
			canon = ipnet.String()
		} else if ip := net.ParseIP(spec); ip != nil {
			canon = ip.String()
		} else {
			ic.report(a.pos, name, convert.Error, "%q is neither a CIDR nor an IP address: ingress-nginx refuses the whole Ingress, so nothing of it was enforced; fix the value and convert again", spec)
			return nil, name, false
		}
		if !seen[canon] {
			seen[canon] = true
			nets = append(nets, canon)
		}
	}
	slices.Sort(nets)
	if len(nets) > maxExempt {
		ic.report(a.pos, name, convert.Inexact, "%d networks, and a policy exempts at most %d: the first %d (in sorted order) are kept, clients of the others are limited; merge networks into wider ones and convert again", len(nets), maxExempt, maxExempt)
		nets = nets[:maxExempt]
	}
	return nets, name, true
}

// The API's bounds.
const (
	maxCount = 1_000_000_000
	maxHosts = 16
	maxPaths = 32
)

var (
	hostPattern = regexp.MustCompile(`^([*][.])?[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*$`)
	pathPattern = regexp.MustCompile(`^/[^*?#[:space:]]*[*]?$`)
)

// gcraLimit is nginx's limit_req of rate per period (period in seconds:
// 1 for r/s, 60 for r/m) with burst, as a gcra limit, and the line that
// explains it.
//
// nginx keeps a zone's rate in thousandths of a request per second,
// rounded down (ngx_http_limit_req_zone: rate * 1000 / scale), so 10r/m is
// 0.166 requests per second; the limit says exactly that: rate 166 per
// 1000s, unless the rate divides evenly.
func gcraLimit(name string, n, periodSeconds, burst int64) (ratelimitv1alpha1.Limit, string) {
	milli := n * 1000 / periodSeconds
	rate, period := n, fmt.Sprintf("%ds", periodSeconds)
	if periodSeconds == 60 {
		period = "1m"
	}
	exact := n*1000%periodSeconds == 0
	if !exact {
		rate, period = milli, "1000s"
	}
	unit := map[int64]string{1: "r/s", 60: "r/m"}[periodSeconds]
	line := fmt.Sprintf("%s: nginx limit_req rate=%d%s burst=%d nodelay admits %d requests at once, then one every %s; gcra rate %d per %s, burst %d",
		name, n, unit, burst, burst+1, spacing(milli), rate, period, burst+1)
	if !exact {
		line += fmt.Sprintf(" (nginx keeps %d%s as %d thousandths of a request per second)", n, unit, milli)
	}
	return ratelimitv1alpha1.Limit{
		Name: ratelimitv1alpha1.LimitName(name),
		GCRA: &ratelimitv1alpha1.GCRA{
			Rate:   ratelimitv1alpha1.Count(rate),
			Period: ratelimitv1alpha1.Duration(period),
			Burst:  ratelimitv1alpha1.Count(burst + 1),
		},
	}, line
}

// spacing is the time between two requests at milli thousandths of a
// request per second.
func spacing(milli int64) string {
	us := 1_000_000_000 / milli
	switch {
	case us%1_000_000 == 0:
		return fmt.Sprintf("%ds", us/1_000_000)
	case us%1000 == 0:
		return fmt.Sprintf("%dms", us/1000)
	}
	return fmt.Sprintf("%.3fs", float64(us)/1e6)
}

// policy builds the Ingress's policy.
func (ic *ingressConversion) policy(rps, rpm intAnn, multiplier int, mult intAnn, exempt []string, exemptAnn string, keepsConn bool) {
	ing := ic.ing
	p := Policy{Ingress: ing.id(), IngressNamespace: ing.namespace, IngressName: ing.name, Source: ing.pos}
	var limits []ratelimitv1alpha1.Limit
	// reqKept: a limit_req stays with ingress-nginx, and with it the
	// multiplier and the whitelist that shape it (limit_conn takes only
	// the whitelist).
	reqKept := false
	for _, v := range []struct {
		a      intAnn
		limit  string
		period int64
	}{{rps, "rps", 1}, {rpm, "rpm", 60}} {
		if v.a.n <= 0 {
			continue
		}
		if v.a.n > maxCount || multiplier > maxCount || int64(v.a.n)*int64(multiplier)+1 > maxCount {
			ic.report(v.a.a.pos, v.a.name, convert.Inexact, "not converted: %d with a burst multiplier of %d is beyond what a policy holds (rates and bursts up to %d)", v.a.n, multiplier, maxCount)
			reqKept = true
			continue
		}
		l, line := gcraLimit(v.limit, int64(v.a.n), v.period, int64(v.a.n)*int64(multiplier))
		limits = append(limits, l)
		p.Explain = append(p.Explain, line)
		p.Remove = append(p.Remove, ic.full(v.a.name))
	}
	if len(limits) == 0 {
		return
	}
	if mult.set && !reqKept {
		p.Remove = append(p.Remove, ic.full("limit-burst-multiplier"))
	}
	if exemptAnn != "" {
		p.Explain = append(p.Explain, fmt.Sprintf("%s: nginx keys these clients' requests on \"\", which limit_req never counts; exemptClients", exemptAnn))
		if reqKept || keepsConn {
			// The same list exempts clients from the limits that stay
			// with ingress-nginx.
			p.Explain = append(p.Explain, fmt.Sprintf("keep %s on the Ingress: it also exempts these clients from the limits ingress-nginx goes on enforcing", exemptAnn))
		} else {
			p.Remove = append(p.Remove, ic.full(exemptAnn))
			if exemptAnn == "limit-allowlist" {
				if _, ok := ic.ann("limit-whitelist"); ok {
					p.Remove = append(p.Remove, ic.full("limit-whitelist"))
				}
			}
		}
	}

	match := ratelimitv1alpha1.RequestMatch{ExemptClients: exempt}
	hosts, hostsOK := ic.hosts()
	p.Hosts = hosts
	if hostsOK {
		for _, h := range hosts {
			match.Hosts = append(match.Hosts, ratelimitv1alpha1.HostMatch(h))
		}
		match.Hosts = slices.Compact(match.Hosts)
	}
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
	if _, err := policy.Compile(obj.Namespace, obj.Name, &obj.Spec); err != nil {
		ic.report(ing.pos, "", convert.Inexact, "not converted: the policy does not compile: %v", err)
		return
	}
	ic.c.names[id] = ing.id()
	p.Object = obj
	p.AuthURL = ic.authURL(obj.Namespace, obj.Name)
	p.AuthURLAnnotation = ic.full("auth-url")
	ic.c.policies = append(ic.c.policies, p)
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

// hosts are the hosts ingress-nginx serves the Ingress's locations on: its
// rules' hosts and the server-alias names. ok is false when some rule
// has no host (every host nginx has no server for) or a host cannot be
// written as a policy's host: the policy then matches any host, and the
// auth-url that names it still limits it to the Ingress's locations.
func (ic *ingressConversion) hosts() (hosts []string, ok bool) {
	ok = true
	if len(ic.ing.rules) == 0 {
		// A default backend alone: ingress-nginx's catch-all server.
		hosts = append(hosts, "")
		ok = false
	}
	for _, r := range ic.ing.rules {
		hosts = append(hosts, r.host)
		if r.host == "" {
			ok = false
		} else if !hostPattern.MatchString(r.host) || len(r.host) > 253 {
			ic.report(r.pos, "", convert.Note, "host %q is not a host name a policy can match: the policy matches any host, and its auth-url still limits it to this Ingress's locations", r.host)
			ok = false
		}
	}
	if a, found := ic.ann("server-alias"); found && a.value != "" {
		for _, alias := range strings.Split(a.value, ",") {
			alias = strings.TrimSpace(alias)
			if alias == "" {
				continue
			}
			if !hostPattern.MatchString(alias) || len(alias) > 253 {
				ic.report(a.pos, "server-alias", convert.Note, "%q is not a host name a policy can match: the policy matches any host, and its auth-url still limits it to this Ingress's locations", alias)
				ok = false
				continue
			}
			hosts = append(hosts, strings.ToLower(alias))
		}
	}
	slices.Sort(hosts)
	hosts = slices.Compact(hosts)
	if ok && len(hosts) > maxHosts {
		ic.report(ic.ing.pos, "", convert.Note, "%d hosts, and a policy names at most %d: the policy matches any host, and its auth-url still limits it to this Ingress's locations", len(hosts), maxHosts)
		ok = false
	}
	return hosts, ok
}

// paths are the policy's match.paths for the Ingress's locations (nil:
// every path), as ingress-nginx turns each path into an nginx location:
//
//   - Exact "/a": location = /a, the policy's "/a".
//   - Prefix "/a": location /a/ and location = /a (element-wise, so
//     "/ab" is not under it): "/a" and "/a/*". Prefix "/a/": location /a/
//     and = /a/ ("/a" itself is not under it): "/a/*". Prefix "/": every path.
//   - ImplementationSpecific (or no pathType): location /a, nginx's own
//     string prefix ("/ab" is under it): "/a*".
//
// A rule without paths gives the host's root location. Regular
// expressions (use-regex, rewrite-target) and paths a policy cannot write
// leave paths unset: the auth-url names the policy, so nginx's location
// still decides which requests it counts.
func (ic *ingressConversion) paths() []string {
	if a, ok := ic.ann("use-regex"); ok {
		if on, err := strconv.ParseBool(a.value); err == nil && on {
			ic.report(a.pos, "use-regex", convert.Note, "the paths are regular expressions (case-insensitive), which a policy's paths cannot hold: the policy matches every path of its hosts, and its auth-url still limits it to this Ingress's locations")
			return nil
		}
	}
	if a, ok := ic.ann("rewrite-target"); ok && a.value != "" {
		ic.report(a.pos, "rewrite-target", convert.Note, "with a rewrite target, ingress-nginx writes the paths as regular expressions (case-insensitive), which a policy's paths cannot hold: the policy matches every path of its hosts, and its auth-url still limits it to this Ingress's locations")
		return nil
	}
	var out []string
	add := func(ps ...string) { out = append(out, ps...) }
	for _, r := range ic.ing.rules {
		if len(r.paths) == 0 {
			return nil // the host's root location
		}
		for _, pt := range r.paths {
			p := pt.path
			if p == "" {
				p = "/"
			}
			if p == "/" && pt.pathType != "Exact" {
				return nil
			}
			switch pt.pathType {
			case "Exact":
				add(p)
			case "Prefix":
				if strings.HasSuffix(p, "/") {
					add(p + "*")
				} else {
					add(p, p+"/*")
				}
			case "ImplementationSpecific", "":
				add(p + "*")
			default:
				ic.report(pt.pos, "", convert.Note, "pathType %q is none of Exact, Prefix and ImplementationSpecific: the policy matches every path of its hosts, and its auth-url still limits it to this Ingress's locations", pt.pathType)
				return nil
			}
		}
	}
	if len(ic.ing.rules) == 0 {
		return nil
	}
	for _, p := range out {
		if len(p) > 1024 || !pathPattern.MatchString(p) {
			ic.report(ic.ing.pos, "", convert.Note, "path %q cannot be written as a policy's path ('*', '?', '#' or spaces in it): the policy matches every path of its hosts, and its auth-url still limits it to this Ingress's locations", strings.TrimSuffix(p, "*"))
			return nil
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > maxPaths {
		ic.report(ic.ing.pos, "", convert.Note, "%d paths, and a policy names at most %d: the policy matches every path of its hosts, and its auth-url still limits it to this Ingress's locations", len(out), maxPaths)
		return nil
	}
	return out
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
