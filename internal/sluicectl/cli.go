// Package sluicectl is the kubectl plugin `kubectl sluice`: day-two
// operations on Sluice's admin API (explain a request, inspect and reset a
// key, top offenders, bans, run-time overrides), in a cluster through the
// API server with the user's kubeconfig, or in local mode on the admin
// listener. It parses the command line, makes one call and renders the
// answer as a table, JSON or YAML, with exit codes scripts can test.
package sluicectl

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sluice-dev/sluice/internal/adminapi"
)

// Exit codes, documented in Usage and the README.
const (
	ExitOK           = 0 // done
	ExitError        = 1 // any other failure: unreachable, server error
	ExitUsage        = 2 // bad usage: the command line, or an argument the server refused (400)
	ExitUnauthorized = 3 // the API server did not accept the credentials (401)
	ExitForbidden    = 4 // the caller lacks the permission the command needs (403)
	ExitNotFound     = 5 // no such namespace, policy or limit (404)
)

// Usage is the help text.
const Usage = `kubectl sluice: day-two operations on Sluice rate limits.

Usage:
  kubectl sluice explain NAMESPACE --url URL [--method M] [--client-ip IP] [--header K=V]... [--transport T]
  kubectl sluice inspect NAMESPACE/POLICY KEY
  kubectl sluice reset NAMESPACE/POLICY KEY [--limit NAME]
  kubectl sluice top NAMESPACE/POLICY [--window DURATION]
  kubectl sluice bans NAMESPACE/POLICY
  kubectl sluice lift NAMESPACE/POLICY KEY
  kubectl sluice override set NAMESPACE/POLICY KEY NAME=NUMBER... [--expires DURATION|TIME]
  kubectl sluice override list NAMESPACE/POLICY
  kubectl sluice override delete NAMESPACE/POLICY KEY

KEY is a key value as the policy's key template renders it (203.0.113.7 for
{client_ip}, acme for {header:X-Tenant}). explain and inspect count nothing.

Flags:
      --server URL            local mode: the address of 'manager local --admin-listen'
                              (no authentication); without it, the cluster of the kubeconfig
      --kubeconfig PATH       the kubeconfig (default: KUBECONFIG, then ~/.kube/config)
      --context NAME          the kubeconfig context (default: its current context)
  -o, --output FORMAT         table (default), json or yaml
      --request-timeout DUR   give up after this long (default 30s)
      --url URL               explain: the request's absolute URL
      --method M              explain: the request's method (default GET)
      --client-ip IP          explain: the request's client address
      --header K=V            explain: a request header (repeat for more)
      --transport T           explain: what the request comes through, which decides what a
                              concurrency limit gets: http (default: the auth hooks of nginx,
                              ForwardAuth, Envoy ext_authz over HTTP), ext-authz-grpc, v1-check
                              or middleware
      --limit NAME            reset: only this limit (default: every limit; a ban stays)
      --window DURATION       top: the last minutes counted, 1m to 15m (default 5m)
      --expires DURATION|TIME override set: expire after a duration (48h) or at an
                              RFC 3339 time (2026-12-31T00:00:00Z); default never
  -h, --help                  this text

Exit codes:
  0  done
  1  error (the API unreachable, a server error)
  2  bad usage: the command line, or an argument the server refused
  3  unauthorized: the API server did not accept your credentials
  4  forbidden: you lack the permission the command needs
  5  not found: no such namespace, policy or limit
`

// options are the flags of every command; parse refuses those given to a
// command that does not take them.
type options struct {
	server, kubeconfig, context, output string
	timeout                             time.Duration

	url, method, clientIP string
	headers               []string
	transport             string
	limit                 string
	window                string
	expires               string
}

// commandFlags names the flags only some commands take.
var commandFlags = map[string][]string{
	"url": {"explain"}, "method": {"explain"}, "client-ip": {"explain"}, "header": {"explain"}, "transport": {"explain"},
	"limit": {"reset"}, "window": {"top"}, "expires": {"override set"},
}

// usageError is a mistake on the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errHelp asks for the help text.
var errHelp = errors.New("help requested")

