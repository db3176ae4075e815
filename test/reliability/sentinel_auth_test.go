package reliability

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestSentinelWithAuth runs the check path and the controller's table sync
// through Sentinels that require their own password (requirepass), in
// front of data nodes that require an ACL user (the default user off), all
// configured as `--redis-sentinel-password-file`, `--redis-username` and
// `--redis-password-file` make it. Without the Sentinels' password no
// master is found and checks are answered by their failure mode with an
// error that says why; with it, Redis decides, and keeps deciding after
// the master is killed and a replica promoted.
func TestSentinelWithAuth(t *testing.T) {
	ctx := context.Background()
	sen := redistest.StartSentinel(t, redistest.WithUser("sluice", "data-pw"), redistest.WithSentinelPassword("sentinel-pw"))
	secret := func(name, body string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := redisconn.Config{SentinelMaster: sen.MasterName, SentinelAddrs: sen.Addrs(),
		Username: "sluice", PasswordFile: secret("password", "data-pw\n"),
		SentinelPasswordFile: secret("sentinel-password", "sentinel-pw\n")}
	connect := func(cfg redisconn.Config) redis.UniversalClient {
		opts, err := cfg.Options()
		if err != nil {
			t.Fatal(err)
		}
		c := redisstore.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	// The process starts, as with any Redis it cannot reach: checks are
	// answered by their failure mode, and the policy table's load fails
	// with the Sentinels' refusal (the check process logs it).
	for _, tc := range []struct {
		name string
		cfg  redisconn.Config
		want string
	}{
		{"without the Sentinel password", redisconn.Config{SentinelMaster: cfg.SentinelMaster, SentinelAddrs: cfg.SentinelAddrs,
			Username: cfg.Username, PasswordFile: cfg.PasswordFile}, "NOAUTH"},
		{"with a wrong Sentinel password", redisconn.Config{SentinelMaster: cfg.SentinelMaster, SentinelAddrs: cfg.SentinelAddrs,
			Username: cfg.Username, PasswordFile: cfg.PasswordFile, SentinelPasswordFile: secret("wrong", "data-pw\n")}, "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := connect(tc.cfg)
			_, _, err := policytable.New(client).Load(ctx)
			if err == nil || !strings.Contains(err.Error(), "sentinels") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("loading the policy table: %v; want an error that names the Sentinels and %s", err, tc.want)
			}
			store, err := redisstore.New(client, redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			checker := checktest.New(t, check.Options{Backend: store.Backend(), Timeout: 2 * time.Second}, limitPolicy("closed", "Closed", faultLimit).compile(t))
			out, err := checker.Check(ctx, check.Input{Namespace: "closed", Request: &policy.Request{
				Method: http.MethodGet, Host: "app.example", Path: "/", Header: http.Header{"X-Client": {"a"}}}})
			if err != nil {
				t.Fatal(err)
			}
			if !out.Degraded || out.Allowed || out.StoreErr == nil || !strings.Contains(out.StoreErr.Error(), tc.want) {
				t.Errorf("outcome %+v: want a denial by failureMode Closed with the store's error naming %s", out, tc.want)
			}
		})
	}

	// With the Sentinels' password: Redis decides, and keeps deciding
	// through a failover.
	st := newStack(t, stackOptions{storeClient: connect(cfg), controllerClient: connect(cfg), policies: faultPolicies})
	old, err := sen.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	warmUp(t, st, faultLoad("", 0))
	if who, err := connect(cfg).Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "sluice" {
		t.Fatalf("the data nodes see user %q (%v), want sluice", who, err)
	}

	announcedAt := watchPromotion(ctx, t, sen.Addrs(), "sentinel-pw")
	ld := st.startLoad(faultLoad("failover-", 30*time.Second))
	time.Sleep(2 * time.Second)
	killAt := ld.since(time.Now())
	old.Kill()
	promoted := sen.WaitFailover(old, 30*time.Second)
	promotedAt := min(ld.since(time.Now()), ld.since(announcedAt())-answerBound)
	time.Sleep(5 * time.Second)
	rec := ld.stop()
	t.Logf("load: %d checks in %s; master %s killed at +%s; Sentinels promoted %s at +%s (%s later); store errors: %s",
		len(rec.samples), rec.duration.Round(time.Millisecond), old.Addr(), ms(killAt), promoted.Addr(), ms(promotedAt), ms(promotedAt-killAt), &st.store.errs)
	n := checkFailureModes(t, rec, killAt+time.Millisecond, promotedAt)
	t.Logf("failure modes: %d checks sent while no master answered were answered by their failureMode", n)
	checkRecovery(t, rec, promotedAt, "after the promotion")
	if err := policiesOnNode(ctx, promoted.Client(), faultPolicies); err != nil {
		t.Errorf("on the promoted master: %v", err)
	}
	waitUntil(t, 10*time.Second, "the controller's table sync succeeds on the new master", func() error { return st.sync.SyncOnce(ctx) })
}
