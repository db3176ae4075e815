package policy

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/overloads"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// timestampGetters are CEL's functions that read a timestamp in a time
// zone given as their argument (timestamp(...).getHours("Europe/Berlin")).
var timestampGetters = []string{
	overloads.TimeGetFullYear, overloads.TimeGetMonth, overloads.TimeGetDayOfYear,
	overloads.TimeGetDate, overloads.TimeGetDayOfMonth, overloads.TimeGetDayOfWeek,
	overloads.TimeGetHours, overloads.TimeGetMinutes, overloads.TimeGetSeconds,
	overloads.TimeGetMilliseconds,
}

// checkWhenZones holds the zones a when expression names to the rule of
// calendar quotas: a literal IANA name of the compiled-in database (or a
// numeric offset, "+05:30", which needs no database). CEL itself would
// load any name with time.LoadLocation, host files first, so "localtime"
// or "posix/Europe/Berlin" would follow the host and fail in the image,
// and a zone taken from the request would be a name the client chose.
func checkWhenZones(ast *cel.Ast) error {
	native := ast.NativeRep()
	for _, fn := range timestampGetters {
		for _, call := range celast.MatchDescendants(celast.NavigateAST(native), celast.FunctionMatcher(fn)) {
			args := call.AsCall().Args()
			if !call.AsCall().IsMemberFunction() || len(args) != 1 {
				continue // no zone: UTC, or a duration's getter
			}
			loc := native.SourceInfo().GetStartLocation(call.ID())
			if args[0].Kind() != celast.LiteralKind {
				return fmt.Errorf("the time zone of %s must be a string literal (line %d, column %d): an IANA name such as \"Europe/Berlin\", or an offset such as \"+01:00\"",
					fn, loc.Line(), loc.Column()+1)
			}
			zone, ok := args[0].AsLiteral().Value().(string)
			if !ok || strings.Contains(zone, ":") {
				continue // a type error, reported by the checker; or an offset
			}
			if _, err := ratelimit.LoadZone(zone); err != nil {
				return fmt.Errorf("%s (line %d, column %d): %w", fn, loc.Line(), loc.Column()+1, err)
			}
		}
	}
	return nil
}
