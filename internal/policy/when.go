package policy

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"regexp/syntax"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// A `when` expression runs on every check of its namespace, on input the
// client chooses, so its worst case is bounded when the policy is compiled:
// the expression's cost is estimated for the largest request the check
// endpoint accepts, and an expression above whenCostBudget does not compile.
//
// A cost unit is CEL's: about one operation, or ten characters of a string
// traversed. The prices below keep a unit of any operation within about
// 100 ns in the worst case (BenchmarkWhenWorstCase on a busy shared 2-core
// machine; loops cost the most per unit, regexes and contains less), so the
// budget is at most about 2 ms of one core per check, well inside
// whenDeadline. It admits header presence and equality, in lists,
// startsWith and endsWith, three contains on a 64 KiB header, or a regex of
// up to about 90 program instructions (a dozen bot names).
const whenCostBudget = 20_000

// The largest request a `when` expression is evaluated on. The check
// endpoint refuses larger ones: its header section is at most
// httpserve.MaxHeaderBytes (64 KiB) and the original URL at most
// MaxURLBytes. A request over these bounds anyway makes the variable an
// evaluation error, so the policy applies rather than the cost exceeding
// the estimate.
const (
	// MaxHeaderBytes is the largest header section (names, values and 4
	// bytes a line) the intakes read; larger ones are refused with 431.
	MaxHeaderBytes = 64 << 10
	maxHeaderBytes = MaxHeaderBytes
	// MaxURLBytes is the longest original URL (host, path and query) the
	// check endpoint reads; longer ones are refused with 400.
	MaxURLBytes      = 16 << 10
	maxURLBytes      = MaxURLBytes
	maxHeaderEntries = maxHeaderBytes / 4 // "a:\r\n" is the shortest header line
	maxQueryEntries  = maxURLBytes / 2    // "a&" is the shortest query pair
	maxClientIPBytes = 64                 // an IPv6 address is at most 45 characters; the rest leaves room for a zone
	// MaxDescriptorEntries and MaxDescriptorBytes bound the descriptor of
	// an Envoy rate limit service request that request.descriptor holds
	// (entries; bytes of every key and value together); a larger one makes
	// the variable an evaluation error, so the policy applies.
	MaxDescriptorEntries = 64
	MaxDescriptorBytes   = 64 << 10
	maxDomainBytes       = 253
)

// regexInputMax is the longest string `matches` runs on. RE2 is linear in
// its input, with a large constant (a few nanoseconds per character per
// program instruction), so a regex over a 64 KiB header would cost
// milliseconds. A longer input is an evaluation error: the policy applies.
// 2 KiB is above any real User-Agent and the classic URL limit of browsers.
const regexInputMax = 2 << 10

// A regex costs a traversal of its input per program instruction (RE2 may
// step every instruction on every character), plus regexBaseInsts
// instructions' worth for the work it does on every character whatever
// the pattern.
const (
	regexCostPerCharInst = common.StringTraversalCostFactor
	regexBaseInsts       = 4
)

// Evaluation is not metered: CEL's runtime cost tracker would cost more
// than the expressions it meters (it counts the runes of every string
// argument, and its bookkeeping is quadratic in the iterations of a
// comprehension), and it could not stop what the estimate admitted anyway.
// The estimate is the bound; tests meter worst-case requests to hold the
// estimate to it. What an estimate cannot foresee, a loop that runs long on
// a busy machine, meets a deadline: CEL checks it every whenInterruptEvery
// iterations of a comprehension. An expression without one has no loop and
// is run without a timer.
const (
	whenDeadline       = 5 * time.Millisecond
	whenInterruptEvery = 64
)

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
		cel.Variable("request.domain", cel.StringType),
		cel.Variable("request.descriptor", cel.MapType(cel.StringType, cel.StringType)),
	)
	if err != nil {
		panic(fmt.Sprintf("policy: CEL environment: %v", err)) // a programming error, caught by any test
	}
	return env
}()

type whenExpr struct {
	program cel.Program
	// interruptible is set when the expression has a comprehension, the
	// only place CEL checks for an interrupt.
	interruptible bool
}

