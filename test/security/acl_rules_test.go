package security

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/topkeys"
)

// keyedArgs builds a valid command line for each command the Lua sources
// run, on the key given; nil for commands without a key.
var keyedArgs = map[string]func(key string) []any{
	// The rate-limit library (internal/ratelimit/redisstore/lua/sluice.lua).
	"HMGET":            func(k string) []any { return []any{"HMGET", k, "a", "t"} },
	"HSET":             func(k string) []any { return []any{"HSET", k, "a", "1"} },
	"HGETALL":          func(k string) []any { return []any{"HGETALL", k} },
	"DEL":              func(k string) []any { return []any{"DEL", k} },
	"PEXPIREAT":        func(k string) []any { return []any{"PEXPIREAT", k, "1"} },
	"ZRANGEBYSCORE":    func(k string) []any { return []any{"ZRANGEBYSCORE", k, "0", "+inf"} },
	"ZRANGE":           func(k string) []any { return []any{"ZRANGE", k, "0", "-1"} },
	"ZADD":             func(k string) []any { return []any{"ZADD", k, "1", "m"} },
	"ZREM":             func(k string) []any { return []any{"ZREM", k, "m"} },
	"ZREMRANGEBYSCORE": func(k string) []any { return []any{"ZREMRANGEBYSCORE", k, "-inf", "1"} },
	"ZCOUNT":           func(k string) []any { return []any{"ZCOUNT", k, "-inf", "1"} },
	"ZCARD":            func(k string) []any { return []any{"ZCARD", k} },
	"TIME":             nil,
	// The policy table's scripts (internal/policytable/table.go).
	"HGET": func(k string) []any { return []any{"HGET", k, "f"} },
	"HDEL": func(k string) []any { return []any{"HDEL", k, "f"} },
	"GET":  func(k string) []any { return []any{"GET", k} },
	"SET":  func(k string) []any { return []any{"SET", k, "1"} },
	// PUBLISH names a channel, not a key: checked apart.
	"PUBLISH": nil,
}

// dangerous are commands neither process may run: flushing, configuring,
// listing keys, loading or deleting code (for the check user), managing
// users, replication, persistence, debugging.
var dangerous = [][]any{
	{"FLUSHALL"}, {"FLUSHDB"},
	{"CONFIG", "SET", "maxmemory", "1"}, {"CONFIG", "GET", "*"}, {"CONFIG", "REWRITE"},
	{"KEYS", "*"}, {"SCAN", "0"}, {"RANDOMKEY"},
	{"FUNCTION", "FLUSH"}, {"FUNCTION", "DELETE", "x"}, {"FUNCTION", "RESTORE", "x"}, {"FUNCTION", "DUMP"}, {"FUNCTION", "KILL"},
	{"SCRIPT", "FLUSH"}, {"SCRIPT", "KILL"},
	{"ACL", "SETUSER", "x"}, {"ACL", "LIST"}, {"ACL", "LOG"}, {"ACL", "DELUSER", "x"},
	{"DEBUG", "SLEEP", "0"}, {"SHUTDOWN"}, {"MONITOR"}, {"CLIENT", "KILL", "ID", "1"}, {"CLIENT", "LIST"},
	{"REPLICAOF", "127.0.0.1", "1"}, {"MODULE", "LOAD", "/x"}, {"SAVE"}, {"BGSAVE"}, {"BGREWRITEAOF"},
	{"SELECT", "1"}, {"SWAPDB", "0", "1"}, {"INFO"}, {"SLOWLOG", "GET"}, {"CLUSTER", "RESET"}, {"FAILOVER"},
}

