package convert

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// Outcome is what a converter made of its input.
type Outcome struct {
	// Reports are the findings, one line each, in the order to print.
	Reports []string
	Worst   Severity
	// Write writes the policies.
	Write func(io.Writer) error
	// Summary is the last line on standard error once they are written.
	Summary string
}

// Command is `manager convert FORMAT` for one converter: its flags may
// follow the files, the files are read together, the reports go to
// standard error, and the policies to standard output unless the worst
// report keeps them back.
type Command struct {
	// Name names the flag set ("convert envoy-ratelimit").
	Name string
	// Usage is printed above the flags.
	Usage string
	// Flags defines the converter's flags; the function it returns checks
	// their values once parsed.
	Flags func(fs *flag.FlagSet) (check func() error)
	// AllowPartial is the help of --allow-partial.
	AllowPartial string
	// NoFiles is the error when no file is named.
	NoFiles string
	// Stdin: "-" names standard input.
	Stdin bool
	// ErrorsRefused, when set, is why nothing is written when an error is
	// reported, --allow-partial or not.
	ErrorsRefused string
	// PartialRefused is why nothing is written when anything but notes is
	// reported, without --allow-partial.
	PartialRefused string
	// Convert converts the files.
	Convert func([]File) Outcome
}

// Run runs the command with args (those after the format's name). An error
// means exit status 1; flag.ErrHelp, that the usage was asked for.
func (c *Command) Run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := c.Flags(fs)
	allowPartial := fs.Bool("allow-partial", false, c.AllowPartial)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), c.Usage)
		fs.PrintDefaults()
	}
	names, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		fs.Usage()
		return errors.New(c.NoFiles)
	}
	if err := check(); err != nil {
		return err
	}
	files, err := c.read(names, stdin)
	if err != nil {
		return err
	}
	out := c.Convert(files)
	for _, r := range out.Reports {
		fmt.Fprintln(stderr, r)
	}
	switch {
	case out.Worst == Error && c.ErrorsRefused != "":
		return errors.New(c.ErrorsRefused)
	case out.Worst > Note && !*allowPartial:
		return errors.New(c.PartialRefused)
	}
	// Whole or nothing: a policy that fails to render writes none.
	var b bytes.Buffer
	if err := out.Write(&b); err != nil {
		return err
	}
	if _, err := io.Copy(stdout, &b); err != nil {
		return err
	}
	fmt.Fprintln(stderr, out.Summary)
	return nil
}

func (c *Command) read(names []string, stdin io.Reader) ([]File, error) {
	files := make([]File, 0, len(names))
	stdinRead := false
	for _, name := range names {
		var data []byte
		var err error
		if c.Stdin && name == "-" {
			if stdinRead {
				return nil, errors.New("- (standard input) is named twice")
			}
			stdinRead = true
			data, err = io.ReadAll(stdin)
		} else {
			data, err = os.ReadFile(name) //nolint:gosec // reading the files the user names is the command's job
		}
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: name, Data: data})
	}
	return files, nil
}

// parseInterleaved parses flags that may follow the files too
// (manager convert envoy-ratelimit a.yaml --namespace x).
// Everything after "--" is a file.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var files, rest []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, rest = args[:i], args[i+1:]
	}
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) > 0 {
			files = append(files, args[0])
			args = args[1:]
		}
	}
	return append(files, rest...), nil
}

// ParseFailureMode is a --failure-mode value: Open or Closed, or "" (the
// API's default) when unsetAllowed.
func ParseFailureMode(s string, unsetAllowed bool) (ratelimitv1alpha1.FailureMode, error) {
	switch m := ratelimitv1alpha1.FailureMode(s); m {
	case ratelimitv1alpha1.FailureModeOpen, ratelimitv1alpha1.FailureModeClosed:
		return m, nil
	case "":
		if unsetAllowed {
			return m, nil
		}
	}
	return "", fmt.Errorf("--failure-mode: %q is neither Open nor Closed", s)
}