func compileWhen(expr string) (*whenExpr, error) {
	ast, _, err := checkWhen(expr)
	if err != nil {
		return nil, err
	}
	prg, err := whenProgram(ast)
	if err != nil {
		return nil, err
	}
	interruptible := len(celast.MatchDescendants(celast.NavigateAST(ast.NativeRep()), celast.KindMatcher(celast.ComprehensionKind))) > 0
	return &whenExpr{program: prg, interruptible: interruptible}, nil
}

// checkWhen parses and type-checks expr and holds its estimated cost to
// the budget.
func checkWhen(expr string) (*cel.Ast, *whenCosts, error) {
	ast, iss := whenEnv.Compile(expr)
	if iss.Err() != nil {
		msg := strings.ReplaceAll(iss.Err().Error(), "\n", " ")
		if strings.Contains(msg, "undeclared reference") {
			msg += " (the variables are request.method, request.host, request.path, request.query, request.headers and request.client_ip, and request.domain and request.descriptor for descriptor policies)"
		}
		return nil, nil, fmt.Errorf("%s", msg)
	}
	if ast.OutputType() != cel.BoolType {
		return nil, nil, fmt.Errorf("must be a boolean expression, not %s", ast.OutputType())
	}
	costs, err := newWhenCosts(ast)
	if err != nil {
		return nil, nil, err
	}
	est, err := whenEnv.EstimateCost(ast, costs)
	if err != nil {
		return nil, nil, fmt.Errorf("estimating the cost: %v", err)
	}
	if est.Max > whenCostBudget {
		return nil, nil, fmt.Errorf("estimated cost %s is over the budget of %d per check (for the largest request: %d KiB of headers, a %d KiB URL; "+
			"matches runs on at most %d KiB); make it cheaper: test headers with ==, in, startsWith or endsWith, use fewer contains or matches on a header, "+
			"keep regex patterns short, and do not iterate over request.headers or request.query",
			formatCost(est.Max), whenCostBudget, maxHeaderBytes>>10, maxURLBytes>>10, regexInputMax>>10)
	}
	return ast, costs, nil
}

// whenProgram plans the checked expression; opts add to the options every
// program has (tests add cost tracking).
func whenProgram(ast *cel.Ast, opts ...cel.ProgramOption) (cel.Program, error) {
	return whenEnv.Program(ast, append([]cel.ProgramOption{
		cel.EvalOptions(cel.OptOptimize),
		cel.OptimizeRegex(boundedMatches(overloads.Matches), boundedMatches(overloads.MatchesString)),
		cel.InterruptCheckFrequency(whenInterruptEvery),
	}, opts...)...)
}

func formatCost(c uint64) string {
	if c == math.MaxUint64 {
		return "unbounded"
	}
	return fmt.Sprint(c)
}

// eval runs the expression. An evaluation error (a missing map key, the
// deadline, an input over the bounds) is returned so the caller can apply
// the policy's failure rule.
func (w *whenExpr) eval(vars *requestVars) (bool, error) {
	return w.evalWithin(vars, whenDeadline)
}

func (w *whenExpr) evalWithin(vars *requestVars, deadline time.Duration) (bool, error) {
	var out ref.Val
	var err error
	if w.interruptible {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		out, _, err = w.program.ContextEval(ctx, vars)
		cancel()
	} else {
		out, _, err = w.program.Eval(vars)
	}
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("when: got %T, want bool", out.Value())
	}
	return b, nil
}

// whenCosts gives the cost estimator the sizes of the request's fields and
// prices the calls CEL's defaults get wrong. It prices the same calls for
// CEL's runtime cost tracker, which tests use to meter evaluations.
type whenCosts struct {
	// regexInsts is the RE2 program size of each constant pattern.
	regexInsts map[string]uint64
}

