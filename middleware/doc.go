// Package middleware is Sluice as net/http middleware: it checks each
// request against RateLimitPolicies inside your own service, sets the
// same rate-limit headers as the check endpoint, and answers a denied
// request itself (429 with Retry-After and an application/problem+json
// body) without calling the next handler.
//
// The policies are the ones you would apply to a cluster: a
// v1alpha1.RateLimitPolicySpec built in Go (WithPolicy) or RateLimitPolicy
// YAML (WithPolicyYAML). A policy that does not compile makes New fail with
// an error that names the field at fault.
//
// Where the decision is made:
//
//   - In the process, with the in-memory store (the default): exact for
//     one process; each replica of a service counts on its own.
//   - In the process, with Redis (WithRedis, WithRedisURL): one limit
//     shared by every replica, each request decided in one atomic call.
//   - Remotely (WithRemote): a Sluice check endpoint decides against the
//     policies in force in the cluster; the middleware forwards the
//     request's description as Traefik's ForwardAuth does and relays the
//     answer's status, headers and body.
//
// When Redis or the check endpoint cannot answer in time, the failure
// mode decides: in the process, each matching policy's failureMode
// (Closed denies, Open allows); remotely, RemoteOptions.FailureMode.
//
// The client address that {client_ip} keys use is the peer's, or, when the
// peer is a trusted proxy (WithTrustedProxies; by default loopback and
// private ranges), the right-most untrusted address of X-Forwarded-For:
// the same rule as the check endpoint's.
//
// A minimal server, 10 requests per client address with a refill of one a
// second:
//
//	lim, err := middleware.New(middleware.WithPolicyYAML(`
//	apiVersion: ratelimit.sluice.dev/v1alpha1
//	kind: RateLimitPolicy
//	metadata:
//	  name: per-client
//	spec:
//	  key: "{client_ip}"
//	  limits:
//	  - name: burst
//	    tokenBucket: {capacity: 10, refillRate: 1, refillInterval: 1s}
//	`))
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer lim.Close()
//	log.Fatal(http.ListenAndServe(":8080", lim.Handler(mux)))
//
// Limiter.Handler has the type func(http.Handler) http.Handler, so it also
// fits routers' Use methods.
//
// The headers are those of the tightest limit: RateLimit-Policy and
// RateLimit (draft-ietf-httpapi-ratelimit-headers), X-RateLimit-Limit,
// -Remaining and -Reset, as the policy's response.headers selects, and
// Retry-After on a denial. They are stored in the response's header map
// under the spellings sent, which are not Go's canonical forms
// ("Ratelimit", "X-Ratelimit-Remaining"), so http.Header.Get does not see
// them: read them as w.Header()["RateLimit"].
package middleware
