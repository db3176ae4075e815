package policy

import (
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"strings"

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
