package overrides

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/fleet"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

var shop = PolicyID{"shop", "per-tenant"}

func tenantPolicy(t testing.TB) *policy.Policy {
	return policytest.Compile(t, shop.Namespace, shop.Name, `
key: "{header:X-Tenant}"
limits:
- {name: per-minute, fixedWindow: {limit: 100, window: 1m}}
- {name: burst, tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}}
`)
}

// newRuntime is a Runtime over store whose policies are p, on clock now.
func newRuntime(store Store, now func() time.Time, p *policy.Policy) *Runtime {
	set := policy.NewSet(1, []*policy.Policy{p})
	return &Runtime{Store: store, Policy: PolicyOf(func() *policy.Set { return set }), Now: now}
}

// follow makes x follow s until the test ends: a memory store by itself,
// a Redis store as a check process does, polling every 50ms.
func follow(t *testing.T, x *Index, s Store) { followEvery(t, x, s, 50*time.Millisecond) }

// followEvery is follow polling Redis every poll.
func followEvery(t *testing.T, x *Index, s Store, poll time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	switch s := s.(type) {
	case *MemoryStore:
		go func() { defer close(done); x.Follow(ctx, s) }()
	case *RedisStore:
		go func() { defer close(done); following(s, NewTracker(x, s), poll).Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); <-done })
}

// following is a fleet.Follower that hands tr the store's changes.
func following(s *RedisStore, tr *Tracker, poll time.Duration) *fleet.Follower {
	f := fleet.NewFollower(s.client, poll, slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.Follow(RedisChannel, tr)
	return f
}

// waitQuota waits until x gives p's key the quota want for limit (0: no
// override), within a second.
func waitQuota(t *testing.T, x *Index, p *policy.Policy, key, limit string, want int64) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		var got int64
		if o := x.Override(p, key); o != nil {
			got = o.Quotas[limit]
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %q limit %s: quota %d after a second, want %d", key, limit, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func stores(t *testing.T) map[string]func() Store {
	return map[string]func() Store{
		"memory": func() Store { return NewMemoryStore() },
		"redis": func() Store {
			srv := redistest.Start(t)
			return NewRedisStore(srv.Client())
		},
	}
}

func TestRuntimeSetListDelete(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
			p := tenantPolicy(t)
			x := NewIndex(nil)
			s := newStore()
			follow(t, x, s)
			r := newRuntime(s, func() time.Time { return now }, p)

			expires := now.Add(48 * time.Hour)
			e, err := r.Set(ctx, shop, "acme", map[string]int64{"per-minute": 1000}, &expires, "alice")
			if err != nil {
				t.Fatal(err)
			}
			if e.SetBy != "alice" || e.Source != policy.OverrideRuntime || !e.Expires.Equal(expires) {
				t.Fatalf("set answered %+v", e)
			}
			waitQuota(t, x, p, "acme", "per-minute", 1000)
			if o := x.Override(p, "acme"); o.Limits()[0].Limit.Capacity != 1000 || o.Limits()[1] != p.Limits[1] {
				t.Fatalf("limits %+v", o.Limits())
			}
			if _, err := r.Set(ctx, shop, "beta", map[string]int64{"burst": 50}, nil, "bob"); err != nil {
				t.Fatal(err)
			}
			if err := s.ReplaceDeclared(ctx, shop, map[string]Entry{"acme": {Key: "acme", Limits: map[string]int64{"per-minute": 7}, Source: policy.OverrideDeclared, Object: "tenants"}}); err != nil {
				t.Fatal(err)
			}
			list, err := r.List(ctx, shop)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range list {
				got = append(got, fmt.Sprintf("%s:%s:%v", e.Source, e.Key, e.Limits))
			}
			if want := "Runtime:acme:map[per-minute:1000] Runtime:beta:map[burst:50] Declared:acme:map[per-minute:7]"; strings.Join(got, " ") != want {
				t.Fatalf("list %s, want %s", strings.Join(got, " "), want)
			}
			// Run time wins over declared.
			waitQuota(t, x, p, "acme", "per-minute", 1000)

			if err := r.Delete(ctx, shop, "acme", "alice"); err != nil {
				t.Fatal(err)
			}
			waitQuota(t, x, p, "acme", "per-minute", 7) // the declared one again
			if err := r.Delete(ctx, shop, "acme", "alice"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("second delete: %v", err)
			}

			// Expired: listed no more, and swept from the store.
			soon := now.Add(time.Hour)
			if _, err := r.Set(ctx, shop, "soon", map[string]int64{"burst": 20}, &soon, "alice"); err != nil {
				t.Fatal(err)
			}
			now = now.Add(49 * time.Hour)
			list, err = r.List(ctx, shop)
			if err != nil || len(list) != 2 || list[0].Key != "beta" || list[1].Source != policy.OverrideDeclared {
				t.Fatalf("list after expiry: %v %v", list, err)
			}
			if stored, _ := s.LoadPolicy(ctx, shop); len(stored.Runtime) != 1 {
				t.Fatalf("expired override left in the store: %v", stored)
			}
			if _, err := r.Set(ctx, shop, "gone", map[string]int64{"burst": 20}, &expires, "alice"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "expires 2026-06-03T12:00:00Z is in the past") {
				t.Fatalf("past expiry: %v", err)
			}
		})
	}
}

func TestRuntimeRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	p := tenantPolicy(t)
	r := newRuntime(NewMemoryStore(), time.Now, p)
	past := time.Now().Add(-time.Minute)
	for _, tt := range []struct {
		id     PolicyID
		key    string
		limits map[string]int64
		exp    *time.Time
		kind   error
		msg    string
	}{
		{PolicyID{"shop", "nope"}, "a", map[string]int64{"burst": 1}, nil, ErrNotFound, "policy shop/nope not found"},
		{shop, "a", map[string]int64{"per-hour": 1}, nil, ErrNotFound, `limit "per-hour" is not a limit of policy shop/per-tenant (its limits: per-minute, burst)`},
		{shop, "", map[string]int64{"burst": 1}, nil, ErrInvalid, "key is required"},
		{shop, "a", map[string]int64{"burst": 0}, nil, ErrInvalid, `limit "burst": 0 must be from 1 to 1000000000`},
		{shop, "a", nil, nil, ErrInvalid, "at least one limit"},
		{shop, "a", map[string]int64{"burst": 5}, &past, ErrInvalid, "is in the past"},
	} {
		_, err := r.Set(ctx, tt.id, tt.key, tt.limits, tt.exp, "x")
		if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Set(%v, %q, %v): %v, want %v %q", tt.id, tt.key, tt.limits, err, tt.kind, tt.msg)
		}
	}
	if list, _ := r.List(ctx, shop); len(list) != 0 {
		t.Fatalf("bad input changed something: %v", list)
	}
}

// An override targets any key value a request can render, as a ban or a
// reset does: a long one (its counters' key is hashed) is set, applied,
// listed whole and deleted like a short one. Before, over 1,024 bytes it
// was refused. Beyond the bound (the longest header section a request may
// carry) it is refused naming the bound.
func TestRuntimeOverridesALongKey(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			p := tenantPolicy(t)
			x := NewIndex(nil)
			s := newStore()
			follow(t, x, s)
			r := newRuntime(s, time.Now, p)
			key := strings.Repeat("tenant-", 4000/7) + "end"
			if _, err := r.Set(ctx, shop, key, map[string]int64{"per-minute": 1000}, nil, "alice"); err != nil {
				t.Fatal(err)
			}
			waitQuota(t, x, p, key, "per-minute", 1000)
			waitQuota(t, x, p, key[:len(key)-1], "per-minute", 0)
			if list, err := r.List(ctx, shop); err != nil || len(list) != 1 || list[0].Key != key {
				t.Fatalf("list: %d entries, %v", len(list), err)
			}
			if err := r.Delete(ctx, shop, key, "alice"); err != nil {
				t.Fatal(err)
			}
			waitQuota(t, x, p, key, "per-minute", 0)
			tooLong := strings.Repeat("x", MaxKeyLen+1)
			if _, err := r.Set(ctx, shop, tooLong, map[string]int64{"per-minute": 1000}, nil, "alice"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprint(MaxKeyLen)) {
				t.Fatalf("a key over the bound: %v", err)
			}
		})
	}
}

