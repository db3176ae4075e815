package security

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/certtest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// TestRedisOverTLS runs Redis with TLS only (no plain port) and the ACL
// users, with a CA and server certificate the test generates: the
// controller's publisher and `manager check` reach it through rediss://
// with the CA from a file (--redis-ca-file), as the ACL users, and checks
// are decided by Redis. With another CA, the system roots, a wrong server
// name, or plain redis://, nothing connects, and the check endpoint answers
// by failure mode.
func TestRedisOverTLS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "sluice-test-ca")
	otherCA := certtest.NewCA(t, "other-ca")
	server := ca.Server(t, "redis")
	users := loadACLUsers(t)
	srv := redistest.StartTLS(t, redistest.TLSFiles{Cert: server.CertFile, Key: server.KeyFile, CA: ca.File}, redistest.WithArgs("--aclfile", users.File))
	url := "rediss://" + srv.Addr() + "/0"
	if tls := srv.Client().ConfigGet(ctx, "port").Val()["port"]; tls != "0" {
		t.Fatalf("redis-server listens on plain port %s too", tls)
	}

	// The controller's side: write a policy over TLS as the controller user.
	_, ctrlStore, ctrlTable := connect(t, redisconn.Config{URL: url, CAFile: ca.File, Username: controllerUser, PasswordFile: users.PasswordFile[controllerUser]})
	pub := &policytable.Publisher{Table: ctrlTable, Library: ctrlStore}
	// The controller's first sync creates the (empty) table; single writes follow.
	if _, _, err := ctrlTable.Replace(ctx, nil, nil); err != nil {
		t.Fatalf("create the policy table: %v", err)
	}
	p := systest.Policy("tls", "api", "/api", ratelimitv1alpha1.FailureModeClosed, systest.FixedWindow("hour", burst, "1h"))
	p.Spec.Mode = ratelimitv1alpha1.ModeEnforce
	if _, err := pub.Apply(ctx, &policytable.Entry{Namespace: p.Namespace, Name: p.Name, Generation: 1, Spec: p.Spec}); err != nil {
		t.Fatalf("publish over TLS: %v", err)
	}

	bin := manager.Path(t)
	startCheck := func(name string, flags ...string) (*systest.CheckClient, *systest.Proc) {
		t.Helper()
		addr := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
		args := append([]string{"check", "--listen", addr, "--redis-username", checkUser, "--redis-password-file", users.PasswordFile[checkUser]}, flags...)
		proc := systest.Start(t, dir, name, nil, bin, args...)
		proc.WaitHTTP(t, "http://"+addr+"/readyz", 30*time.Second)
		return systest.NewCheckClient(addr, "tls"), proc
	}

	t.Run("rediss with the CA file", func(t *testing.T) {
		cc, _ := startCheck("check-tls", "--redis-url", url, "--redis-ca-file", ca.File)
		cc.WaitLimit(t, "/api", burst, 10*time.Second)
		got := cc.Decisions(t, "/api", "client-a", burst+2)
		t.Logf("manager check over rediss:// with --redis-ca-file: decisions %v", got)
		if !systest.FirstN(got, burst) {
			t.Errorf("decisions %v, want %d allowed then denied", got, burst)
		}
		clients := srv.Client().ClientList(ctx).Val()
		if n := strings.Count(clients, "user="+checkUser); n == 0 {
			t.Errorf("no connection of %s in CLIENT LIST:\n%s", checkUser, clients)
		}
		if log := aclLog(t, srv.Client()); len(log) > 0 {
			t.Errorf("Redis refused commands over TLS:%s", describeLog(log))
		}
	})

	t.Run("a wrong CA, the system roots, a wrong name or plain TCP do not connect", func(t *testing.T) {
		for _, tc := range []struct {
			what string
			cfg  redisconn.Config
			want string
		}{
			{"another CA", redisconn.Config{URL: url, CAFile: otherCA.File}, "certificate signed by unknown authority"},
			{"the system roots", redisconn.Config{URL: url}, "certificate signed by unknown authority"},
			{"a name the certificate lacks", redisconn.Config{URL: url, CAFile: ca.File, TLSServerName: "redis.example.com"}, "not redis.example.com"},
			{"plain redis://", redisconn.Config{URL: "redis://" + srv.Addr() + "/0"}, ""},
		} {
			tc.cfg.Username, tc.cfg.PasswordFile = checkUser, users.PasswordFile[checkUser]
			client, _, _ := connect(t, tc.cfg)
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err := client.Ping(pctx).Err()
			cancel()
			t.Logf("%s: %v", tc.what, err)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: PING: %v, want an error containing %q", tc.what, err, tc.want)
			}
		}

		cc, proc := startCheck("check-wrong-ca", "--redis-url", url, "--redis-ca-file", otherCA.File)
		deadline := time.Now().Add(10 * time.Second)
		for !proc.LogContains("certificate signed by unknown authority") {
			if time.Now().After(deadline) {
				t.Fatalf("manager check with the wrong CA logged no certificate error:\n%s", proc.Tail(20))
			}
			time.Sleep(50 * time.Millisecond)
		}
		// It could never read the policy table: no policy is in force.
		r := cc.MustAsk(t, "/api", "client-b")
		t.Logf("manager check with the wrong CA: reason=%s; its log: %s", r.Reason, lastLine(proc, "unknown authority"))
		if r.Reason != "NoPolicyMatched" {
			t.Errorf("with the wrong CA: %+v, want no policy in force (the table is unreadable)", r)
		}
	})
}

// lastLine is the last line of p's log that holds s.
func lastLine(p *systest.Proc, s string) string {
	lines := strings.Split(p.Tail(200), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}
