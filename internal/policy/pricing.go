package policy

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Usage is what a response reports it used: the tokens of an LLM call.
// InputTokens include the cached ones (as OpenAI's prompt_tokens does).
type Usage struct {
	InputTokens       int64 `json:"inputTokens"`
	OutputTokens      int64 `json:"outputTokens"`
	CachedInputTokens int64 `json:"cachedInputTokens"`
}

// Validate refuses usage no response reports, naming the field (under
// prefix, such as "usage"): a count below 0 or above ratelimit.MaxCount,
// or more cached input tokens than input tokens.
func (u Usage) Validate(prefix string) error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"inputTokens", u.InputTokens}, {"outputTokens", u.OutputTokens}, {"cachedInputTokens", u.CachedInputTokens}} {
		if f.v < 0 || f.v > ratelimit.MaxCount {
			return fmt.Errorf("%s.%s: %d, want 0 to %d", prefix, f.name, f.v, ratelimit.MaxCount)
		}
	}
	if u.CachedInputTokens > u.InputTokens {
		return fmt.Errorf("%s.cachedInputTokens: %d, more than inputTokens (%d), which include them", prefix, u.CachedInputTokens, u.InputTokens)
	}
	return nil
}

// pricing is reserve.pricing compiled: weights in millionths of a unit,
// or a CEL program.
type pricing struct {
	input, output, cached uint64
	program               cel.Program
}

// weightScale is a weight's unit: weights have six decimals at most.
const weightScale = 1_000_000

// pricingCostBudget bounds an expression's estimated cost: a few dozen
// arithmetic operations, run once per settlement.
const pricingCostBudget = 100

var pricingEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("inputTokens", cel.IntType),
		cel.Variable("outputTokens", cel.IntType),
		cel.Variable("cachedInputTokens", cel.IntType),
	)
	if err != nil {
		panic(fmt.Sprintf("policy: CEL pricing environment: %v", err)) // a programming error
	}
	return env
}()

// compilePricing reads reserve.pricing (nil: one per token, cached input
// as input).
func compilePricing(src *ratelimitv1alpha1.UsagePricing, path *field.Path) (pricing, field.ErrorList) {
	p := pricing{input: weightScale, output: weightScale}
	if src == nil {
		p.cached = p.input
		return p, nil
	}
	if src.Expression != "" {
		prg, err := compilePricingExpression(src.Expression)
		if err != nil {
			return p, field.ErrorList{field.Invalid(path.Child("expression"), src.Expression, err.Error())}
		}
		p.program = prg
		return p, nil
	}
	var errs field.ErrorList
	read := func(w *ratelimitv1alpha1.Weight, name string, def uint64) uint64 {
		if w == nil {
			return def
		}
		v, err := parseWeight(string(*w))
		if err != nil {
			errs = append(errs, field.Invalid(path.Child(name), *w, err.Error()))
		}
		return v
	}
	p.input = read(src.InputTokens, "inputTokens", weightScale)
	p.output = read(src.OutputTokens, "outputTokens", weightScale)
	p.cached = read(src.CachedInputTokens, "cachedInputTokens", p.input)
	return p, errs
}

// parseWeight reads a decimal of at most six digits each side of the
// point, in millionths.
func parseWeight(s string) (uint64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	bad := errors.New(`must be a decimal of at most six digits before and after the point, such as "4" or "0.1"`)
	if len(whole) < 1 || len(whole) > 6 || len(frac) > 6 || strings.Contains(s, ".") && frac == "" {
		return 0, bad
	}
	w, err := strconv.ParseUint(whole, 10, 64)
	if err != nil {
		return 0, bad
	}
	f := uint64(0)
	if frac != "" {
		if f, err = strconv.ParseUint(frac+strings.Repeat("0", 6-len(frac)), 10, 64); err != nil {
			return 0, bad
		}
	}
	return w*weightScale + f, nil
}

// compilePricingExpression type-checks expr (a number) and holds its
// estimated cost to pricingCostBudget.
func compilePricingExpression(expr string) (cel.Program, error) {
	ast, iss := pricingEnv.Compile(expr)
	if iss.Err() != nil {
		msg := strings.ReplaceAll(iss.Err().Error(), "\n", " ")
		if strings.Contains(msg, "undeclared reference") {
			msg += " (the variables are inputTokens, outputTokens and cachedInputTokens)"
		}
		return nil, errors.New(msg)
	}
	if t := ast.OutputType(); t != cel.IntType && t != cel.DoubleType && t != cel.UintType {
		return nil, fmt.Errorf("must give a number (int or double), not %s", t)
	}
	est, err := pricingEnv.EstimateCost(ast, defaultCosts{})
	if err != nil {
		return nil, fmt.Errorf("estimating the cost: %v", err)
	}
	if est.Max > pricingCostBudget {
		return nil, fmt.Errorf("estimated cost %s is over the budget of %d per settlement: price usage with arithmetic on inputTokens, outputTokens and cachedInputTokens, without loops",
			formatCost(est.Max), pricingCostBudget)
	}
	return pricingEnv.Program(ast, cel.CostLimit(pricingCostBudget))
}

func (p *pricing) price(u Usage) (int64, error) {
	if p.program != nil {
		return p.evaluate(u)
	}
	// In millionths: each product fits 128 bits; saturate past 64.
	sum := mulSat(p.input, uint64(u.InputTokens-u.CachedInputTokens)) //nolint:gosec // validated: 0 <= cached <= input
	sum = addSat(sum, mulSat(p.cached, uint64(u.CachedInputTokens)))  //nolint:gosec // validated >= 0
	sum = addSat(sum, mulSat(p.output, uint64(u.OutputTokens)))       //nolint:gosec // validated >= 0
	units := sum / weightScale
	if sum%weightScale != 0 {
		units++
	}
	return int64(min(units, ratelimit.MaxCount)), nil //nolint:gosec // at most MaxCount
}

func (p *pricing) evaluate(u Usage) (int64, error) {
	v, _, err := p.program.Eval(map[string]any{
		"inputTokens": u.InputTokens, "outputTokens": u.OutputTokens, "cachedInputTokens": u.CachedInputTokens,
	})
	if err != nil {
		return 0, fmt.Errorf("spec.reserve.pricing.expression: %v", err)
	}
	var f float64
	switch n := v.(type) {
	case types.Int:
		return min(max(int64(n), 0), ratelimit.MaxCount), nil
	case types.Uint:
		return int64(min(uint64(n), ratelimit.MaxCount)), nil //nolint:gosec // at most MaxCount
	case types.Double:
		f = float64(n)
	default:
		return 0, fmt.Errorf("spec.reserve.pricing.expression gave %v, not a number", v.Type())
	}
	if math.IsNaN(f) {
		return 0, errors.New("spec.reserve.pricing.expression gave NaN")
	}
	return int64(min(max(math.Ceil(f), 0), ratelimit.MaxCount)), nil
}

// defaultCosts leaves every estimate to CEL's defaults: the expression's
// variables are integers, whose size is fixed.
type defaultCosts struct{}

func (defaultCosts) EstimateSize(checker.AstNode) *checker.SizeEstimate { return nil }
func (defaultCosts) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

func addSat(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}
