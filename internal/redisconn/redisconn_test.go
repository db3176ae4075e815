package redisconn

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil/certtest"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOptions(t *testing.T) {
	pw := writeFile(t, "password", "s3cret\n")
	ca := certtest.NewCA(t, "test CA").File

	o, err := (&Config{URL: "redis://user:pw@10.0.0.1:6380/2"}).Options()
	if err != nil || o.Addrs[0] != "10.0.0.1:6380" || o.DB != 2 || o.Username != "user" || o.Password != "pw" || o.TLSConfig != nil {
		t.Fatalf("URL: %+v %v", o, err)
	}
	o, err = (&Config{URL: "rediss://redis:6379", Username: "checker", PasswordFile: pw, CAFile: ca}).Options()
	if err != nil || o.Username != "checker" || o.Password != "s3cret" || o.TLSConfig == nil || o.TLSConfig.RootCAs == nil {
		t.Fatalf("rediss with files: %+v %v", o, err)
	}
	o, err = (&Config{SentinelMaster: "mymaster", SentinelAddrs: []string{"a:26379", "b:26379"}}).Options()
	if err != nil || o.MasterName != "mymaster" || len(o.Addrs) != 2 {
		t.Fatalf("sentinel: %+v %v", o, err)
	}
	senPw := writeFile(t, "sentinel-password", "sentinel-s3cret\r\n")
	o, err = (&Config{SentinelMaster: "mymaster", SentinelAddrs: []string{"a:26379"}, Username: "checker", PasswordFile: pw,
		SentinelUsername: "watcher", SentinelPasswordFile: senPw}).Options()
	if err != nil || o.Username != "checker" || o.Password != "s3cret" || o.SentinelUsername != "watcher" || o.SentinelPassword != "sentinel-s3cret" {
		t.Fatalf("sentinel with its own credentials: %+v %v", o, err)
	}
	o, err = (&Config{ClusterAddrs: []string{"a:7000"}, TLS: true}).Options()
	if err != nil || !o.IsClusterMode || o.TLSConfig == nil {
		t.Fatalf("cluster: %+v %v", o, err)
	}

	for _, bad := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "set exactly one of"},
		{Config{URL: "redis://a", ClusterAddrs: []string{"b"}}, "set exactly one of"},
		{Config{URL: "http://a"}, "--redis-url"},
		{Config{SentinelAddrs: []string{"a"}}, "--redis-sentinel-master"},
		{Config{URL: "redis://a", PasswordFile: "/nonexistent"}, "--redis-password-file"},
		{Config{SentinelMaster: "m", SentinelAddrs: []string{"a"}, SentinelPasswordFile: "/nonexistent"}, "--redis-sentinel-password-file: open /nonexistent"},
		{Config{URL: "redis://a", SentinelPasswordFile: pw}, "only with --redis-sentinel-addrs"},
		{Config{ClusterAddrs: []string{"a"}, SentinelUsername: "watcher"}, "only with --redis-sentinel-addrs"},
		{Config{URL: "redis://a", CAFile: ca}, "TLS is off"},
		{Config{URL: "rediss://a", CAFile: pw}, "holds no PEM certificate"},
	} {
		if _, err := bad.cfg.Options(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: error %v, want one containing %q", bad.cfg, err, bad.want)
		}
	}
}

func TestBindFlagsSentinelCredentials(t *testing.T) {
	t.Setenv("SLUICE_REDIS_SENTINEL_USERNAME", "watcher")
	t.Setenv("SLUICE_REDIS_SENTINEL_PASSWORD_FILE", "/etc/sluice/env-sentinel-password")
	var c Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.BindFlags(fs)
	if c.SentinelUsername != "watcher" || c.SentinelPasswordFile != "/etc/sluice/env-sentinel-password" {
		t.Fatalf("from the environment: %+v", c)
	}
	if err := fs.Parse([]string{"--redis-sentinel-password-file=/etc/sluice/sentinel-password"}); err != nil {
		t.Fatal(err)
	}
	if c.SentinelPasswordFile != "/etc/sluice/sentinel-password" {
		t.Fatalf("the flag does not override the environment: %+v", c)
	}
}
