package ingressnginx

import (
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/internal/convert"
)

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
