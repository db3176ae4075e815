package grpcserver

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/intake"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// NamespaceExtension is the context extension that names the namespace
// whose policies decide an ext_authz check. Envoy sets it from the
// route's configuration (ext_authz per-route check_settings
// context_extensions): the operator's choice, like the {namespace} of the
// HTTP endpoint's URL, never the client's.
const NamespaceExtension = "namespace"

var authzService = authv3.Authorization_ServiceDesc.ServiceName

// authz is envoy.service.auth.v3.Authorization over the Checker.
type authz struct {
	authv3.UnimplementedAuthorizationServer
	s     *Server
	state sync.Pool // *authzState
}

// authzState is the per-check memory, pooled.
type authzState struct {
	req     policy.Request
	out     check.Outcome
	headers checkhttp.HeaderScratch
	w       recorder
	buf     []byte // AppendDenial's scratch, apart from the body it writes
}

func registerAuthz(s *Server) {
	a := &authz{s: s}
	a.state.New = func() any { return &authzState{} }
	authv3.RegisterAuthorizationServer(s.grpc, a)
}

// Check answers every check with a CheckResponse, never an RPC error: a
// request that cannot be read, or a check that fails, is a denial with a
// problem body, so that no failure of Sluice's turns into Envoy's
// failure_mode_allow.
func (a *authz) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	resp, code := a.check(ctx, req)
	a.s.metrics.authz.answered(code)
	return resp, nil
}

// check decides req; the code is the answer's status code.
func (a *authz) check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, codes.Code) {
	st := a.state.Get().(*authzState)
	defer func() {
		st.req.Header = nil // do not keep the request's headers alive in the pool
		a.state.Put(st)
	}()
	st.w.reset()
	attrs := req.GetAttributes()
	namespace, err := a.namespace(attrs)
	if err == nil {
		err = readRequest(attrs, a.s.opts.TrustedProxies, &st.req)
	}
	if err != nil {
		checkhttp.WriteProblem(&st.w, checkhttp.Problem{
			Type: checkhttp.ProblemBadRequest, Title: "Bad check request",
			Status: http.StatusBadRequest, Detail: err.Error(),
		})
		return denied(codes.InvalidArgument, "bad check request: "+err.Error(), &st.w), codes.InvalidArgument
	}
	ctx, span := a.s.opts.Tracer.StartGRPC(ctx, tracing.IntakeExtAuthz, namespace)
	err = a.s.opts.Checker.CheckInto(ctx, check.Input{Namespace: namespace, Request: &st.req}, &st.out)
	span.End(&st.out, err)
	if err != nil {
		p := checkhttp.CheckFailedProblem(err)
		checkhttp.WriteProblem(&st.w, p)
		if p.Status == http.StatusBadRequest { // more limits than one check evaluates
			return denied(codes.InvalidArgument, "bad check request: "+err.Error(), &st.w), codes.InvalidArgument
		}
		a.s.opts.Logger.Error("check failed", "err", err)
		return denied(codes.Internal, "check failed: "+err.Error(), &st.w), codes.Internal
	}
	out := &st.out
	checkhttp.AppendHeaders(st.w.header, out, a.s.opts.Now(), &st.headers)
	resp, code := a.answer(st)
	resp.DynamicMetadata = a.s.ruleMetadata(out)
	return resp, code
}

// answer renders the decision in st.out: allowed with the rate-limit
// headers, or denied with its status, headers and body.
func (a *authz) answer(st *authzState) (*authv3.CheckResponse, codes.Code) {
	out := &st.out
	if out.Allowed {
		headers := headerOptions(st.w.header)
		ok := &authv3.OkHttpResponse{
			Headers:              headers, // to the upstream
			ResponseHeadersToAdd: headers, // to the client
		}
		if v := checkhttp.OverLimit(out); v != "" {
			ok.Headers = append(slices.Clip(headers), &corev3.HeaderValueOption{ // the upstream's only
				Header:       &corev3.HeaderValue{Key: checkhttp.OverLimitHeader, Value: v},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			})
		} else {
			ok.HeadersToRemove = overLimitRemoved // the upstream trusts no client's
		}
		return &authv3.CheckResponse{
			Status:       grpcstatus.New(codes.OK, "").Proto(),
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok},
		}, codes.OK
	}
	status := checkhttp.DenyStatus(out, http.StatusTooManyRequests)
	st.buf = checkhttp.AppendDenial(&st.w, out, status, st.buf)
	code := codes.PermissionDenied
	if out.Reason == check.ReasonLimited || out.Reason == check.ReasonBanned {
		code = codes.ResourceExhausted
	}
	return denied(code, string(out.Reason), &st.w), code
}

// namespace is the check's namespace: the route's context extension, else
// the configured default.
func (a *authz) namespace(attrs *authv3.AttributeContext) (string, error) {
	ns, ok := attrs.GetContextExtensions()[NamespaceExtension]
	if !ok {
		if a.s.opts.DefaultNamespace == "" {
			return "", attrError("attributes.context_extensions."+NamespaceExtension, "missing, and the endpoint has no --grpc-default-namespace")
		}
		return a.s.opts.DefaultNamespace, nil
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", attrError("attributes.context_extensions."+NamespaceExtension, "%q is not a namespace name", intake.Excerpt(ns))
	}
	return ns, nil
}

