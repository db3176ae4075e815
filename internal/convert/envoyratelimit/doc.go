// Package envoyratelimit turns envoyproxy/ratelimit YAML configuration into
// RateLimitPolicy objects that decide the same, and reports by file and
// line whatever it cannot carry over exactly. It parses and converts; it
// reads no files and writes nothing but to the writers it is given.
//
// # envoyproxy/ratelimit's semantics
//
// Read from its source (github.com/envoyproxy/ratelimit, src/config,
// src/limiter, src/redis and src/service, as of 2026-01):
//
// Loading. A file is one YAML document (further documents are ignored)
// holding a domain and a list of descriptors, each with a key, an optional
// value, an optional rate_limit and nested descriptors. Every mapping key
// anywhere must be one of domain, key, value, descriptors, rate_limit, unit,
// requests_per_unit, unlimited, shadow_mode, quota_mode, name, replaces,
// detailed_metric, value_to_metric and share_threshold (one flat set: a
// valid key in the wrong place is ignored); lists must hold mappings, and a
// float anywhere is refused. YAML is read as YAML 1.1 (gopkg.in/yaml.v2):
// yes/no/on/off are booleans, and a repeated mapping key silently takes the
// last value. A node's map key is "key_value", or "key" without a value (an
// empty value is no value); two siblings with the same map key, an empty key
// or domain, a domain in two files (unless MERGE_DOMAIN_CONFIG, which merges
// their top-level descriptors in an unspecified file order), a unit other
// than SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR (any case) without
// unlimited, a unit with unlimited, an empty or self-naming replaces entry,
// and share_threshold on a value not ending in '*' make the whole
// configuration fail to load.
//
// Matching. Each descriptor of a request is looked up on its own. Entry i
// of the descriptor picks one child of the node picked for entry i-1 (the
// domain's descriptors for entry 0), in this order: the child whose map key
// is exactly key+"_"+value; else the first wildcard child (a map key ending
// in '*', in load order) whose map key without the '*' is a prefix of
// key+"_"+value; else the child whose map key is the entry's key alone (any
// value). There is no backtracking: a child picked for entry i that has no
// match for entry i+1 ends the walk without a limit, even when a less
// specific sibling would have matched. The limit is the rate_limit of the
// node picked for the last entry, so a descriptor must have exactly as many
// entries as the node's depth: fewer or more entries find no limit (an
// intermediate node's rate_limit applies to descriptors of its own depth).
// A node without rate_limit still takes the descriptors it matches away
// from its siblings, which then get no limit: that is how a value is
// exempted. unlimited: true answers OK and counts nothing.
//
// Counting. A limit is a fixed window of requests_per_unit requests per
// unit, aligned to the clock: the window starts at now/unit*unit (Unix
// seconds), with SECOND 1 s, MINUTE 60 s, HOUR 3600 s, DAY 86400 s, WEEK
// 7 days (from Thursday 00:00 UTC, the epoch's weekday), MONTH 30 days and
// YEAR 365 days (not calendar months or years). The counter is the Redis key
// prefix+domain+"_"+ key+"_"+value+"_" for every entry + window start: one
// bucket per distinct descriptor, whatever node matched it. share_threshold
// on a wildcard node puts its pattern ("files*") in place of the entry's
// value, so all values matching the wildcard share one bucket, also when the
// rate_limit is on a node below it. Every descriptor of a request is counted
// (INCRBY hits_addend, default 1) whether or not another is over its limit,
// and the count goes on past the limit; a descriptor is OVER_LIMIT when its
// count after the increment exceeds requests_per_unit (so 0 denies all).
// With STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT a request with a descriptor
// over its limit increments only the descriptors that are over.
//
// Modes and the rest. shadow_mode (on the node with the rate_limit) counts
// and reports but turns OVER_LIMIT into OK; quota_mode does the same and
// also lists the violation in the response's dynamic metadata. Neither is
// inherited by nested nodes. name names a limit; replaces lists names of
// limits that must not apply to a request when this limit (or an unlimited
// node naming them) matched any descriptor of the same request: the replaced
// descriptor is then OK and not counted. detailed_metric and value_to_metric
// change only the statistics' names. A Redis error fails the whole call with
// a gRPC error, and Envoy's rate limit filter then allows the request unless
// it is configured with failure_mode_deny: true.
//
// # The conversion
//
// Every node with a rate_limit becomes one descriptor policy: match.domain
// is the file's domain, match.descriptor the entries from the top node down
// (value exact, "x*" a prefix, unset for a key-only node), one fixedWindow
// limit with alignment Clock and the unit's window, mode Shadow for
// shadow_mode, the limit's own mode Soft for quota_mode (counted, never
// denied, and the request flagged to the upstream by X-Sluice-Over-Limit,
// as the peer flags it in dynamic metadata), and failureMode Open (Envoy's default when the
// service cannot answer; Options.FailureMode changes it). The key is left
// unset, so Sluice's default {descriptor} counts a bucket per distinct
// descriptor as envoyproxy/ratelimit does; with share_threshold it is built
// from {descriptor:key} placeholders of the entries that do not share.
//
// Sluice applies every policy that matches, so the precedence of the walk
// is written into each policy's match.when: a policy excludes, at every
// level, the values its more specific siblings take (exact values, and
// earlier wildcards for a wildcard), computed on envoyproxy/ratelimit's own
// key+"_"+value strings. Each descriptor then matches at most the one policy
// of the node envoyproxy/ratelimit would pick, and none where it would find
// no limit (unlimited nodes and nodes without rate_limit produce no policy
// but still exclude). A wildcard that an earlier one covers keeps only its
// literal value ("/a/b*" itself), which the exact lookup still gives it.
// requests_per_unit: 0 becomes a policy whose key reads
// an entry the descriptor cannot have, with onMissingKey Deny: every request
// denied, none counted.
//
// Reported as not exact (Inexact): replaces (Sluice decides each descriptor
// on its own, so the replaced limit still applies); a key ending in '*'
// without a value (a wildcard over key and value, which Sluice's exact keys
// cannot express); a node whose entry key also matches, through the "_"
// joining, an entry with another key of the same domain (key "a" value
// "b_c" is also key "a_b" value "c" there); an exclusion on a key that
// occurs earlier in the same descriptor (request.descriptor holds the first);
// wildcards from different merged files that overlap; and what exceeds the
// API's bounds (16 entries, 256-byte keys, 1024-byte values, a 4096-byte
// when or one over the CEL cost budget, requests_per_unit above 10^9). Reported as notes, exact in decisions:
// detailed_metric and value_to_metric (statistics only), quota_mode (a
// header to the upstream for its dynamic metadata), flags without a rate_limit, keys envoyproxy/ratelimit
// ignores, repeated keys, extra documents, unlimited nodes, nodes no
// descriptor can reach, and replaces naming no limit of the domain.
//
// Not a matter of configuration, and so not reported per line: Sluice
// decides a request's descriptors together (all counted, or none when any
// is over its limit), where envoyproxy/ratelimit counts every descriptor
// regardless; a request's hits_addend and a descriptor's own limit override
// are the RLS server's to honor; and requests whose entry keys straddle the
// "_" join in ways the configuration's keys do not suggest.
package envoyratelimit
