package controller_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/fleet"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/envtest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/webhook"
)

var (
	suiteT    *testing.T
	k8sClient client.Client
	ctx       context.Context
	cancel    context.CancelFunc

	redisServer *redistest.Server
	redisClient redis.UniversalClient
	table       *policytable.Table
	checkReader *policytable.Reader // the check endpoint's view of the table
	// checkOverrides are the check endpoint's overrides, following Redis.
	checkOverrides *overrides.Index
	checkURL       string // an in-process check endpoint following the table
	// controllerDone has the controller's return once ctx ends.
	controllerDone = make(chan error, 1)
)

func TestControllers(t *testing.T) {
	suiteT = t
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx, cancel = context.WithCancel(context.Background())
	redisServer = redistest.Start(suiteT)

	crds, err := envtest.CRDDir()
	Expect(err).NotTo(HaveOccurred())
	env, err := envtest.Start(envtest.Options{CRDDirs: []string{crds}, Setup: []func(*envtest.Environment) error{startController}})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	k8sClient = env.Client

	// A check endpoint that knows only Redis, as `manager check` runs.
	redisClient = redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{redisServer.Addr()}})
	store, err := redisstore.New(redisClient, redisstore.Options{})
	Expect(err).NotTo(HaveOccurred())
	table = policytable.New(redisClient)
	checkLog := slog.New(slog.NewTextHandler(GinkgoWriter, nil))
	checkReader = policytable.NewReader(table, checkLog)
	checkOverrides = overrides.NewIndex(checkLog)
	follower := fleet.NewFollower(redisClient, 500*time.Millisecond, checkLog)
	follower.Follow(policytable.Channel, checkReader)
	follower.Follow(overrides.RedisChannel, overrides.NewTracker(checkOverrides, overrides.NewRedisStore(redisClient)))
	go follower.Run(ctx)
	checker := check.New(check.Options{Backend: store.Backend(), Source: checkReader, Overrides: checkOverrides})
	srv, err := webhook.New(webhook.Options{Checker: checker})
	Expect(err).NotTo(HaveOccurred())
	ts := httptest.NewServer(srv)
	checkURL = ts.URL
	DeferCleanup(ts.Close)
	DeferCleanup(func() { _ = store.Close(); _ = redisClient.Close() })
})

// testLimitsBound stands for the 8,192 limits one check evaluates, so
// that a few policies reach it: 80 policies of 8 limits are at it, 81 over
// it; over RLS, 64 descriptors meeting 10 limits each are at it, 11 over.
// The other specs stay below it (500 policies of one limit).
const testLimitsBound = 640

// startController runs the controller as `manager controller` does
// (internal/app's wiring), with a short table sync, until the suite ends.
func startController(e *envtest.Environment) error {
	go func() {
		controllerDone <- app.RunController(ctx, app.ControllerConfig{
			RESTConfig: e.Config, MetricsAddr: "0", ProbeAddr: "0", SyncInterval: time.Second,
			LimitsBound: testLimitsBound,
		}, &redisconn.Config{URL: "redis://" + redisServer.Addr() + "/0"})
	}()
	return nil
}

// The controller stops before the API server does (BeforeSuite's cleanups
// run after AfterSuite).
var _ = AfterSuite(func() {
	cancel()
	Expect(<-controllerDone).To(Succeed())
})
