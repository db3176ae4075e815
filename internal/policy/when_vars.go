package policy

import (
	"net/url"
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// requestVars resolves the CEL variables of one request. The header and
// query maps are built on first use and shared by every policy checked for
// the request, so requests against policies without `when` build nothing.
type requestVars struct {
	r             *Request
	headers       map[string]string
	query         map[string]string
	descriptor    map[string]string
	headersErr    ref.Val
	queryErr      ref.Val
	descriptorErr ref.Val
}

var _ interpreter.Activation = (*requestVars)(nil)

func (v *requestVars) reset(r *Request) {
	v.r = r
	v.headers = nil
	v.query = nil
	v.headersErr = nil
	v.queryErr = nil
	v.descriptor = nil
	v.descriptorErr = nil
}

// tooLarge is the value of a variable over the bounds the cost estimate
// assumed: an evaluation error, so the policy applies.
func tooLarge(name string, n, most int) ref.Val {
	return types.NewErr("%s: %d is over %d, the most a `when` expression is evaluated on", name, n, most)
}

// ResolveName implements interpreter.Activation.
func (v *requestVars) ResolveName(name string) (any, bool) {
	switch name {
	case "request.method":
		if len(v.r.Method) > maxHeaderBytes {
			return tooLarge("request.method length", len(v.r.Method), maxHeaderBytes), true
		}
		return v.r.Method, true
	case "request.host":
		if len(v.r.Host) > maxURLBytes {
			return tooLarge("request.host length", len(v.r.Host), maxURLBytes), true
		}
		return v.r.Host, true
	case "request.path":
		if len(v.r.Path) > maxURLBytes {
			return tooLarge("request.path length", len(v.r.Path), maxURLBytes), true
		}
		return v.r.Path, true
	case "request.client_ip":
		if !v.r.ClientIP.IsValid() {
			return "", true
		}
		s := v.r.ClientIP.String()
		if len(s) > maxClientIPBytes {
			return tooLarge("request.client_ip length", len(s), maxClientIPBytes), true
		}
		return s, true
	case "request.headers":
		if v.headers == nil && v.headersErr == nil {
			v.buildHeaders()
		}
		if v.headersErr != nil {
			return v.headersErr, true
		}
		return v.headers, true
	case "request.query":
		if v.query == nil && v.queryErr == nil {
			v.buildQuery()
		}
		if v.queryErr != nil {
			return v.queryErr, true
		}
		return v.query, true
	case "request.domain":
		if len(v.r.Domain) > maxDomainBytes {
			return tooLarge("request.domain length", len(v.r.Domain), maxDomainBytes), true
		}
		return v.r.Domain, true
	case "request.descriptor":
		if v.descriptor == nil && v.descriptorErr == nil {
			v.buildDescriptor()
		}
		if v.descriptorErr != nil {
			return v.descriptorErr, true
		}
		return v.descriptor, true
	}
	return nil, false
}

// buildDescriptor maps each entry's key to its value; the first entry of
// a key wins, as {descriptor:key} reads it.
func (v *requestVars) buildDescriptor() {
	d := v.r.Descriptor
	if len(d) > MaxDescriptorEntries {
		v.descriptorErr = tooLarge("request.descriptor entries", len(d), MaxDescriptorEntries)
		return
	}
	size := 0
	for i := range d {
		size += len(d[i].Key) + len(d[i].Value)
	}
	if size > MaxDescriptorBytes {
		v.descriptorErr = tooLarge("request.descriptor bytes", size, MaxDescriptorBytes)
		return
	}
	v.descriptor = make(map[string]string, len(d))
	for i := range d {
		if _, seen := v.descriptor[d[i].Key]; !seen {
			v.descriptor[d[i].Key] = d[i].Value
		}
	}
}

func (v *requestVars) buildHeaders() {
	if len(v.r.Header) > maxHeaderEntries {
		v.headersErr = tooLarge("request.headers entries", len(v.r.Header), maxHeaderEntries)
		return
	}
	v.headers = make(map[string]string, len(v.r.Header))
	for k, vals := range v.r.Header {
		if len(vals) == 0 {
			continue
		}
		if len(k) > maxHeaderBytes || len(vals[0]) > maxHeaderBytes {
			v.headers = nil
			v.headersErr = tooLarge("request.headers["+truncateName(k)+"] length", len(k)+len(vals[0]), maxHeaderBytes)
			return
		}
		v.headers[strings.ToLower(k)] = vals[0]
	}
}

func (v *requestVars) buildQuery() {
	if len(v.r.RawQuery) > maxURLBytes {
		v.queryErr = tooLarge("request.query length", len(v.r.RawQuery), maxURLBytes)
		return
	}
	v.query = map[string]string{}
	q, _ := url.ParseQuery(v.r.RawQuery) // keeps what parses; a bad pair is skipped
	for k, vals := range q {
		if len(vals) > 0 {
			v.query[k] = vals[0]
		}
	}
}

func truncateName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Parent implements interpreter.Activation.
func (v *requestVars) Parent() interpreter.Activation { return nil }
