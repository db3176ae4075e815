package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/checkserver"
	"github.com/sluice-dev/sluice/internal/fleet"
	"github.com/sluice-dev/sluice/internal/grpcserver"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// A check process follows the policy table, the overrides and the other
// processes' lifts over one subscription: one subscriber connection in
// Redis, on both channels. A policy change, an override and a lift reach
// it by message; when messages are lost (changes written without one, the
// subscription dropped), subscribing again makes up for them all. The
// revision poll is an hour, so nothing else could.
func TestOneSubscriptionFollowsTheTableOverridesAndLifts(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table := policytable.New(client)
	policyWith := func(limit int) *policytable.Entry {
		spec := policytest.Spec(t, "match: {descriptor: [{key: user}]}\nkey: '{descriptor:user}'\nlimits: [{name: l, fixedWindow: {limit: "+strconv.Itoa(limit)+", window: 1h}}]")
		return &policytable.Entry{Namespace: "ns", Name: "api", Generation: int64(limit), Spec: spec}
	}
	if _, _, err := table.Replace(ctx, []*policytable.Entry{policyWith(2)}, nil); err != nil {
		t.Fatal(err)
	}
	rls := startFollowingReplica(t, srv.Addr())
	check := func(user string, hits uint64) *ratelimitv3.RateLimitResponse {
		t.Helper()
		d := &ratelimitcommonv3.RateLimitDescriptor{Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}, HitsAddend: wrapperspb.UInt64(hits)}
		callCtx, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		resp, err := rls.ShouldRateLimit(callCtx, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	limitOf := func(user string) uint32 {
		return check(user, 0).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("%s: never", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	eventually("the table loaded", func() bool { return limitOf("w") == 2 })
	subscriber := oneSubscriber(t, client)

	// Denies u from its cache of denials after the bucket was emptied
	// behind its back: only a message of another process (or a lost one
	// made up for) makes it forget the denial.
	denyFromCache := func() {
		t.Helper()
		eventually("u denied", func() bool { return check("u", 1).GetOverallCode() == ratelimitv3.RateLimitResponse_OVER_LIMIT })
		bucket, _ := ratelimit.SplitKey(ratelimit.Key("ns", "api", "u", "l"))
		client.Del(ctx, bucket)
		if got := check("u", 1).GetOverallCode(); got != ratelimitv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("u after its bucket was emptied: %v, want the cached denial", got)
		}
	}
	admitted := func() bool { return check("u", 1).GetOverallCode() == ratelimitv3.RateLimitResponse_OK }

	// By message.
	if _, _, err := table.Put(ctx, policyWith(3)); err != nil {
		t.Fatal(err)
	}
	eventually("the policy change", func() bool { return limitOf("w") == 3 })
	id := overrides.PolicyID{Namespace: "ns", Name: "api"}
	if err := overrides.NewRedisStore(client).Put(ctx, id, overrides.Entry{Key: "v", Limits: map[string]int64{"l": 7}, Source: policy.OverrideRuntime}); err != nil {
		t.Fatal(err)
	}
	eventually("the override", func() bool { return limitOf("v") == 7 })
	denyFromCache()
	other := fleet.NewAnnouncer(client, policytable.Channel, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go other.Run(ctx)
	other.AnnounceLifts([]string{ratelimit.Key("ns", "api", "u", "l")})
	eventually("the lift", admitted)

	// Messages lost: the changes are written without one, and the
	// denial's lift is never told.
	denyFromCache()
	rev, err := table.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(policyWith(4))
	if err != nil {
		t.Fatal(err)
	}
	client.HSet(ctx, policytable.HashKey, "ns/api", raw)
	client.Set(ctx, policytable.RevisionKey, rev+1, 0)
	raw, err = json.Marshal(overrides.Entry{Key: "v", Limits: map[string]int64{"l": 9}, Source: policy.OverrideRuntime})
	if err != nil {
		t.Fatal(err)
	}
	runtimeKey, _ := overrides.RedisHashKeys(id)
	client.HSet(ctx, runtimeKey, "v", raw)
	client.Incr(ctx, overrides.RedisRevisionKey)
	if limitOf("w") != 3 || limitOf("v") != 7 || admitted() {
		t.Fatal("a change written without a message reached the process before its poll")
	}
	// The subscription dropped: subscribing again polls the table and
	// the overrides, and forgets every denial (lifts may have been lost).
	if err := client.ClientKillByFilter(ctx, "ID", subscriber).Err(); err != nil {
		t.Fatal(err)
	}
	eventually("the policy change made up for", func() bool { return limitOf("w") == 4 })
	eventually("the override made up for", func() bool { return limitOf("v") == 9 })
	eventually("the lost lift made up for", admitted)
	oneSubscriber(t, client)
}

// startFollowingReplica runs a check process over the Redis at addr,
// polling its revisions hourly, and returns a client of its rate limit
// service (domain "edge" is namespace ns).
func startFollowingReplica(t *testing.T, addr string) ratelimitv3.RateLimitServiceClient {
	t.Helper()
	parts, err := connectRedis(&redisconn.Config{URL: "redis://" + addr + "/0"}, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(parts.Close)
	grpcAddr := freeAddr(t)
	cs, err := newCheckServer(CheckConfig{Config: checkserver.Config{
		Listen: freeAddr(t), PollInterval: time.Hour,
		GRPC:   grpcserver.Config{Listen: grpcAddr, Domains: grpcserver.DomainBindings{"edge": "ns"}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}}, parts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cs.run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("check server: %v", err)
		}
	})
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return ratelimitv3.NewRateLimitServiceClient(conn)
}

// oneSubscriber waits until Redis has exactly one subscribed connection,
// subscribed to the table's and the overrides' channels (and no other),
// and returns its ID.
func oneSubscriber(t *testing.T, client redis.UniversalClient) string {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var subscribers []string
		list, err := client.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
			if !strings.Contains(" "+line, " sub=0 ") {
				subscribers = append(subscribers, line)
			}
		}
		numsub, err := client.PubSubNumSub(ctx, policytable.Channel, overrides.RedisChannel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(subscribers) == 1 && strings.Contains(" "+subscribers[0], " sub=2 ") && numsub[policytable.Channel] == 1 && numsub[overrides.RedisChannel] == 1 {
			for field := range strings.FieldsSeq(subscribers[0]) {
				if v, ok := strings.CutPrefix(field, "id="); ok {
					return v
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("want one connection subscribed to the two channels; subscribers:\n%s\nNUMSUB %v", strings.Join(subscribers, "\n"), numsub)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