// AttributeError is a problem with an attribute of a check request; it
// names the attribute. It is answered with a 400 denial, never an allow.
type AttributeError struct {
	Attribute string
	Reason    string
}

func (e *AttributeError) Error() string { return e.Attribute + ": " + e.Reason }

func attrError(attr, format string, args ...any) error {
	return &AttributeError{Attribute: attr, Reason: fmt.Sprintf(format, args...)}
}

const (
	attrHTTP    = "attributes.request.http"
	attrMethod  = attrHTTP + ".method"
	attrHost    = attrHTTP + ".host"
	attrPath    = attrHTTP + ".path"
	attrHeaders = attrHTTP + ".headers"
	attrSource  = "attributes.source.address.socket_address.address"
)

// attrFields names each field intake.Read may refuse by its attribute.
var attrFields = map[intake.Field]string{
	intake.FieldMethod: attrMethod, intake.FieldHost: attrHost, intake.FieldTarget: attrPath,
	intake.FieldHeaders: attrHeaders, intake.FieldClientAddress: attrSource,
}

// readRequest maps the check's attributes onto the intake, the source
// address being the peer, and reads the original request into out.
func readRequest(attrs *authv3.AttributeContext, trusted *clientip.TrustedProxies, out *policy.Request) error {
	h := attrs.GetRequest().GetHttp()
	if h == nil {
		return attrError(attrHTTP, "missing")
	}
	o := intake.Original{Method: h.GetMethod(), Authority: h.GetHost(), Target: h.GetPath()}
	var err error
	if o.Header, err = readHeaders(h); err == nil {
		if o.Peer, err = sourceAddress(attrs); err == nil {
			err = intake.Read(&o, trusted, out)
		}
	}
	if err != nil {
		f, _ := intake.FieldOf(err)
		return attrError(attrFields[f], "%v", err)
	}
	return nil
}

// readHeaders builds the request's header section from the headers map
// (keys lower case, repeated headers joined by Envoy) or, with Envoy's
// encode_raw_headers, from header_map.
func readHeaders(h *authv3.AttributeContext_HttpRequest) (http.Header, error) {
	s := intake.HeaderSection{Header: make(http.Header, len(h.GetHeaders()))}
	for k, v := range h.GetHeaders() {
		if err := s.Add(k, v); err != nil {
			return nil, err
		}
	}
	for _, hv := range h.GetHeaderMap().GetHeaders() {
		v := hv.GetValue()
		if raw := hv.GetRawValue(); raw != nil {
			v = string(raw)
		}
		if err := s.Add(hv.GetKey(), v); err != nil {
			return nil, err
		}
	}
	return s.Header, nil
}

// sourceAddress is the peer of the original request: Envoy's downstream
// address. Without a socket address (a pipe) the client is unknown, and
// policies keyed by {client_ip} apply their onMissingKey.
func sourceAddress(attrs *authv3.AttributeContext) (netip.Addr, error) {
	sa := attrs.GetSource().GetAddress().GetSocketAddress()
	if sa == nil {
		return netip.Addr{}, nil
	}
	return intake.ReadAddress(sa.GetAddress())
}

// denied is a denial with the recorded status, headers and body.
func denied(code codes.Code, message string, w *recorder) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status: grpcstatus.New(code, message).Proto(),
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(w.status)}, //nolint:gosec // an HTTP status, 100..599
			Headers: headerOptions(w.header),
			Body:    string(w.body),
		}},
	}
}

// overLimitRemoved removes checkhttp.OverLimitHeader from a request over
// no soft limit: one the client sent would otherwise reach the upstream.
var overLimitRemoved = []string{strings.ToLower(checkhttp.OverLimitHeader)}

// headerOptions turns the rendered headers into Envoy's, each replacing
// any header of the same name, so that a client cannot pass its own
// rate-limit headers on to the upstream beside Sluice's.
func headerOptions(h http.Header) []*corev3.HeaderValueOption {
	if len(h) == 0 {
		return nil
	}
	opts := make([]*corev3.HeaderValueOption, 0, len(h))
	for _, k := range slices.Sorted(maps.Keys(h)) { // the same answer, the same bytes
		for _, v := range h[k] {
			opts = append(opts, &corev3.HeaderValueOption{
				Header:       &corev3.HeaderValue{Key: k, Value: v},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			})
		}
	}
	return opts
}

// recorder is the http.ResponseWriter checkhttp's renderers write an
// answer into, for it to be carried in a CheckResponse.
type recorder struct {
	header http.Header
	status int
	body   []byte
}

func (r *recorder) reset() {
	r.header = make(http.Header, 8) // the CheckResponse keeps the last one's values
	r.status = http.StatusOK
	r.body = r.body[:0]
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) { r.status = status }

func (r *recorder) Write(b []byte) (int, error) {
	r.body = append(r.body, b...)
	return len(b), nil
}
