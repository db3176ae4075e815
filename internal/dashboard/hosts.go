package dashboard

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/sluice-dev/sluice/internal/intake"
)

// hostFlag is the flag that admits more names.
const hostFlag = "dashboard-host"

// Hosts is the --dashboard-host flag: names, besides the ones always
// admitted, that the dashboard is served as (a Service or Ingress name, a
// name in /etc/hosts). Repeatable, or comma-separated.
type Hosts []string

// BindFlag adds --dashboard-host to fs.
func (h *Hosts) BindFlag(fs *flag.FlagSet) {
	fs.Var(h, hostFlag, "a host name the dashboard is served as, besides localhost, IP addresses and the --listen host (repeatable, or comma-separated; any port): its page and JSON routes refuse every other Host with 421, so that another site's name rebound to this address reaches nothing")
}

// String implements flag.Value.
func (h *Hosts) String() string { return strings.Join(*h, ",") }

// Set implements flag.Value.
func (h *Hosts) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		name := intake.NormalizeHost(v)
		switch {
		case name == "":
			return fmt.Errorf("%q: want a host name", v)
		case name != strings.TrimSuffix(strings.ToLower(v), "."):
			return fmt.Errorf("%q: want a host name alone, without port or brackets (every port is admitted)", v)
		case !hostName(name):
			return fmt.Errorf("%q: a host name has only letters, digits, '-', '_' and '.'", v)
		}
		*h = append(*h, name)
	}
	return nil
}

func hostName(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// hostGuard keeps the dashboard to the names it is served as. After a DNS
// rebinding, another site's page talks to this server as its own origin:
// Origin and Sec-Fetch-Site say same-origin, and only the Host, that
// site's name, tells the request apart. Admitted always: "localhost" and
// IP addresses (a rebinding needs a name the attacker's DNS answers for),
// with any port; and the names listed, the listen host's included.
type hostGuard struct {
	names map[string]bool
}

func newHostGuard(listen string, hosts []string) hostGuard {
	g := hostGuard{names: map[string]bool{}}
	for _, h := range hosts {
		g.names[intake.NormalizeHost(h)] = true
	}
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" {
		g.names[intake.NormalizeHost(host)] = true
	}
	return g
}

func (g hostGuard) admits(name string) bool {
	return intake.Unrebindable(name) || g.names[name]
}

// guard answers 421 (Misdirected Request) for a Host the dashboard is not
// served as, and serves the rest with h.
func (g hostGuard) guard(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := intake.NormalizeHost(r.Host)
		if g.admits(name) {
			h(w, r)
			return
		}
		detail := "Host: missing or unreadable; the dashboard answers only to the names it is served as"
		if name != "" {
			detail = fmt.Sprintf("Host %q is not a name this dashboard is served as (localhost, IP addresses, the --listen host and each --%s), "+
				"so that another site's name rebound to this address reaches nothing; to serve it as %s, start it with --%s=%s",
				intake.Excerpt(name), hostFlag, intake.Excerpt(name), hostFlag, intake.Excerpt(name))
		}
		problemJSON(w, http.StatusMisdirectedRequest, "Misdirected Request", detail)
	})
}
