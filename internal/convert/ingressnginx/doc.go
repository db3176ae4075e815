// Package ingressnginx turns the rate limits of ingress-nginx Ingress
// manifests into RateLimitPolicy objects that decide the same, and
// reports by file, line, Ingress and annotation whatever it cannot carry
// over exactly. It parses and converts; it reads no files and writes
// nothing but to the writers it is given.
//
// # ingress-nginx's semantics
//
// Read from its source (kubernetes/ingress-nginx, controller v1.9 and
// later: internal/ingress/annotations/ratelimit, annotations/parser, the
// controller's server and location building, and nginx.tmpl) and from
// nginx's ngx_http_limit_req_module.c:
//
// Annotations. limit-rps, limit-rpm and limit-connections are read with
// strconv.Atoi ("+5" and "05" are 5; " 5", "5.0" and "ten" are not
// integers). With annotation validation (on by default since v1.9) a value
// that is not an integer makes ingress-nginx refuse the whole Ingress (the
// admission webhook rejects it; the controller skips it); without, the
// annotation is read as 0. A value of 0 or less sets no limit.
// limit-burst-multiplier (default 5) falls back to 5 when it is not an
// integer; a negative one makes a negative burst, which nginx refuses
// ("invalid burst value"), so no configuration with the Ingress loads.
// limit-allowlist, or its older name limit-whitelist when the first is
// empty, is a comma-separated list of CIDRs or addresses, each trimmed
// (net.ParseCIDR, then net.ParseIP; an empty element, as a trailing
// comma makes, is refused with the Ingress). limit-rate and
// limit-rate-after (KB/s and KB for each response) fall back to the
// ConfigMap's values when they are not integers. The global-rate-limit
// annotations were removed in v1.12. A canary Ingress's own locations are
// never built: its traffic goes through the main Ingress's locations and
// their limits.
//
// Zones. For each Ingress with a limit, ingress-nginx writes
//
//	geo $remote_addr $whitelist_ID { default 0; CIDR 1; ... }
//	map $whitelist_ID $limit_ID { 0 $binary_remote_addr; 1 ""; }
//	limit_req_zone $limit_ID zone=NS_NAME_UID_rps:5m rate=Nr/s;
//	limit_req_zone $limit_ID zone=NS_NAME_UID_rpm:5m rate=Mr/m;
//
// ($binary_remote_addr is the ConfigMap's limit-conn-zone-variable) and,
// in every location of the Ingress, on every host and path,
//
//	limit_conn NS_NAME_UID_conn C;
//	limit_req zone=NS_NAME_UID_rps burst=N*multiplier nodelay;
//	limit_req zone=NS_NAME_UID_rpm burst=M*multiplier nodelay;
//	limit_rate_after Ak; limit_rate Rk;
//
// So one bucket per client address is shared by all the Ingress's hosts
// and paths, and nothing else; a whitelisted client's key is "", which
// limit_req never counts. A rejected request gets the ConfigMap's
// limit-req-status-code, 503 by default.
//
// limit_req. A zone's rate is kept in thousandths of a request per
// second, rounded down (rate*1000 for r/s, rate*1000/60 for r/m: 10r/m is
// 166), and each key's node holds excess (thousandths of a request) and
// the time of the last admitted request (ms, the event loop's cached
// clock). A request computes excess = max(0, excess - rate*ms/1000 + 1000)
// with ms the time since then, rate*ms/1000 rounded down; it is rejected
// when excess > burst*1000, and otherwise admitted and the excess stored
// (with the time, when it moved). A new key is admitted with excess 0. So
// burst=B admits B+1 requests at once, then one every 1/rate. With
// nodelay nothing is delayed. Several limit_req in a location decide
// together: each zone is looked up in order, the first that would reject
// rejects the request, and only a request every zone admits is stored in
// all of them (ngx_http_limit_req_account).
//
// # The conversion
//
// Each Ingress with limit-rps or limit-rpm above 0 becomes one policy
// named after it (a DNS label; another name is made one, with a hash),
// in its namespace, with key {client_ip} (one bucket per client address,
// the address nginx's auth request sends as X-Real-IP and X-Forwarded-For
// from $remote_addr), and one gcra limit per zone: limit-rps N as
// "rps: gcra rate N per 1s", limit-rpm M as "rpm: gcra rate M per 1m",
// each with burst N*multiplier+1.
//
// Why gcra and why +1: GCRA keeps a level that drains continuously at
// rate and admits a request when level+1 fits in burst. Writing nginx's
// state as level = excess/1000 + 1 after each admitted request, nginx's
// step excess' = max(0, excess - drained + 1000) <= B*1000 is exactly
// level' = max(0, level - drained) + 1 <= B+1, the GCRA step with burst
// B+1, and a new key (excess 0) is GCRA's first request (level 1). A
// rejected request changes neither. Sluice decides a request's limits all
// or nothing, as nginx decides its zones, so the rps and rpm limits of
// one policy are nginx's two limit_req lines. (A token bucket would not
// do: Sluice's refills in whole tokens at intervals, nginx's drain is
// continuous.) The test TestDecidesAsLimitReq runs a port of the module's
// arithmetic beside the engine's model of every converted policy on random
// timelines: every decision is the same.
//
// The two differ only below nginx's resolution. nginx counts time in
// whole milliseconds of a clock cached per event loop iteration, where
// Sluice reads Redis's (or the process's) clock in microseconds; and when
// rate*ms/1000 is not whole, nginx drops the fraction of a thousandth of a
// request at each admitted request, where Sluice drains exactly. Where
// nginx's rate itself is not a whole number of thousandths of a request
// per second (r/m not a multiple of 3), the limit states nginx's rounded
// rate: rate 166 per 1000s for 10r/m.
//
// limit-allowlist (limit-whitelist) becomes match.exemptClients, the
// networks canonical (10.1.2.3/8 is 10.0.0.0/8), at most 64.
//
// Which requests. ingress-nginx builds an nginx location from each path
// of each rule: Exact "/a" is "location = /a"; Prefix "/a" is "location
// /a/" and "location = /a" (element-wise: "/ab" is not under it), and
// Prefix "/a/" only "location /a/" ("/a" is not under it); Prefix "/" is
// "location /"; ImplementationSpecific (the default of v1beta1) is
// "location /a", nginx's string prefix ("/ab" is under it). The policy's
// paths say the same: "/a"; "/a" and "/a/*"; "/a/*"; every path;
// "/a*". Its hosts are the rules' hosts and the server-alias names (any
// host for a rule without one, or a default backend alone: ingress-nginx's
// catch-all server). With use-regex or a rewrite-target, ingress-nginx
// writes every path of the Ingress's hosts as a case-insensitive regular
// expression, which a policy's paths cannot hold: the policy then matches
// every path. The same goes for a path with '*', '?', '#' or a space in
// it, and for more than 32 paths or 16 hosts.
//
// The auth-url the converter proposes names the policy:
// /check/$namespace/POLICY?host=$host. nginx asks it from exactly the
// Ingress's locations, the requests limit_req counted in the Ingress's
// zone, and Sluice checks that policy alone, so a request a more specific
// path of another Ingress takes is never counted here, and a policy whose
// match is wider than the Ingress (every path after use-regex, the hosts
// times the paths of rules with different paths) still counts only what
// nginx counted. The match says which requests the policy is for when it
// is asked through /check/$namespace, or after its hosts and paths are
// replaced by targetRefs to the HTTPRoute that replaces the Ingress.
//
// Reported as errors (no policy for the Ingress): values ingress-nginx
// refuses (limit-rps, limit-rpm or limit-connections not an integer, a
// whitelist entry that is neither a CIDR nor an address, a negative
// multiplier with a limit), an Ingress read twice, and input that is not
// YAML. As inexact: limit-connections (a limit on open connections, not
// requests), limit-rate and limit-rate-after (bandwidth), global-rate-limit
// and its companions, an auth-url of another service already on the
// Ingress (nginx asks one auth service per location), more than 64 exempt
// networks, and limits beyond the API's bounds (10^9). As notes: what
// ingress-nginx also ignores or sets no limit for, a canary Ingress, and
// matches widened as above.
//
// Not reported per line, and said in the README: through auth-url,
// Sluice's denials reach clients as 403 (nginx's auth_request allows no
// other denial status), where limit_req answered limit-req-status-code
// (503 by default); the 429 example's snippet can answer any status.
// limit_req runs in nginx's preaccess phase, before auth_request and
// allow/deny: a request an allow-list or basic auth then refuses was
// counted by limit_req but never reaches Sluice. ingress-nginx gives a
// host's root location, which takes the requests for paths no Ingress
// serves, the annotations of the host's oldest Ingress: limit_req counted
// those 404s in its zone, and the policy, whose paths are the Ingress's
// own, leaves them alone. A ConfigMap limit-conn-zone-variable other than
// $binary_remote_addr keys nginx's zones otherwise: edit the key. And a
// Redis outage answers by the policy's failureMode (Open unless
// --failure-mode says otherwise), where nginx's zones never fail.
package ingressnginx
