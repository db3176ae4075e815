package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/redisconn"
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
	cfg.BindFlags(fs)
	redisCfg.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cfg.FinishFlags(); err != nil {
		return err
	}
	cfg.Logger = newLogger()
	ctx, stop := signalContext()
	defer stop()
	return app.RunCheck(ctx, cfg, &redisCfg)
}

func runAll(args []string) error {
	fs := flag.NewFlagSet("all", flag.ContinueOnError)
	var ccfg app.ControllerConfig
	var kcfg app.CheckConfig
	var redisCfg redisconn.Config
	var kubeconfig string
	bindControllerFlags(fs, &ccfg, &kubeconfig)
	kcfg.BindFlags(fs)
	redisCfg.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	kcfg.Logger = newLogger()
	if err := finishControllerFlags(&ccfg, kubeconfig); err != nil {
		return err
	}
	if err := kcfg.FinishFlags(); err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	return app.RunAll(ctx, ccfg, kcfg, &redisCfg)
}
