package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/localmode"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/webhook"
)

func runLocal(args []string) error {
	cfg, pprofAddr, err := parseLocalFlags(args)
	if err != nil {
		return err
	}
	servePprof(pprofAddr)
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return localmode.Run(ctx, cfg)
}

// parseLocalFlags reads local mode's flags into its Config, and the
// pprof address.
func parseLocalFlags(args []string) (localmode.Config, string, error) {
	fs := flag.NewFlagSet("local", flag.ContinueOnError)
	var cfg localmode.Config
	var profile, trusted string
	fs.StringVar(&cfg.PoliciesDir, "policies", "config/samples", "folder of RateLimitPolicy YAML files, watched for edits")
	fs.StringVar(&cfg.Listen, "listen", localmode.DefaultListen, "address of the check endpoint and the dashboard; loopback by default, as nothing here is authenticated (:8080 or 0.0.0.0:8080 serves every interface)")
	cfg.DashboardHosts.BindFlag(fs)
	fs.StringVar(&profile, "profile", "auto", "proxy profile: auto, nginx, forwardauth (traefik, caddy) or envoy")
	fs.StringVar(&trusted, "trusted-proxies", strings.Join(clientip.DefaultTrustedProxies, ","), "comma-separated CIDRs whose forwarded headers are believed")
	fs.BoolVar(&cfg.ReportPolicy, "report-policy", false, "name the policy, limit, key hash, remaining and decision of each check in its answer, for the proxy's access log: the X-Sluice-Policy header on HTTP, dynamic metadata on ext_authz and the rate limit service")
	fs.DurationVar(&cfg.Timeout, "redis-timeout", 50*time.Millisecond, "deadline of each Redis call; the policy's failureMode answers after it")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", 500*time.Millisecond, "how often the policies folder is checked for edits")
	fs.IntVar(&cfg.MemoryMaxKeys, "memory-max-keys", memstore.DefaultMaxKeys, "most buckets (a key value of a policy) the in-memory store holds (about 250 B each with one limit); when it is full, a new bucket evicts the least recently used, which starts afresh (0: no cap)")
	fs.StringVar(&cfg.AdminListen, "admin-listen", "", "serve the admin API (explain, inspect, reset, bans, lift) on this loopback address, such as 127.0.0.1:8081; off when empty. Nothing on it is authenticated, so other addresses are refused")
	cfg.HTTP.BindFlags(fs)
	cfg.GRPC.BindFlags(fs)
	cfg.Redis.BindFlags(fs)
	pprofAddr := fs.String("pprof-listen", "", "serve net/http/pprof on this address (profiling; keep it on loopback)")
	if err := fs.Parse(args); err != nil {
		return cfg, "", err
	}
	p, err := webhook.ParseProfile(profile)
	if err != nil {
		return cfg, "", fmt.Errorf("--profile: %w", err)
	}
	cfg.Profile = p
	cfg.TrustedProxies = strings.Split(trusted, ",")
	return cfg, *pprofAddr, nil
}