// parse reads a command line into the call it asks for and the options
// that say where and how.
func parse(args []string) (*call, *options, error) {
	var o options
	fs := pflag.NewFlagSet("kubectl sluice", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.server, "server", "", "")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "")
	fs.StringVar(&o.context, "context", "", "")
	fs.StringVarP(&o.output, "output", "o", "table", "")
	fs.DurationVar(&o.timeout, "request-timeout", 30*time.Second, "")
	fs.StringVar(&o.url, "url", "", "")
	fs.StringVar(&o.method, "method", "", "")
	fs.StringVar(&o.clientIP, "client-ip", "", "")
	fs.StringArrayVar(&o.headers, "header", nil, "")
	fs.StringVar(&o.transport, "transport", "", "")
	fs.StringVar(&o.limit, "limit", "", "")
	fs.StringVar(&o.window, "window", "", "")
	fs.StringVar(&o.expires, "expires", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, nil, errHelp
		}
		return nil, nil, usageError{err.Error()}
	}
	switch o.output {
	case "table", "json", "yaml":
	default:
		return nil, nil, usagef("--output %q: want table, json or yaml", o.output)
	}
	if o.timeout <= 0 {
		return nil, nil, usagef("--request-timeout %s: want a positive duration", o.timeout)
	}
	if o.server != "" {
		if u, err := url.Parse(o.server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, nil, usagef("--server %q: want the admin listener's URL, such as http://127.0.0.1:8081", o.server)
		}
		for _, flag := range []string{"kubeconfig", "context"} {
			if fs.Changed(flag) {
				return nil, nil, usagef("--%s is a flag of the kubeconfig, which --server does not read: give one or the other", flag)
			}
		}
	}
	pos := fs.Args()
	if len(pos) == 0 {
		return nil, nil, usagef("no command given")
	}
	name, pos := pos[0], pos[1:]
	if name == "override" {
		if len(pos) == 0 {
			return nil, nil, usagef("override needs a subcommand: set, list or delete")
		}
		name, pos = "override "+pos[0], pos[1:]
	}
	build, ok := commands[name]
	if !ok {
		return nil, nil, usagef("unknown command %q", name)
	}
	for flag, takers := range commandFlags {
		if fs.Changed(flag) && !contains(takers, name) {
			return nil, nil, usagef("--%s is a flag of %s, not of %s", flag, strings.Join(takers, ", "), name)
		}
	}
	c, err := build(pos, &o)
	if err != nil {
		return nil, nil, err
	}
	c.command = name
	return c, &o, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// commands build each command's call from its positional arguments and
// flags.
var commands = map[string]func(pos []string, o *options) (*call, error){
	"explain": func(pos []string, o *options) (*call, error) {
		if len(pos) != 1 {
			return nil, usagef("explain takes one argument, NAMESPACE (got %d)", len(pos))
		}
		ns, err := namespaceArg(pos[0])
		if err != nil {
			return nil, err
		}
		body, err := explainBody(o)
		if err != nil {
			return nil, err
		}
		return &call{verb: "POST", namespace: ns, sub: "explain", body: body,
			need: permission{"get", "keys"}, render: renderExplain}, nil
	},
	"inspect": keyCommand("GET", "keys", permission{"get", "keys"}, renderInspect),
	"reset": func(pos []string, o *options) (*call, error) {
		c, err := keyCommand("DELETE", "keys", permission{"update", "keys"}, renderReset)(pos, o)
		if err != nil {
			return nil, err
		}
		if o.limit != "" {
			if !limitName(o.limit) {
				return nil, usagef("--limit %q: want a limit name of the policy, such as per-minute (%s)", o.limit, dnsLabel)
			}
			c.query.Set("limit", o.limit)
		}
		return c, nil
	},
	"top": func(pos []string, o *options) (*call, error) {
		c, err := policyCommand("GET", "top", permission{"get", "keys"}, renderTop)(pos, o)
		if err != nil {
			return nil, err
		}
		if o.window != "" {
			if _, err := adminapi.ParseTopWindow(o.window); err != nil {
				return nil, usagef("--%v", err)
			}
			c.query.Set("window", o.window)
		}
		return c, nil
	},
	"bans":            policyCommand("GET", "bans", permission{"get", "keys"}, renderBans),
	"lift":            keyCommand("DELETE", "bans", permission{"update", "keys"}, renderDone("lifted the ban of")),
	"override list":   policyCommand("GET", "overrides", permission{"get", "overrides"}, renderOverrides),
	"override delete": keyCommand("DELETE", "overrides", permission{"update", "overrides"}, renderDone("deleted the run-time override of")),
	"override set": func(pos []string, o *options) (*call, error) {
		if len(pos) < 3 {
			return nil, usagef("override set takes NAMESPACE/POLICY KEY NAME=NUMBER... (got %d arguments)", len(pos))
		}
		c, err := keyCommand("PUT", "overrides", permission{"update", "overrides"}, renderOverride)(pos[:2], o)
		if err != nil {
			return nil, err
		}
		body := adminapi.SetOverride{Limits: map[string]int64{}}
		for _, arg := range pos[2:] {
			name, n, err := limitArg(arg)
			if err != nil {
				return nil, err
			}
			if _, dup := body.Limits[name]; dup {
				return nil, usagef("limit %q is given twice", name)
			}
			body.Limits[name] = n
		}
		if o.expires != "" {
			if body.ExpiresIn, body.Expires, err = expiresArg(o.expires); err != nil {
				return nil, err
			}
		}
		c.body = body
		return c, nil
	},
}