// Declared entries keep the schema's bound on a key (1 to 1,024 bytes,
// so that an object of many entries fits in etcd), and local mode's files,
// which no API server saw, are held to it by Declare too.
func TestDeclaredKeyBound(t *testing.T) {
	p := tenantPolicy(t)
	long := strings.Repeat("k", MaxDeclaredKeyLen+1)
	o := &ratelimitv1alpha1.RateLimitOverrides{ObjectMeta: metav1.ObjectMeta{Name: "tenants", Namespace: shop.Namespace}}
	for _, key := range []string{"", long, strings.Repeat("k", MaxDeclaredKeyLen)} {
		o.Spec.Overrides = append(o.Spec.Overrides, ratelimitv1alpha1.Override{Key: key, Limits: []ratelimitv1alpha1.OverrideLimit{{Name: "burst", Limit: 5}}})
	}
	valid, invalid := Declare(p, []*ratelimitv1alpha1.RateLimitOverrides{o}, time.Now())
	if len(valid) != 1 || len(invalid) != 2 {
		t.Fatalf("%d valid, invalid %v", len(valid), invalid)
	}
	if !strings.Contains(invalid[0].Message, "key is required") || !strings.Contains(invalid[1].Message, "1024") || !strings.Contains(invalid[1].Message, "run-time override") {
		t.Fatalf("invalid: %v", invalid)
	}
}

func TestExpiredOverrideStopsApplyingAtItsExpiry(t *testing.T) {
	p := tenantPolicy(t)
	x := NewIndex(nil)
	expires := time.Now().Add(time.Hour)
	x.SetRuntime(shop, map[string]Entry{"acme": {Key: "acme", Limits: map[string]int64{"burst": 20}, Source: policy.OverrideRuntime, Expires: &expires}})
	o := x.Override(p, "acme")
	if !o.Applies(expires.Add(-time.Nanosecond)) || o.Applies(expires) {
		t.Fatal("the override does not end at its expiry")
	}
}

func TestBoundCountsDeclaredAndRuntime(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			p := tenantPolicy(t)
			s := newStore()
			declared := make(map[string]Entry, MaxPerPolicy-1)
			for i := range MaxPerPolicy - 1 {
				k := fmt.Sprintf("t%d", i)
				declared[k] = Entry{Key: k, Limits: map[string]int64{"burst": 20}, Source: policy.OverrideDeclared}
			}
			if err := s.ReplaceDeclared(ctx, shop, declared); err != nil {
				t.Fatal(err)
			}
			r := newRuntime(s, time.Now, p)
			if _, err := r.Set(ctx, shop, "last", map[string]int64{"burst": 20}, nil, "a"); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Set(ctx, shop, "last", map[string]int64{"burst": 30}, nil, "a"); err != nil {
				t.Fatalf("replacing an override at the bound: %v", err)
			}
			_, err := r.Set(ctx, shop, "one-more", map[string]int64{"burst": 20}, nil, "a")
			if !errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), "policy shop/per-tenant has 100000 overrides") {
				t.Fatalf("beyond the bound: %v", err)
			}
		})
	}
}

func TestTwoProcessesOnOneRedisSeeAChange(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	p := tenantPolicy(t)
	a, b := NewIndex(nil), NewIndex(nil)
	sa, sb := NewRedisStore(srv.Client()), NewRedisStore(srv.Client())
	followEvery(t, a, sa, time.Hour) // pub/sub alone
	followEvery(t, b, sb, time.Hour)
	time.Sleep(50 * time.Millisecond) // both subscribed
	r := newRuntime(sa, time.Now, p)
	if _, err := r.Set(ctx, shop, "acme", map[string]int64{"burst": 40}, nil, "alice"); err != nil {
		t.Fatal(err)
	}
	waitQuota(t, b, p, "acme", "burst", 40)
	if err := r.Delete(ctx, shop, "acme", "alice"); err != nil {
		t.Fatal(err)
	}
	waitQuota(t, b, p, "acme", "burst", 0)

	// A process that starts later, or loses messages, loads them all.
	if _, err := r.Set(ctx, shop, "beta", map[string]int64{"burst": 60}, nil, "alice"); err != nil {
		t.Fatal(err)
	}
	c := NewIndex(nil)
	follow(t, c, NewRedisStore(srv.Client()))
	waitQuota(t, c, p, "beta", "burst", 60)
}

