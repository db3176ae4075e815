package redisstore

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// PrepareOptions sets the go-redis options a client used by the Store
// needs, and returns o:
//
//   - MaxRetries = -1 (no retries). go-redis retries a command whose
//     connection failed after it was written (EOF, reset, read timeout),
//     and a rate-limit call that already ran on the server would then be
//     applied twice: a request consumed twice, or admitted on a replayed
//     answer. The Store also marks its own commands as not retryable; the
//     option keeps every other command on a shared client honest too.
//     Redirects (MaxRedirects, Cluster MOVED/ASK) stay on: a redirected
//     command did not run.
//   - ContextTimeoutEnabled = true, so a caller's context deadline bounds
//     the socket I/O of its call instead of only ReadTimeout.
func PrepareOptions(o *redis.UniversalOptions) *redis.UniversalOptions {
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	return o
}

// NewClient returns redis.NewUniversalClient(PrepareOptions(o)): a single
// client, a Sentinel failover client (MasterName set) or a Cluster client
// (several Addrs or IsClusterMode), ready for New.
func NewClient(o *redis.UniversalOptions) redis.UniversalClient {
	return redis.NewUniversalClient(PrepareOptions(o))
}

// noRetryCmd is a go-redis command that go-redis never replays after it
// may have reached the server (pipelines holding one are not retried on
// network errors either). A call of the library must run at most once.
type noRetryCmd struct{ *redis.IntSliceCmd }

// NoRetry implements the go-redis Cmder hook.
func (noRetryCmd) NoRetry() bool { return true }

// serverError returns the message of a Redis error reply, or "" for any
// other error (network, context, ...).
func serverError(err error) string {
	if err == nil {
		return ""
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return ""
	}
	return re.Error()
}

// needsLoad: the library is not loaded on the node that answered (after
// FUNCTION FLUSH, SCRIPT FLUSH, a restart, or a failover to a replica whose
// script cache is empty). The command did not run: safe to load and resend.
func needsLoad(err error) bool {
	msg := serverError(err)
	return strings.HasPrefix(msg, "NOSCRIPT") || strings.Contains(msg, "Function not found")
}

// outOfMemory: the server is over its maxmemory with nothing it may evict
// (maxmemory-policy noeviction, or volatile-* with no key to evict) and
// refused the command before it changed anything: FCALL before it
// starts, a script (EVALSHA) at its first write.
func outOfMemory(err error) bool {
	return strings.HasPrefix(serverError(err), "OOM ")
}

// unknownCommand: the server has no FCALL/FUNCTION (Redis < 7, or a proxy
// that does not pass them); the command did not run.
func unknownCommand(err error) bool {
	return strings.HasPrefix(serverError(err), "ERR unknown command")
}
