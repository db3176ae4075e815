package ingressnginx

import (
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/internal/convert"
)

// Document is the policy after a comment that says where it comes from,
// what it enforces, and how to point its Ingress (or the HTTPRoute that
// replaces it) at Sluice.
func (p Policy) Document() convert.Document {
	return convert.Document{Comment: p.comment(), Policy: p.Object}
}

// comment is the comment above the policy, a line each.
func (p Policy) comment() []string {
	lines := []string{fmt.Sprintf("Ingress %s (%s):", p.Ingress, p.Source)}
	for _, e := range p.Explain {
		lines = append(lines, "  "+e)
	}
	if p.AuthURL != "" {
		lines = append(lines, "With ingress-nginx: have it ask Sluice about the Ingress's requests, and remove what this policy replaces:")
		cmd := "  kubectl annotate ingress"
		if p.IngressNamespace != "" {
			cmd += " --namespace " + p.IngressNamespace
		}
		lines = append(lines, cmd+" "+p.IngressName+" --overwrite \\")
		args := []string{fmt.Sprintf("'%s=%s'", p.AuthURLAnnotation, p.AuthURL)}
		for _, r := range p.Remove {
			args = append(args, r+"-")
		}
		for i, a := range args {
			end := " \\"
			if i == len(args)-1 {
				end = ""
			}
			lines = append(lines, "    "+a+end)
		}
	} else {
		lines = append(lines, "The Ingress already asks another auth service (auth-url), and nginx asks one per location: apply this policy through its HTTPRoute.")
	}
	hosts := make([]string, 0, len(p.Hosts))
	for _, h := range p.Hosts {
		if h == "" {
			h = "any host"
		}
		hosts = append(hosts, h)
	}
	lines = append(lines,
		fmt.Sprintf("With Gateway API: once HTTPRoutes replace the Ingress (for %s), replace match.hosts and", strings.Join(hosts, ", ")),
		"match.paths with the routes, naming a rule with sectionName where a route also holds other Ingresses' paths:",
		"  targetRefs:",
		"  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: <the HTTPRoute>}",
	)
	return lines
}
