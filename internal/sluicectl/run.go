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
	if err == nil {
		err = run(c, o, stdout)
	}
	return fail(stderr, c, err)
}

// run makes the call and renders its answer.
func run(c *call, o *options, stdout io.Writer) error {
	t, err := connect(o)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	body, err := t.do(ctx, c)
	if err != nil {
		return err
	}
	return render(stdout, o.output, c, body)
}

// fail reports err, when there is one, and returns its exit code: the one
// path of every failure. A bad argument, refused before any call, is
// ExitUsage; a failed call has the code its answer maps to (cliError).
// Messages are made visible: they may quote key values and arguments.
func fail(stderr io.Writer, c *call, err error) int {
	var usage usageError
	var ce *cliError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &usage):
		_ = writef(stderr, "kubectl sluice: %s\nRun 'kubectl sluice --help' for usage.\n", visibleText(usage.msg))
		return ExitUsage
	case errors.As(err, &ce):
		_ = writef(stderr, "kubectl sluice %s: %s\n", c.command, visibleText(ce.err.Error()))
		if ce.hint != "" {
			_ = writef(stderr, "hint: %s\n", visibleText(ce.hint))
		}
		return ce.code
	}
	_ = writef(stderr, "kubectl sluice %s: %s\n", c.command, visibleText(err.Error()))
	return ExitError
}
