package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/envoyconvert"
	"github.com/sluice-dev/sluice/internal/ingressconvert"
)

const convertUsage = `usage: manager convert envoy-ratelimit [flags] FILE...

Converts envoyproxy/ratelimit configuration files (domain, nested descriptors,
rate_limit, unlimited, shadow_mode, quota_mode, replaces, detailed_metric,
share_threshold, ...) into RateLimitPolicy YAML on standard output, one
descriptor policy per limited descriptor. The files are read together, as the
service loads its configuration folder. Reports go to standard error as
FILE:LINE: SEVERITY: MESSAGE:

  error    envoyproxy/ratelimit would refuse the configuration; nothing is written
  inexact  Sluice would decide some requests differently (the message says how)
  note     carried over exactly as far as decisions go (statistics, ignored keys)

Exit status: 0 when every decision carries over (notes only); 1 otherwise: on
an error, on bad usage, and on an inexact conversion, when nothing is written
unless --allow-partial. Bind each domain to the namespace on the check process:
--rls-domain DOMAIN=NAMESPACE. The policies assume they are the only descriptor
policies of their domains in that namespace.

flags:
`

func runConvert(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, "usage: manager convert envoy-ratelimit [flags] FILE...\n       manager convert ingress-nginx [flags] FILE...|-\n\nRun 'manager convert FORMAT -h' for what each does and its flags.\n")
		if len(args) == 0 {
			return errors.New("name the input format: envoy-ratelimit or ingress-nginx")
		}
		return flag.ErrHelp
	}
	switch args[0] {
	case "envoy-ratelimit":
		return runConvertEnvoy(args[1:])
	case "ingress-nginx":
		return runConvertIngress(args[1:])
	}
	return fmt.Errorf("unknown input format %q; the formats are envoy-ratelimit and ingress-nginx", args[0])
}

func runConvertEnvoy(args []string) error {
	fs := flag.NewFlagSet("convert envoy-ratelimit", flag.ContinueOnError)
	var opts envoyconvert.Options
	var failureMode string
	fs.StringVar(&opts.Namespace, "namespace", "default", "namespace of the policies (bind their domains to it with --rls-domain DOMAIN=NAMESPACE)")
	fs.StringVar(&failureMode, "failure-mode", string(ratelimitv1alpha1.FailureModeOpen), "failureMode of the policies: Open, as Envoy's rate limit filter allows when the service fails (failure_mode_deny: false), or Closed for filters with failure_mode_deny: true")
	fs.BoolVar(&opts.MergeDomains, "merge-domains", false, "accept a domain in several files, merging their descriptors (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true)")
	allowPartial := fs.Bool("allow-partial", false, "write the policies and exit 0 even when some decisions cannot be carried over exactly (errors still write nothing)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), convertUsage)
		fs.PrintDefaults()
	}
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		fs.Usage()
		return errors.New("no configuration files given")
	}
	switch ratelimitv1alpha1.FailureMode(failureMode) {
	case ratelimitv1alpha1.FailureModeOpen, ratelimitv1alpha1.FailureModeClosed:
		opts.FailureMode = ratelimitv1alpha1.FailureMode(failureMode)
	default:
		return fmt.Errorf("--failure-mode: %q is neither Open nor Closed", failureMode)
	}

	inputs := make([]envoyconvert.File, 0, len(files))
	for _, name := range files {
		data, err := os.ReadFile(name) //nolint:gosec // reading the files the user names is the command's job
		if err != nil {
			return err
		}
		inputs = append(inputs, envoyconvert.File{Name: name, Data: data})
	}
	res := envoyconvert.Convert(inputs, opts)
	for _, r := range res.Reports {
		fmt.Fprintln(os.Stderr, r)
	}
	switch worst := res.Worst(); {
	case worst == envoyconvert.Error:
		return errors.New("nothing written: envoyproxy/ratelimit would refuse this configuration")
	case worst == envoyconvert.Inexact && !*allowPartial:
		return errors.New("nothing written: some decisions cannot be carried over exactly (see above); --allow-partial writes the policies anyway")
	}
	var out bytes.Buffer
	if err := envoyconvert.WriteYAML(&out, res.Policies); err != nil {
		return err
	}
	if _, err := io.Copy(os.Stdout, &out); err != nil {
		return err
	}
	bind := make([]string, len(res.Domains))
	for i, d := range res.Domains {
		bind[i] = "--rls-domain " + d + "=" + opts.Namespace
	}
	fmt.Fprintf(os.Stderr, "manager convert: %d policies in namespace %s; the check process needs %s\n", len(res.Policies), opts.Namespace, strings.Join(bind, " "))
	return nil
}