// newWhenCosts rejects regexes whose pattern is not a constant: the
// pattern would be compiled on every check, at a cost no bound on the
// input makes small (a 20 KB pattern from a header took 1.3 s a check).
func newWhenCosts(ast *cel.Ast) (*whenCosts, error) {
	c := &whenCosts{regexInsts: map[string]uint64{}}
	native := ast.NativeRep()
	for _, call := range celast.MatchDescendants(celast.NavigateAST(native), celast.FunctionMatcher(overloads.Matches)) {
		args := call.AsCall().Args()
		pattern := args[len(args)-1]
		if pattern.Kind() != celast.LiteralKind {
			loc := native.SourceInfo().GetStartLocation(call.ID())
			return nil, fmt.Errorf("the pattern of matches must be a string literal (line %d, column %d): a pattern taken from the request would be compiled on every check", loc.Line(), loc.Column()+1)
		}
		p, ok := pattern.AsLiteral().Value().(string)
		if !ok {
			continue // a type error, reported by the checker
		}
		n, err := regexInstructions(p)
		if err != nil {
			return nil, fmt.Errorf("invalid regex %q: %v", p, err)
		}
		c.regexInsts[p] = n
	}
	return c, nil
}

// regexInstructions is the size of the program regexp.Compile builds for
// pattern: the number of states RE2 may step per input character.
func regexInstructions(pattern string) (uint64, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, err
	}
	return uint64(len(prog.Inst)), nil
}

func regexCost(inputLen, insts uint64) uint64 {
	return uint64(math.Ceil(float64(inputLen+1) * float64(insts+regexBaseInsts) * regexCostPerCharInst))
}

func traversalCost(n uint64) uint64 {
	return uint64(math.Ceil(float64(n) * common.StringTraversalCostFactor))
}

var _ checker.CostEstimator = (*whenCosts)(nil)
var _ interpreter.ActualCostEstimator = (*whenCosts)(nil)

// EstimateSize implements checker.CostEstimator: the largest size each
// request field can have.
func (c *whenCosts) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	path := n.Path()
	if len(path) == 0 {
		return nil
	}
	var most uint64
	switch strings.Join(path, ".") {
	case "request.headers":
		most = maxHeaderEntries
	case "request.headers.@keys", "request.headers.@values", "request.method":
		most = maxHeaderBytes
	case "request.query":
		most = maxQueryEntries
	case "request.query.@keys", "request.query.@values", "request.path", "request.host":
		most = maxURLBytes
	case "request.client_ip":
		most = maxClientIPBytes
	case "request.descriptor":
		most = MaxDescriptorEntries
	case "request.descriptor.@keys", "request.descriptor.@values":
		most = MaxDescriptorBytes
	case "request.domain":
		most = maxDomainBytes
	default:
		return nil
	}
	return &checker.SizeEstimate{Min: 0, Max: most}
}

// Strings are priced by their length in bytes, both when estimating and at
// run time. CEL's own runtime prices count runes, which reads the whole
// string for every call: an equality test on a 64 KiB header would take
// 100 µs while costing 3 units.

// estimatedSize is the largest size of n: bytes for a string.
func estimatedSize(n checker.AstNode) uint64 {
	if e := n.Expr(); e.Kind() == celast.LiteralKind {
		switch v := e.AsLiteral().(type) {
		case types.String:
			return uint64(len(v))
		case types.Bytes:
			return uint64(len(v))
		}
	}
	if s := n.ComputedSize(); s != nil {
		return s.Max
	}
	return math.MaxUint64
}

// actualSize is the size of v as estimatedSize counts it, without reading it.
func actualSize(v ref.Val) uint64 {
	switch v := v.(type) {
	case types.String:
		return uint64(len(v))
	case types.Bytes:
		return uint64(len(v))
	case traits.Sizer:
		if n, ok := v.Size().(types.Int); ok && n >= 0 {
			return uint64(n)
		}
	}
	return 1
}

