package security

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/fleet"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// connect builds the client, store and table a process builds from its
// Redis settings (internal/app does the same from the flags).
func connect(t *testing.T, cfg redisconn.Config) (redis.UniversalClient, *redisstore.Store, *policytable.Table) {
	t.Helper()
	opts, err := cfg.Options()
	if err != nil {
		t.Fatal(err)
	}
	client := redisstore.NewClient(opts)
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = store.Close()
		_ = client.Close()
	})
	return client, store, policytable.New(client)
}

// TestACLUsersInCluster runs the controller's and the check endpoint's
// Redis code (publisher, library loading on every master, table reader,
// checker) as the shipped ACL users against a Redis Cluster of three
// masters, every node loading config/redis/users.acl: a Cluster client
// also reads the slot map and the command table, which the users allow.
func TestACLUsersInCluster(t *testing.T) {
	ctx := context.Background()
	users := loadACLUsers(t)
	cl := redistest.StartCluster(t, 3, redistest.WithArgs("--aclfile", users.File))

	_, ctrlStore, ctrlTable := connect(t, redisconn.Config{ClusterAddrs: cl.Addrs(), Username: controllerUser, PasswordFile: users.PasswordFile[controllerUser]})
	pub := &policytable.Publisher{Table: ctrlTable, Library: ctrlStore}
	// The controller's first sync creates the (empty) table; single writes follow.
	if _, _, err := ctrlTable.Replace(ctx, nil, nil); err != nil {
		t.Fatalf("create the policy table: %v", err)
	}
	policies := testPolicies()
	for _, p := range policies {
		p.Spec.Mode = ratelimitv1alpha1.ModeEnforce // what the API server defaults
		if _, err := pub.Apply(ctx, &policytable.Entry{Namespace: p.Namespace, Name: p.Name, Generation: 1, Spec: p.Spec}); err != nil {
			t.Fatalf("publish %s as %s: %v", p.Name, controllerUser, err)
		}
	}
	for _, node := range cl.Nodes {
		role := node.Client().Do(ctx, "ROLE").Val().([]any)[0]
		if role != "master" {
			continue
		}
		libs := node.Client().FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisstore.LibraryName}).Val()
		if len(libs) != 1 {
			t.Errorf("master %s: library %s not loaded", node.Addr(), redisstore.LibraryName)
		}
	}

	checkClient, checkStore, checkTable := connect(t, redisconn.Config{ClusterAddrs: cl.Addrs(), Username: checkUser, PasswordFile: users.PasswordFile[checkUser]})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The check process's follower: the table, the overrides and the
	// refunds' messages on one subscription, within the check user's ACL.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	reader := policytable.NewReader(checkTable, quiet)
	follower := fleet.NewFollower(checkClient, 100*time.Millisecond, quiet)
	follower.Follow(policytable.Channel, reader)
	follower.Follow(overrides.RedisChannel, overrides.NewTracker(overrides.NewIndex(quiet), overrides.NewRedisStore(checkClient)))
	follower.Follow(policytable.Channel, fleet.NewAnnouncer(checkClient, policytable.Channel, quiet))
	go follower.Run(runCtx)
	deadline := time.Now().Add(10 * time.Second)
	for reader.Policies().Get(policyNS, "fail-closed") == nil || len(reader.Policies().Namespace(policyNS)) != len(policies) {
		if time.Now().After(deadline) {
			t.Fatalf("the reader (as %s) did not load the table: problems %v", checkUser, reader.Problems())
		}
		time.Sleep(20 * time.Millisecond)
	}
	checker := check.New(check.Options{Backend: checkStore.Backend(), Source: reader, Timeout: 2 * time.Second})
	for _, p := range policies {
		var got []bool
		for range burst + 2 {
			out, err := checker.Check(ctx, check.Input{Namespace: policyNS, Request: &policy.Request{
				Method: http.MethodGet, Host: "example.com", Path: pathOf(p),
				Header: http.Header{systest.ClientHeader: {"client-a"}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			if out.Degraded {
				t.Fatalf("%s: answered by the failure mode: %v", p.Name, out.StoreErr)
			}
			got = append(got, out.Allowed)
		}
		if !systest.FirstN(got, burst) {
			t.Errorf("%s: decisions %v, want %d allowed then denied", p.Name, got, burst)
		}
	}
	for _, node := range cl.Nodes {
		if log := aclLog(t, node.Client()); len(log) > 0 {
			t.Errorf("node %s refused the processes' commands:%s", node.Addr(), describeLog(log))
		}
	}
}
