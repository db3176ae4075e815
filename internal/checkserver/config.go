package checkserver

import (
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/dashboard"
	"github.com/sluice-dev/sluice/internal/decisionlog"
	"github.com/sluice-dev/sluice/internal/grpcserver"
	"github.com/sluice-dev/sluice/internal/httpserve"
	"github.com/sluice-dev/sluice/webhook"
)

// Config is a check process's settings, which local mode and the cluster's
// check process (`manager check`, `manager all`) share: their endpoints,
// the Redis calls' deadline and the poll of what they follow. Each embeds
// it in its own settings.
type Config struct {
	// Listen is the HTTP endpoint's address; its host, when one is
	// named, is a name the dashboard answers to, beside DashboardHosts.
	Listen string
	// DashboardHosts are the names, besides localhost, IP addresses and
	// the Listen host, that the dashboard is served as (a Service or
	// Ingress name; kubectl port-forward is localhost).
	DashboardHosts dashboard.Hosts
	// Profile fixes the proxy profile (default: detected per request).
	Profile webhook.Profile
	// TrustedProxies are the CIDRs whose forwarded headers are believed
	// (nil: clientip.DefaultTrustedProxies), on HTTP and gRPC alike.
	TrustedProxies []string
	// ReportPolicy names the rule that decided in every answer, for the
	// proxy's access log: checkhttp.PolicyHeader on HTTP, dynamic metadata
	// on gRPC.
	ReportPolicy bool
	// DecisionLog is where each denial is logged (off by default).
	DecisionLog decisionlog.Config
	// Timeout bounds each Redis call; the policy's failure mode answers
	// after it.
	Timeout time.Duration
	// PollInterval is how often what the process follows is polled: the
	// policy table's and the overrides' revisions (the fallback to
	// pub/sub), local mode's folder.
	PollInterval time.Duration
	// HTTP bounds the HTTP endpoint's client connections.
	HTTP httpserve.Config
	// GRPC is the gRPC endpoint, off unless GRPC.Listen is set.
	GRPC   grpcserver.Config
	Logger *slog.Logger

	// profile and trusted are the flags FinishFlags parses.
	profile, trusted string
}

// FlagUsage is what differs between the flags of local mode and of the
// cluster's check process: --listen's default and help, and what
// --poll-interval polls.
type FlagUsage struct {
	Listen, ListenHelp, PollIntervalHelp string
}

// BindFlags binds c's flags to fs; FinishFlags reads them once fs is
// parsed.
func (c *Config) BindFlags(fs *flag.FlagSet, u FlagUsage) {
	fs.StringVar(&c.Listen, "listen", u.Listen, u.ListenHelp)
	c.DashboardHosts.BindFlag(fs)
	fs.StringVar(&c.profile, "profile", "auto", "proxy profile: auto, nginx, forwardauth (traefik, caddy) or envoy")
	fs.StringVar(&c.trusted, "trusted-proxies", strings.Join(clientip.DefaultTrustedProxies, ","), "comma-separated CIDRs whose forwarded headers are believed")
	fs.BoolVar(&c.ReportPolicy, "report-policy", false, "name the policy, limit, key hash, remaining and decision of each check in its answer, for the proxy's access log: the X-Sluice-Policy header on HTTP, dynamic metadata on ext_authz and the rate limit service")
	c.DecisionLog.BindFlags(fs)
	fs.DurationVar(&c.Timeout, "redis-timeout", 50*time.Millisecond, "deadline of each Redis call; the policy's failureMode answers after it")
	fs.DurationVar(&c.PollInterval, "poll-interval", 500*time.Millisecond, u.PollIntervalHelp)
	c.HTTP.BindFlags(fs)
	c.GRPC.BindFlags(fs)
}

// FinishFlags reads the flags that BindFlags bound as text (--profile,
// --trusted-proxies) into c.
func (c *Config) FinishFlags() error {
	p, err := webhook.ParseProfile(c.profile)
	if err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	c.Profile = p
	c.TrustedProxies = strings.Split(c.trusted, ",")
	return nil
}