// policyCommand is a command on NAMESPACE/POLICY.
func policyCommand(verb, sub string, need permission, render renderer) func([]string, *options) (*call, error) {
	return func(pos []string, _ *options) (*call, error) {
		if len(pos) != 1 {
			return nil, usagef("this command takes one argument, NAMESPACE/POLICY (got %d)", len(pos))
		}
		ns, name, err := policyArg(pos[0])
		if err != nil {
			return nil, err
		}
		return &call{verb: verb, namespace: ns, policy: name, sub: sub, query: url.Values{},
			need: need, render: render}, nil
	}
}

// keyCommand is a command on NAMESPACE/POLICY KEY.
func keyCommand(verb, sub string, need permission, render renderer) func([]string, *options) (*call, error) {
	return func(pos []string, o *options) (*call, error) {
		if len(pos) != 2 {
			return nil, usagef("this command takes two arguments, NAMESPACE/POLICY KEY (got %d)", len(pos))
		}
		c, err := policyCommand(verb, sub, need, render)(pos[:1], o)
		if err != nil {
			return nil, err
		}
		if pos[1] == "" {
			return nil, usagef("KEY is empty: give the key value as the policy's key template renders it")
		}
		c.key = pos[1]
		c.query.Set("key", pos[1])
		return c, nil
	}
}

// Names are checked as Kubernetes and local mode check them (a namespace
// and a limit name are DNS labels, a policy name a DNS subdomain), so no
// name the server could not hold is sent, and none that a path would
// read otherwise (".", "..", "%").
const dnsLabel = "lower-case letters, digits and '-', starting and ending with a letter or digit"

func namespaceName(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }
func policyName(s string) bool    { return len(validation.IsDNS1123Subdomain(s)) == 0 }
func limitName(s string) bool     { return len(validation.IsDNS1123Label(s)) == 0 }

func namespaceArg(s string) (string, error) {
	if !namespaceName(s) {
		return "", usagef("NAMESPACE %q: want a namespace name, such as shop (%s)", s, dnsLabel)
	}
	return s, nil
}

func policyArg(s string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || !namespaceName(ns) || !policyName(name) {
		return "", "", usagef("NAMESPACE/POLICY %q: want a namespace and a policy name, such as shop/per-tenant (%s; a policy name may also hold '.')", s, dnsLabel)
	}
	return ns, name, nil
}

// limitArg reads NAME=NUMBER, the number a positive integer.
func limitArg(s string) (string, int64, error) {
	name, num, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return "", 0, usagef("%q: want NAME=NUMBER, such as per-minute=1000", s)
	}
	if !limitName(name) {
		return "", 0, usagef("%q: the limit name %q is not one a policy can have (%s)", s, name, dnsLabel)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 1 {
		return "", 0, usagef("%q: the number %q is not a positive integer", s, num)
	}
	return name, n, nil
}

// expiresArg reads --expires: a positive duration or an RFC 3339 time.
func expiresArg(s string) (in string, at *time.Time, err error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return "", &t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return "", nil, usagef("--expires %q: want a duration such as 48h or an RFC 3339 time such as 2026-12-31T00:00:00Z", s)
	}
	if d <= 0 {
		return "", nil, usagef("--expires %q: want a positive duration", s)
	}
	return s, nil, nil
}

func explainBody(o *options) (adminapi.ExplainRequest, error) {
	if o.url == "" {
		return adminapi.ExplainRequest{}, usagef("explain needs --url, the request's absolute URL")
	}
	if u, err := url.Parse(o.url); err != nil || !u.IsAbs() || u.Host == "" {
		return adminapi.ExplainRequest{}, usagef("--url %q: want an absolute URL such as https://shop.example.com/api/cart", o.url)
	}
	if o.clientIP != "" && net.ParseIP(o.clientIP) == nil {
		return adminapi.ExplainRequest{}, usagef("--client-ip %q: want an IP address such as 203.0.113.7", o.clientIP)
	}
	if o.transport != "" && !slices.Contains(adminapi.Transports, o.transport) {
		return adminapi.ExplainRequest{}, usagef("--transport %q: want one of %s", o.transport, strings.Join(adminapi.Transports, ", "))
	}
	body := adminapi.ExplainRequest{URL: o.url, Method: o.method, ClientIP: o.clientIP, Transport: o.transport}
	for _, h := range o.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return adminapi.ExplainRequest{}, usagef("--header %q: want K=V, such as X-Tenant=acme", h)
		}
		if body.Headers == nil {
			body.Headers = map[string][]string{}
		}
		body.Headers[k] = append(body.Headers[k], v)
	}
	return body, nil
}