const convertIngressUsage = `usage: manager convert ingress-nginx [flags] FILE...|-

Converts the rate limits of ingress-nginx Ingress manifests (files, or - for
standard input: kubectl get ingress -A -o yaml | manager convert ingress-nginx -)
into RateLimitPolicy YAML on standard output, one policy per rate-limited
Ingress, deciding as nginx's limit_req did: limit-rps and limit-rpm with
limit-burst-multiplier become gcra limits per client address, limit-whitelist
(limit-allowlist) exempt client networks, the Ingress's hosts and paths the
match. Above each policy, a comment gives the auth-url annotation that makes
ingress-nginx ask Sluice (kubectl annotate ... with the annotations the policy
replaces removed), and how to attach the policy to the Ingress's successor
HTTPRoute instead. Reports go to standard error as
FILE:LINE: INGRESS: annotation NAME: SEVERITY: MESSAGE:

  error    ingress-nginx refuses the Ingress (or nginx its limits); no policy for it
  inexact  not convertible, or converted differently (limit-connections,
           limit-rate, limit-rate-after, ...); the message says what happens
  note     carried over exactly as far as decisions go

Exit status: 0 when every limit carries over (notes only); 1 otherwise, and
then nothing is written unless --allow-partial, which writes the policies of
every Ingress that converts (none for an Ingress with an error).

flags:
`

func runConvertIngress(args []string) error {
	fs := flag.NewFlagSet("convert ingress-nginx", flag.ContinueOnError)
	var opts ingressconvert.Options
	var failureMode string
	fs.StringVar(&opts.Namespace, "namespace", "", "namespace of the policies of Ingresses whose manifests name none (default: none, so that kubectl apply -n decides, as for the Ingress)")
	fromIngress := fs.Bool("namespace-from-ingress", true, "put each policy in its Ingress's namespace; false puts every policy in --namespace, and the auth-url then names it")
	fs.StringVar(&opts.AnnotationsPrefix, "annotations-prefix", ingressconvert.DefaultAnnotationsPrefix, "ingress-nginx's --annotations-prefix")
	fs.StringVar(&opts.CheckURL, "check-url", ingressconvert.DefaultCheckURL, "the check endpoint's base URL, for the auth-url annotation")
	fs.StringVar(&failureMode, "failure-mode", "", "failureMode of the policies: Open or Closed (default: unset, the API's Open)")
	allowPartial := fs.Bool("allow-partial", false, "write the policies and exit 0 even when something cannot be converted (an Ingress with an error gets no policy)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), convertIngressUsage)
		fs.PrintDefaults()
	}
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		fs.Usage()
		return errors.New("no Ingress manifests given (name files, or - for standard input)")
	}
	opts.IgnoreIngressNamespace = !*fromIngress
	if opts.IgnoreIngressNamespace && opts.Namespace == "" {
		return errors.New("--namespace-from-ingress=false needs --namespace")
	}
	switch ratelimitv1alpha1.FailureMode(failureMode) {
	case "", ratelimitv1alpha1.FailureModeOpen, ratelimitv1alpha1.FailureModeClosed:
		opts.FailureMode = ratelimitv1alpha1.FailureMode(failureMode)
	default:
		return fmt.Errorf("--failure-mode: %q is neither Open nor Closed", failureMode)
	}

	inputs := make([]ingressconvert.File, 0, len(files))
	stdinRead := false
	for _, name := range files {
		var data []byte
		var err error
		if name == "-" {
			if stdinRead {
				return errors.New("- (standard input) is named twice")
			}
			stdinRead = true
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(name) //nolint:gosec // reading the files the user names is the command's job
		}
		if err != nil {
			return err
		}
		inputs = append(inputs, ingressconvert.File{Name: name, Data: data})
	}
	res := ingressconvert.Convert(inputs, opts)
	for _, r := range res.Reports {
		fmt.Fprintln(os.Stderr, r)
	}
	if worst := res.Worst(); worst > ingressconvert.Note && !*allowPartial {
		return errors.New("nothing written: some Ingresses cannot be converted exactly, or at all (see above); --allow-partial writes the policies of those that convert")
	}
	var out bytes.Buffer
	if err := ingressconvert.WriteYAML(&out, res.Policies); err != nil {
		return err
	}
	if _, err := io.Copy(os.Stdout, &out); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "manager convert: %d Ingresses read, %d policies written. Through auth-url, Sluice's denials reach clients as 403 "+
		"(nginx answered limit_req's with the ConfigMap's limit-req-status-code, 503 by default); "+
		"config/examples/ingress-nginx/ingress-429.yaml answers 429 instead, or any status its snippet returns.\n", res.Ingresses, len(res.Policies))
	return nil
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
