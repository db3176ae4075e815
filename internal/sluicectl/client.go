package sluicectl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The admin API's group and version; the APIService that serves it in a
// cluster is named after them.
var adminGroupVersion = schema.GroupVersion{Group: "admin.ratelimit.sluice.dev", Version: "v1alpha1"}

const apiServiceName = "v1alpha1.admin.ratelimit.sluice.dev"

// call is one request to the admin API and how to show its answer.
type call struct {
	command   string // as typed: "reset", "override set"
	verb      string // HTTP method
	namespace string
	policy    string // empty for explain
	sub       string // explain, or what of the policy: keys, top, bans, overrides
	key       string
	query     url.Values
	body      any
	need      permission
	render    renderer
}

// permission is what Sluice authorizes a call against: a verb on a
// subresource of ratelimitpolicies in ratelimit.sluice.dev (the admin
// API's call table holds the same; TestPermissionsAreTheCallTable).
type permission struct{ verb, subresource string }

// ownResource is the call's resource in the admin API's group, which
// kube-apiserver authorizes before it hands the call on.
func (c *call) ownResource() string {
	if c.policy == "" {
		return c.sub
	}
	return "ratelimitpolicies/" + c.sub
}

// ownVerb is the verb kube-apiserver authorizes the call's method as.
func (c *call) ownVerb() string {
	return map[string]string{"GET": "get", "POST": "create", "PUT": "update", "DELETE": "delete"}[c.verb]
}

// target is where calls go: the REST client and whether it reaches a
// cluster (through the API server) or local mode's admin listener.
type target struct {
	client  rest.Interface
	cluster bool
	where   string // the server's address, for messages
}

