package sluicectl

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Main runs one command line (without the program's name) and returns
// the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	c, o, err := parse(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, Usage)
		return ExitOK
	}
	var usage usageError
	if errors.As(err, &usage) {
		fmt.Fprintf(stderr, "kubectl sluice: %s\nRun 'kubectl sluice --help' for usage.\n", usage.msg)
		return ExitUsage
	}
	t, err := connect(o)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl sluice: %v\n", err)
		return ExitError
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	body, err := t.do(ctx, c)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl sluice %s: %v\n", c.command, err)
		var ce *cliError
		if errors.As(err, &ce) {
			return ce.code
		}
		return ExitError
	}
	if err := render(stdout, o.output, c, body); err != nil {
		fmt.Fprintf(stderr, "kubectl sluice %s: %v\n", c.command, err)
		return ExitError
	}
	return ExitOK
}
