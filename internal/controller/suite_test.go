package controller_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/webhook"
)

var (
	suiteT    *testing.T
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	ctx       context.Context
	cancel    context.CancelFunc

	redisServer *redistest.Server
	redisClient redis.UniversalClient
	table       *policytable.Table
	checkURL    string // an in-process check endpoint following the table
)

func TestControllers(t *testing.T) {
	suiteT = t
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx, cancel = context.WithCancel(context.Background())

	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(),
		"KUBEBUILDER_ASSETS is not set: run `make test`, which builds the envtest binaries into bin/k8s")
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	scheme := app.Scheme()
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	redisServer = redistest.Start(suiteT)
	redisClient = redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{redisServer.Addr()}})
	store, err := redisstore.New(redisClient, redisstore.Options{})
	Expect(err).NotTo(HaveOccurred())
	table = policytable.New(redisClient)

	// The controller, wired as `manager controller` wires it, with a short sync.
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	Expect(err).NotTo(HaveOccurred())
	publisher := &policytable.Publisher{Table: table, Library: store}
	lastGood := controller.NewLastGood()
	Expect((&controller.Reconciler{
		Client: mgr.GetClient(), Publisher: publisher, Recorder: mgr.GetEventRecorder("sluice-controller"),
		LibraryVersion: redisstore.LibraryName, LastGood: lastGood,
	}).SetupWithManager(mgr)).To(Succeed())
	Expect(mgr.Add(&controller.TableSync{Client: mgr.GetClient(), Syncer: publisher, LastGood: lastGood, Interval: time.Second})).To(Succeed())
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()

	// A check endpoint that knows only Redis, as `manager check` runs.
	reader := policytable.NewReader(table, 500*time.Millisecond, slog.New(slog.NewTextHandler(GinkgoWriter, nil)))
	go reader.Run(ctx)
	checker := check.New(check.Options{Store: store, Source: reader})
	srv, err := webhook.New(webhook.Options{Checker: checker})
	Expect(err).NotTo(HaveOccurred())
	ts := httptest.NewServer(srv)
	checkURL = ts.URL
	DeferCleanup(ts.Close)
	DeferCleanup(func() { _ = store.Close(); _ = redisClient.Close() })
})

var _ = AfterSuite(func() {
	cancel()
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})