// callCost prices the calls whose cost depends on their arguments' sizes;
// ok is false for the rest, which cost 1 (CEL's default). sizes holds the
// arguments' sizes, the target first.
func (c *whenCosts) callCost(overloadID string, sizes []uint64, pattern func() (string, bool)) (cost uint64, ok bool) {
	switch overloadID {
	case overloads.Equals, overloads.NotEquals,
		overloads.LessString, overloads.GreaterString, overloads.LessEqualsString, overloads.GreaterEqualsString,
		overloads.LessBytes, overloads.GreaterBytes, overloads.LessEqualsBytes, overloads.GreaterEqualsBytes:
		if len(sizes) != 2 {
			return 0, false
		}
		return max(traversalCost(min(sizes[0], sizes[1])), 1), true
	case overloads.StartsWithString, overloads.EndsWithString:
		if len(sizes) != 2 {
			return 0, false
		}
		return max(traversalCost(sizes[1]), 1), true
	case overloads.ContainsString, overloads.AddString, overloads.AddBytes:
		// strings.Contains is linear in both lengths, not their product.
		if len(sizes) != 2 {
			return 0, false
		}
		return max(traversalCost(satAdd(sizes[0], sizes[1])), 1), true
	case overloads.StringToInt, overloads.StringToUint, overloads.StringToDouble,
		overloads.StringToTimestamp, overloads.StringToDuration,
		overloads.StringToBytes, overloads.BytesToString,
		overloads.SizeString, overloads.SizeStringInst:
		// Parsing, converting or counting runes reads the whole string.
		if len(sizes) != 1 {
			return 0, false
		}
		return max(traversalCost(sizes[0]), 1), true
	case overloads.Matches, overloads.MatchesString:
		if len(sizes) != 2 {
			return 0, false
		}
		p, isConst := pattern()
		insts, known := c.regexInsts[p]
		if !isConst || !known {
			return 0, false
		}
		if sizes[0] > regexInputMax {
			// Refused without running at run time; the estimate takes
			// the longest input that runs.
			sizes[0] = regexInputMax
		}
		return regexCost(sizes[0], insts), true
	}
	return 0, false
}

// EstimateCallCost implements checker.CostEstimator.
func (c *whenCosts) EstimateCallCost(_, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	all := args
	if target != nil {
		all = append([]checker.AstNode{*target}, args...)
	}
	sizes := make([]uint64, len(all))
	for i, a := range all {
		sizes[i] = estimatedSize(a)
	}
	pattern := func() (string, bool) {
		e := all[1].Expr()
		if e.Kind() != celast.LiteralKind {
			return "", false
		}
		p, ok := e.AsLiteral().Value().(string)
		return p, ok
	}
	cost, ok := c.callCost(overloadID, sizes, pattern)
	if !ok {
		return nil
	}
	est := &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: cost}}
	switch overloadID {
	case overloads.AddString, overloads.AddBytes:
		est.ResultSize = &checker.SizeEstimate{Min: 0, Max: satAdd(sizes[0], sizes[1])}
	case overloads.StringToBytes, overloads.BytesToString:
		est.ResultSize = &checker.SizeEstimate{Min: 0, Max: sizes[0]}
	}
	return est
}

// CallCost implements interpreter.ActualCostEstimator with the same prices.
func (c *whenCosts) CallCost(_, overloadID string, args []ref.Val, _ ref.Val) *uint64 {
	var sizes [2]uint64
	if len(args) > len(sizes) {
		return nil
	}
	for i, a := range args {
		sizes[i] = actualSize(a)
	}
	pattern := func() (string, bool) {
		p, ok := args[1].(types.String)
		return string(p), ok
	}
	cost, ok := c.callCost(overloadID, sizes[:len(args)], pattern)
	if !ok {
		return nil
	}
	return &cost
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// boundedMatches compiles a constant pattern once, as CEL's own
// optimization does, and refuses an input longer than regexInputMax.
func boundedMatches(overloadID string) *interpreter.RegexOptimization {
	return &interpreter.RegexOptimization{
		Function:   overloads.Matches,
		OverloadID: overloadID,
		RegexIndex: 1,
		Factory: func(call interpreter.InterpretableCall, pattern string) (interpreter.InterpretableCall, error) {
			re, err := regexp.Compile(pattern)
			if err != nil {
				return nil, err
			}
			return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), func(values ...ref.Val) ref.Val {
				if len(values) != 2 {
					return types.NoSuchOverloadErr()
				}
				in, ok := values[0].(types.String)
				if !ok {
					return types.NoSuchOverloadErr()
				}
				if len(in) > regexInputMax {
					return types.NewErr("matches: input of %d bytes is longer than %d, the most a regex is run on", len(in), regexInputMax)
				}
				return types.Bool(re.MatchString(string(in)))
			}), nil
		},
	}
}

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