func TestPolicyChangeRecompiles(t *testing.T) {
	p := tenantPolicy(t)
	x := NewIndex(nil)
	x.SetRuntime(shop, map[string]Entry{"acme": {Key: "acme", Limits: map[string]int64{"burst": 20}, Source: policy.OverrideRuntime}})
	if x.Override(p, "acme") == nil {
		t.Fatal("no override")
	}
	renamed := policytest.Compile(t, shop.Namespace, shop.Name, "key: \"{header:X-Tenant}\"\nlimits: [{name: spike, tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}}]\n")
	if o := x.Override(renamed, "acme"); o != nil {
		t.Fatalf("an override of a limit the policy no longer has applies: %+v", o)
	}
}

func TestPolicyInTable(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	table := policytable.New(srv.Client())
	if _, _, err := table.Replace(ctx, []*policytable.Entry{{Namespace: "shop", Name: "per-tenant", Spec: policytest.Spec(t, "limits: [{name: burst, tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}}]")}}, nil); err != nil {
		t.Fatal(err)
	}
	lookup := PolicyInTable(table)
	if p, err := lookup(ctx, shop); err != nil || p == nil || p.Limits[0].Name != "burst" {
		t.Fatalf("policy %v, %v", p, err)
	}
	if p, err := lookup(ctx, PolicyID{"shop", "nope"}); err != nil || p != nil {
		t.Fatalf("a missing policy: %v, %v", p, err)
	}
}

// Replacing no declared overrides by none changes nothing, and bumps no
// revision (a policy without RateLimitOverrides is reconciled at each of
// its changes).
func TestReplacingNoDeclaredOverridesByNoneChangesNothing(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s := NewRedisStore(srv.Client())
	if err := s.ReplaceDeclared(ctx, shop, nil); err != nil {
		t.Fatal(err)
	}
	if rev, err := s.revision(ctx); err != nil || rev != 0 {
		t.Fatalf("revision %d, %v; want 0", rev, err)
	}
	declared := map[string]Entry{"acme": {Key: "acme", Limits: map[string]int64{"burst": 20}, Source: policy.OverrideDeclared}}
	if err := s.ReplaceDeclared(ctx, shop, declared); err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceDeclared(ctx, shop, nil); err != nil {
		t.Fatal(err)
	}
	o, err := s.LoadPolicy(ctx, shop)
	if rev, _ := s.revision(ctx); err != nil || len(o.Declared) != 0 || rev != 2 {
		t.Fatalf("after removing: %+v, %v, revision %d", o, err, rev)
	}
	if members, _ := srv.Client().SMembers(ctx, RedisPoliciesKey).Result(); len(members) != 0 {
		t.Fatalf("policies with overrides: %v", members)
	}
}