// TestACLRules asks Redis itself (ACL DRYRUN) what each shipped user may
// run, command by command and key by key: the commands the Lua sources call
// are read from those sources, so a new command in the library or a table
// script fails here until the ACL grants it.
func TestACLRules(t *testing.T) {
	ctx := context.Background()
	users := loadACLUsers(t)
	srv := redistest.Start(t, redistest.WithArgs("--aclfile", users.File))
	admin := srv.Client()
	root := kubetest.RepoRoot(t)

	dry := func(user string, args ...any) string {
		t.Helper()
		res, err := admin.ACLDryRun(ctx, user, args...).Result()
		if err != nil {
			t.Fatalf("ACL DRYRUN %s %v: %v", user, args, err)
		}
		return res
	}
	allow := func(user string, args ...any) {
		t.Helper()
		if res := dry(user, args...); res != "OK" {
			t.Errorf("%s may not run %v: %s", user, args, res)
		}
	}
	refuse := func(user string, args ...any) {
		t.Helper()
		if res := dry(user, args...); res == "OK" {
			t.Errorf("%s may run %v", user, args)
		}
	}

	// Counter keys as the check endpoint builds them, hostile values
	// included: separators are escaped, long values hashed. Each limit's
	// key names a sliding log's sorted set; its bucket (the hash of every
	// other algorithm) is the key up to the hash tag's end.
	var counters []string
	for _, k := range []string{
		ratelimit.Key("shop", "api", "203.0.113.7", "burst"),
		ratelimit.Key("shop", "api", "}:{policies}/x", "day"),
		ratelimit.Key("shop", "api", strings.Repeat("v", 500), "burst"),
		ratelimit.Key("ns", "p", "", "l"),
	} {
		bucket, _ := ratelimit.SplitKey(k)
		counters = append(counters, k, bucket)
	}
	table := []string{policytable.HashKey, policytable.RevisionKey}
	others := []string{"app:session:1", "sluice:other", "sluice:{shop/api}:x", "sluice:{policies}:other", "sluice:{policies}x",
		"sluice:v2:other", "sluice:v2:{policies}", "sluice:{shop/api/203.0.113.7}:burst"} // the last: the layout before v2

	library := scriptCommands(t, filepath.Join(root, "internal", "ratelimit", "redisstore", "lua", "sluice.lua"))
	tableScripts := scriptCommands(t, filepath.Join(root, "internal", "policytable", "table.go"))
	t.Logf("the library runs %v; the table scripts run %v", library, tableScripts)
	if len(library) < 5 || len(tableScripts) < 5 {
		t.Fatalf("found too few commands in the Lua sources (%v, %v): has the way they call Redis changed?", library, tableScripts)
	}

	t.Run("check and controller users run the library on counter keys only", func(t *testing.T) {
		for _, cmd := range library {
			args, known := keyedArgs[cmd]
			if !known {
				t.Errorf("the library calls %s, which this test does not know: grant it to %s in config/redis/users.acl (on counter keys) and add it to keyedArgs", cmd, checkUser)
				continue
			}
			if args == nil {
				allow(checkUser, cmd)
				continue
			}
			for _, k := range counters {
				allow(checkUser, args(k)...)
				allow(controllerUser, args(k)...) // the admin API's inspect, reset and lift
			}
			for _, k := range append(append([]string{}, table...), others...) {
				if cmd == "HGETALL" && slices.Contains(table, k) {
					continue // the check process reads the table with it too
				}
				refuse(checkUser, args(k)...)
			}
		}
		for _, k := range counters {
			allow(checkUser, "FCALL", redisstore.FunctionName, 1, k, "1:0:-")
			allow(checkUser, "EVALSHA", strings.Repeat("0", 40), 1, k, "1:0:-")
			refuse(checkUser, "GET", k)
		}
		for _, k := range append(append([]string{}, table...), others...) {
			refuse(checkUser, "FCALL", redisstore.FunctionName, 1, k, "1:0:-")
			refuse(checkUser, "EVALSHA", strings.Repeat("0", 40), 1, k, "1:0:-")
		}
		refuse(checkUser, "FCALL_RO", redisstore.FunctionName, 1, counters[0], "1:0:-")
	})

	t.Run("check user reads the table, read-only", func(*testing.T) {
		allow(checkUser, "HGETALL", policytable.HashKey)
		allow(checkUser, "GET", policytable.RevisionKey)
		allow(checkUser, "MULTI")
		allow(checkUser, "EXEC")
		allow(checkUser, "SUBSCRIBE", policytable.Channel)
		allow(checkUser, "PUBLISH", policytable.Channel, "refunded acl-test\n*") // refunds, told to the other check processes
		allow(checkUser, "PING")
		refuse(checkUser, "SUBSCRIBE", "other")
		refuse(checkUser, "PSUBSCRIBE", "*")
		refuse(checkUser, "PUBLISH", "other", "x")
		for _, k := range table {
			for _, args := range [][]any{{"HSET", k, "ns/p", "{}"}, {"HDEL", k, "ns/p"}, {"DEL", k}, {"SET", k, "1"}, {"EXPIRE", k, "1"}, {"RENAME", k, "x"}} {
				refuse(checkUser, args...)
			}
			refuse(checkUser, "EVALSHA", strings.Repeat("0", 40), 2, policytable.HashKey, policytable.RevisionKey)
		}
		for _, k := range others {
			refuse(checkUser, "GET", k)
			refuse(checkUser, "HGETALL", k)
		}
	})

	t.Run("check user cannot load code", func(*testing.T) {
		refuse(checkUser, "EVAL", "return 1", 0)
		refuse(checkUser, "EVAL_RO", "return 1", 0)
		refuse(checkUser, "FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('x', function() return 1 end)")
		refuse(checkUser, "FUNCTION", "LIST")
		refuse(checkUser, "SCRIPT", "LOAD", "return 1")
		refuse(checkUser, "SCRIPT", "EXISTS", strings.Repeat("0", 40))
	})

	t.Run("controller user keeps the library and writes the table", func(t *testing.T) {
		for _, cmd := range tableScripts {
			args, known := keyedArgs[cmd]
			if !known {
				t.Errorf("a table script calls %s, which this test does not know: grant it to %s in config/redis/users.acl (on the table keys) and add it to keyedArgs", cmd, controllerUser)
				continue
			}
			if cmd == "PUBLISH" {
				allow(controllerUser, "PUBLISH", policytable.Channel, "1")
				refuse(controllerUser, "PUBLISH", "other", "1")
				continue
			}
			if args == nil {
				allow(controllerUser, cmd)
				continue
			}
			for _, k := range table {
				allow(controllerUser, args(k)...)
			}
			for _, k := range others {
				refuse(controllerUser, args(k)...)
			}
			if !slices.Contains(library, cmd) { // the library's run on counters too
				for _, k := range counters {
					refuse(controllerUser, args(k)...)
				}
			}
		}
		allow(controllerUser, "FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('x', function() return 1 end)")
		allow(controllerUser, "FUNCTION", "LIST")
		allow(controllerUser, "SCRIPT", "LOAD", "return 1")
		allow(controllerUser, "SCRIPT", "EXISTS", strings.Repeat("0", 40))
		allow(controllerUser, "EVALSHA", strings.Repeat("0", 40), 2, policytable.HashKey, policytable.RevisionKey)
		allow(controllerUser, "EVAL", "return 1", 2, policytable.HashKey, policytable.RevisionKey)
		allow(controllerUser, "MULTI")
		allow(controllerUser, "EXEC")
		allow(controllerUser, "HGETALL", policytable.HashKey)
		allow(controllerUser, "PING")
		// INFO memory alone, for maxmemory-policy (the eviction check); plain INFO stays refused.
		allow(controllerUser, "INFO", "memory")
		for _, k := range counters {
			refuse(controllerUser, "EVAL", "return 1", 1, k)
			allow(controllerUser, "FCALL", redisstore.FunctionName, 1, k, "1:0:-")
		}
		for _, k := range others {
			refuse(controllerUser, "EVAL", "return 1", 1, k)
			refuse(controllerUser, "FCALL", redisstore.FunctionName, 1, k, "1:0:-")
			refuse(controllerUser, "HGETALL", k)
		}
	})

	// Top key values: each check process writes its own field of a
	// policy's minute and its expiry, which the controller (the admin
	// API) reads; neither may do anything else there, nor reach the
	// counters or the table through those keys' rules (above: the
	// other keys stay refused).
	t.Run("check user publishes top key values, controller reads them", func(*testing.T) {
		top := topkeys.Key("shop", "api", 29_666_666)
		allow(checkUser, "HSET", top, "process", "{}")
		allow(checkUser, "PEXPIREAT", top, "1")
		allow(controllerUser, "HGETALL", top)
		for _, args := range [][]any{{"HGETALL", top}, {"DEL", top}, {"GET", top}, {"HDEL", top, "process"}} {
			refuse(checkUser, args...)
		}
		refuse(checkUser, "FCALL", redisstore.FunctionName, 1, top, "1:0:-")
		for _, args := range [][]any{{"HSET", top, "process", "{}"}, {"DEL", top}, {"PEXPIREAT", top, "1"}, {"HDEL", top, "process"}} {
			refuse(controllerUser, args...)
		}
	})

	t.Run("overrides: the controller writes them, the check user reads them", func(t *testing.T) {
		scripts := scriptCommands(t, filepath.Join(root, "internal", "overrides", "redis.go"))
		if len(scripts) < 5 {
			t.Fatalf("found too few commands in the overrides' scripts: %v", scripts)
		}
		id := overrides.PolicyID{Namespace: "shop", Name: "api"}
		runtimeKey, declaredKey := overrides.RedisHashKeys(id)
		keys := []string{runtimeKey, declaredKey, overrides.RedisPoliciesKey, overrides.RedisRevisionKey}
		staging, digestKey := "sluice:{overrides}:staging:shop/api:1", "sluice:{overrides}:digest:shop/api"
		for _, cmd := range scripts {
			if cmd == "PUBLISH" {
				allow(controllerUser, "PUBLISH", overrides.RedisChannel, "1 shop/api")
				continue
			}
			args := map[string][]any{"HEXISTS": {"HEXISTS", runtimeKey, "k"}, "HLEN": {"HLEN", runtimeKey}, "HSET": {"HSET", runtimeKey, "k", "{}"},
				"HDEL": {"HDEL", runtimeKey, "k"}, "DEL": {"DEL", declaredKey}, "SADD": {"SADD", overrides.RedisPoliciesKey, "shop/api"},
				"SREM": {"SREM", overrides.RedisPoliciesKey, "shop/api"}, "INCR": {"INCR", overrides.RedisRevisionKey},
				"UNLINK": {"UNLINK", staging}, "RENAME": {"RENAME", staging, declaredKey}, "PERSIST": {"PERSIST", declaredKey},
				"SET": {"SET", digestKey, "0"}, "GET": {"GET", digestKey}}[cmd]
			if args == nil {
				t.Errorf("an overrides script calls %s, which this test does not know: grant it to %s in config/redis/users.acl (on the overrides' keys) and add it here", cmd, controllerUser)
				continue
			}
			allow(controllerUser, args...)
			if cmd != "HLEN" && cmd != "GET" { // reads, which the check user makes too
				refuse(checkUser, args...)
			}
		}
		allow(controllerUser, "EVALSHA", strings.Repeat("0", 40), 4, keys[0], keys[1], keys[2], keys[3])
		// Written in batches outside the scripts: staged, then swapped in.
		allow(controllerUser, "HSET", staging, "k", "{}")
		allow(controllerUser, "PEXPIRE", staging, "60000")
		allow(controllerUser, "EXISTS", declaredKey)
		refuse(checkUser, "HSET", staging, "k", "{}")
		allow(checkUser, "HGETALL", runtimeKey)
		allow(checkUser, "HGETALL", declaredKey)
		allow(checkUser, "HLEN", declaredKey)
		allow(checkUser, "HSCAN", declaredKey, "0")
		allow(checkUser, "SMEMBERS", overrides.RedisPoliciesKey)
		allow(checkUser, "GET", overrides.RedisRevisionKey)
		allow(checkUser, "SUBSCRIBE", overrides.RedisChannel)
		for _, k := range table {
			refuse(controllerUser, "DEL", k)
		}
		for _, k := range append(append([]string{}, counters...), table...) {
			refuse(controllerUser, "INCR", k)
		}
	})

	// The index of bans: the check records a ban, the controller's admin
	// API lists them and forgets a lifted one; neither does more.
	t.Run("index of bans", func(*testing.T) {
		for _, k := range []string{ratelimit.BanIndexKey("shop", "api"), ratelimit.BanIndexKey("n}s", "p/x")} {
			allow(checkUser, "HSET", k, "acme", "1:1")
			allow(checkUser, "PEXPIRE", k, "1")
			refuse(checkUser, "HGETALL", k)
			refuse(checkUser, "HDEL", k, "acme")
			refuse(checkUser, "DEL", k)
			allow(controllerUser, "HGETALL", k)
			allow(controllerUser, "HDEL", k, "acme")
			refuse(controllerUser, "HSET", k, "acme", "1:1")
			refuse(controllerUser, "DEL", k)
		}
		for _, k := range append(append([]string{}, table...), others...) {
			refuse(checkUser, "PEXPIRE", k, "1")
		}
	})

	t.Run("neither may flush, configure, list keys or manage users", func(*testing.T) {
		for _, user := range []string{checkUser, controllerUser} {
			for _, args := range dangerous {
				refuse(user, args...)
			}
		}
	})

	// config/redis/README.md gives the rules of one user for `manager all`:
	// the controller's, then SUBSCRIBE and the check user's counter rules
	// as a selector.
	t.Run("one user for manager all, as config/redis/README.md gives it", func(t *testing.T) {
		doc, err := os.ReadFile(filepath.Join(root, "config", "redis", "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		extra := regexp.MustCompile("`([^`]*\\(~sluice:[^`]*\\))`").FindStringSubmatch(string(doc))
		if extra == nil {
			t.Fatal("config/redis/README.md gives no rules for `manager all`")
		}
		rules := append(aclRules(t, root, controllerUser), splitRules(extra[1])...)
		rules = append(rules, ">pw")
		if err := admin.ACLSetUser(ctx, "sluice-all", rules...).Err(); err != nil {
			t.Fatalf("ACL SETUSER sluice-all %v: %v", rules, err)
		}
		for _, cmd := range library {
			if args := keyedArgs[cmd]; args != nil {
				allow("sluice-all", args(counters[0])...)
			}
		}
		allow("sluice-all", "FCALL", redisstore.FunctionName, 1, counters[0], "1:0:-")
		allow("sluice-all", "FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('x', function() return 1 end)")
		allow("sluice-all", "HSET", policytable.HashKey, "ns/p", "{}")
		allow("sluice-all", "SUBSCRIBE", policytable.Channel)
		allow("sluice-all", "HSET", topkeys.Key("shop", "api", 1), "process", "{}")
		allow("sluice-all", "HGETALL", topkeys.Key("shop", "api", 1))
		refuse("sluice-all", "GET", others[0])
		refuse("sluice-all", "FLUSHALL")
	})

	// The same rules are what a live connection gets (DRYRUN and a real
	// command agree): one example each way.
	t.Run("live connection agrees", func(t *testing.T) {
		c := users.client(t, srv.Addr(), checkUser, nil)
		if err := c.HGetAll(ctx, policytable.HashKey).Err(); err != nil {
			t.Errorf("%s: HGETALL the table: %v", checkUser, err)
		}
		if err := c.FlushAll(ctx).Err(); !refused(err) {
			t.Errorf("%s: FLUSHALL: %v, want NOPERM", checkUser, err)
		}
		if n := len(aclLog(t, admin)); n != 1 {
			t.Errorf("ACL LOG holds %d entries, want the one FLUSHALL:%s", n, describeLog(aclLog(t, admin)))
		}
	})
}

// aclRules are a user's rules in config/redis/users.acl (the line after
// `user <name>`), split as ACL SETUSER takes them: a selector in
// parentheses is one argument.
func aclRules(t *testing.T, root, user string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "config", "redis", "users.acl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "user "+user+" ")
		if !ok {
			continue
		}
		return splitRules(rest)
	}
	t.Fatalf("config/redis/users.acl has no user %s", user)
	return nil
}

// splitRules splits ACL rules as ACL SETUSER takes them: a selector in
// parentheses is one argument.
func splitRules(rules string) []string {
	return regexp.MustCompile(`\([^)]*\)|\S+`).FindAllString(rules, -1)
}