// connect makes the REST client: on --server without credentials, else
// from the kubeconfig as kubectl reads it (its credentials as they are:
// client certificates, tokens, exec plugins).
func connect(o *options) (*target, error) {
	var cfg *rest.Config
	if o.server != "" {
		cfg = &rest.Config{Host: o.server}
	} else {
		// A --kubeconfig or --context that names nothing is a bad
		// argument; a kubeconfig that does not work is an error.
		if o.kubeconfig != "" {
			if _, err := os.Stat(o.kubeconfig); err != nil {
				return nil, usagef("--kubeconfig %q: %v", o.kubeconfig, errors.Unwrap(err))
			}
		}
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = o.kubeconfig
		overrides := &clientcmd.ConfigOverrides{CurrentContext: o.context}
		loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
		if raw, err := loader.RawConfig(); err == nil && o.context != "" && raw.Contexts[o.context] == nil {
			return nil, usagef("--context %q: the kubeconfig has no such context", o.context)
		}
		var err error
		if cfg, err = loader.ClientConfig(); err != nil {
			return nil, &cliError{code: ExitError, err: err,
				hint: "the plugin reads the kubeconfig as kubectl does (--kubeconfig, KUBECONFIG, ~/.kube/config; --context); for local mode give --server URL"}
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.APIPath = "/apis"
	cfg.GroupVersion = &adminGroupVersion
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	cfg.UserAgent = "kubectl-sluice"
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &target{client: c, cluster: o.server == "", where: cfg.Host}, nil
}

// do makes the call and returns the answer's body.
func (t *target) do(ctx context.Context, c *call) ([]byte, error) {
	req := t.client.Verb(c.verb).Namespace(c.namespace)
	if c.policy == "" {
		req = req.Resource(c.sub)
	} else {
		req = req.Resource("ratelimitpolicies").Name(c.policy).SubResource(c.sub)
	}
	for k, vs := range c.query {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	if c.body != nil {
		b, err := json.Marshal(c.body)
		if err != nil {
			return nil, err
		}
		req = req.SetHeader("Content-Type", "application/json").Body(b)
	}
	// Error, unlike Raw, reads a failure's metav1.Status: its message and
	// reason.
	res := req.Do(ctx)
	if err := res.Error(); err != nil {
		return nil, t.explainError(ctx, c, err)
	}
	return res.Raw()
}

// cliError is a failure with the exit code it maps to and a hint of what
// to do.
type cliError struct {
	code int
	err  error
	hint string
}

func (e *cliError) Error() string {
	if e.hint == "" {
		return e.err.Error()
	}
	return e.err.Error() + "\nhint: " + e.hint
}

func (e *cliError) Unwrap() error { return e.err }

// explainError maps a failed call to its exit code and a hint.
func (t *target) explainError(ctx context.Context, c *call, err error) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		var netErr *url.Error
		if errors.As(err, &netErr) {
			return &cliError{code: ExitError, err: err, hint: t.unreachableHint()}
		}
		return &cliError{code: ExitError, err: err}
	}
	where := "namespace " + c.namespace
	switch {
	case apierrors.IsUnauthorized(err):
		return &cliError{code: ExitUnauthorized, err: err,
			hint: "the API server did not accept your credentials; 'kubectl auth whoami' shows whether kubectl's are valid (the plugin uses the same kubeconfig)"}
	case apierrors.IsForbidden(err) && refusedByAPIServer(status):
		return &cliError{code: ExitForbidden, err: err,
			hint: fmt.Sprintf("the API server refused the call before it reached Sluice: %s needs %s on %s in API group %s (and %s on ratelimitpolicies/%s in ratelimit.sluice.dev, which Sluice checks next); Sluice's ClusterRole %s grants both; ask for it in %s",
				c.command, c.ownVerb(), c.ownResource(), adminGroupVersion.Group, c.need.verb, c.need.subresource, roleFor(c.need), where)}
	case apierrors.IsForbidden(err):
		return &cliError{code: ExitForbidden, err: err,
			hint: fmt.Sprintf("%s needs %s on ratelimitpolicies/%s in %s; check with 'kubectl auth can-i %s ratelimitpolicies.ratelimit.sluice.dev --subresource=%s -n %s'",
				c.command, c.need.verb, c.need.subresource, where, c.need.verb, c.need.subresource, c.namespace)}
	case apierrors.IsNotFound(err):
		if !t.served(ctx) {
			return &cliError{code: ExitError, err: err, hint: t.notServedHint()}
		}
		return &cliError{code: ExitNotFound, err: err}
	case apierrors.IsServiceUnavailable(err) && t.cluster:
		return &cliError{code: ExitError, err: err,
			hint: fmt.Sprintf("the APIService %s is registered but its server does not answer: 'kubectl get apiservice %s' says why; Sluice's controller Deployment serves it", apiServiceName, apiServiceName)}
	case apierrors.IsBadRequest(err) || apierrors.IsInvalid(err):
		return &cliError{code: ExitUsage, err: err}
	}
	return &cliError{code: ExitError, err: err}
}

// roleFor names the ClusterRole that grants what a command needs: reading
// is sluice-admin-view's, changing sluice-admin-edit's
// (config/rbac/admin_user_roles.yaml).
func roleFor(need permission) string {
	if need.verb == "get" {
		return "sluice-admin-view (aggregated into view, edit and admin)"
	}
	return "sluice-admin-edit (aggregated into edit and admin)"
}

// refusedByAPIServer tells kube-apiserver's own refusal (it authorizes a
// call to an aggregated API on that API's group before handing it on) from
// Sluice's, which names no group.
func refusedByAPIServer(status apierrors.APIStatus) bool {
	d := status.Status().Details
	return d != nil && d.Group == adminGroupVersion.Group
}

// served tells whether the admin API's discovery answers, which tells a
// missing policy from an admin API that is not there at all.
func (t *target) served(ctx context.Context) bool {
	err := t.client.Get().Do(ctx).Error()
	return err == nil || !apierrors.IsNotFound(err)
}

func (t *target) notServedHint() string {
	if t.cluster {
		return fmt.Sprintf("the API server at %s does not serve %s: the APIService %s is missing ('kubectl get apiservice %s'); install Sluice with its admin API",
			t.where, adminGroupVersion, apiServiceName, apiServiceName)
	}
	return fmt.Sprintf("%s serves no Sluice admin API: --server wants the address of 'manager local --admin-listen'", t.where)
}

func (t *target) unreachableHint() string {
	if t.cluster {
		return fmt.Sprintf("cannot reach the API server at %s: does 'kubectl get --raw /apis/%s' work with this kubeconfig and context?", t.where, adminGroupVersion)
	}
	return fmt.Sprintf("cannot reach %s: is 'manager local --admin-listen' running there?", strings.TrimSuffix(t.where, "/"))
}