// Declared overrides beyond one batch are staged in batches and swapped in
// whole; read back (in batches too) they are what was written. The same
// entries again write and announce nothing; no staging hash is left.
func TestManyDeclaredOverrides(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s := NewRedisStore(srv.Client())
	declared := map[string]Entry{}
	for i := range 2*stageBatch + 500 {
		key := fmt.Sprintf("tenant-%d", i)
		declared[key] = Entry{Key: key, Limits: map[string]int64{"burst": int64(i + 1)}, Source: policy.OverrideDeclared, Object: "tenants"}
	}
	if err := s.ReplaceDeclared(ctx, shop, declared); err != nil {
		t.Fatal(err)
	}
	o, err := s.LoadPolicy(ctx, shop)
	if err != nil || len(o.Declared) != len(declared) || o.Declared["tenant-2499"].Limits["burst"] != 2500 {
		t.Fatalf("read back %d declared, %v; want %d", len(o.Declared), err, len(declared))
	}
	if rev, _ := s.revision(ctx); rev != 1 {
		t.Fatalf("revision %d after one replace, want 1", rev)
	}
	if err := s.ReplaceDeclared(ctx, shop, declared); err != nil {
		t.Fatal(err)
	}
	if rev, _ := s.revision(ctx); rev != 1 {
		t.Fatalf("the same entries again moved the revision to %d", rev)
	}
	declared["tenant-7"] = Entry{Key: "tenant-7", Limits: map[string]int64{"burst": 99}, Source: policy.OverrideDeclared, Object: "tenants"}
	if err := s.ReplaceDeclared(ctx, shop, declared); err != nil {
		t.Fatal(err)
	}
	if o, _ := s.LoadPolicy(ctx, shop); o.Declared["tenant-7"].Limits["burst"] != 99 {
		t.Fatalf("a changed entry: %+v", o.Declared["tenant-7"])
	}
	if keys, _ := srv.Client().Keys(ctx, redisPrefix+"staging:*").Result(); len(keys) != 0 {
		t.Fatalf("staging hashes left: %v", keys)
	}
	if err := s.ReplaceDeclared(ctx, shop, nil); err != nil {
		t.Fatal(err)
	}
	if o, _ := s.LoadPolicy(ctx, shop); len(o.Declared) != 0 {
		t.Fatalf("%d declared after removing them all", len(o.Declared))
	}
	if n, _ := srv.Client().Exists(ctx, redisPrefix+"digest:"+shop.String()).Result(); n != 0 {
		t.Fatal("the digest outlived its entries")
	}
}

// A staging hash that lost entries (it expired before the swap) changes
// nothing.
func TestLostStagingChangesNothing(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s := NewRedisStore(srv.Client())
	before := map[string]Entry{"acme": {Key: "acme", Limits: map[string]int64{"burst": 20}, Source: policy.OverrideDeclared}}
	if err := s.ReplaceDeclared(ctx, shop, before); err != nil {
		t.Fatal(err)
	}
	runtimeKey, declaredKey := RedisHashKeys(shop)
	staging := redisPrefix + "staging:" + shop.String() + ":lost"
	srv.Client().HSet(ctx, staging, "beta", "{}")
	err := replaceDeclaredScript.Run(ctx, srv.Client(), []string{runtimeKey, declaredKey, RedisPoliciesKey, RedisRevisionKey, staging, redisPrefix + "digest:" + shop.String()},
		RedisChannel, shop.String(), "digest", 2).Err()
	if err == nil || !strings.Contains(err.Error(), "SLUICE_STAGING_LOST") {
		t.Fatalf("swap of a short staging hash: %v", err)
	}
	if o, _ := s.LoadPolicy(ctx, shop); len(o.Declared) != 1 || o.Declared["acme"].Limits["burst"] != 20 {
		t.Fatalf("declared after the failed swap: %+v", o.Declared)
	}
}

// A change whose reload fails is loaded again: the next poll finds the
// revision moved. (Which call reads the change first, the message's or
// the poll's, is a race: the first read after the change fails either way.)
func TestFailedReloadIsRetried(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := redistest.Start(t)
	s := NewRedisStore(srv.Client())
	var armed, failed atomic.Bool
	loaded, retried := make(chan struct{}, 1), make(chan struct{}, 1)
	read := func() error {
		if armed.CompareAndSwap(true, false) {
			failed.Store(true)
			return errors.New("read failed")
		}
		signal := loaded
		if failed.Load() {
			signal = retried
		}
		select {
		case signal <- struct{}{}:
		default:
		}
		return nil
	}
	tr := &Tracker{store: s, changed: func(context.Context, PolicyID) error { return read() }, all: func(context.Context) error { return read() }, seen: -1}
	go following(s, tr, 50*time.Millisecond).Run(ctx)
	<-loaded // the first load
	armed.Store(true)
	if err := s.Put(ctx, shop, Entry{Key: "acme", Limits: map[string]int64{"burst": 1}, Source: policy.OverrideRuntime}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-retried:
	case <-time.After(5 * time.Second):
		t.Fatalf("a change whose reload failed (failed: %v) was not loaded again", failed.Load())
	}
}
