package ingressnginx

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/convert"
)

// The API's bounds on a policy's hosts and paths.
const (
	maxHosts = 16
	maxPaths = 32
)

var (
	hostPattern = regexp.MustCompile(`^([*][.])?[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*$`)
	pathPattern = regexp.MustCompile(`^/[^*?#[:space:]]*[*]?$`)
)

// matchHosts are the policy's match.hosts (none: any host) and the
// Ingress's hosts for the comment above it (see hosts).
func (ic *ingressConversion) matchHosts() (match []ratelimitv1alpha1.HostMatch, hosts []string) {
	hosts, ok := ic.hosts()
	if !ok {
		return nil, hosts
	}
	for _, h := range hosts {
		match = append(match, ratelimitv1alpha1.HostMatch(h))
	}
	return slices.Compact(match), hosts
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
