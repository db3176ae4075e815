package policy

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/interpreter"
)

// whenCostLimit bounds the work one `when` expression may do per request, so
// a policy cannot make the check endpoint slow (a loop over a large header).
const whenCostLimit = 100_000

// whenEnv declares the request's fields as qualified variables, so that a
// typo such as request.hedaers fails when the policy is compiled, not later.
var whenEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("request.method", cel.StringType),
		cel.Variable("request.host", cel.StringType),
		cel.Variable("request.path", cel.StringType),
		cel.Variable("request.client_ip", cel.StringType),
		cel.Variable("request.query", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("request.headers", cel.MapType(cel.StringType, cel.StringType)),
	)
	if err != nil {
		panic(fmt.Sprintf("policy: CEL environment: %v", err)) // a programming error, caught by any test
	}
	return env
}()

type whenExpr struct {
	program cel.Program
}

func compileWhen(expr string) (*whenExpr, error) {
	ast, iss := whenEnv.Compile(expr)
	if iss.Err() != nil {
		msg := strings.ReplaceAll(iss.Err().Error(), "\n", " ")
		if strings.Contains(msg, "undeclared reference") {
			msg += " (the variables are request.method, request.host, request.path, request.query, request.headers and request.client_ip)"
		}
		return nil, fmt.Errorf("%s", msg)
	}
	if ast.OutputType() != cel.BoolType {
		return nil, fmt.Errorf("must be a boolean expression, not %s", ast.OutputType())
	}
	prg, err := whenEnv.Program(ast, cel.CostLimit(whenCostLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, err
	}
	return &whenExpr{program: prg}, nil
}

// eval runs the expression. An evaluation error (a missing map key, the
// cost limit) is returned so the caller can apply the policy's failure rule.
func (w *whenExpr) eval(vars *requestVars) (bool, error) {
	out, _, err := w.program.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("when: got %T, want bool", out.Value())
	}
	return b, nil
}

// requestVars resolves the CEL variables of one request. The header and
// query maps are built on first use and shared by every policy checked for
// the request, so requests against policies without `when` build nothing.
type requestVars struct {
	r       *Request
	headers map[string]string
	query   map[string]string
}

var _ interpreter.Activation = (*requestVars)(nil)

func (v *requestVars) reset(r *Request) {
	v.r = r
	v.headers = nil
	v.query = nil
}

// ResolveName implements interpreter.Activation.
func (v *requestVars) ResolveName(name string) (any, bool) {
	switch name {
	case "request.method":
		return v.r.Method, true
	case "request.host":
		return v.r.Host, true
	case "request.path":
		return v.r.Path, true
	case "request.client_ip":
		if !v.r.ClientIP.IsValid() {
			return "", true
		}
		return v.r.ClientIP.String(), true
	case "request.headers":
		if v.headers == nil {
			v.headers = make(map[string]string, len(v.r.Header))
			for k, vals := range v.r.Header {
				if len(vals) > 0 {
					v.headers[strings.ToLower(k)] = vals[0]
				}
			}
		}
		return v.headers, true
	case "request.query":
		if v.query == nil {
			v.query = map[string]string{}
			q, _ := url.ParseQuery(v.r.RawQuery) // keeps what parses; a bad pair is skipped
			for k, vals := range q {
				if len(vals) > 0 {
					v.query[k] = vals[0]
				}
			}
		}
		return v.query, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (v *requestVars) Parent() interpreter.Activation { return nil }
