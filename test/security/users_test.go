package security

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// The Redis users of config/redis/users.acl.
const (
	checkUser      = "sluice-check"
	controllerUser = "sluice-controller"
)

// aclUsers is config/redis/users.acl, as shipped, with a password the test
// chose appended to each user's line (the shipped file has none).
type aclUsers struct {
	// File is the ACL file to load (redis-server --aclfile).
	File string
	// Password and PasswordFile (for --redis-password-file) per user.
	Password     map[string]string
	PasswordFile map[string]string
}

func loadACLUsers(t *testing.T) *aclUsers {
	t.Helper()
	src := filepath.Join(kubetest.RepoRoot(t), "config", "redis", "users.acl")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	u := &aclUsers{File: filepath.Join(dir, "users.acl"), Password: map[string]string{}, PasswordFile: map[string]string{}}
	var out strings.Builder
	for i, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 2 || fields[0] != "user" {
			t.Fatalf("config/redis/users.acl:%d: want `user <name> <rules>`; Redis reads no comments in ACL files: %q", i+1, line)
		}
		name, pw := fields[1], rand.Text()
		u.Password[name] = pw
		u.PasswordFile[name] = filepath.Join(dir, name+".password")
		// As a mounted Secret holds it: with a trailing newline.
		if err := os.WriteFile(u.PasswordFile[name], []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "%s >%s\n", strings.TrimSpace(line), pw)
	}
	for _, want := range []string{checkUser, controllerUser} {
		if _, ok := u.Password[want]; !ok {
			t.Fatalf("config/redis/users.acl defines no user %s", want)
		}
	}
	if err := os.WriteFile(u.File, []byte(out.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return u
}

// client logs in to addr as user (over TLS when tlsConfig is set). Like the
// processes' clients, it never retries a command.
func (u *aclUsers) client(t *testing.T, addr, user string, tlsConfig *tls.Config) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: u.Password[user], TLSConfig: tlsConfig, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("log in as %s: %v", user, err)
	}
	return c
}

// aclLog reads the server's ACL LOG: every command, key or channel it
// refused, grouped by user, reason and object.
func aclLog(t *testing.T, admin redis.Cmdable) []*redis.ACLLogEntry {
	t.Helper()
	entries, err := admin.ACLLog(context.Background(), 1000).Result()
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func describeLog(entries []*redis.ACLLogEntry) string {
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "\n  %s refused %s %q (%s context) %d time(s)", e.Username, e.Reason, e.Object, e.Context, e.Count)
	}
	return b.String()
}

// refused reports whether err is Redis refusing a command by ACL.
func refused(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOPERM")
}

// scriptCommands lists the Redis commands a Lua source calls: every
// ('UPPERCASE' string literal opening an argument list, as in
// redis.call('HSET', ...) or a local alias call('HSET', ...).
func scriptCommands(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`\(\s*'([A-Z][A-Z_]+)'`).FindAllStringSubmatch(string(b), -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return out
}
