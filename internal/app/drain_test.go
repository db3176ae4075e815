package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/checkserver"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// A check process that drains (SIGTERM: it still answers its keep-alive
// clients, closing each connection, until they have moved to another
// replica) keeps following the policy table: a policy applied meanwhile
// is enforced by its last answers, as by every other replica.
func TestDrainingProcessFollowsTheTable(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	parts, err := connectRedis(&redisconn.Config{URL: "redis://" + srv.Addr() + "/0"}, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer parts.Close()
	addr := freeAddr(t)
	cs, err := newCheckServer(CheckConfig{Config: checkserver.Config{Listen: addr, PollInterval: time.Hour, // changes by message only
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}, parts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, sigterm := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cs.run(runCtx) }()

	// Two keep-alive clients, each with its connection open.
	check := func(client *http.Client) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/check/ns", nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("X-Original-URL", "http://localhost/reports")
		req.Header.Set("X-Original-Method", http.MethodGet)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	clients := make([]*http.Client, 2)
	for i := range clients {
		clients[i] = &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, err := check(clients[i])
			if err == nil && code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("client %d before the drain: %d %v, want 200 (no policy yet)", i, code, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	sigterm()
	spec := policytest.Spec(t, "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]")
	if _, _, err := policytable.New(srv.Client()).Replace(ctx, []*policytable.Entry{{Namespace: "ns", Name: "applied-while-draining", Generation: 1, Spec: spec}}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the change message's way; the drain lasts while requests come within a second
	var codes []int
	for i, client := range clients {
		code, err := check(client)
		if err != nil {
			t.Fatalf("client %d during the drain: %v", i, err)
		}
		codes = append(codes, code)
	}
	if codes[0] != http.StatusOK || codes[1] != http.StatusForbidden {
		t.Fatalf("answers during the drain %v, want [200 403]: the policy applied meanwhile enforced", codes)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
