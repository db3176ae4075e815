package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/adminauth"
	"github.com/sluice-dev/sluice/internal/buildinfo"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
)

// ControllerConfig configures the controller process.
type ControllerConfig struct {
	// MetricsAddr and ProbeAddr serve /metrics and /healthz, /readyz ("0" disables).
	MetricsAddr string
	ProbeAddr   string
	// LeaderElection elects one writer among controller replicas.
	LeaderElection          bool
	LeaderElectionNamespace string
	LeaderElectionID        string
	// LeaseDuration is how long a standby waits after the leader's last
	// renewal before it takes over (kill -9, node loss); RenewDeadline how
	// long the leader keeps trying to renew before it steps down; RetryPeriod
	// how often both try. Zero: controller-runtime's defaults (15s, 10s, 2s).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// SyncInterval is how often the whole table is compared with the cluster.
	SyncInterval time.Duration
	// RESTConfig reaches the API server (default: in-cluster or KUBECONFIG).
	RESTConfig *rest.Config
	// LimitsBound is the most limits one check evaluates, which the
	// TooManyLimits condition compares a namespace's worst case with
	// (0: ratelimit.MaxEntries, what the check processes refuse beyond).
	// Tests lower it to reach it with few policies.
	LimitsBound int
	// Admin is the admin API's port; AdminAPI the admin API that every
	// replica serves there behind its front (adminauth), which
	// authenticates kube-apiserver and authorizes each call. Nil AdminAPI:
	// the process's own, over the table and the counters in Redis (tests
	// give another). No port when Admin.Listen is empty.
	Admin    adminauth.Options
	AdminAPI http.Handler
}

// Scheme has the types the controller reads.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // static registrations: fails in every test if wrong
	}
	if err := ratelimitv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := gatewayv1.Install(s); err != nil {
		panic(err)
	}
	return s
}

// newControllerManager builds the controller's manager over parts: the
// reconcilers and table sync, the admin API, and the probes.
func newControllerManager(cfg ControllerConfig, parts *redisParts) (ctrl.Manager, error) {
	restCfg := cfg.RESTConfig
	if restCfg == nil {
		var err error
		if restCfg, err = ctrl.GetConfig(); err != nil {
			return nil, fmt.Errorf("kubernetes config: %w", err)
		}
	}
	mgr, err := newManager(cfg, restCfg)
	if err != nil {
		return nil, err
	}
	if err := addReconcilers(mgr, cfg, parts); err != nil {
		return nil, err
	}
	if err := addAdminAPI(mgr, cfg, parts, restCfg); err != nil {
		return nil, err
	}
	// Probes never depend on Redis: a Redis outage must not restart pods.
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}

// newManager is controller-runtime's manager with the process's metrics,
// probes and leader election.
func newManager(cfg ControllerConfig, restCfg *rest.Config) (ctrl.Manager, error) {
	id := cfg.LeaderElectionID
	if id == "" {
		id = "sluice-controller.ratelimit.sluice.dev"
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                  Scheme(),
		Metrics:                 metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress:  cfg.ProbeAddr,
		LeaderElection:          cfg.LeaderElection,
		LeaderElectionID:        id,
		LeaderElectionNamespace: cfg.LeaderElectionNamespace,
		// Step down at once on shutdown, so a rolling update hands over
		// without waiting for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 positive(cfg.LeaseDuration),
		RenewDeadline:                 positive(cfg.RenewDeadline),
		RetryPeriod:                   positive(cfg.RetryPeriod),
	})
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	// controller-runtime serves /metrics from its process-wide registry.
	if err := buildinfo.Register(crmetrics.Registry); err != nil {
		return nil, fmt.Errorf("register %s: %w", buildinfo.MetricName, err)
	}
	return mgr, nil
}

// addReconcilers adds the policy and overrides reconcilers and the table
// sync, which write the policy table and the declared overrides in Redis.
func addReconcilers(mgr ctrl.Manager, cfg ControllerConfig, parts *redisParts) error {
	publisher := &policytable.Publisher{Table: parts.table, Library: parts.Store}
	lastGood := controller.NewLastGood()
	r := &controller.Reconciler{
		Client:         mgr.GetClient(),
		Publisher:      publisher,
		Recorder:       mgr.GetEventRecorder("sluice-controller"),
		LibraryVersion: redisstore.LibraryName,
		LastGood:       lastGood,
		LimitsBound:    cfg.LimitsBound,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	// Declared overrides (RateLimitOverrides objects) go to Redis beside
	// the run-time ones, which every check process follows.
	if err := (&controller.OverridesReconciler{Client: mgr.GetClient(), Store: overrides.NewRedisStore(parts.Client)}).SetupWithManager(mgr); err != nil {
		return err
	}
	// r.Targets is set by SetupWithManager when Gateway API is installed.
	return mgr.Add(&controller.TableSync{Client: mgr.GetClient(), Syncer: publisher, LastGood: lastGood, Interval: cfg.SyncInterval, Targets: r.Targets,
		Recorder: r.Recorder,
		// maxmemory-policy of every master, for the eviction warning.
		Memory: func(ctx context.Context) ([]redisconn.MemoryPolicy, error) {
			return redisconn.ReadMemoryPolicies(ctx, parts.Client)
		},
	})
}

// addAdminAPI serves the admin API behind its front on cfg.Admin.Listen,
// on every replica; nothing when it is empty.
func addAdminAPI(mgr ctrl.Manager, cfg ControllerConfig, parts *redisParts, restCfg *rest.Config) error {
	if cfg.Admin.Listen == "" {
		return nil
	}
	api := cfg.AdminAPI
	if api == nil {
		a := newAdminAPI(parts, slog.Default())
		if err := mgr.Add(a); err != nil {
			return err
		}
		api = a.handler
	}
	srv, err := adminauth.NewServer(cfg.Admin, api, restCfg)
	if err != nil {
		return err
	}
	return mgr.Add(srv)
}

// positive is &d, or nil (the default) when d is not above zero.
func positive(d time.Duration) *time.Duration {
	if d <= 0 {
		return nil
	}
	return &d
}

// RunController runs the controller process until ctx ends.
func RunController(ctx context.Context, cfg ControllerConfig, redisCfg *redisconn.Config) error {
	parts, err := connectRedis(redisCfg, redisstore.Options{})
	if err != nil {
		return err
	}
	defer parts.Close()
	mgr, err := newControllerManager(cfg, parts)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// RunAll runs the controller and the check endpoint in one process over one
// Redis connection.
func RunAll(ctx context.Context, ccfg ControllerConfig, kcfg CheckConfig, redisCfg *redisconn.Config) error {
	// One store for both: the controller loads the library whatever NoLoad says.
	parts, err := connectRedis(redisCfg, redisstore.Options{NoLoad: kcfg.NoLibraryLoad})
	if err != nil {
		return err
	}
	defer parts.Close()
	// The check server first: it makes the process's view of the fleet's
	// state and follows it until its drain is over; the admin API shares it.
	srv, err := newCheckServer(kcfg, parts)
	if err != nil {
		return err
	}
	if srv.server.GRPC != nil {
		parts.quota = srv.server.GRPC.Quota()
	}
	mgr, err := newControllerManager(ccfg, parts)
	if err != nil {
		_ = srv.stack.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- mgr.Start(ctx) }()
	go func() { errc <- srv.run(ctx) }()
	err = <-errc
	cancel() // one stopped: stop the other and wait for it
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}
