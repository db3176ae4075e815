package policy

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types/ref"

	// CEL's timestamp functions that take a zone name (getHours("Europe/Berlin"))
	// load it with time.LoadLocation: the host's data first, else this
	// copy, so an image without /usr/share/zoneinfo knows the zones too.
	// Calendar quotas do not use it: see ratelimit.LoadZone.
	_ "time/tzdata"
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
	if err := checkWhenZones(ast); err != nil {
		return nil, nil, err
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
