package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/webhook"
)

// The flags of the cluster processes, bound per subcommand.

func bindControllerFlags(fs *flag.FlagSet, cfg *app.ControllerConfig, kubeconfig *string) {
	fs.StringVar(&cfg.MetricsAddr, "metrics-bind-address", ":8081", "address of the controller's /metrics (0 disables)")
	fs.StringVar(&cfg.ProbeAddr, "health-probe-bind-address", ":8082", "address of the controller's /healthz and /readyz")
	// Off by default (kubebuilder's convention), so a controller started
	// outside a cluster needs no namespace for its Lease; the Deployments
	// in config/manager turn it on.
	fs.BoolVar(&cfg.LeaderElection, "leader-elect", false, "elect one active controller among replicas with a Lease in --leader-election-namespace; needed when more than one runs (config/manager sets it)")
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "sluice-system"
	}
	fs.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", ns, "namespace of the leader-election Lease (env POD_NAMESPACE)")
	fs.DurationVar(&cfg.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a standby waits after the leader's last renewal before it takes over")
	fs.DurationVar(&cfg.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew its lease before it steps down (below the lease duration)")
	fs.DurationVar(&cfg.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often the leader renews and a standby tries to take the lease")
	fs.DurationVar(&cfg.SyncInterval, "sync-interval", 3*time.Second, "how often the Redis policy table is compared with the cluster and repaired")
	fs.StringVar(kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, or $KUBECONFIG)")
	cfg.Admin.BindFlags(fs)
}

func bindCheckFlags(fs *flag.FlagSet, cfg *app.CheckConfig, profile, trusted *string) {
	fs.StringVar(&cfg.Listen, "listen", ":8080", "address of the check endpoint, its /metrics and probes")
	cfg.DashboardHosts.BindFlag(fs)
	fs.StringVar(profile, "profile", "auto", "proxy profile: auto, nginx, forwardauth (traefik, caddy) or envoy")
	fs.StringVar(trusted, "trusted-proxies", strings.Join(clientip.DefaultTrustedProxies, ","), "comma-separated CIDRs whose forwarded headers are believed")
	fs.BoolVar(&cfg.ReportPolicy, "report-policy", false, "name the policy, limit, key hash, remaining and decision of each check in its answer, for the proxy's access log: the X-Sluice-Policy header on HTTP, dynamic metadata on ext_authz and the rate limit service")
	cfg.DecisionLog.BindFlags(fs)
	fs.DurationVar(&cfg.Timeout, "redis-timeout", 50*time.Millisecond, "deadline of each Redis call; the policy's failureMode answers after it")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", 500*time.Millisecond, "how often the policy-table revision is polled (pub/sub is the fast path)")
	cfg.HTTP.BindFlags(fs)
	cfg.GRPC.BindFlags(fs)
	fs.BoolFunc("redis-load-library", "load the rate-limit library into Redis when a check finds it missing (default true); false when the Redis user may not load code (config/redis/users.acl): the controller restores it", func(s string) error {
		load, err := strconv.ParseBool(s)
		cfg.NoLibraryLoad = !load
		return err
	})
}

func finishCheckFlags(cfg *app.CheckConfig, profile, trusted string, log *slog.Logger) error {
	p, err := webhook.ParseProfile(profile)
	if err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	cfg.Profile = p
	cfg.TrustedProxies = strings.Split(trusted, ",")
	cfg.Logger = log
	return nil
}

func finishControllerFlags(cfg *app.ControllerConfig, kubeconfig string) error {
	if kubeconfig == "" {
		return nil // ctrl.GetConfig: in-cluster or $KUBECONFIG
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	// As ctrl.GetConfig leaves it: no client-side throttle (client-go's
	// default, 5 requests a second, would pace a namespace of thousands of
	// policies); the API server's priority and fairness bounds the
	// controller instead.
	if rc.QPS == 0 {
		rc.QPS = -1
	}
	cfg.RESTConfig = rc
	return nil
}

// newLogger logs text to stderr, for our code and controller-runtime's.
func newLogger() *slog.Logger {
	h := slog.NewTextHandler(os.Stderr, nil)
	ctrl.SetLogger(logr.FromSlogHandler(h))
	return slog.New(h)
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runController(args []string) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	var cfg app.ControllerConfig
	var redisCfg redisconn.Config
	var kubeconfig string
	bindControllerFlags(fs, &cfg, &kubeconfig)
	redisCfg.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	newLogger()
	if err := finishControllerFlags(&cfg, kubeconfig); err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	return app.RunController(ctx, cfg, &redisCfg)
}

func runCheck(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var cfg app.CheckConfig
	var redisCfg redisconn.Config
	var profile, trusted string
	bindCheckFlags(fs, &cfg, &profile, &trusted)
	redisCfg.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := finishCheckFlags(&cfg, profile, trusted, newLogger()); err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	return app.RunCheck(ctx, cfg, &redisCfg)
}

func runAll(args []string) error {
	fs := flag.NewFlagSet("all", flag.ContinueOnError)
	var ccfg app.ControllerConfig
	var kcfg app.CheckConfig
	var redisCfg redisconn.Config
	var kubeconfig, profile, trusted string
	bindControllerFlags(fs, &ccfg, &kubeconfig)
	bindCheckFlags(fs, &kcfg, &profile, &trusted)
	redisCfg.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := newLogger()
	if err := finishControllerFlags(&ccfg, kubeconfig); err != nil {
		return err
	}
	if err := finishCheckFlags(&kcfg, profile, trusted, log); err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	return app.RunAll(ctx, ccfg, kcfg, &redisCfg)
}
